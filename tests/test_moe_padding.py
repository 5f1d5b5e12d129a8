"""vLLM's DeepGEMM MoE path: block-fp8 experts' grouped products over the worst-case contiguous layout, its padded
blocks computed (0.12) or skipped (0.13-0.17), the activation and re-quantization over every row either way
(perfmodel.engines.moe_padding_for, perfmodel.graph.padded_expert_ops, perfmodel/measure/padded_layout.py)."""
from __future__ import annotations

import math

import pytest

from perfmodel.engines import ENGINES, moe_padding_for
from perfmodel.graph import DEEPGEMM_BLOCK_M, Step, active_experts, build_ops, padded_expert_ops, worst_case_layout
from perfmodel.measure.padded_layout import groups, layout, padded_cases
from perfmodel.projection import project
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.scenario import Scenario

QWEN = "qwen3-235b-a22b-fp8"  # 128 experts of 1,536, top 8, block-fp8 checkpoint


def test_release_rule():
    assert moe_padding_for("vllm", "0.12.0") == "computed"
    assert moe_padding_for("vllm", "0.13.0") == "skipped" == moe_padding_for("vllm", "0.14.0", "hopper", "softmax", 4)
    assert moe_padding_for("vllm", "0.19.0") == "none" == moe_padding_for("vllm", "0.24.0", "blackwell", "sigmoid_bias")
    # 0.12-0.14 keep DeepGEMM's MoE off at a MoE TP degree of 8; 0.12 ran it on capability 10.0, not the B300's 10.3
    assert moe_padding_for("vllm", "0.13.0", "blackwell", "softmax", 8) == "none"
    assert moe_padding_for("vllm", "0.12.0", "blackwell-ultra", "softmax", 2) == "none"
    assert moe_padding_for("vllm", "0.13.0", "blackwell-ultra", "softmax", 2) == "skipped"
    # 0.15-0.17: FlashInfer's TensorRT-LLM kernel first on SM100, for the routers it routes itself; MiniMax-M2's
    # sigmoid with a selection bias and plain top-k it refuses, so DeepGEMM runs it; Hopper takes other kernels
    for version in ("0.15.1", "0.16.0", "0.17.0"):
        assert moe_padding_for("vllm", version, "blackwell", "sigmoid_bias", 2) == "skipped"
        assert moe_padding_for("vllm", version, "blackwell-ultra", "sigmoid_bias", 8) == "skipped"
        for router in ("softmax", "sigmoid_bias_grouped"):
            assert moe_padding_for("vllm", version, "blackwell", router, 2) == "none"
        assert moe_padding_for("vllm", version, "hopper", "sigmoid_bias", 2) == "none"
    assert moe_padding_for("vllm", "0.17.0", "ampere", "sigmoid_bias", 2) == "none"
    assert moe_padding_for("vllm", "0.18.0") is None  # its wheel not read
    assert moe_padding_for("vllm", "0.11.2") is None
    assert moe_padding_for("vllm", "nightly-5b8c30d62b754b57") is None
    assert moe_padding_for("sglang", "0.5.6.post2") is None
    assert all(e.moe_padding == "none" for e in ENGINES.values())  # no preset's release runs the layout
    assert "deepgemm_moe_permute" in ENGINES["vllm"].sources["moe_padding"]
    assert "TrtLlmFp8ExpertsModular" in ENGINES["vllm"].sources["moe_padding"]


def test_a_models_router_picks_the_kernel():
    """The routers the library and config.json give (perfmodel.models.MoE.router)."""
    from perfmodel.models import load_model

    assert load_model("minimax-m2.5").moe.router == "sigmoid_bias"
    assert {load_model(k).moe.router for k in ("deepseek-v3", "kimi-k2", "glm-5")} == {"sigmoid_bias_grouped"}
    assert load_model("qwen3-235b-a22b-fp8").moe.router == "softmax"
    assert load_model("qwen2-57b-a14b").moe.router == "softmax_unnormalized"
    assert load_model("llama-4-scout").moe.router == "sigmoid"
    hw = resolve_hardware("b200")

    def padding(model: str, release: str) -> str:
        return (Scenario(engine="vllm", dtype="fp8", tp=2, defaults_release=release).validated()
                .for_hardware(hw, resolve_model(model)).moe_padding)

    assert padding("minimax-m2.5", "0.17.0") == "skipped" and padding("minimax-m2.5", "0.19.0") == "none"
    assert padding(QWEN, "0.17.0") == "none"


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
    sc, names = _decode_ops("h200-sxm", tp=2, moe_padding="computed")
    assert worst_case_layout(resolve_model(QWEN), sc) == "computed"
    assert [n for n in names if n.startswith("moe.padding")] == [
        "moe.padding.gate_up", "moe.padding.swiglu", "moe.padding.quant", "moe.padding.down"]
    assert "moe.padding.gate_up.quant" not in names  # the module quantized its input already
    assert not any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=2)[1])  # the preset's: none
    # blocks skipped: the activation and re-quantization over every row, no product
    assert [n for n in _decode_ops("h200-sxm", tp=2, moe_padding="skipped")[1] if n.startswith("moe.padding")] == [
        "moe.padding.swiglu", "moe.padding.quant"]
    assert not any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=2, moe_padding="none")[1])
    # a named release: vLLM 0.12 keeps DeepGEMM's MoE off at a MoE TP degree of 8; EP 8 splits no expert
    assert not any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=8, engine_release="0.12.0")[1])
    assert any(n.startswith("moe.padding") for n in _decode_ops("h200-sxm", tp=8, ep=8, engine_release="0.12.0")[1])
    # DeepGEMM runs on SM90 and SM100 only
    sc, names = _decode_ops("a100-sxm-80gb", tp=4, moe_padding="computed")
    assert sc.moe_padding == "none" and not any(n.startswith("moe.padding") for n in names)
    # per-tensor fp8 experts (gpt-oss's MXFP4, Llama 4's fp8) and bf16 ones do not take the block-fp8 path
    hw = resolve_hardware("h200-sxm")
    sc = Scenario(batch=16, dtype="bf16", tp=2, engine="vllm", moe_padding="computed").validated().for_hardware(hw)
    assert worst_case_layout(resolve_model(QWEN), sc) is None


def test_the_projection_says_so_and_slows():
    kw = dict(dtype="fp8", tp=2, batch=16, isl=2000, osl=500, engine="vllm")
    plain, padded = project("h200-sxm", QWEN, **kw), project("h200-sxm", QWEN, moe_padding="computed", **kw)
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
    plain, padded = project("h200-sxm", QWEN, **kw), project("h200-sxm", QWEN, moe_padding="computed", **kw)
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


def test_engines_doc_states_the_skipped_layouts_figures():
    """docs/engines.md's later-releases paragraph prints MiniMax-M2.5's TP 2 decode step on the B200 as the model
    gives it with the padded blocks skipped."""
    from perfmodel.paths import repo_root

    doc = " ".join((repo_root() / "docs" / "engines.md").read_text().split())
    para = doc.split("**Later releases: the padded blocks skipped, the rows kept**")[1].split("## ")[0]
    kw = dict(dtype="fp8", tp=2, batch=16, isl=1024, osl=1024, engine="vllm")
    plain = project("b200", "minimax-m2.5", moe_padding="none", **kw)
    skipped = project("b200", "minimax-m2.5", moe_padding="skipped", **kw)
    t = {x.op.name: x for x in skipped.decode.times if x.op.name.startswith("moe.padding")}
    assert set(t) == {"moe.padding.swiglu", "moe.padding.quant"}
    beyond = t["moe.padding.swiglu"].op.params["tokens"]
    rows = math.ceil((16 * 8 + 256 * 127) / DEEPGEMM_BLOCK_M) * DEEPGEMM_BLOCK_M
    assert beyond == rows - 16 * 8
    assert (f"the layout holds {rows:,} rows, {beyond:,.0f} beyond the routed pairs, whose activation costs "
            f"{t['moe.padding.swiglu'].time * 1e6:.0f} us and re-quantization {t['moe.padding.quant'].time * 1e6:.0f} us "
            f"a layer: a decode step {plain.decode.time_s * 1e3:.1f} -> {skipped.decode.time_s * 1e3:.1f} ms") in para


@pytest.mark.parametrize("config,key", [
    ("MiniMaxAI--MiniMax-M2.5", "minimax-m2.5"), ("Qwen--Qwen2-57B-A14B", "qwen2-57b-a14b"),
    ("Qwen--Qwen3-235B-A22B-FP8", "qwen3-235b-a22b-fp8"), ("Qwen--Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
    ("Qwen--Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"), ("deepseek-ai--DeepSeek-V2-Lite", "deepseek-v2-lite"),
    ("deepseek-ai--DeepSeek-V3.2", "deepseek-v3.2"), ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", "llama-4-maverick"),
    ("mistralai--Mixtral-8x22B-v0.1", "mixtral-8x22b"), ("moonshotai--Kimi-K2-Instruct", "kimi-k2"),
    ("moonshotai--Kimi-K2.5", "kimi-k2.5"), ("openai--gpt-oss-120b", "gpt-oss-120b"), ("zai-org--GLM-4.5", "glm-4.5"),
    ("zai-org--GLM-5", "glm-5"),
])
def test_a_published_configs_router_is_the_librarys(config, key):
    """config.json's scoring_func, topk_method, use_routing_bias and norm_topk_prob give the router the library's
    descriptor of the same checkpoint states (tests/data/hf_configs: the published files)."""
    from pathlib import Path

    from perfmodel.models import load_model, model_from_hf_config

    path = Path(__file__).parent / "data" / "hf_configs" / f"{config}_config.json"
    assert model_from_hf_config(path).moe.router == load_model(key).moe.router


@pytest.mark.parametrize("version, router, want", [
    ("0.19.0", "sigmoid_bias", "modular"), ("0.19.0", "softmax", "modular"),
    ("0.19.0", "sigmoid_bias_grouped", "monolithic"), (None, "sigmoid_bias", "monolithic"),
    ("0.24.0", "softmax", "monolithic"), ("0.24.0", "sigmoid", "modular"), (None, "softmax_unnormalized", "modular"),
    ("0.20.0", "softmax", "monolithic"), ("0.20.0", "sigmoid_bias", "modular"), ("0.21.0", "sigmoid_bias", "monolithic"),
    ("0.22.1", "sigmoid_bias", "monolithic"), ("0.23.0", "softmax_unnormalized", "modular"),
    ("0.30.0", "softmax", "monolithic"), ("0.17.0", "sigmoid_bias", None), ("nightly", "softmax", None)])
def test_vllms_tensorrt_llm_moe_class_by_release_and_router(version, router, want):
    """vLLM's monolithic TensorRT-LLM block-fp8 MoE routes the tokens itself for the routers it lists (0.19:
    DeepSeek-V3's alone; 0.20: also Renormalize; 0.21: also MiniMax-M2's), the modular one takes the rest; before
    0.19 no modular class; SM100 parts only."""
    from perfmodel.engines import moe_module_for

    assert moe_module_for("vllm", version, "blackwell", router) == want
    assert moe_module_for("vllm", version, "hopper", router) is None
    assert moe_module_for("sglang", version, "blackwell", router) is None


def test_the_modular_class_is_priced_from_its_own_rows():
    """MiniMax-M2.5 under vLLM 0.19 on the B200 runs the modular class, timed in the 0.24 folder's table beside the
    monolithic one: its module ops name it, and the decode step takes that kernel's rows."""
    hw = resolve_hardware("b200")
    kw = dict(batch=16, isl=1024, osl=128, dtype="fp8", tp=2, engine="vllm")
    model = resolve_model("minimax-m2.5")

    def decode(**extra):
        sc = Scenario(**kw, **extra).validated().for_hardware(hw, model)
        ops = build_ops(model, Step("decode", 16, 1, 1024), sc)
        return sc, {op.params.get("moe_kernel") for op in ops if "moe_format" in op.params}

    sc, kernels = decode()
    assert sc.moe_module == "monolithic" and kernels == {"monolithic"}  # the folder's own release, 0.24
    sc, kernels = decode(defaults_release="0.19.0")
    assert sc.moe_module == "modular" and kernels == {"modular"}
    old = project("b200", "minimax-m2.5", defaults_release="0.19.0", **{**kw, "batch": 16})
    new = project("b200", "minimax-m2.5", **{**kw, "batch": 16})
    assert old.decode.time_s > 1.03 * new.decode.time_s
    from perfmodel.cost.tables import load_folder
    from perfmodel.paths import repo_root

    folder = load_folder(repo_root() / "calibration" / "b200-vllm")
    key = ("moe", "fp8_block", "power_law_1.2")
    assert folder.kernel_for("moe", key, "modular").endswith("modular")
    assert folder.kernel_for("moe", key) == folder.kernel_for("moe", key, "monolithic")
    # block fp8 on Hopper takes no such class
    assert project("h200-sxm", "minimax-m2.5", **kw).scenario.moe_module == ""


def test_engines_doc_states_the_two_classes_figures():
    """docs/engines.md's paragraph on vLLM 0.19's modular TensorRT-LLM class: the shapes each class's rows hold in the
    B200 table, their one-token times, and the decode step it quotes, as the tables and the model give them today."""
    import collections

    from perfmodel.cost.table_store import FILE, decode_lazily
    from perfmodel.paths import repo_root

    doc = " ".join((repo_root() / "docs" / "engines.md").read_text().split())
    para = doc.split("**From 0.19: the TensorRT-LLM kernel's two classes, by router**")[1].split("**")[0]
    rows = decode_lazily(repo_root() / "calibration" / "b200-vllm" / FILE)[0][("moe", "fp8_block", "balanced")]
    shapes = {}
    for kernel in rows:
        c = rows[kernel]
        by = collections.defaultdict(dict)
        for dims, t in zip(c.dims.tolist(), c.times.tolist()):
            by[tuple(dims[1:])][int(dims[0])] = t
        shapes["modular" if kernel.endswith("modular") else "monolithic"] = by
    assert f"the monolithic at {len(shapes['monolithic'])} shapes, the modular at {len(shapes['modular'])} others" \
        in para
    # shapes alike but for top-k (dims: hidden, width, experts a rank, top-k, EP)
    pairs = [(s, t) for s in shapes["modular"] for t in shapes["monolithic"]
             if (s[0], s[1], s[2], s[4]) == (t[0], t[1], t[2], t[4]) and s[3] == 6 and t[3] == 8]
    r = [shapes["modular"][s][1] / shapes["monolithic"][t][1] for s, t in pairs]
    assert f"at top-8: {len(pairs)} shapes), the modular one takes {min(r):.2f}-{max(r):.2f}x" in para
    kw = dict(dtype="fp8", tp=2, batch=16, isl=1024, osl=1024, engine="vllm")
    new = project("b200", "minimax-m2.5", **kw).decode.time_s * 1e3
    old = project("b200", "minimax-m2.5", defaults_release="0.19.0", **kw).decode.time_s * 1e3
    assert f"a decode step {new:.1f} -> {old:.1f} ms" in para
