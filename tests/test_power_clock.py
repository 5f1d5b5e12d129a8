"""The power-limited clock as physics (perfmodel.power_clock, issue 24): measured time course, bounds in a step."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel import project
from perfmodel.cost import OpTime, clock_info, step_demand, time_op, time_ops
from perfmodel.cost.backend import XL, Expr
from perfmodel.fit.clock import fit_clock
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model
from perfmodel.power_clock import (DEFAULT_CLOCK, alone_stretch, measure_window, mean_onset, onset,
                                   steady_stretch)
from perfmodel.profile import IMPORT_TIMING, SUITE_TIMING
from perfmodel.resolve import resolve_hardware
from perfmodel.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
COURSES = ROOT / "calibration" / "h200" / "clock-course"


@pytest.fixture(scope="module")
def fitted_clock():
    return fit_clock(COURSES, resolve_hardware("h200-sxm"))


def test_courses_fit_reproduces_the_measured_steady_stretch(fitted_clock):
    model, report = fitted_clock
    by = {c["name"]: c for c in report["courses"]}
    # the fitted GEMM courses within 2%, the course of 20 s rest and the GEMM/copy mix (never fitted) within 3%
    for c in report["courses"]:
        if c["fitted"] and c["steady_model"]:
            assert abs(c["error"]) < 0.02, c
    assert abs(by["gemm_bf16_8192_rest20"]["error"]) < 0.03
    assert abs(by["mix_gemm_copy"]["error"]) < 0.03
    # memory-bound streams never slow: the copy and the batch-16 decode GEMM stayed under the limit
    assert abs(by["copy_1g"]["steady_measured"] - 1.0) < 0.01
    assert abs(by["gemm_bf16_decode_m16"]["steady_measured"] - 1.0) < 0.01
    # a power limit costs percent, not a factor of two: 1.19-1.21x on the H200 at full demand
    for name in ("gemm_bf16_8192", "gemm_fp8_8192", "gemm_bf16_prefill_ffn"):
        assert 1.1 < by[name]["steady_measured"] < 1.3


def test_default_clock_is_the_shipped_fit(fitted_clock):
    model, _ = fitted_clock
    for key in ("onset_s", "tau_s", "fast_share", "slow_tau_s", "alone_share", "demand_per_bandwidth"):
        assert getattr(DEFAULT_CLOCK, key) == pytest.approx(getattr(model, key), rel=0.01), key
    for fmt, v in model.demand_at_peak.items():
        assert DEFAULT_CLOCK.demand_at_peak[fmt] == pytest.approx(v, rel=0.01)


def test_time_course_shape():
    m = DEFAULT_CLOCK
    assert onset(0.0, m) == pytest.approx(0.0, abs=1e-9)
    assert onset(10.0, m) == pytest.approx(1.0, abs=1e-6)
    t = np.linspace(0, 5, 200)
    assert np.all(np.diff(onset(t, m)) >= -1e-12)
    # the mean over a stretch lies below the value at its end and rises with the stretch
    s = np.array([0.01, 0.05, 0.2, 1.0, 5.0])
    assert np.all(mean_onset(s, m) <= onset(s, m) + 1e-12)
    assert np.all(np.diff(mean_onset(s, m)) > 0)


def test_alone_stretch_follows_the_measurement_window():
    m = DEFAULT_CLOCK
    demand = 1.5
    steady = float(steady_stretch(demand, m.alpha))
    short, long_ = (float(alone_stretch(m, demand, t, IMPORT_TIMING)) for t in (1e-4, 0.05))
    assert short == pytest.approx(1.0, abs=1e-3)  # a few replays of a 0.1 ms kernel: the boost clock
    assert 1.0 < long_ < steady  # a 50 ms kernel ran mostly at the limit
    # the suite's 25 ms warmup and 80 ms of repetitions already show part of the stretch
    assert 1.0 < float(alone_stretch(m, demand, 1e-3, SUITE_TIMING)) < steady
    a, b = measure_window(1e-3, SUITE_TIMING)
    assert a == pytest.approx(0.025) and b == pytest.approx(0.105)
    assert float(alone_stretch(m, 0.8, 0.05, IMPORT_TIMING)) == 1.0  # under the limit: no stretch


@pytest.mark.parametrize("arch,dtype", [("b200", "fp4"), ("b200", "bf16"), ("h200-sxm", "bf16"), ("h200-sxm", "fp8")])
def test_a_gemm_in_a_long_step_slows_by_no_more_than_physics_allows(arch, dtype):
    hw = resolve_hardware(arch)
    p = project(arch, "llama70b", dtype=dtype, isl=8192, tp=2)
    info = clock_info(p.prefill.times, hw, p.profile)
    bound = info["steady_stretch"]
    assert 1.0 <= bound < 1.35
    for row in info["ops"]:
        # at most the steady stretch over the boost clock, and never faster than alone by more than the
        # stretch the alone measurement itself showed
        assert row["in_step_over_alone"] <= bound + 1e-6, row
        assert row["in_step_over_alone"] > 1.0 / bound - 1e-6, row


def test_memory_bound_decode_runs_at_the_boost_clock():
    hw = resolve_hardware("h200-sxm")
    p = project("h200-sxm", "llama8b", batch=1, isl=1024, osl=128)
    info = clock_info(p.decode.times, hw, p.profile)
    assert info["step_demand"] < 1.0
    assert all(abs(r["in_step_over_alone"] - 1.0) < 0.02 for r in info["ops"])


def test_json_reports_the_in_step_over_alone_ratio():
    from perfmodel.serialize import projection_dict

    d = json.loads(json.dumps(projection_dict(project("b200", "llama70b", dtype="fp4"))))
    pc = d["power_clock"]["prefill"]
    assert {"step_demand", "steady_stretch", "from_rest_stretch", "ops"} <= set(pc)
    assert any(r["name"] == "ffn.gate_up" and r["in_step_over_alone"] >= 1.0 for r in pc["ops"])


def test_step_demand_is_a_time_weighted_mean():
    hw = resolve_hardware("h200-sxm")
    model = load_model("llama8b")
    ops = build_ops(model, Step("prefill", 1, 4096, 0), resolve_scenario(Scenario(kernels="torch"), None, None))
    prof = project("h200-sxm", "llama8b").profile
    d = float(step_demand(ops, hw, prof))
    gemm = [o for o in ops if o.kind == "gemm"]
    mem = [o for o in ops if o.kind not in ("gemm", "attention", "all_reduce")]
    assert float(step_demand(mem, hw, prof)) < d < float(step_demand(gemm, hw, prof))


def test_excel_backend_has_exp():
    e = XL.exp(Expr("A1"))
    assert str(e) == "EXP(A1)"
    assert float(mean_onset(0.5, DEFAULT_CLOCK)) > 0


def test_docs_power_clock_tables_are_regenerated():
    import importlib.util

    spec = importlib.util.spec_from_file_location("power_clock_table", ROOT / "docs" / "tools" / "power_clock_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    doc = (ROOT / "docs" / "power-clock.md").read_text()
    block = doc.split("<!-- power-clock-tables: begin -->\n")[1].split("\n<!-- power-clock-tables: end -->")[0]
    assert block == tool.tables()


H100_COURSES = ROOT / "calibration" / "h100-sxm" / "clock-course"


def test_h100_profile_carries_its_own_clock_fit():
    """The H100's courses are fitted into its profile (perfmodel fit reads DIR/clock-course), not the default;
    the parts that carry from the H100 (the A100, nearest by bandwidth) take the same model."""
    from perfmodel.profile import load_profile
    from perfmodel.fit.clock import fit_clock as fit

    model, _ = fit(H100_COURSES, resolve_hardware("h100-sxm"))
    shipped = load_profile(ROOT / "calibration" / "h100-sxm" / "profile.json").power["clock"]
    assert shipped["source"] == model.source and "H100" in shipped["source"]
    for key in ("alone_share", "demand_per_bandwidth"):
        assert shipped[key] == pytest.approx(getattr(model, key), rel=1e-6), key
    # the onset and the time constants lie on a flat valley of the fit (docs/power-clock.md): a refit's digits
    # follow the host's floating point, its course past the first half second does not
    from perfmodel.power_clock import ClockModel

    t = np.linspace(0.5, 5.0, 901)
    assert np.abs(onset(t, ClockModel.from_dict(shipped)) - onset(t, model)).max() < 0.01
    assert shipped["demand_at_peak"]["bf16"] != pytest.approx(DEFAULT_CLOCK.demand_at_peak["bf16"], rel=0.01)


def test_the_default_clock_against_the_h100_courses(capsys):
    """`--against-default` prices every course with the carried default beside the part's own fit: on the H100 the
    H200's model over-predicts the steady stretch of every throttled GEMM course (the H100 throttles less)."""
    from perfmodel.fit.clock import main

    assert main([str(H100_COURSES), "--arch", "h100-sxm", "--against-default"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.startswith("gemm_")}
    for name in ("gemm_bf16_8192", "gemm_fp8_8192", "gemm_bf16_prefill_ffn"):
        own, other = float(rows[name][5].rstrip("%")), float(rows[name][7].rstrip("%"))
        assert abs(own) < abs(other) and other > 0, rows[name]
    assert "other: H200 clock courses" in out


def test_clock_fit_refuses_bad_input_in_one_line(tmp_path, capsys):
    from perfmodel.fit.clock import main

    assert main([str(tmp_path)]) == 2
    assert main([str(H100_COURSES), "--arch", "no-such-part"]) == 2
    err = capsys.readouterr().err
    assert "no clock_course.jsonl rows" in err and "no-such-part" in err and "Traceback" not in err
