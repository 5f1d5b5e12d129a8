"""NVFP4 checkpoints as published: the modules NVIDIA's ModelOpt releases keep in bf16 (``Model.fp4_unquantized``)
run unquantized products and hold bf16 weights under ``--dtype fp4`` (issue 25: Blackwell fp4 and MoE)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfmodel.capacity import _layer_params, mtp_weight_bytes, weight_bytes
from perfmodel.errors import InputError
from perfmodel.graph import Step, build_ops
from perfmodel.models import FP4_UNQUANTIZED, load_model, model_from_hf_config
from perfmodel.ops import bytes_per_element
from perfmodel.projection import project
from perfmodel.resolve import resolve_hardware
from perfmodel.scenario import Scenario
from perfmodel.speculative import mtp_scenario
REPO = Path(__file__).resolve().parents[1]
HF = REPO / "tests" / "data" / "hf_configs"


def _ops(model, dtype: str, **kw) -> dict:
    hw = resolve_hardware("b200")
    sc = Scenario(batch=8, isl=1024, osl=128, dtype=dtype, tp=8, engine="sglang", **kw).validated().for_hardware(hw)
    return {op.name: op for op in build_ops(model, Step("decode", 8, 1, 1024), sc)}


def test_kept_modules_run_bf16_products_without_a_quantize_kernel():
    glm = load_model("glm-5")
    assert glm.fp4_unquantized == ("attention_qkv", "attention_o", "indexer", "mtp")
    ops = _ops(glm, "fp4")
    for name in ("attn.qkv_a", "attn.q_b", "attn.absorb_q", "attn.absorb_o", "attn.o", "attn.indexer.q"):
        assert ops[name].params["dtype"] == "bf16" and f"{name}.quant" not in ops, name
    assert ops["moe.gate_up"].params["dtype"] == "fp4" and ops["moe.shared.gate_up"].params["dtype"] == "fp4"
    assert ops["ffn.gate_up"].params["dtype"] == "fp4"  # GLM-5's NVFP4 release quantizes the dense layers
    # the same model at fp8, and an fp4 model whose checkpoint keeps nothing, quantize every product
    assert all(op.params.get("dtype") != "bf16" for n, op in _ops(glm, "fp8").items()
               if op.kind == "gemm" and n != "moe.router")
    every = dataclasses.replace(glm, fp4_unquantized=())
    assert _ops(every, "fp4")["attn.o"].params["dtype"] == "fp4" and "attn.o.quant" in _ops(every, "fp4")


def test_deepseeks_release_keeps_q_and_kv_but_quantizes_the_output_projection():
    ops = _ops(load_model("deepseek-v3"), "fp4")
    assert ops["attn.qkv_a"].params["dtype"] == "bf16" and ops["attn.o"].params["dtype"] == "fp4"


def test_shared_experts_and_linear_attention_follow_the_checkpoint():
    ops = _ops(load_model("qwen3.5-397b-a17b"), "fp4")
    assert ops["moe.shared.gate_up"].params["dtype"] == "bf16" and ops["linear.in_proj"].params["dtype"] == "bf16"
    assert ops["moe.gate_up"].params["dtype"] == "fp4"


@pytest.mark.parametrize("name", ["minimax-m2.5", "glm-5", "qwen3.5-397b-a17b", "deepseek-v3"])
def test_kept_weights_are_held_in_bf16(name):
    """The weights grow by exactly the kept parameters' bf16 bytes less their NVFP4 bytes (scales included)."""
    m = load_model(name)
    sc = Scenario(dtype="fp4", tp=4)
    every = dataclasses.replace(m, fp4_unquantized=())
    grown = weight_bytes(m, sc) - weight_bytes(every, sc)
    assert grown > 0
    bf16 = Scenario(dtype="bf16", tp=4)
    # the kept parameters: what the model holds in bf16 beyond its fp4 copy, at every group
    kept = sum(_layer_params(m, i, sc)[2] for i in range(m.layers))
    assert grown == pytest.approx(kept * (2.0 - bytes_per_element("fp4")), rel=1e-9)
    assert weight_bytes(m, bf16) == weight_bytes(every, bf16)  # only fp4 is touched


def test_the_mtp_layer_drafts_and_is_held_in_its_checkpoints_format():
    ds = load_model("deepseek-v3")
    fp4, fp8 = Scenario(dtype="fp4", mtp=1), Scenario(dtype="fp8", mtp=1)
    assert mtp_scenario(ds, fp4).dtype == "bf16" and mtp_scenario(ds, fp8) is fp8
    assert mtp_weight_bytes(ds, fp4) > 3.5 * mtp_weight_bytes(dataclasses.replace(ds, fp4_unquantized=()), fp4)


def test_the_projection_says_which_modules_stay_bf16():
    kw = dict(dtype="fp4", tp=2, batch=8, isl=1024, osl=256, engine="vllm")
    kept = project("b200", "minimax-m2.5", **kw)
    assert any("NVFP4 checkpoint" in a and "output projection" in a for a in kept.assumptions)
    assert not any("NVFP4 checkpoint" in a for a in project("b200", "qwen3-235b-a22b", **kw).assumptions)
    fp8 = project("b200", "minimax-m2.5", **{**kw, "dtype": "fp8"})
    assert not any("NVFP4 checkpoint" in a for a in fp8.assumptions)


def _write_checkpoint(tmp_path, config: dict, hf_quant: dict | None = None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return tmp_path / "config.json"


def test_a_modelopt_checkpoints_exclusions_are_read_from_hf_quant_config(tmp_path):
    """nvidia/DeepSeek-V3.2-NVFP4's layout (its exclude_modules, abbreviated to one layer of each kind)."""
    cfg = json.loads((HF / "deepseek-ai--DeepSeek-V3.2_config.json").read_text())
    cfg.pop("quantization_config", None)
    quant = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                              "exclude_modules": ["lm_head", "model.layers.61*", "model.layers.0.self_attn.indexer*",
                                                  "model.layers.0.self_attn.kv_a_proj_with_mqa",
                                                  "model.layers.0.self_attn.kv_b_proj",
                                                  "model.layers.0.self_attn.q_a_proj",
                                                  "model.layers.0.self_attn.q_b_proj"]}}
    m = model_from_hf_config(_write_checkpoint(tmp_path, cfg, quant))
    assert m.fp4_unquantized == ("attention_qkv", "indexer", "mtp")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert model_from_hf_config(_write_checkpoint(plain, cfg)).fp4_unquantized == ()  # no hf_quant_config.json


def test_a_compressed_tensors_checkpoints_ignore_list_is_read(tmp_path):
    """nvidia/MiniMax-M2.5-NVFP4's quantization_config: 4-bit float weights in groups of 16, attention ignored."""
    cfg = json.loads((HF / "MiniMaxAI--MiniMax-M2.5_config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                      "input_activations": {"num_bits": 4, "type": "float", "group_size": 16},
                                      "targets": ["Linear"]}},
        "ignore": ["lm_head", "model.layers.0.block_sparse_moe.gate", "model.layers.0.self_attn*"]}
    assert model_from_hf_config(_write_checkpoint(tmp_path, cfg)).fp4_unquantized == ("attention_qkv", "attention_o")


def test_a_descriptor_names_known_groups_once(tmp_path):
    base = (REPO / "workloads" / "models" / "minimax-m2.5.yaml").read_text()
    for bad in ("[attention]", "[attention_o, attention_o]", "attention_o"):
        p = tmp_path / "m.yaml"
        p.write_text(base.replace("fp4_unquantized: [attention_qkv, attention_o]", f"fp4_unquantized: {bad}"))
        with pytest.raises(InputError) as e:
            load_model(str(p))
        assert e.value.field == "fp4_unquantized" and "attention_qkv" in str(e.value)
    assert set(FP4_UNQUANTIZED) >= set(load_model("minimax-m2.5").fp4_unquantized)


def test_training_quantizes_by_its_recipe_not_by_the_inference_checkpoint():
    """A training step runs every product in its recipe's format: the NVFP4 release's bf16 modules do not reach it."""
    from perfmodel.train.graph import layer_ops
    from perfmodel.train.scenario import TrainScenario

    ds = load_model("deepseek-v3")
    ts = TrainScenario(gpus=64, tp=8, ep=8, global_batch=64, micro_batch=1, seq=4096, dtype="fp4")
    every = dataclasses.replace(ds, fp4_unquantized=())
    assert [(t.op.name, t.op.params.get("dtype")) for t in layer_ops(ds, ts)] == \
        [(t.op.name, t.op.params.get("dtype")) for t in layer_ops(every, ts)]
