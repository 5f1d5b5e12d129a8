"""Step accounting (perfmodel.step_accounting): the rules by which a step's timed ops add up, and that every user
of them (projection, serving-step model, layer predictions, report, workbook) gets its step time from there."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import dataclasses

import pytest

from perfmodel.cost import time_ops
from perfmodel.cost.backend import XL, Expr
from perfmodel.graph import Step, build_ops
from perfmodel.ops import COMM_KINDS
from perfmodel.profile import DEFAULTS
from perfmodel.projection import evaluate_step
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.step_accounting import PARTS, OpShare, Rules, account, host_cost, step_time

H200 = resolve_hardware("h200")
LLAMA70 = resolve_model("llama-3.1-70b")


def _times(sc, step=Step("decode", 16, 1, 2048), model=LLAMA70, hw=H200, prof=DEFAULTS):
    sc = sc.validated().for_hardware(hw)
    return sc, time_ops(build_ops(model, step, resolve_scenario(sc, None, None)), hw, prof, mode=sc.mode, world=sc.gpus)


@pytest.mark.parametrize("launch", ["graph", "eager"])
def test_the_rules_per_op(launch):
    sc, times = _times(Scenario(tp=4, launch=launch))
    acc = account(times, Rules.of(sc, "decode"), DEFAULTS, hw=H200, world=sc.gpus)
    assert [s.op for s in acc.ops] == [t.op for t in times]
    for s, t in zip(acc.ops, times):
        if t.op.kind in COMM_KINDS:
            assert s.collective and s.run == s.comm == t.time  # no overlap by default: the collective alone
            assert s.host_s == 0.0
        elif launch == "eager":
            # the larger of the device path (the op and its launch) and the host's issuing it
            assert s.run + s.gap == pytest.approx(max(t.time + s.gap, host_cost(t.op, DEFAULTS)), rel=1e-12)
            assert s.host_s == pytest.approx(max(host_cost(t.op, DEFAULTS) - s.gap - t.time, 0.0) * t.op.count)
        else:
            assert s.run == t.time and s.host_s == 0.0
        per_kernel = DEFAULTS.launch_graph_s if launch == "graph" else DEFAULTS.launch_queued_s
        assert s.gap == per_kernel * t.op.kernels
        assert s.device_s + s.host_s + s.gaps_s == pytest.approx(s.share, rel=1e-12)
    if launch == "eager":
        assert any(s.host_s > 0 for s in acc.ops)


def test_speed_of_light_has_no_floor_and_no_gaps():
    sc, times = _times(Scenario(tp=4, launch="eager", mode="sol"))
    acc = account(times, Rules.of(sc, "decode"), DEFAULTS)
    assert all(s.run == s.time and s.gap == 0.0 for s in acc.ops)
    assert acc.gaps_s == 0.0


def test_step_time_is_resolve_of_the_summed_parts():
    sc, times = _times(Scenario(tp=4))
    acc = account(times, Rules.of(sc, "decode"), DEFAULTS, hw=H200, world=sc.gpus)
    sums = acc.sums()
    assert set(sums) == set(PARTS)
    assert acc.time_s == step_time(sums)
    assert sums["gaps"] == acc.gaps_s > 0
    # a step's ops split in two: the parts add up, and so do the shares
    flags = [t.op.scope == "layer" for t in times]
    rest = [not f for f in flags]
    assert acc.sums(flags)["busy"] + acc.sums(rest)["busy"] == pytest.approx(sums["busy"], rel=1e-12)
    assert acc.total(flags) + acc.total(rest) == pytest.approx(acc.time_s, rel=1e-12)
    with pytest.raises(ValueError):
        acc.total([True])


def test_the_module_leaves_the_public_step_function_alone():
    """perfmodel.step is the public one-step function (perfmodel/__init__.py): the accounting module is named
    otherwise, so importing it does not shadow that name."""
    import perfmodel

    assert callable(perfmodel.step) and perfmodel.step.__module__ == "perfmodel.projection"


def test_projection_phase_holds_the_account():
    sc = Scenario(tp=4, overlap="stream").validated()
    ph = evaluate_step(LLAMA70, H200, resolve_scenario(sc, H200, None), DEFAULTS, Step("decode", 16, 1, 2048))
    acc = ph.account
    assert ph.time_s == acc.time_s and ph.kernels_s == acc.gaps_s
    assert ph.comm_runs == [s.comm for s in acc.ops]
    comm = [s for s in acc.ops if s.collective]
    assert comm and all(s.comm < s.time for s in comm)  # the stream hides part of each all-reduce


def test_host_floor_on_collectives_is_a_rule():
    sc, times = _times(Scenario(tp=4, launch="eager"), step=Step("decode", 1, 1, 16))
    prof = DEFAULTS.with_(launch_eager_s=1e-3)  # a slow host: every dispatch binds
    off = account(times, Rules.of(sc, "decode"), prof)
    on = account(times, Rules.of(sc, "decode", host_floor_collectives=True), prof)
    for a, b in zip(off.ops, on.ops):
        if a.collective:
            assert a.run == a.comm < 1e-3 and b.run + b.gap == pytest.approx(1e-3) and b.host_s > 0
        else:
            assert a.run == b.run


def test_fixed_fraction_may_be_a_cell_and_the_rules_write_formulas():
    sc, times = _times(Scenario(tp=4, launch="eager"))
    cells = [dataclasses.replace(t, time=Expr(f"$T{i}")) for i, t in enumerate(times, start=9)]
    prof = dataclasses.replace(DEFAULTS, launch_eager_s=Expr("Inputs!$B$1"), launch_graph_s=Expr("Inputs!$B$2"))
    rules = dataclasses.replace(Rules.of(sc, "decode"), overlap="fixed", fraction=Expr("Inputs!$B$3"))
    acc = account(cells, rules, prof, xp=XL)
    for i, s in enumerate(acc.ops, start=9):
        if s.collective:
            assert s.run.text == f"($T{i}*(1.0-Inputs!$B$3))"
        else:
            assert s.run.text.startswith(f"MAX($T{i},")
    assert "SUM" not in str(acc.time_s) and "Inputs!$B$1" in str(acc.time_s)


def test_host_cost_is_the_dispatch_or_the_measured_floor():
    op = build_ops(LLAMA70, Step("decode", 1, 1, 16), resolve_scenario(Scenario(kernels="torch").validated(), None, None))[1]
    prof = DEFAULTS.with_(launch_eager_s=5e-6, host_floor_s={op.kind: 8e-6})
    assert host_cost(op, prof) == 8e-6
    assert host_cost(op, DEFAULTS.with_(launch_eager_s=5e-6, host_floor_s={})) == 5e-6
    assert str(host_cost(op, dataclasses.replace(prof, launch_eager_s=Expr("A1")), XL)) == "MAX(A1,8e-06)"


def test_every_user_books_the_step_as_the_account_does():
    """The serving-step model, the calibration's layer predictions and the report's breakdown agree with the
    projection's step (each reads the account; none restates the rules)."""
    from perfmodel.fit.layers import layer_scenario, layer_step, predict_layer
    from perfmodel.outputs.report import _family_times
    from perfmodel.serve.steptime import exact_step

    hw = H200
    prof = resolve_profile(None, hw)
    sc = Scenario(tp=4, launch="eager", overlap="stream").validated().for_hardware(hw)
    ph = evaluate_step(LLAMA70, hw, resolve_scenario(sc, hw, None), prof, Step("decode", 8, 1, 700))
    assert exact_step(LLAMA70, hw, sc, prof, 8, 700.0, []) == pytest.approx(float(ph.time_s), rel=1e-9)
    assert sum(_family_times(ph).values()) == pytest.approx(float(ph.time_s), rel=1e-12)

    params = {"model": "l", "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate": 14336,
              "tp": 1, "dtype": "bf16", "graph": False, "phase": "decode", "batch": 4, "context": 512}
    from perfmodel.fit.layers import layer_model

    layer = evaluate_step(layer_model(params), hw, resolve_scenario(layer_scenario(params), hw, None), prof, layer_step(params))
    own = sum(max(float(t.time) + prof.launch_queued_s * t.op.kernels, host_cost(t.op, prof))
              for t in layer.times if t.op.scope == "layer")
    assert predict_layer(params, hw, prof) == pytest.approx(own, rel=1e-12)


def test_op_share_parts_follow_the_run():
    op = build_ops(LLAMA70, Step("decode", 1, 1, 16), resolve_scenario(Scenario().validated(), None, None))[1]
    s = OpShare(op, 1.0, 2.0, 0.5)
    assert s.parts() == {"busy": 2.0 * op.count, "gaps": 0.5 * op.count}
    assert s.with_run(Expr("U9")).parts()["busy"].text == f"(U9*{float(op.count)!r})"
