"""Training FLOPs: the Megatron definition, 6 x params x tokens for dense models, recompute in hardware FLOPs."""
from __future__ import annotations

import pytest

from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.train.project import forward_model_flops, project_training, step_flops
from perfmodel.train.scenario import TrainScenario


def _gemm_flops(model, ts):
    """Model FLOPs of one step without the attention scores and the attention over values."""
    layers, attn, head = forward_model_flops(model, ts)
    return 3.0 * (layers - attn + head) * ts.global_batch


@pytest.mark.parametrize("name", ["gpt-18.4b", "gpt-1008b", "llama-3.1-70b", "qwen2.5-72b"])
def test_dense_gemm_flops_are_six_params_tokens(name):
    model = resolve_model(name)
    ts = TrainScenario(gpus=8, tp=8, global_batch=16, seq=2048)
    six_pt = 6.0 * model.param_count() * ts.tokens_per_step
    assert _gemm_flops(model, ts) == pytest.approx(six_pt, rel=0.02)


def test_megatron_model_flops_match_narayanan_appendix_formula():
    # Narayanan et al. 2021, appendix: F = 96 B s l h^2 (1 + s / 6h + V / 16 l h) with recompute (4 passes);
    # model FLOPs are the same with 3 passes of the layers: 72 B s l h^2 (1 + s / 6h + V / 12 l h)
    model = resolve_model("gpt-145.6b")
    b, s, l, h, v = 64, 2048, model.layers, model.hidden, model.vocab
    ts = TrainScenario(gpus=8, tp=8, global_batch=b, seq=s, recompute="full")
    mf, hf = step_flops(model, ts)
    assert hf == pytest.approx(96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)), rel=1e-9)
    assert mf == pytest.approx(72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)), rel=1e-9)


def test_full_recompute_adds_exactly_one_forward_of_the_layers():
    model = resolve_model("llama-3.1-8b")
    base = TrainScenario(gpus=8, tp=2, pp=2, global_batch=32, seq=4096)
    layers, attn, head = forward_model_flops(model, base)
    m0, h0 = step_flops(model, base)
    m1, h1 = step_flops(model, base.with_(recompute="full"))
    m2, h2 = step_flops(model, base.with_(recompute="selective"))
    assert m0 == m1 == m2 == h0
    assert h1 - h0 == pytest.approx(layers * base.global_batch, rel=1e-12)
    assert h2 - h0 == pytest.approx(attn * base.global_batch, rel=1e-12)
    assert 0 < attn < layers


def test_projected_tflops_follow_the_flops_and_the_step_time():
    hw = resolve_hardware("h100-sxm")
    model = resolve_model("llama-3.1-8b")
    ts = TrainScenario(gpus=16, tp=2, pp=2, global_batch=64, seq=4096, recompute="full")
    p = project_training(hw, model, ts, _defaults())
    mf, hf = step_flops(model, ts)
    assert p.model_tflops_per_gpu * 1e12 == pytest.approx(mf / (p.step_time_s * ts.gpus))
    assert p.hardware_tflops_per_gpu / p.model_tflops_per_gpu == pytest.approx(hf / mf)
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu * 1e12 / hw.tensor_flops["bf16"])
    assert p.tokens_per_s == pytest.approx(64 * 4096 / p.step_time_s)


def test_model_flops_do_not_depend_on_the_layout():
    model = resolve_model("llama-3.1-70b")
    a = step_flops(model, TrainScenario(gpus=64, tp=8, pp=8, global_batch=64, seq=8192))
    b = step_flops(model, TrainScenario(gpus=64, tp=4, pp=2, cp=2, global_batch=64, seq=8192,
                                        sequence_parallel=True))
    assert a == b


def _defaults():
    from perfmodel.profile import DEFAULTS

    return DEFAULTS


def test_sliding_window_layers_train_their_own_attention_core_once_per_layer():
    # Gemma-3-27B: 10 full-attention layers and 52 with a 1024-token window; each type's core runs once per
    # layer of that type, forward and backward, and a window bounds its FLOPs
    from perfmodel.geometry import attention_layer_kinds
    from perfmodel.train.graph import backward, layer_forward

    model = resolve_model("gemma-3-27b")
    kinds = attention_layer_kinds(model)
    ts = TrainScenario(gpus=8, tp=8, global_batch=8, seq=8192)
    fwd = layer_forward(model, ts)
    counts = {t.name: t.op.count * model.layers for t in fwd if t.name.startswith("attn.core")}
    assert counts == pytest.approx({"attn.core": kinds["full"][0], "attn.core.sliding": kinds["sliding"][0]})
    bwd = {t.name for t in backward(fwd, ts)}
    assert {"attn.core.bwd", "attn.core.sliding.bwd"} <= bwd
    per_run = {t.name: t.model_flops for t in fwd if t.name.startswith("attn.core")}
    assert per_run["attn.core.sliding"] == pytest.approx(per_run["attn.core"] * 1024 / 8192)
