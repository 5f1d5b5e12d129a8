"""Closed-form truths the model must respect, whatever its calibration."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import numpy as np
import pytest

from perfmodel import capacity
from perfmodel import ops as O
from perfmodel.cost import time_op, time_ops
from perfmodel.graph import Step, active_experts, build_ops
from perfmodel.models import load_model
from perfmodel.profile import DEFAULTS
from perfmodel.projection import evaluate_step, project, serving_times
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec, spec_with

DENSE = ("llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-72b", "llama-3.1-405b")


@pytest.mark.parametrize("name", DENSE)
def test_dense_forward_flops_are_two_times_params_times_tokens(name):
    model = load_model(name)
    tokens = 512
    ops = build_ops(model, Step("prefill", 1, tokens, 0), resolve_scenario(Scenario(), None, None))
    gemm = sum(o.flops * o.count for o in ops if o.kind == "gemm" and o.scope == "layer")
    non_embedding = model.param_count() - 2 * model.vocab * model.hidden * (0.5 if model.tied_embeddings else 1.0)
    assert gemm == pytest.approx(2 * non_embedding * tokens, rel=0.02)


def test_moe_forward_flops_follow_active_params():
    model = load_model("mixtral")
    tokens = 4096  # enough tokens that every expert is active
    ops = build_ops(model, Step("prefill", 1, tokens, 0), resolve_scenario(Scenario(), None, None))
    gemm = sum(o.flops * o.count for o in ops if o.kind == "gemm" and o.scope == "layer")
    active = model.active_param_count() - 2 * model.vocab * model.hidden
    assert gemm == pytest.approx(2 * active * tokens, rel=0.02)


@pytest.mark.parametrize("arch", ["a100", "h100-sxm", "h200", "b200", "mi300x"])
@pytest.mark.parametrize("name,batch,context", [("llama8b", 1, 1024), ("llama70b", 16, 4096),
                                                ("mixtral", 8, 2048), ("deepseek-v3", 4, 2048)])
def test_decode_step_is_never_faster_than_weights_and_kv_over_bandwidth(arch, name, batch, context):
    hw = load_spec(arch)
    model = load_model(name)
    sc = Scenario(tp=8 if name == "deepseek-v3" else 1, dtype="fp8" if name == "deepseek-v3" else "bf16")
    step = evaluate_step(model, hw, resolve_scenario(sc, hw, None), DEFAULTS, Step("decode", batch, 1, context))
    kv_read = capacity.kv_bytes_per_token(model, sc) * batch * context
    floor = (capacity.weight_bytes(model, sc) * (1 if model.moe is None else 0) + kv_read) / hw.hbm_bandwidth
    assert step.time_s >= floor
    sol = evaluate_step(model, hw, resolve_scenario(sc.with_(mode="sol"), hw, None), DEFAULTS, Step("decode", batch, 1, context))
    assert step.time_s >= sol.time_s


def test_dense_decode_reads_all_weights_at_least_once():
    hw = load_spec("h200")
    model = load_model("llama70b")
    sc = Scenario(mode="sol")
    step = evaluate_step(model, hw, resolve_scenario(sc, hw, None), DEFAULTS, Step("decode", 1, 1, 128))
    assert step.time_s >= capacity.weight_bytes(model, sc) / hw.hbm_bandwidth * 0.97  # embedding is gathered


def test_roofline_ridge_point():
    hw = load_spec("h100-sxm")
    peak = hw.tensor_flops["bf16"]
    ridge = peak / hw.hbm_bandwidth  # FLOP per byte where compute time equals memory time
    n = 8192
    op = O.gemm("g", 4096, n, n, "bf16")
    at_ridge = O.Op("x", "gemm", "standalone", ridge * op.bytes, op.bytes, op.params)
    t = time_op(at_ridge, hw, DEFAULTS, mode="sol")
    assert t.compute == pytest.approx(t.memory, rel=1e-12)
    below = O.Op("x", "gemm", "standalone", 0.5 * ridge * op.bytes, op.bytes, op.params)
    above = O.Op("x", "gemm", "standalone", 2.0 * ridge * op.bytes, op.bytes, op.params)
    assert time_op(below, hw, DEFAULTS, mode="sol").bound == "memory"
    assert time_op(above, hw, DEFAULTS, mode="sol").bound == "compute"
    assert ridge == pytest.approx(989.4e12 / 3.35e12)


def test_tp2_halves_per_gpu_weight_bytes():
    model = load_model("llama70b")
    one = capacity.weight_bytes(model, Scenario(tp=1))
    two = capacity.weight_bytes(model, Scenario(tp=2))
    assert two == pytest.approx(one / 2, rel=0.005)
    ops1 = build_ops(model, Step("decode", 1, 1, 0), resolve_scenario(Scenario(tp=1), None, None))
    ops2 = build_ops(model, Step("decode", 1, 1, 0), resolve_scenario(Scenario(tp=2), None, None))
    w1 = sum(o.params["k"] * o.params["n"] * o.count for o in ops1 if o.kind == "gemm")
    w2 = sum(o.params["k"] * o.params["n"] * o.count for o in ops2 if o.kind == "gemm")
    assert w2 == pytest.approx(w1 / 2, rel=1e-6)


def test_tp_adds_allreduce_per_block():
    model = load_model("llama70b")
    ops = build_ops(model, Step("decode", 4, 1, 100), resolve_scenario(Scenario(tp=4), None, None))
    ar = [o for o in ops if o.kind == "all_reduce"]
    assert sum(o.count for o in ar) == 2 * model.layers
    assert all(o.params["bytes"] == 4 * model.hidden * 2 for o in ar)


def test_wave_quantization_separates_sm_counts():
    h100 = load_spec("h100-sxm")
    more_sms = spec_with(h100, sm_count=148)
    # 132 tiles of 128x256 fill one wave on 132 SMs; on 148 SMs the same shape leaves 16 idle
    op = O.gemm("g", 128 * 12, 256 * 11, 8192, "bf16")
    t132 = time_op(op, h100, DEFAULTS).time
    t148 = time_op(op, more_sms, DEFAULTS).time
    assert t132 != pytest.approx(t148, rel=1e-3)
    # one tile more than a wave costs a second wave on 132 SMs
    op_plus = O.gemm("g", 128 * 12 + 1, 256 * 11, 8192, "bf16")
    assert time_op(op_plus, h100, DEFAULTS).time > 1.3 * t132


def test_sol_is_a_lower_bound_of_every_op():
    hw = load_spec("b200")
    model = load_model("llama70b")
    sc = Scenario(tp=2, dtype="fp8")
    for step in (Step("prefill", 2, 1024, 0), Step("decode", 64, 1, 2048)):
        ops = build_ops(model, step, resolve_scenario(sc, None, None))
        for lat, sol in zip(time_ops(ops, hw, DEFAULTS, world=2), time_ops(ops, hw, DEFAULTS, mode="sol", world=2)):
            assert lat.time >= sol.time, lat.op.name


def test_max_batch_fits_and_one_more_does_not():
    hw = load_spec("h200")
    model = load_model("llama70b")
    sc = Scenario(isl=2048, osl=512, dtype="fp8", batch="max")
    best = capacity.max_batch(model, resolve_scenario(sc, hw, None), hw)
    assert best > 1
    assert capacity.memory(model, resolve_scenario(sc, hw, None), best, hw).fits
    assert not capacity.memory(model, resolve_scenario(sc, hw, None), best + 1, hw).fits
    p = project(hw, model, sc)
    assert p.batch == best


def test_active_experts_limits():
    assert active_experts(8, 2, 1) == pytest.approx(2.0)
    assert active_experts(256, 8, 10_000) == pytest.approx(256.0)
    assert active_experts(256, 8, 4) < 32


def test_mla_decode_kv_bytes_use_the_latent():
    model = load_model("deepseek-v3")
    sc = Scenario(tp=8, dtype="fp8")
    per_token = capacity.kv_bytes_per_token(model, sc)
    assert per_token == model.layers * (512 + 64) * 1.0


def test_projection_metrics_are_consistent():
    p = project("h200", "llama8b", isl=512, osl=64, batch=8, batching="static")
    assert p.e2e_s == pytest.approx(p.ttft_s + 63 * p.tpot_s)
    assert p.throughput_tok_s == pytest.approx(8 * 64 / p.e2e_s)
    lo, mid, hi = p.bands["tpot_ms"]
    assert lo < mid < hi
    c = project("h200", "llama8b", isl=512, osl=64, batch=8)
    assert c.throughput_tok_s < 8 / c.tpot_s  # prefill is amortised, not free


def test_vectorised_serving_times_match_scalar():
    hw = load_spec("b200")
    model = load_model("llama70b")
    sc = Scenario(isl=1024, osl=256, dtype="fp8")
    batches = np.array([1, 4, 32])
    bws = np.array([6e12, 8e12])[:, None]
    grid = serving_times(model, spec_with(hw, hbm_bandwidth=bws), resolve_scenario(sc, spec_with(hw, hbm_bandwidth=bws), None), DEFAULTS, batches[None, :])
    for i, bw in enumerate((6e12, 8e12)):
        for j, b in enumerate(batches):
            one = project(spec_with(hw, hbm_bandwidth=bw), model, sc.with_(batch=int(b)), profile=DEFAULTS)
            assert grid.tpot_s[i, j] == pytest.approx(one.tpot_s, rel=1e-9)
            assert grid.throughput_tok_s[i, j] == pytest.approx(one.throughput_tok_s, rel=1e-9)


def test_pipeline_parallel_splits_layers_and_adds_sends():
    model = load_model("llama70b")
    hw = load_spec("h100-sxm")
    one = project(hw, model, isl=512, osl=64, batch=8, tp=4, profile=DEFAULTS)
    two = project(hw, model, isl=512, osl=64, batch=8, tp=4, pp=2, profile=DEFAULTS)
    assert capacity.weight_bytes(model, Scenario(tp=4, pp=2)) < 0.52 * capacity.weight_bytes(model, Scenario(tp=4))
    assert any(t.op.kind == "p2p" for t in two.prefill.times)
    assert two.scenario.gpus == 8 and one.scenario.gpus == 4
