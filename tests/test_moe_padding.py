"""vLLM 0.12's DeepGEMM MoE path: block-fp8 experts' grouped products over the worst-case contiguous layout with every
block computed (perfmodel.engines.moe_padded_rows_for, perfmodel.graph.padded_expert_ops, perfmodel/measure/
padded_layout.py)."""
from __future__ import annotations

import math

import pytest

from perfmodel.engines import ENGINES, moe_padded_rows_for
from perfmodel.graph import DEEPGEMM_BLOCK_M, Step, active_experts, build_ops, padded_expert_ops, pads_expert_rows
from perfmodel.measure.padded_layout import groups, layout, padded_cases
from perfmodel.projection import project
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.scenario import Scenario

QWEN = "qwen3-235b-a22b-fp8"  # 128 experts of 1,536, top 8, block-fp8 checkpoint


def test_release_rule():
    assert moe_padded_rows_for("vllm", "0.12.0") is True
    assert moe_padded_rows_for("vllm", "0.13.0") is False and moe_padded_rows_for("vllm", "0.19.0") is False
    assert moe_padded_rows_for("vllm", "0.11.2") is None  # not read
    assert moe_padded_rows_for("vllm", "nightly-5b8c30d62b754b57") is None
    assert moe_padded_rows_for("sglang", "0.5.6.post2") is None
    assert not any(e.moe_padded_rows for e in ENGINES.values())  # no preset's release pads
    assert "deepgemm_moe_permute" in ENGINES["vllm"].sources["moe_padded_rows"]


def test_the_layout_rows_and_what_the_padding_adds():
    # 16 tokens at TP 2: 16 x 8 + 128 x 127 = 16,384 rows, a whole number of blocks already
    ops = {op.name: op for op in padded_expert_ops(16, 4096, 768, 8, 128, 1, "bf16", "decode")}
    active = active_experts(128, 8, 16)
    empty = 16384 - DEEPGEMM_BLOCK_M * active  # the blocks no token reaches (each reached expert: one block)
    assert ops["moe.padding.gate_up"].params["m"] == pytest.approx(empty)
    assert (ops["moe.padding.gate_up"].params["n"], ops["moe.padding.gate_up"].params["k"]) == (1536, 4096)
    assert (ops["moe.padding.down"].params["n"], ops["moe.padding.down"].params["k"]) == (4096, 768)
    assert ops["moe.padding.gate_up"].params["scaling"] == "block" and ops["moe.padding.gate_up"].params["prequantized"]
    # the activation and the re-quantization over every row beyond the 128 routed pairs
    assert ops["moe.padding.swiglu"].params["tokens"] == ops["moe.padding.quant"].params["tokens"] == 16384 - 128
    # rounded up to whole blocks; expert parallelism keeps every pair's row and its own experts' alignment
    assert padded_expert_ops(17, 4096, 768, 8, 128, 1, "bf16", "decode")[1].params["tokens"] == 16512 - 136
    ep2 = {op.name: op for op in padded_expert_ops(16, 4096, 1536, 8, 128, 2, "bf16", "decode")}
    assert ep2["moe.padding.swiglu"].params["tokens"] == math.ceil((128 + 64 * 127) / 128) * 128 - 64


def _decode_ops(arch: str, **kw):
    hw = resolve_hardware(arch)
    sc = Scenario(batch=16, isl=1024, osl=128, dtype="fp8", engine="vllm", **kw).validated().for_hardware(hw)
    return sc, [op.name for op in build_ops(resolve_model(QWEN), Step("decode", 16, 1, 1024), sc)]


def test_only_where_the_path_runs():
    sc, names = _decode_ops("h200-sxm", tp=2, moe_padded_rows=True)
    assert pads_expert_rows(resolve_model(QWEN), sc)
    assert [n for n in names if n.startswith("moe.padding")] == [
        "moe.padding.gate_up", "moe.padding.swiglu", "moe.padding.quant", "moe.padding.down"]
    assert "moe.padding.gate_up.quant" not in names  # the module quantized its input already
    assert not any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=2)[1])  # the preset's: off
    # vLLM keeps DeepGEMM's MoE off at a MoE TP degree of 8; EP 8 splits no expert
    assert not any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=8, moe_padded_rows=True)[1])
    assert any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=8, ep=8, moe_padded_rows=True)[1])
    # DeepGEMM runs on SM90 and SM100 only
    sc, names = _decode_ops("a100-sxm-80gb", tp=4, moe_padded_rows=True)
    assert sc.moe_padded_rows is False and not any(n.startswith("moe.padding") for n in names)
    # per-tensor fp8 experts (gpt-oss's MXFP4, Llama 4's fp8) and bf16 ones do not take the block-fp8 path
    hw = resolve_hardware("h200-sxm")
    sc = Scenario(batch=16, dtype="bf16", tp=2, engine="vllm", moe_padded_rows=True).validated().for_hardware(hw)
    assert not pads_expert_rows(resolve_model(QWEN), sc)


def test_the_projection_says_so_and_slows():
    kw = dict(dtype="fp8", tp=2, batch=16, isl=2000, osl=500, engine="vllm")
    plain, padded = project("h200-sxm", QWEN, **kw), project("h200-sxm", QWEN, moe_padded_rows=True, **kw)
    assert padded.tpot_s > plain.tpot_s * 1.1
    assert any("worst-case contiguous layout" in a for a in padded.assumptions)
    assert not any("worst-case contiguous layout" in a for a in plain.assumptions)


def test_the_measured_layout_is_the_modelled_one():
    aligned, worst = layout(16, 128, 8, 128)
    assert worst == 16384 and all(a % DEEPGEMM_BLOCK_M == 0 for a in aligned)
    assert sum(1 for a in aligned if a) * DEEPGEMM_BLOCK_M == sum(aligned)  # 16 tokens: a block a reached expert
    p = {"tokens": 16, "experts": 128, "top_k": 8, "all_experts": 128}
    routed, padded, dense = (groups({**p, "variant": v}) for v in ("routed", "padded", "dense"))
    assert sum(padded) == worst and dense == [worst - sum(routed)] and padded[1:] == routed[1:]
    assert len(padded_cases()) == 5 * 5 * 2 * 3 and len(padded_cases(quick=True)) == 6


def test_engines_doc_states_todays_padding_figures():
    """docs/engines.md's vLLM 0.12 paragraph prints the padding of Qwen3-235B's TP 2 decode step as the model gives it."""
    from perfmodel.paths import repo_root

    doc = " ".join((repo_root() / "docs" / "engines.md").read_text().split())
    para = doc.split("**A release's path no table times: vLLM 0.12's DeepGEMM MoE**")[1].split("\n\n")[0]
    kw = dict(dtype="fp8", tp=2, batch=16, isl=2000, osl=500, engine="vllm")
    plain, padded = project("h200-sxm", QWEN, **kw), project("h200-sxm", QWEN, moe_padded_rows=True, **kw)
    t = {x.op.name: x for x in padded.decode.times if x.op.name.startswith("moe.padding")}
    empty, beyond = t["moe.padding.gate_up"].op.params["m"], t["moe.padding.swiglu"].op.params["tokens"]
    us = {k: v.time * 1e6 for k, v in t.items()}
    assert f"hold about {active_experts(128, 8, 16):.0f} reached experts' blocks" in para
    assert (f"the other {empty:,.0f} rows cost {us['moe.padding.gate_up']:.0f} us (gate and up) and "
            f"{us['moe.padding.down']:.0f} us (down) a layer, the activation and re-quantization over {beyond:,.0f} rows "
            f"{us['moe.padding.swiglu'] + us['moe.padding.quant']:.0f} us: a decode step "
            f"{plain.decode.time_s * 1e3:.1f} -> {padded.decode.time_s * 1e3:.1f} ms") in para


def test_engines_doc_states_the_measured_padding_range(docs_tool):
    """The prose after the generated padded-layout block gives the range of its last column as the tool prints it."""
    from perfmodel.paths import repo_root

    rows = docs_tool("padded_layout_check.py").compare()
    lo, hi = min(r["priced"] for r in rows), max(r["priced"] for r in rows)
    doc = " ".join((repo_root() / "docs" / "engines.md").read_text().split())
    assert f"prices the padding at {lo:.1f}-{hi:.2f} of what the stand-in adds" in doc
    # "the padding adds about its own product's time ...; Qwen3-235B's gate and up product at EP 2 ... far more"
    import statistics

    assert 0.8 < statistics.median(r["share"] for r in rows) < 1.25
    ep2 = next(r for r in rows if (r["layer"], r["product"]) == ("qwen3-235b ep2", "gate_up"))
    assert ep2["share"] == max(r["share"] for r in rows) > 2
