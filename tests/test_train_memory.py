"""Training memory: ZeRO stages, Korthikanti et al. 2022 activations, pipeline in-flight micro-batches."""
from __future__ import annotations

import pytest

from perfmodel.models import Model
from perfmodel.resolve import resolve_model
from perfmodel.train import memory as M
from perfmodel.train.scenario import TrainScenario

HBM = 80e9


def _gpt(hidden=4096, heads=32, layers=8) -> Model:
    return Model(key="gpt-test", name="GPT test", family="gpt", hidden=hidden, layers=layers, heads=heads,
                 kv_heads=heads, head_dim=hidden // heads, intermediate=4 * hidden, vocab=51200, mlp="gelu",
                 norm="layernorm", position="learned", max_position=2048, tied_embeddings=True)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_divides_optimizer_states_by_dp(zero):
    model = resolve_model("llama-3.1-8b")
    base = TrainScenario(gpus=64, tp=2, pp=2, global_batch=64, seq=2048, zero=0)
    layers = M.stage_layers(model, base)
    w0, g0, o0 = M.state_bytes(M.stage_params(model, base, 0, layers), base)
    z = base.with_(zero=zero)
    w, g, o = M.state_bytes(M.stage_params(model, z, 0, layers), z)
    dp = base.data_parallel
    assert dp == 16
    assert o == pytest.approx(o0 / dp)
    assert g == pytest.approx(g0 / dp if zero >= 2 else g0)
    assert w == pytest.approx(w0 / dp if zero == 3 else w0)


def test_zero3_memory_report_divides_optimizer_by_dp():
    model = resolve_model("llama-3.1-8b")
    a = M.memory(model, TrainScenario(gpus=32, tp=1, pp=1, global_batch=32, seq=2048, zero=0), HBM)
    b = M.memory(model, TrainScenario(gpus=32, tp=1, pp=1, global_batch=32, seq=2048, zero=3), HBM)
    assert b.optimizer_states == pytest.approx(a.optimizer_states / 32)
    assert a.optimizer_states == pytest.approx(12.0 * model.param_count(), rel=1e-3)  # fp32 master, m, v


def test_mixed_precision_bytes_per_parameter():
    # Rajbhandari et al. 2020: 2 (bf16 weights) + fp32 main gradients 4 + 12 (AdamW master, m, v)
    model = resolve_model("llama-3.1-8b")
    ts = TrainScenario(gpus=1, global_batch=1, seq=2048, zero=0)
    w, g, o = M.state_bytes(M.stage_params(model, ts, 0, M.stage_layers(model, ts)), ts)
    n = model.param_count()
    assert (w / n, g / n, o / n) == pytest.approx((2.0, 4.0, 12.0), rel=1e-3)
    sgd = ts.with_(optimizer="sgd")
    assert M.state_bytes(M.stage_params(model, sgd, 0, [32]), sgd)[2] / n == pytest.approx(8.0, rel=1e-3)


@pytest.mark.parametrize("t,sp,rec", [(1, False, "none"), (8, False, "none"), (8, True, "none"),
                                      (8, False, "selective"), (8, True, "selective"), (4, True, "full"),
                                      (1, False, "full")])
def test_activations_reproduce_korthikanti_table_2(t, sp, rec):
    model = _gpt(hidden=6144, heads=48)
    s, b = 2048, 2
    ts = TrainScenario(gpus=t, tp=t, global_batch=b, micro_batch=b, seq=s, attention="unfused", dropout=True,
                       sequence_parallel=sp, recompute=rec)
    got = M.layer_activation_bytes(model, ts)
    want = M.korthikanti_layer_bytes(s, b, model.hidden, model.heads, t, sp=sp, recompute=rec)
    assert got == pytest.approx(want, rel=1e-12)


def test_flash_attention_keeps_no_score_matrix():
    model = _gpt()
    unfused = TrainScenario(gpus=1, global_batch=1, seq=4096, attention="unfused", dropout=True)
    flash = unfused.with_(attention="flash")
    diff = M.layer_activation_bytes(model, unfused) - M.layer_activation_bytes(model, flash)
    a, s = model.heads, 4096
    assert diff == pytest.approx(5.0 * a * s * s - 4.0 * a * s)  # scores gone, fp32 log-sum-exp kept


def test_stage_layers_balance_the_first_and_last_stage():
    model = resolve_model("llama-3.1-405b")
    layers = M.stage_layers(model, TrainScenario(gpus=128, tp=8, pp=16, global_batch=16, seq=8192))
    assert sum(layers) == 126
    assert layers[0] == layers[-1] == 7 and set(layers[1:-1]) == {8}


def test_pipeline_in_flight_microbatches():
    ts = TrainScenario(gpus=8, pp=8, global_batch=64, seq=2048)
    assert [M.in_flight(ts, k) for k in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]
    few = ts.with_(global_batch=4)
    assert M.in_flight(few, 0) == 4
    inter = ts.with_(schedule="interleaved", interleave=2)
    p, v = 8, 2
    # Korthikanti et al. 2022: the first stage holds L (1 + (p - 1) / (p v)) layers' activations
    assert M.in_flight(inter, 0) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert M.in_flight(ts.with_(schedule="dualpipe"), 3) == 9


def test_layer_params_add_up_to_the_model():
    for name in ("llama-3.1-8b", "gpt-18.4b", "mixtral-8x7b"):
        model = resolve_model(name)
        ts = TrainScenario(gpus=4, tp=1, pp=4, global_batch=4, seq=2048)
        layers = M.stage_layers(model, ts)
        total = sum(M.stage_params(model, ts, k, layers).total for k in range(4))
        # the pipeline keeps a second copy of tied embeddings on its last stage
        extra = model.vocab * model.hidden if model.tied_embeddings else 0
        padded = (-(-model.vocab // 128) * 128 - model.vocab) * model.hidden * (1 if model.tied_embeddings else 2)
        assert total == pytest.approx(model.param_count() + extra + padded, rel=1e-6)


def test_memory_reports_the_fullest_stage_and_whether_it_fits():
    model = resolve_model("llama-3.1-70b")
    small = M.memory(model, TrainScenario(gpus=8, tp=8, global_batch=8, seq=4096, zero=0), HBM)
    assert not small.fits  # 70B on 8 GPUs with replicated fp32 states: 16 bytes a parameter / 8 > 80 GB
    big = M.memory(model, TrainScenario(gpus=64, tp=8, pp=8, global_batch=64, seq=4096, sequence_parallel=True,
                                        recompute="selective"), HBM)
    assert big.fits and big.total < big.capacity
    assert big.total == pytest.approx(sum(v for k, v in big.as_dict().items()
                                          if k in ("weights", "gradients", "optimizer_states", "activations",
                                                   "activation_working", "reserve")))
