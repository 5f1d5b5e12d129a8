"""The H200 power-clock tables of docs/power-clock.md, regenerated from the measured courses.

    python docs/tools/power_clock_table.py > /tmp/power-clock-tables.md     # about two seconds

prints the H200 block (``power-clock-tables``) and then the H100 block (``power-clock-h100``).

The first table is each course's per-call time over its boost time at several moments of the stream (the median
of the windows around that moment), its steady stretch after 2 s and the clock model's; the second the suite-style
timing of the same kernels, rested and right after a hot course; the third the fitted model.
"""
from __future__ import annotations

import numpy as np

from perfmodel.fit.clock import (check_against, course_summary, fit_clock, fit_courses, load_courses, percent_cell,
                                 ratio_cell)
from perfmodel.power_clock import DEFAULT_CLOCK
from perfmodel.paths import repo_root
from perfmodel.resolve import resolve_hardware

MOMENTS_S = (0.02, 0.05, 0.1, 0.3, 1.0, 2.0)


def _at(summary: dict, t_s: float) -> str:
    t, s = summary["t"], summary["stretch"]
    if t_s > t[-1]:
        return "-"
    i = int(np.searchsorted(t, t_s))
    return f"{np.median(s[max(0, i - 3):i + 3]):.3f}"


def _workload(p: dict) -> str:
    what = (f"{p.get('dtype', '')} {p['m']}x{p['n']}x{p['k']}".strip() if "m" in p else f"copy {p['bytes'] >> 20} MiB")
    if p["op"] == "mix":
        what = f"{p['dtype']} {p['m']}^3 GEMM and {p['bytes'] >> 20} MiB copy in turn"
    if "burst_s" in p:
        what += f", {p['burst_s'] * 1e3:g} ms on / {p['gap_s'] * 1e3:g} ms idle"
    if p.get("rest_s"):
        what += f", after {p['rest_s']:g} s rest"
    return what


def tables() -> str:
    folder = repo_root() / "calibration" / "h200" / "clock-course"
    courses, alone = load_courses(folder)
    hw = resolve_hardware("h200-sxm")
    model, report = fit_clock(folder, hw)
    checks = {c["name"]: c for c in report["courses"]}
    out = ["| course | workload | boost ms | " + " | ".join(f"{m * 1e3:g} ms" if m < 1 else f"{m:g} s"
                                                            for m in MOMENTS_S)
           + " | steady (>= 2 s) | model | fitted |",
           "|---|---|---|" + "---|" * len(MOMENTS_S) + "---|---|---|"]
    for row in courses:
        s = course_summary(row)
        c = checks[row["name"]]
        what = _workload(row["params"])
        model_cell = f"{c['steady_model']:.3f}" if c["steady_model"] else "-"
        out.append(f"| {row['name']} | {what} | {s['boost_s'] * 1e3:.4f} | "
                   + " | ".join(_at(s, m) for m in MOMENTS_S)
                   + f" | {s['steady']:.3f} | {model_cell} | {'yes' if c['fitted'] else 'no'} |")
    out += ["", "| kernel | boost ms | suite timing, rested | after a hot course | rested over boost |",
            "|---|---|---|---|---|"]
    boost = {r["name"]: course_summary(r)["boost_s"] for r in courses}
    rested = {a["name"]: a for a in alone if not a["after_hot_s"]}
    for a in alone:
        if not a["after_hot_s"]:
            continue
        r = rested[a["name"]]
        out.append(f"| {a['name']} | {boost[a['name']] * 1e3:.4f} | {r['time_s'] * 1e3:.4f} ms | "
                   f"{a['time_s'] * 1e3:.4f} ms | {r['time_s'] / boost[a['name']]:.3f} |")
    m = model.as_dict()
    out += ["", "| parameter | value |", "|---|---|",
            f"| onset | {m['onset_s'] * 1e3:.1f} ms |", f"| fast time constant | {m['tau_s'] * 1e3:.1f} ms |",
            f"| fast share of the stretch | {m['fast_share']:.2f} |",
            f"| slow time constant | {m['slow_tau_s']:.2f} s |", f"| alpha (estimate) | {m['alpha']:g} |",
            f"| share the suite's timing shows | {m['alone_share']:.2f} |"]
    out += [f"| demand at peak, {k} | {v:.2f} |" for k, v in m["demand_at_peak"].items()]
    out += [f"| demand of streaming at the datasheet bandwidth | {m['demand_per_bandwidth']:.2f} |",
            f"| static power (rested, measured) | {report['static_w']:.0f} W |",
            f"| power limit (enforced) | {report['limit_w']:.0f} W |"]
    out += ["", in_step_table()]
    return "\n".join(out)


def h100_tables() -> str:
    """The H100's courses (calibration/h100-sxm/clock-course): each course's steady stretch against the H100's own
    fit and against the default (the H200's fit, what the H100 carried before its courses were fitted), and the
    two models' parameters side by side."""
    from perfmodel.power_clock import clock_model
    from perfmodel.profile import load_profile

    folder = repo_root() / "calibration" / "h100-sxm" / "clock-course"
    courses, alone = load_courses(folder)
    hw = resolve_hardware("h100-sxm")
    _, report = fit_courses(courses, alone, hw)  # the courses' summaries, which were fitted, the measured powers
    # the shipped fit (what projections take), not a refit here: the courses leave the onset and the two time
    # constants on a flat valley (docs/power-clock.md), where a refit's digits depend on the host's floating point
    model = clock_model(load_profile(repo_root() / "calibration" / "h100-sxm"))
    mine = check_against(courses, report, model, hw)["courses"]
    report = check_against(courses, report, DEFAULT_CLOCK, hw)
    params = {r["name"]: r["params"] for r in courses}
    out = ["| course | workload | boost ms | steady (>= 2 s) | H100 fit | error | H200 fit (default) | error | fitted |",
           "|---|---|---|---|---|---|---|---|---|"]
    for own_row, c in zip(mine, report["courses"]):
        out.append(f"| {c['name']} | {_workload(params[c['name']])} | {c['boost_ms']:.4f} | {c['steady_measured']:.3f} | "
                   f"{ratio_cell(own_row['other_model'])} | {percent_cell(own_row['other_error'])} | "
                   f"{ratio_cell(c['other_model'])} | {percent_cell(c['other_error'])} | "
                   f"{'yes' if c['fitted'] else 'no'} |")
    own, default = model.as_dict(), DEFAULT_CLOCK.as_dict()
    out += ["", "| parameter | H100 fit | H200 fit (default) |", "|---|---|---|",
            f"| onset | {own['onset_s'] * 1e3:.1f} ms | {default['onset_s'] * 1e3:.1f} ms |",
            f"| fast time constant | {own['tau_s'] * 1e3:.1f} ms | {default['tau_s'] * 1e3:.1f} ms |",
            f"| fast share of the stretch | {own['fast_share']:.2f} | {default['fast_share']:.2f} |",
            f"| slow time constant | {own['slow_tau_s']:.3f} s | {default['slow_tau_s']:.3f} s |",
            f"| share the suite's timing shows | {own['alone_share']:.2f} | {default['alone_share']:.2f} |"]
    out += [f"| demand at peak, {k} | {v:.2f} | {default['demand_at_peak'][k]:.2f} |"
            for k, v in own["demand_at_peak"].items() if k in default["demand_at_peak"]]
    out += [f"| demand of streaming at the datasheet bandwidth | {own['demand_per_bandwidth']:.2f} | "
            f"{default['demand_per_bandwidth']:.2f} |",
            f"| static power (rested, measured) | {report['static_w']:.0f} W | - |",
            f"| power limit (enforced) | {report['limit_w']:.0f} W | - |"]
    return "\n".join(out + ["", h100_checks()])


# the H100's never-fitted checks as `perfmodel fit` reported them with the H200's clock model (commit ce40819's
# calibration/h100-sxm/profile.json, before the H100's courses were fitted), beside the shipped profile's
H100_CHECKS_UNDER_DEFAULT = {"layers_prefill": 0.03845, "layers_decode": 0.03132, "gemm_held_out": 0.05181,
                             "train_step": 0.00633, "energy_held_out": 0.03188}


def h100_checks() -> str:
    """The H100 profile's checks that were never fitted, fitted under the default clock model and under its own."""
    import json

    v = json.loads((repo_root() / "calibration" / "h100-sxm" / "profile.json").read_text())["validation"]
    now = {"layers_prefill": v["layers"]["prefill"]["median_abs_error"],
           "layers_decode": v["layers"]["decode"]["median_abs_error"],
           "gemm_held_out": v["ops"]["held_out"]["gemm"]["median_abs_error"],
           "train_step": v["training"]["train_step_summary"]["median_abs_error"],
           "energy_held_out": v["power"]["held_out_end_to_end"]["median_abs_error"]}
    names = {"layers_prefill": "whole layers, prefill", "layers_decode": "whole layers, decode",
             "gemm_held_out": "GEMMs, held out", "train_step": "whole training steps",
             "energy_held_out": "energy, held out"}
    out = ["| check (median abs error) | fitted under the H200's clock (ce40819) | under the H100's own |", "|---|---|---|"]
    out += [f"| {names[k]} | {H100_CHECKS_UNDER_DEFAULT[k] * 100:.1f}% | {now[k] * 100:.1f}% |" for k in names]
    return "\n".join(out)


IN_STEP_CASES = (("h100-sxm", "bf16"), ("h200-sxm", "bf16"), ("h200-sxm", "fp8"), ("b200", "bf16"), ("b200", "fp8"),
                 ("b200", "fp4"), ("gb200", "fp4"), ("b300", "fp4"))


def in_step_table() -> str:
    """Llama-3.1-70B prefill of 8,192 tokens at TP 2 (TensorRT-LLM): the step's demand, the stretch it settles to,
    and the FFN GEMMs' time in the step over their time alone, per part and format (``--format json``'s
    ``power_clock``)."""
    from perfmodel import project
    from perfmodel.cost import clock_info

    out = ["| part | format | step demand | steady stretch | gate_up alone | in step | in step / alone | "
           "down in step / alone |", "|---|---|---|---|---|---|---|---|"]
    for arch, dtype in IN_STEP_CASES:
        p = project(arch, "llama70b", dtype=dtype, isl=8192, tp=2)
        info = clock_info(p.prefill.times, p.hardware, p.profile)
        ops = {r["name"]: r for r in info["ops"]}
        g, d = ops["ffn.gate_up"], ops["ffn.down"]
        out.append(f"| {arch} | {dtype} | {info['step_demand']:.2f} | {info['steady_stretch']:.3f} | "
                   f"{g['alone_ms']:.3f} ms | {g['in_step_ms']:.3f} ms | {g['in_step_over_alone']:.3f} | "
                   f"{d['in_step_over_alone']:.3f} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(tables())
    print()
    print(h100_tables())
