"""Fitting the power-limited clock (:mod:`perfmodel.power_clock`) to measured time courses.

The rows are :mod:`perfmodel.measure.clock_course`'s: each a stream of one workload from a rested device,
its per-call time against the elapsed device time, and (``clock_alone`` rows) the same kernel timed the way
the calibration suite times it. Per course:

- the *boost* time: the median per-call time of the first windows (the first ``BOOST_S`` of the stream, before
  the controller acts);
- the *steady* stretch: the median per-call time after ``STEADY_FROM_S`` over the boost time;
- the kernel's *demand*: its dynamic power at the boost clock over the budget, ``steady ** alpha`` (the
  clock model's inverse, :func:`perfmodel.power_clock.steady_stretch`);

and over all compute-bound courses together:

- ``demand_at_peak[format]``: the demand over the kernel's share of the datasheet peak (dimensionless, so it
  carries to other parts by the energy carry's rule 2: a vendor rates the peak at the clock its TDP sustains;
  :mod:`perfmodel.energy.carry`), the median over the format's courses;
- ``onset_s`` and ``tau_s``: least squares of every course's normalised stretch ``(s(t) - 1) / (s_ss - 1)``
  over its first ``ONSET_WINDOW_S`` against ``1 - exp(-(t - onset) / tau)``;
- ``alone_share``: how much of the steady stretch a suite-style timing of the rested kernel already shows,
  the median over the GEMM courses of ``(alone - boost) / (steady - boost)``;
- ``demand_per_bandwidth``: from the copy course, which stays under the limit: its measured power over the
  budget, per share of the datasheet bandwidth.

Courses that mix workloads (``mix``, priced by the time-weighted demand a projection uses) or idle between bursts
(``duty``, priced from rest) are never fitted: they are predicted, and the report gives their error.

    python -m perfmodel.fit.clock calibration/h200/clock-course [--arch h200-sxm] [--against-default]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from ..measure.store import read_rows
from ..power_clock import ClockModel, DEFAULT_CLOCK, mean_onset, steady_stretch

BOOST_S = 0.01  # the controller has not acted yet: every course's first 10 ms ran at the boost clock
STEADY_FROM_S = 2.0  # past the 1 s averaging window's transient (the courses settle by 2 s)
ONSET_WINDOW_S = 0.6  # the fast response, before the slow one (1 s power average) sets in
COURSE_FILE = "clock_course.jsonl"
CLOCK_COURSE_DIR = "clock-course"  # beside a calibration's measurements: perfmodel fit reads it there


def _file(directory: Path) -> Path | None:
    for name in (COURSE_FILE, COURSE_FILE + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def load_courses(directory: Path) -> tuple[list[dict], list[dict]]:
    """(course rows, alone rows) of a folder, or two empty lists."""
    path = _file(Path(directory))
    if path is None:
        return [], []
    rows = read_rows(path)
    return ([r for r in rows if r.get("kind") == "clock_course" and r.get("windows")],
            [r for r in rows if r.get("kind") == "clock_alone"])


def course_summary(row: dict) -> dict:
    """Boost and steady per-call times of one course, and its per-window stretch over the boost time."""
    w = np.asarray(row["windows"], dtype=float)
    t, per = w[:, 0], w[:, 2]
    head = per[t <= max(BOOST_S, t[min(2, len(t) - 1)])]
    boost = float(np.median(head))
    tail = per[t >= STEADY_FROM_S]
    steady = float(np.median(tail)) / boost if len(tail) else float("nan")
    return {"name": row["name"], "params": row["params"], "boost_s": boost, "steady": steady,
            "t": t, "stretch": per / boost}


def _format(params: dict) -> str:
    return str(params.get("dtype", "bf16"))


def fit_courses(courses: list[dict], alone: list[dict], spec) -> tuple[ClockModel, dict]:
    """The clock model of a part from its courses (module doc), and a report."""
    base = DEFAULT_CLOCK
    summaries = [course_summary(r) for r in courses]
    fitted = [s for s in summaries if s["params"].get("op") == "gemm" and "burst_s" not in s["params"]
              and not s["params"].get("rest_s")]
    alpha = base.alpha
    demand_at_peak: dict[str, list[float]] = {}
    for s in fitted:
        p = s["params"]
        flops = 2.0 * p["m"] * p["n"] * p["k"]
        share = flops / s["boost_s"] / spec.tensor_flops[_format(p)]
        if s["steady"] > 1.02:  # under the limit a course says only "demand below 1"
            demand_at_peak.setdefault(_format(p), []).append(s["steady"] ** alpha / share)
    dap = {f: float(np.median(v)) for f, v in demand_at_peak.items()}
    if "bf16" in dap:
        dap.setdefault("fp16", dap["bf16"])  # the same tensor-core rate and operand width
    # onset, time constants and the fast share, over the throttled compute courses' whole streams
    onset_s, tau_s, fast_share, slow_tau_s = _fit_onset(fitted, base)
    shares = []
    by_name = {s["name"]: s for s in summaries}
    for a in alone:
        s = by_name.get(a["name"])
        if s is None or a.get("after_hot_s") or s["steady"] <= 1.02:
            continue
        shares.append((a["time_s"] / s["boost_s"] - 1.0) / (s["steady"] - 1.0))
    alone_share = float(np.clip(np.median(shares), 0.0, 1.0)) if shares else base.alone_share
    # memory: the copy course's power stays under the limit; its demand is its power over the budget
    dpb = base.demand_per_bandwidth
    copy_rate = None  # bytes/s the copy course streamed (read plus written), for the mix course's check
    static = float(np.median([r.get("power_w_start") or base_static(spec) for r in courses])) if courses else None
    limit = float(next((r.get("power_limit_w") for r in courses if r.get("power_limit_w")), spec.tdp_w))
    for r in courses:
        if r["params"].get("op") != "copy":
            continue
        s = by_name[r["name"]]
        samples = [x for x in r["samples"] if x[0] >= STEADY_FROM_S and x[1]]
        if samples and static:
            power = float(np.median([x[1] for x in samples]))
            copy_rate = r["bytes_per_call"] / (s["boost_s"] * s["steady"])
            dpb = (power - static) / (limit - static) / (copy_rate / spec.hbm_bandwidth)
    model = ClockModel(alpha=alpha, onset_s=onset_s, tau_s=tau_s, alone_share=alone_share, fast_share=fast_share,
                       slow_tau_s=slow_tau_s,
                       demand_at_peak={**base.demand_at_peak, **dap}, demand_per_bandwidth=dpb,
                       source=f"fitted to {len(fitted)} GEMM courses on {spec.name}")
    report = {"courses": [], "model": model.as_dict(), "static_w": static, "limit_w": limit,
              "copy_rate_Bps": copy_rate}
    for s in summaries:
        report["courses"].append(_check(s, model, spec, s in fitted, copy_rate))
    return model, report


def check_against(courses: list[dict], report: dict, model: ClockModel, spec) -> dict:
    """``report`` with each course also priced by another clock model (``other_model``, ``other_error``): how a
    model fitted elsewhere (the default, carried) predicts this part's courses, beside the part's own fit."""
    by_name = {s["name"]: s for s in (course_summary(r) for r in courses)}
    rows = []
    for c in report["courses"]:
        other = _check(by_name[c["name"]], model, spec, False, report.get("copy_rate_Bps"))
        rows.append({**c, "other_model": other["steady_model"], "other_error": other["error"]})
    return {**report, "courses": rows, "other": model.source}


def _fit_onset(fitted: list[dict], base: ClockModel) -> tuple[float, float, float, float]:
    """(onset, fast tau, fast share, slow tau) by least squares of the courses' normalised stretch
    ``(s(t) - 1) / (steady - 1)`` against :func:`perfmodel.power_clock.onset` (bounded least squares from three
    starts, the best kept)."""
    from ..power_clock import onset

    ts, gs = [], []
    for s in fitted:
        if s["steady"] <= 1.02:
            continue
        ts.append(s["t"])
        gs.append((s["stretch"] - 1.0) / (s["steady"] - 1.0))
    if not ts:
        return base.onset_s, base.tau_s, base.fast_share, base.slow_tau_s
    tt, gg = np.concatenate(ts), np.concatenate(gs)
    # weight each course's windows by the time they span (long courses have many windows at late times)
    wt = np.sqrt(np.concatenate([np.gradient(t) for t in ts]))

    def resid(x):
        m = ClockModel(alpha=base.alpha, onset_s=x[0], tau_s=x[1], alone_share=0.0, fast_share=x[2], slow_tau_s=x[3])
        return wt * (onset(tt, m) - gg)

    lo, hi = [0.0, 1e-3, 0.3, 0.05], [0.2, 0.5, 1.0, 5.0]
    best = None
    for start in ([0.03, 0.02, 0.85, 1.0], [0.01, 0.08, 0.7, 0.5], [0.05, 0.01, 0.95, 2.0]):
        r = least_squares(resid, start, bounds=(lo, hi))
        if best is None or r.cost < best.cost:
            best = r
    return tuple(float(v) for v in best.x)


def fit_clock(directory: Path, spec) -> tuple[ClockModel, dict] | None:
    """The clock model of a folder of courses (``DIR/clock-course`` of a calibration), or None without one."""
    courses, alone = load_courses(Path(directory))
    if not courses:
        return None
    return fit_courses(courses, alone, spec)


def base_static(spec) -> float:
    return 0.17 * spec.tdp_w


def _check(s: dict, model: ClockModel, spec, fitted: bool, copy_rate: float | None) -> dict:
    """A course's measured steady stretch against the model's. A mix course is priced as a projection prices a
    step (:func:`perfmodel.cost.step_demand`): the clock of the calls' time-weighted demand, the GEMM's share of a
    call stretched by it, the copy's (at the copy course's measured rate) not."""
    p = s["params"]
    pred = None
    if p.get("op") in ("gemm", "mix"):
        flops = 2.0 * p["m"] * p["n"] * p["k"]
        gemm_s = s["boost_s"]
        copy_s = 0.0
        if p["op"] == "mix" and copy_rate:  # a call is half a GEMM and half a copy
            copy_s = p["bytes"] * 2.0 / copy_rate
            gemm_s = max(2.0 * s["boost_s"] - copy_s, 1e-9)
        demand = model.format_demand(_format(p)) * flops / gemm_s / spec.tensor_flops[_format(p)]
        if copy_s:
            copy_demand = model.demand_per_bandwidth * copy_rate / spec.hbm_bandwidth
            demand = (demand * gemm_s + copy_demand * copy_s) / (gemm_s + copy_s)
        gemm = float(steady_stretch(demand, model.alpha))
        if p["op"] == "mix":  # the GEMM's share of a call stretches, the copy's does not
            pred = (gemm_s * gemm + copy_s) / (gemm_s + copy_s)
        elif "burst_s" in p:  # bursts from rest: the mean stretch over a burst (idle between them)
            pred = 1.0 + (gemm - 1.0) * float(mean_onset(p["burst_s"], model))
        else:
            pred = gemm
    elif p.get("op") == "copy":
        pred = 1.0
    return {"name": s["name"], "fitted": fitted, "boost_ms": s["boost_s"] * 1e3,
            "steady_measured": s["steady"], "steady_model": pred,
            "error": (pred / s["steady"] - 1.0) if pred and math.isfinite(s["steady"]) else None}


def report_text(report: dict) -> str:
    m = report["model"]
    lines = [f"clock model: alpha {m['alpha']}, onset {m['onset_s'] * 1e3:.1f} ms, tau {m['tau_s'] * 1e3:.1f} ms for {m['fast_share']:.2f} "
             f"of the stretch, the rest {m['slow_tau_s']:.2f} s, "
             f"alone share {m['alone_share']:.2f}, demand at peak "
             + ", ".join(f"{k} {v:.2f}" for k, v in m["demand_at_peak"].items())
             + f", demand per bandwidth {m['demand_per_bandwidth']:.2f}",
             f"{'course':<26} {'fitted':>6} {'boost ms':>9} {'steady':>7} {'model':>7} {'error':>7}"
             + (f" {'other':>7} {'error':>7}" if "other" in report else "")]
    for c in report["courses"]:
        line = (f"{c['name']:<26} {'yes' if c['fitted'] else 'no':>6} {c['boost_ms']:9.4f} "
                f"{c['steady_measured']:7.3f} {ratio_cell(c['steady_model']):>7} {percent_cell(c['error']):>7}")
        if "other" in report:
            line += f" {ratio_cell(c['other_model']):>7} {percent_cell(c['other_error']):>7}"
        lines.append(line)
    if "other" in report:
        lines.append(f"other: {report['other']}")
    return "\n".join(lines)


def ratio_cell(x: float | None) -> str:
    """A stretch to three decimals, '-' where there is none."""
    return f"{x:.3f}" if x else "-"


def percent_cell(x: float | None) -> str:
    """A signed error in percent, '-' where there is none."""
    return f"{x * 100:+.1f}%" if x is not None else "-"


def main(argv: list[str] | None = None) -> int:
    from ..errors import InputError
    from ..resolve import resolve_hardware

    ap = argparse.ArgumentParser(prog="python -m perfmodel.fit.clock", description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--arch", default="h200-sxm")
    ap.add_argument("--against-default", action="store_true",
                    help="also price every course with the default clock model (the H200's fit, what a part "
                         "without its own courses carries)")
    args = ap.parse_args(argv)
    courses, alone = load_courses(args.directory)
    if not courses:
        print(f"error: {args.directory}: no {COURSE_FILE} rows", file=sys.stderr)
        return 2
    try:
        spec = resolve_hardware(args.arch)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _, report = fit_courses(courses, alone, spec)
    if args.against_default:
        report = check_against(courses, report, DEFAULT_CLOCK, spec)
    print(report_text(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
