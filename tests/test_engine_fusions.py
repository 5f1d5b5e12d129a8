"""What the serving engines run together that the graph would otherwise price apart: shared experts on a second CUDA
stream, SGLang's shared expert folded into the routed module, the query and KV latents in one product, SGLang's
all-reduce with the RMSNorm after it (perfmodel.engines, perfmodel.graph, perfmodel.step_accounting.stream_regions)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from perfmodel import ops as O
from perfmodel.cost import OpTime
from perfmodel.engines import ENGINES, SHARED_STREAM_TOKENS, shared_stream_for
from perfmodel.graph import Step, build_ops, fuses_shared_expert
from perfmodel.measure.streams import hidden_fractions
from perfmodel.projection import project
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.scenario import Scenario
from perfmodel.step_accounting import STREAM_HIDDEN, Rules, account, stream_regions

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("calibration/h200/streams-h100", "calibration/h200/streams-h100-repeat")


def _ops(model: str, phase: str, batch: int, **kw):
    hw = resolve_hardware("b200")
    sc = Scenario(batch=batch, isl=1024, osl=128, **kw).validated().for_hardware(hw)
    step = Step(phase, batch, 1, 1024) if phase == "decode" else Step(phase, batch, 1024, 0)
    return build_ops(resolve_model(model), step, sc)


def _streams(ops):
    return {op.name: op.params.get(O.STREAM) for op in ops if op.name.startswith("moe.")}


def test_release_rule():
    assert shared_stream_for("vllm", "0.11.0") == "never"
    assert shared_stream_for("vllm", "0.12.0") == "small"
    assert shared_stream_for("vllm", "0.19.0") == "small"
    assert shared_stream_for("vllm", "nightly-5b8c30d62b754b57") is None
    assert shared_stream_for("sglang", "0.5.9") is None
    assert ENGINES["trtllm"].shared_stream == "graph" and ENGINES["sglang"].shared_stream == "graph"
    assert ENGINES["vllm"].shared_stream == "never"  # the preset's release, 0.11


def test_trtllm_decode_tags_both_paths():
    tags = _streams(_ops("deepseek-v3", "decode", 4, tp=8, dtype="fp4", engine="trtllm"))
    assert tags["moe.shared.gate_up"] == tags["moe.shared.gate_up.quant"] == tags["moe.shared.down"] == "side"
    assert tags["moe.router"] == tags["moe.gate_up"] == tags["moe.unpermute"] == "main"
    assert tags["moe.allreduce"] is None  # after the join
    # prefill runs eagerly: one stream
    assert set(_streams(_ops("deepseek-v3", "prefill", 1, tp=8, dtype="fp4", engine="trtllm")).values()) == {None}


def test_vllm_small_steps_only():
    assert set(_streams(_ops("kimi-k2", "decode", 8, tp=8, engine="vllm")).values()) == {None}
    small = _streams(_ops("kimi-k2", "decode", SHARED_STREAM_TOKENS, tp=8, engine="vllm", shared_stream="small"))
    assert small["moe.shared.down"] == "side"
    large = _streams(_ops("kimi-k2", "decode", SHARED_STREAM_TOKENS + 1, tp=8, engine="vllm", shared_stream="small"))
    assert set(large.values()) == {None}


def test_sglang_folds_deepseek_shared_expert_without_ep():
    hw = resolve_hardware("b200")
    fused = Scenario(batch=4, tp=8, engine="sglang").validated().for_hardware(hw)
    model = resolve_model("deepseek-v3")
    assert fuses_shared_expert(model, fused)
    ops = build_ops(model, Step("decode", 4, 1, 1024), fused)
    assert not any(op.name.startswith("moe.shared") for op in ops)
    module = next(op for op in ops if op.name == "moe.gate_up")
    assert module.params["moe_tokens"] == pytest.approx(4 * 9 / 8)  # one more expert each token picks
    # with expert parallelism, or another layout (Kimi K2's 384 experts), a stream of its own
    assert not fuses_shared_expert(model, fused.with_(ep=8))
    assert not fuses_shared_expert(resolve_model("kimi-k2"), fused)
    assert _streams(_ops("deepseek-v3", "decode", 4, tp=8, ep=8, engine="sglang"))["moe.shared.down"] == "side"


def _timed(name, stream, t, nbytes=0.0, on=1.0):
    op = O.on_stream(O.Op(name, "gemm", "decode", 0.0, nbytes, {}), stream, on)
    return OpTime(op, t, 0.0, t, "latency")


def test_region_arithmetic():
    main = [_timed("a", "main", 30e-6), _timed("b", "main", 10e-6)]
    side = [_timed("s1", "side", 6e-6), _timed("s2", "side", 4e-6)]
    acc = account(main + side, Rules(sol=True), None)
    together = 40e-6 + 10e-6 - STREAM_HIDDEN * 10e-6
    assert acc.total() == pytest.approx(together)
    shares = {s.op.name: s for s in acc.ops}
    assert shares["s1"].run / shares["s2"].run == pytest.approx(1.5)  # spread in proportion to time
    assert shares["s1"].device_s == pytest.approx(shares["s1"].run)
    # the side stream off: one after the other
    off = [_timed(t.op.name, t.op.params[O.STREAM], t.time, on=0.0) for t in main + side]
    assert account(off, Rules(sol=True), None).total() == pytest.approx(50e-6)
    # a longer side path: the main one is the shorter
    long_side = [_timed("s", "side", 100e-6)]
    assert account(main + long_side, Rules(sol=True), None).total() == pytest.approx(
        100e-6 + 40e-6 * (1 - STREAM_HIDDEN))


def test_region_floor_is_hbm_traffic():
    class HW:
        hbm_bandwidth = 1e12

    ops = [_timed("a", "main", 10e-6, nbytes=30e6), _timed("s", "side", 10e-6, nbytes=30e6)]
    out = stream_regions([s for s in account(ops, Rules(sol=True), None).ops], HW())
    assert sum(s.run for s in out) == pytest.approx(60e-6)  # 60 MB at 1 TB/s


def test_projection_gains_at_most_the_shared_path():
    kw = dict(tp=8, dtype="fp4", engine="trtllm", batch=4, isl=1024, osl=256, batching="static")
    never = project("b200", "deepseek-v3", shared_stream="never", **kw)
    graph = project("b200", "deepseek-v3", **kw)
    assert graph.tpot_s < never.tpot_s
    shared = sum(t.time * t.op.count for t in never.decode.times if t.op.name.startswith("moe.shared"))
    gaps = sum(t.op.count for t in never.decode.times if t.op.name.startswith("moe.shared"))
    assert never.tpot_s - graph.tpot_s <= (shared + gaps * 5e-6) * STREAM_HIDDEN
    # prefill is launched eagerly: untouched
    assert graph.ttft_s == pytest.approx(never.ttft_s)


def test_hidden_share_is_the_committed_runs_median():
    rows = [json.loads(line) for run in RUNS for line in (ROOT / run / "measurements.jsonl").open()]
    fractions = hidden_fractions(rows)
    assert len(fractions) == 60
    assert round(statistics.median(fractions.values()), 2) == STREAM_HIDDEN


def test_measured_shapes_are_the_models():
    from perfmodel.measure.streams import MODELS, stream_cases

    for name, hidden, experts, top_k, width, shared, gate, _ in MODELS:
        m = resolve_model(name)
        assert (m.hidden, m.moe.num_experts, m.moe.top_k, m.moe.expert_intermediate,
                m.moe.num_shared_experts * m.moe.shared_intermediate, bool(m.moe.shared_expert_gate)) == \
            (hidden, experts, top_k, width, shared, gate)
    measured = {json.loads(line)["id"] for line in (ROOT / RUNS[0] / "measurements.jsonl").open()}
    assert {c.id for c in stream_cases()} == measured  # the committed run measured these very cases


def test_bad_flag(capsys):
    from perfmodel.cli import main

    with pytest.raises(SystemExit) as e:
        main(["project", "--arch", "b200", "--model", "deepseek-v3", "--shared-stream", "sometimes"])
    assert e.value.code == 2


def test_engines_project_both_latents_with_one_product():
    """TensorRT-LLM's fused_a, SGLang's fused_qkv_a_proj_with_mqa, vLLM's fused_qkv_a_proj: one product of the hidden
    state into the query latent and the KV latent; transformers' layer keeps q_a_proj and kv_a_proj_with_mqa apart."""
    model = resolve_model("deepseek-v3")
    mla = model.mla
    for engine in ("trtllm", "sglang", "vllm"):
        names = {op.name: op for op in _ops("deepseek-v3", "decode", 4, tp=8, engine=engine)}
        assert "attn.q_a" not in names and "attn.kv_a" not in names
        fused = names["attn.qkv_a"]
        assert fused.params["n"] == mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim == 2112
    plain = {op.name for op in _ops("deepseek-v3", "decode", 4, tp=8, engine="hf")}
    assert {"attn.q_a", "attn.kv_a"} <= plain and "attn.qkv_a" not in plain


def test_sglang_folds_the_norm_into_the_all_reduce():
    def norms(model, batch=4, **kw):
        ops = _ops(model, "decode", batch, tp=8, engine="sglang", **kw)
        return {op.name for op in ops if op.name in ("attn.norm", "ffn.norm")}

    assert norms("qwen3-235b-a22b-fp8") == set()  # a listed family, on Blackwell, TP 8
    assert norms("qwen3.5-397b-a17b") == {"attn.norm", "ffn.norm"}  # not listed
    assert norms("qwen3-235b-a22b-fp8", batch=4096) == {"attn.norm", "ffn.norm"}  # beyond 2,048 tokens
    assert norms("qwen3-235b-a22b-fp8", attention_dp=2, ep=16) == {"attn.norm", "ffn.norm"}
    trt = {op.name for op in _ops("qwen3-235b-a22b-fp8", "decode", 4, tp=8, engine="trtllm")}
    assert {"attn.norm", "ffn.norm"} <= trt  # not sourced for TensorRT-LLM: kept
    hopper = Scenario(batch=4, tp=8, engine="sglang").validated().for_hardware(resolve_hardware("h200-sxm"))
    ampere = Scenario(batch=4, tp=8, engine="sglang").validated().for_hardware(resolve_hardware("a100-sxm-80gb"))
    assert "qwen3_moe" in hopper.allreduce_norm and ampere.allreduce_norm == ()
