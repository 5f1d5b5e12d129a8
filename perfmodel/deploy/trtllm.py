"""TensorRT-LLM: ``trtllm-serve MODEL`` per instance with its extra LLM-API options YAML; disaggregated context
(prefill) and generation (decode) servers behind ``trtllm-serve disaggregated -c disagg-config.yaml``. Every plan
field that reaches an option is mapped in :func:`options` (command line) and :func:`llm_api` (YAML)."""
from __future__ import annotations

from .options import Argv, checked_tree, table
from .target import Role, Site, Target

ENGINE = "trtllm"
KV_CACHE = {"fp8": "fp8", "bf16": "auto", "fp16": "auto"}  # perfmodel's KV format -> kv_cache_config.dtype


def options_file(role: Role) -> str:
    return "extra-llm-api-options.yaml" if role.name == "serve" else f"extra-llm-api-options-{role.name}.yaml"


def options(t: Target, role: Role) -> list[tuple[str, object]]:
    """The plan's fields as ``trtllm-serve`` options for an instance of ``role`` (flag, value)."""
    lay = t.layout
    adp = lay.attention_dp
    if adp > 1 and role.tp != 1:
        raise t.refuse(f"attention data parallel with tp {role.tp}: TensorRT-LLM's enable_attention_dp runs "
                       "attention with TP 1 on every rank", "scenario.attention_dp")
    out: list[tuple[str, object]] = [("--backend", "pytorch"), ("--tp_size", role.tp * adp)]
    if lay.pp > 1:
        out.append(("--pp_size", lay.pp))
    ep = t.ep_for(role)
    if ep > 1:
        out.append(("--ep_size", ep))
    if role.batch is not None:
        out.append(("--max_batch_size", role.batch))
    out.append(("--max_num_tokens", t.max_num_tokens()))
    out.append(("--kv_cache_free_gpu_memory_fraction", t.mem_fraction(role)))
    return out


def llm_api(t: Target, role: Role) -> dict:
    """The extra LLM-API options of an instance of ``role``, checked against the option table."""
    lay = t.layout
    d: dict = {}
    if lay.attention_dp > 1:
        d["enable_attention_dp"] = True
    d["enable_chunked_prefill"] = True  # the plan's scheduler splits prompts at the token budget
    kv = t.kv_dtype()
    if kv is not None:
        if kv not in KV_CACHE:
            raise t.refuse(f"KV cache {kv} has no kv_cache_config.dtype mapped", "scenario.kv_dtype")
        d["kv_cache_config"] = {"dtype": KV_CACHE[kv]}
    if role.batch is not None:  # decode steps replayed from CUDA graphs up to the running-sequence cap
        sizes = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if b < role.batch}
                       | {role.batch})
        d["cuda_graph_config"] = {"enable_padding": True, "batch_sizes": sizes}
    backend = moe_backend(t, role)
    if backend is not None:
        d["moe_config"] = {"backend": backend}
    if role.name == "prefill":
        d["disable_overlap_scheduler"] = True  # examples/disaggregated: context servers run without it
    if role.name in ("prefill", "decode"):
        d["cache_transceiver_config"] = {"backend": "DEFAULT"}
    if lay.mtp and role.name != "prefill":
        if t.draft_path:
            raise t.refuse("a separate draft model: deploy maps TensorRT-LLM's MTP only (the model's own layers)",
                           "scenario.draft")
        d["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": lay.mtp}
    return checked_tree(table(ENGINE)["files"]["extra_llm_api_options"], d, options_file(role))


def moe_backend(t: Target, role: Role) -> str | None:
    """TensorRT-LLM's MoE module for an instance of ``role`` where the plan priced an all-to-all: WIDEEP, its wide
    expert-parallel module (the all-to-all is that module's exchange; the default CUTLASS one meets the other ranks'
    tokens by all-gather); None: the default."""
    return "WIDEEP" if t.exchange(role) == "all_to_all" else None


def commands(t: Target, site: Site) -> dict[str, list[Argv]]:
    out: dict[str, list[Argv]] = {}
    for role in t.roles():
        argvs = []
        for i in range(role.count):
            a = Argv(ENGINE, "serve").positional(t.model_path)
            for flag, value in options(t, role):
                a.flag(flag, value)
            a.flag("--host", "0.0.0.0").flag("--port", site.port(role.name, i))
            a.flag("--extra_llm_api_options", site.config(options_file(role)))
            argvs.append(a)
        out[role.name] = argvs
    if t.layout.mode == "disaggregated":
        out["router"] = [Argv(ENGINE, "disaggregated").flag("-c", site.config("disagg-config.yaml"))]
    return out


def disagg_config(t: Target, site: Site) -> dict:
    lay = t.layout
    d = {"hostname": "0.0.0.0", "port": site.port("router"),
         "context_servers": {"num_instances": lay.prefill_instances,
                             "urls": [site.address("prefill", i) for i in range(lay.prefill_instances)]},
         "generation_servers": {"num_instances": lay.decode_instances,
                                "urls": [site.address("decode", i) for i in range(lay.decode_instances)]}}
    return checked_tree(table(ENGINE)["files"]["disagg_config"], d, "disagg-config.yaml")


def files(t: Target, site: Site) -> dict[str, dict]:
    """Config file name -> content, as the processes on ``site`` read them."""
    out = {options_file(role): llm_api(t, role) for role in t.roles()}
    if t.layout.mode == "disaggregated":
        out["disagg-config.yaml"] = disagg_config(t, site)
    return out


def notes(t: Target) -> list[str]:
    out = []
    dtype = t.weight_dtype()
    if dtype in ("fp8", "fp4"):
        out.append(f"the plan runs {dtype} weights: TensorRT-LLM reads the format from the checkpoint (no online "
                   f"quantization), so the model path must name a {dtype.upper()} checkpoint (ModelOpt-quantized)")
    if t.layout.mode == "disaggregated":
        out.append("the context and generation servers send the KV cache through cache_transceiver_config backend "
                   "DEFAULT (UCX or NIXL as the build has them); the router is trtllm-serve disaggregated")
    wide = [role.name for role in t.roles() if moe_backend(t, role) == "WIDEEP"]
    if wide:
        out.append(f"the plan priced the MoE exchange as TensorRT-LLM's all-to-all (wide expert parallelism: its MNNVL "
                   f"kernels on NVL72, DeepEP's across nodes), so the {' and '.join(wide)} options select its wide-EP "
                   f"module (moe_config.backend WIDEEP; the choice as aiconfigurator 0.12.0's templates list it from "
                   f"TensorRT-LLM 1.2.0rc3 on: check that the release you run has it)")
    return out
