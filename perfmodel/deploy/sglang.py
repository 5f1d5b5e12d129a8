"""SGLang: ``python3 -m sglang.launch_server`` per instance; disaggregated instances run with
``--disaggregation-mode prefill|decode`` (KV cache over NIXL) behind ``sglang_router.launch_router
--pd-disaggregation``. Every plan field that reaches an option is mapped in :func:`options`."""
from __future__ import annotations

from .options import Argv
from .target import Role, Site, Target

ENGINE = "sglang"
KV_CACHE = {"fp8": "fp8_e4m3", "bf16": "auto", "fp16": "auto"}  # perfmodel's KV format -> --kv-cache-dtype


def options(t: Target, role: Role) -> list[tuple[str, object]]:
    """The plan's fields as ``launch_server`` options for an instance of ``role`` (flag, value; None: no value)."""
    lay = t.layout
    adp = lay.attention_dp
    out: list[tuple[str, object]] = [("--tp-size", role.tp * adp)]  # SGLang's TP spans the attention-DP ranks
    if lay.pp > 1:
        out.append(("--pp-size", lay.pp))
    if adp > 1:
        out += [("--dp-size", adp), ("--enable-dp-attention", None)]
    ep = t.ep_for(role)
    if ep > 1:
        out.append(("--ep-size", ep))
    if t.exchange(role) == "all_to_all":  # DeepEP: low-latency kernels for decode batches, normal ones for prefill
        out.append(("--moe-a2a-backend", "deepep"))
    if role.batch is not None:
        out.append(("--max-running-requests", role.batch))
    servers = lay.scenario.get("api_servers")
    if servers:  # the HTTP server processes the plan priced (perfmodel.engines: frontend_host)
        out.append(("--tokenizer-worker-num", servers))
    out.append(("--chunked-prefill-size", t.max_num_tokens()))
    out.append(("--mem-fraction-static", t.mem_fraction(role)))
    kv = t.kv_dtype()
    if kv is not None:
        if kv not in KV_CACHE:
            raise t.refuse(f"KV cache {kv} has no --kv-cache-dtype mapped", "scenario.kv_dtype")
        out.append(("--kv-cache-dtype", KV_CACHE[kv]))
    if t.weight_dtype() == "fp8":
        out.append(("--quantization", "fp8"))
    if lay.mtp:
        if t.draft_path:
            out += [("--speculative-algorithm", "STANDALONE"), ("--speculative-draft-model-path", t.draft_path)]
        else:
            out.append(("--speculative-algorithm", "NEXTN"))
        # a chain of K drafts: K steps, one candidate each, K + 1 tokens verified
        out += [("--speculative-num-steps", lay.mtp), ("--speculative-eagle-topk", 1),
                ("--speculative-num-draft-tokens", lay.mtp + 1)]
    if role.name in ("prefill", "decode"):
        out += [("--disaggregation-mode", role.name), ("--disaggregation-transfer-backend", "nixl")]
    return out


def commands(t: Target, site: Site) -> dict[str, list[Argv]]:
    out: dict[str, list[Argv]] = {}
    for role in t.roles():
        argvs = []
        for i in range(role.count):
            a = Argv(ENGINE, "launch_server").flag("--model-path", t.model_path)
            for flag, value in options(t, role):
                a.flag(flag, value)
            if role.name == "prefill":
                a.flag("--disaggregation-bootstrap-port", site.bootstrap_port(i))
            a.flag("--host", "0.0.0.0").flag("--port", site.port(role.name, i))
            argvs.append(a)
        out[role.name] = argvs
    if t.layout.mode == "disaggregated":
        r = Argv(ENGINE, "router").flag("--pd-disaggregation")
        for i in range(t.layout.prefill_instances):
            r.flag("--prefill", (f"http://{site.address('prefill', i)}", site.bootstrap_port(i)))
        for i in range(t.layout.decode_instances):
            r.flag("--decode", f"http://{site.address('decode', i)}")
        r.flag("--host", "0.0.0.0").flag("--port", site.port("router"))
        out["router"] = [r]
    return out


def files(t: Target, site: Site) -> dict[str, dict]:
    return {}


def notes(t: Target) -> list[str]:
    out = []
    if t.weight_dtype() == "fp4":
        out.append("the plan runs fp4 weights: SGLang reads them from an NVFP4 (ModelOpt) checkpoint; the model path "
                   "must name one")
    if t.layout.mode == "disaggregated":
        out.append("the router is the sglang-router package (pip install sglang-router; its flags as of 0.3.2); the "
                   "KV cache moves over NIXL (pip install nixl; SGLang's default transfer backend is mooncake)")
    if t.ep_for(t.roles()[-1]) > 1:
        out.append("--ep-size alone turns expert parallelism on in SGLang 0.5; 0.4.x also needed --enable-ep-moe")
    return out
