"""vLLM: ``vllm serve MODEL`` per instance; disaggregated prefill and decode instances exchange the KV cache
through the NixlConnector (``--kv-transfer-config``). vLLM 0.11 ships no router of its own (README.txt says
what routes requests). Every plan field that reaches an option is mapped in :func:`options`."""
from __future__ import annotations

from .options import Argv
from .target import NIXL_PORT, NIXL_STRIDE, POD_IP, Role, Site, Target

ENGINE = "vllm"
KV_CACHE = {"fp8": "fp8", "bf16": "auto", "fp16": "auto"}  # perfmodel's KV format -> --kv-cache-dtype


def options(t: Target, role: Role) -> list[tuple[str, object]]:
    """The plan's fields as ``vllm serve`` options for an instance of ``role`` (flag, value; None: no value)."""
    lay = t.layout
    out: list[tuple[str, object]] = [("--tensor-parallel-size", role.tp)]
    if lay.pp > 1:
        out.append(("--pipeline-parallel-size", lay.pp))
    if lay.attention_dp > 1:
        out.append(("--data-parallel-size", lay.attention_dp))
    ep = t.ep_for(role)
    if ep > 1:
        if ep != role.tp * lay.attention_dp:
            raise t.refuse(f"expert parallel {ep} over {role.tp * lay.attention_dp} GPUs: vLLM runs experts either "
                           "over every TP x DP rank (--enable-expert-parallel) or tensor parallel", "scenario.ep")
        out.append(("--enable-expert-parallel", None))
    if role.batch is not None:
        out.append(("--max-num-seqs", role.batch))
    servers = lay.scenario.get("api_servers")
    if servers:  # the API servers the plan priced (perfmodel.engines: frontend_host); 0: priced without a stream
        out.append(("--api-server-count", servers))
    out.append(("--max-num-batched-tokens", t.max_num_tokens()))
    out.append(("--gpu-memory-utilization", t.mem_fraction(role)))
    kv = t.kv_dtype()
    if kv is not None:
        if kv not in KV_CACHE:
            raise t.refuse(f"KV cache {kv} has no --kv-cache-dtype", "scenario.kv_dtype")
        out.append(("--kv-cache-dtype", KV_CACHE[kv]))
    if t.weight_dtype() == "fp8":
        out.append(("--quantization", "fp8"))
    if lay.mtp and role.name != "prefill":
        spec = {"model": t.draft_path} if t.draft_path else {"method": "mtp"}
        spec["num_speculative_tokens"] = lay.mtp
        out.append(("--speculative-config", spec))
    if role.name in ("prefill", "decode"):
        out.append(("--kv-transfer-config", {"kv_connector": "NixlConnector", "kv_role": "kv_both"}))
    return out


def all2all_backend(t: Target, role: Role) -> str | None:
    """The DeepEP backend an instance of ``role`` runs where the plan priced an all-to-all (VLLM_ALL2ALL_BACKEND;
    one for every step: the high-throughput kernels for a prefill instance, the low-latency ones otherwise, where
    the projection prices a mixed instance's prefill steps on the normal kernels); None: vLLM's default gather."""
    if t.exchange(role) != "all_to_all":
        return None
    return "deepep_high_throughput" if role.name == "prefill" else "deepep_low_latency"


def commands(t: Target, site: Site) -> dict[str, list[Argv]]:
    """Every process: role -> one Argv per instance (no router: vLLM 0.11 has none)."""
    out: dict[str, list[Argv]] = {}
    for role in t.roles():
        argvs = []
        for i in range(role.count):
            a = Argv(ENGINE, "serve").positional(t.model_path)
            for flag, value in options(t, role):
                a.flag(flag, value)
            a.flag("--host", "0.0.0.0").flag("--port", site.port(role.name, i))
            backend = all2all_backend(t, role)
            if backend:
                a.setenv("VLLM_ALL2ALL_BACKEND", backend)
            if role.name in ("prefill", "decode"):
                if site.local:  # every instance's handshake on its own port on one host
                    a.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", str(NIXL_PORT + NIXL_STRIDE * (role.offset + i)))
                else:
                    a.setenv("VLLM_NIXL_SIDE_CHANNEL_HOST", POD_IP)
            argvs.append(a)
        out[role.name] = argvs
    return out


def files(t: Target, site: Site) -> dict[str, dict]:
    return {}


def notes(t: Target) -> list[str]:
    out = []
    if t.weight_dtype() == "fp4":
        out.append("the plan runs fp4 weights: vLLM reads them from an NVFP4 checkpoint (there is no online fp4 "
                   "quantization); the model path must name one")
    if t.layout.mode == "disaggregated":
        out.append("vLLM 0.11 ships no router for disaggregated serving: a proxy sends each request to a prefill "
                   "instance (max_tokens 1, kv_transfer_params do_remote_decode) and then to a decode instance - the "
                   "toy_proxy_server.py of vLLM's NixlConnector documentation, llm-d or NVIDIA Dynamo; the "
                   "instances' addresses are listed above. NIXL must be installed (pip install nixl)")
    return out
