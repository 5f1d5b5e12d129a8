"""An engine's defaults per model architecture (perfmodel.engines.ModelDefault): SGLang runs Qwen3-Next and Qwen3.5
without its overlap scheduler, and on B200/B300-class parts with Triton attention, from the measured Triton tables."""
from __future__ import annotations

import json

import numpy as np

from perfmodel.cli import main
from perfmodel.cost import attention_kernel, table_ratio
from perfmodel.cost.table_store import decode_lazily
from perfmodel.engines import ENGINES
from perfmodel.graph import Step, build_ops
from perfmodel.imports.aiconfigurator import ATTN_BACKENDS
from perfmodel.models import load_model
from perfmodel.paths import calibration_dir
from perfmodel.projection import project_resolved
from perfmodel.resolve import resolve_profile, resolve_scenario
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec

QWEN35 = load_model("qwen3.5-397b-a17b")
LLAMA = load_model("llama-3.1-70b")


def _resolved(part: str, model, **kw):
    return resolve_scenario(Scenario(**kw).validated(), load_spec(part), model)


def test_sglang_runs_gated_deltanet_models_synchronously_and_with_triton_on_sm100():
    for part in ("b200", "b300", "gb200"):
        sc = _resolved(part, QWEN35, engine="sglang", tp=8)
        assert (sc.async_scheduling, sc.attention_kernel) == (False, "triton"), part
    hopper = _resolved("h200", QWEN35, engine="sglang", tp=8)
    assert hopper.async_scheduling is False
    assert hopper.attention_kernel == ENGINES["sglang"].attention_for("hopper")
    # other models, other engines and no model at all keep the preset
    for sc in (_resolved("b200", LLAMA, engine="sglang", tp=8), _resolved("b200", None, engine="sglang", tp=8)):
        assert (sc.async_scheduling, sc.attention_kernel) == (True, "trtllm")
    trt = _resolved("b200", QWEN35, engine="trtllm", tp=8)
    assert trt.attention_kernel == "trtllm"


def test_the_users_choice_wins_over_a_model_default():
    sc = _resolved("b200", QWEN35, engine="sglang", tp=8, async_scheduling=True, attention_kernel="trtllm")
    assert (sc.async_scheduling, sc.attention_kernel) == (True, "trtllm")


def test_the_sglang_folders_hold_triton_attention_tables_and_a_projection_reads_them():
    assert ATTN_BACKENDS[("sglang", "triton")] == "triton"
    for part in ("b200", "b300"):
        classes, _ = decode_lazily(calibration_dir() / f"{part}-sglang" / "tables.npz")
        triton = [k for k in classes if k[0] == "attention" and k[1] == "triton"]
        assert {k[2] for k in triton} == {"prefill", "decode"}, part
    hw = load_spec("b200")
    prof = resolve_profile(None, hw, "sglang")
    sc = _resolved("b200", QWEN35, engine="sglang", tp=8)
    core = next(op for op in build_ops(QWEN35, Step("decode", 64, 1, 2048), sc) if op.kind == "attention")
    assert attention_kernel(core, hw, prof).kernel.key == "triton"
    ratio = table_ratio(core, hw, prof)
    # the fitted model is FlashAttention-2's carried; the measured Triton kernel moves it
    assert ratio is not None and not np.isclose(ratio, 1.0)


def test_the_defaults_slow_a_large_decode_batch_and_the_projection_says_why():
    hw = load_spec("b200")
    prof = resolve_profile(None, hw, "sglang")
    kw = dict(engine="sglang", tp=8, dtype="fp8", batch=256, isl=1024, osl=1024, batching="static")
    own = project_resolved(hw, QWEN35, _resolved("b200", QWEN35, **kw), prof)
    preset = project_resolved(
        hw, QWEN35, _resolved("b200", QWEN35, **kw, async_scheduling=True, attention_kernel="trtllm"), prof)
    assert own.tpot_s > preset.tpot_s
    text = " ".join(own.assumptions)
    assert "synchronous scheduling" in text and "Triton attention" in text
    assert "defaults for this model's architecture" not in " ".join(preset.assumptions)


def test_project_json_lists_the_model_defaults_with_their_sources(capsys):
    assert main(["project", "--arch", "b200", "--model", "qwen3.5-397b-a17b", "--engine", "sglang", "--tp", "8",
                 "--batch", "8", "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)["kernels"]["engine"]["model_defaults"]
    assert [r["field"] for r in rules] == ["async_scheduling", "attention_kernel"]
    assert all("server_args.py" in r["source"] for r in rules)
    assert main(["project", "--arch", "b200", "--model", "qwen3.5-397b-a17b", "--engine", "sglang", "--tp", "8",
                 "--batch", "8", "--scheduling", "async", "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)["kernels"]["engine"]["model_defaults"]
    assert [r["field"] for r in rules] == ["attention_kernel"]


GLM5 = load_model("zhipuai/GLM-5")


def test_sglang_decodes_sparse_attention_models_over_an_fp8_cache_on_sm100_only():
    for part in ("b200", "b300", "gb200"):
        sc = _resolved(part, GLM5, engine="sglang", tp=8, dtype="fp8")
        assert sc.kv == "fp8", part
    assert _resolved("h200", GLM5, engine="sglang", tp=8, dtype="fp8").kv == "bf16"
    # dense MLA (DeepSeek-V3) and the user's --kv-dtype keep theirs
    assert _resolved("b200", load_model("deepseek-v3"), engine="sglang", tp=8, dtype="fp8").kv == "bf16"
    assert _resolved("b200", GLM5, engine="sglang", tp=8, dtype="fp8", kv_dtype="bf16").kv == "bf16"


def test_an_fp8_sparse_attention_cache_holds_more_sequences_and_says_why():
    hw = load_spec("b200")
    prof = resolve_profile(None, hw, "sglang")
    kw = dict(engine="sglang", tp=8, dtype="fp8", batch=16, isl=8192, osl=1024, batching="static")
    own = project_resolved(hw, GLM5, _resolved("b200", GLM5, **kw), prof)
    bf16 = project_resolved(hw, GLM5, _resolved("b200", GLM5, **kw, kv_dtype="bf16"), prof)
    assert own.memory.kv_per_sequence < 0.6 * bf16.memory.kv_per_sequence
    assert "an fp8 KV cache" in " ".join(own.assumptions)
    assert "an fp8 KV cache" not in " ".join(bf16.assumptions)
