"""The engine-preset table of docs/engines.md, from the presets themselves (perfmodel/engines.py).

    python docs/tools/engines_table.py
"""
from __future__ import annotations

ATTENTION = {"trtllm": "TensorRT-LLM FMHA / XQA", "fa3": "FlashAttention-3", "flash": "FlashAttention-2",
             "flashinfer": "FlashInfer", "auto": "PyTorch's dispatch"}
KERNELS = {"fused": ("one fused kernel", "one kernel"), "torch": ("`F.rms_norm`, separate add", "`silu(g) * u` (two kernels)"),
           "hf": ("eight kernels in fp32, separate add", "two kernels")}
ROTARY = {"kv_write": "inside the KV-cache write", "kernel": "one kernel", "eager": "eager (five calls each on q and k)"}
SCHEDULE = {"mixed": "prompt chunks ride in the decode steps", "prefill_first": "prompts alone, decoding waits"}
LAUNCH = {"auto": "decode from CUDA graphs, prefill eager", "eager": "eager", "graph": "CUDA graphs"}
HUGE = 1 << 29
EXAMPLE_PARTS = ("h200-sxm", "b200")  # where a preset whose settings follow the GPU's memory is shown


A2A_KERNELS = {"deepep": "DeepEP (low-latency for decode, normal with prefill)", "per_rank": "once per rank",
               "mnnvl": "its MNNVL all-to-all, once per rank"}
PAYLOAD = {"bf16": "bf16", "fp8": "fp8", "experts": "the experts' format",
           "fp8_experts": "fp8 for fp8 or fp4 experts, else bf16", "fp4_experts": "NVFP4 for fp4 experts, else bf16",
           "block_fp8_experts": "fp8 for block-fp8 experts, else bf16"}


def _payloads(e) -> str:
    """The formats the preset's all-to-all kernels send (``Engine.a2a_payload``; bf16 where a rule says
    otherwise)."""
    kinds = {"deepep": ("ll", "normal"), "mnnvl": ("mnnvl",), "per_rank": ()}
    shown = [k for kind in (e.moe_all_to_all, e.moe_all_to_all_nvl) if kind for k in kinds[kind]]
    if not shown:
        return "the exchange's (above)"
    names = {"ll": "low-latency", "normal": "normal", "mnnvl": "MNNVL"}
    return "; ".join(f"{names[k]}: {PAYLOAD[e.a2a_payload[k + '.dispatch']]} / {PAYLOAD[e.a2a_payload[k + '.combine']]}"
                     for k in shown)


def _schedule(e) -> str:
    """The serving simulation's schedule of a preset, and the engine's own where it differs (docs/serving.md,
    Schedules)."""
    if e.batching != "continuous":
        return "one batch at a time"
    other = e.own_schedule if e.own_schedule not in (None, e.schedule) else None
    return SCHEDULE[e.schedule] + (f" (the engine's own: `{other}`)" if other else "")


def _by_memory(e) -> list[tuple[str, int, float]]:
    """(part name, prefill tokens a step, memory share) of a preset with a memory rule on EXAMPLE_PARTS at TP 8."""
    from perfmodel.spec import load_spec

    return [(hw.name, *e.memory_for(hw, 8)) for hw in map(load_spec, EXAMPLE_PARTS)]


def _est(e, key: str, text: str) -> str:
    """``text``, marked where the preset's source for ``key`` calls it an estimate."""
    return f"{text} (estimate)" if e.sources.get(key, "").startswith("estimate") else text


def _memory(e) -> str:
    if e.memory_rule is not None:
        held = "weights and KV cache" if e.mem_policy == "static" else "everything"
        shares = ", ".join(f"{share:.1%} on {name} at TP 8" for name, _, share in _by_memory(e))
        return f"{held} within the share the engine computes from the GPU's memory and layout ({shares})"
    if e.mem_policy == "free":
        return f"KV gets {e.mem_fraction:.0%} of what is free after weights and activations"
    if isinstance(e.mem_fraction, dict):
        shares = "/".join(f"{v:.0%}".rstrip("%") for v in e.mem_fraction.values())
        tps = "/".join(str(k) for k in e.mem_fraction)
        return f"{shares}% of the device (TP {tps})"
    return "the whole device" if e.mem_fraction == 1.0 else f"{e.mem_fraction:.0%} of the device in all"


def _scheduler(e) -> str:
    mode = "async" if e.async_scheduling else "sync"
    if not e.scheduler_host:
        return "not measured (none)"
    at = ", ".join(f"{e.scheduler_host_s(n, mode == 'async') * 1e3:.2f} ms at {n:,}" for n in (8, 64, 1024))
    return f"{at} sequences, {mode}: measured"


def _shared(e) -> str:
    stream = {"graph": "second stream in CUDA-graph decode", "small": "second stream in steps of <= 256 tokens",
              "never": "same stream"}[e.shared_stream]
    return stream + ("; DeepSeek-V3's folded into the routed experts without EP" if e.fused_shared_expert else "")


def _allreduce_norm(e) -> str:
    if not e.allreduce_norm:
        return "two kernels"
    return (f"one kernel for {', '.join(e.allreduce_norm)} on {', '.join(e.allreduce_norm_generations)} (steps of "
            "at most 2,048 tokens, no attention DP)")


def _model_defaults(e) -> str:
    return "; ".join(d.note() for d in e.model_defaults) or "none"


def table() -> str:
    from perfmodel.engines import ENGINES

    engines = list(ENGINES.values())
    rows = {
        "defaults follow": [e.version for e in engines],
        "attention (Hopper)": [ATTENTION.get(e.attention_for("hopper"), e.attention_for("hopper")) for e in engines],
        "attention (Blackwell)": [ATTENTION.get(e.attention_for("blackwell"), e.attention_for("blackwell"))
                                  for e in engines],
        "attention (Ampere)": [ATTENTION.get(e.attention_for("ampere"), e.attention_for("ampere")) for e in engines],
        "norm + residual": [KERNELS[e.kernels][0] for e in engines],
        "SwiGLU": [KERNELS[e.kernels][1] for e in engines],
        "rotary": [ROTARY[e.rotary] for e in engines],
        "launches": [LAUNCH[e.launch] for e in engines],
        "KV cache with fp8 weights": ["fp8" if e.fp8_kv else "model dtype" for e in engines],
        "fp8 attention over an fp8 cache": [_est(e, "fp8_attention", "yes") if e.fp8_attention else "no"
                                            for e in engines],
        "prefill tokens per step": ["whole prompt" if e.prefill_chunk > HUGE else
                                    "by the GPU's memory: " + ", ".join(f"{chunk} on {name}"
                                                                        for name, chunk, _ in _by_memory(e))
                                    if e.memory_rule else f"{e.prefill_chunk}" for e in engines],
        "most sequences at once": ["memory alone" if e.max_batch > HUGE else _est(e, "max_batch", f"{e.max_batch}")
                                   for e in engines],
        "memory": [_memory(e) for e in engines],
        "batching": [e.batching for e in engines],
        "serving steps (serve --schedule)": [_schedule(e) for e in engines],
        "each attention-DP rank's step budget": [_est(e, "dp_budget", "the chunk / DP" if e.dp_budget == "split"
                                                      else "the whole chunk") for e in engines],
        "attention-DP ranks' tokens in CUDA-graph steps": [
            "padded to the busiest rank's" if e.dp_pad else "each rank's own" for e in engines],
        "MoE over attention-DP ranks": [_est(e, "moe_exchange", e.moe_exchange + (
            ", in the experts' format" if e.moe_quantized_exchange else ", bf16")) + (
            _est(e, "wide_ep", "; all_to_all where the ranks span more than one 8-GPU node")
            if e.wide_ep_all_to_all else "") for e in engines],
        "--moe-exchange all_to_all runs": [_est(e, "moe_all_to_all", A2A_KERNELS[e.moe_all_to_all] + (
            f"; {A2A_KERNELS[e.moe_all_to_all_nvl]} where the NVLink domain spans nodes (NVL72)"
            if e.moe_all_to_all_nvl else "")) for e in engines],
        "all-to-all payloads, out / back": [_payloads(e) for e in engines],
        "engine's host work a step (--scheduling)": [_scheduler(e) for e in engines],
        "MoE shared experts (--shared-stream)": [_shared(e) for e in engines],
        "block-fp8 experts' layout (--moe-padding)": [
            {"computed": "DeepGEMM's worst-case layout, padded blocks computed",
             "skipped": "DeepGEMM's worst-case layout, padded blocks skipped"}.get(e.moe_padding, "the routed rows")
            + ("; DeepGEMM's worst-case layout in some releases (--engine-release)" if "moe_padding" in e.sources
               else "")
            for e in engines],
        "TP all-reduce and the next RMSNorm": [_allreduce_norm(e) for e in engines],
        "defaults for some architectures": [_model_defaults(e) for e in engines],
    }
    lines = ["| | " + " | ".join(f"`{e.key}`" for e in engines) + " |", "|---" * (len(engines) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
