"""Speed goals of the projection path (issue 28: speed as a designed property), measured, never asserted in tests.

    python benchmarks/bench_projection.py [--json FILE] [--reps N] [--no-plan]

Goals (issue 28; issue 2's were 20 ms, 2 s and 1.5 s):

- a warm in-process projection (``perfmodel.project("h200-sxm", "llama-3.1-70b", tp=8)``, names resolved each time as a
  caller passes them) < 5 ms;
- CLI start < 0.3 s above a bare interpreter (``python -c pass``): ``perfmodel --help``; the cold ``perfmodel project``
  (start, imports, the first use of the part's measured tables) is reported beside it;
- a 10,000-point sweep < 1 s: ``run_sweep`` over 100 HBM bandwidths x 100 batch sizes in-process (and 10,000 points in
  one vectorised ``serving_times``);
- ``perfmodel plan`` of Llama-3.1-70B on 8 H200s with TTFT 2 s and TPOT 50 ms SLOs < 5 s (a fresh process).

Every figure is a median over ``--reps`` runs (more for the fast ones), as wall-clock seconds and, where other jobs share
the machine, as CPU seconds of the process (``time.process_time``, or the children's user + system time for a fresh
process), which a busy machine inflates less. The load average is printed with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel import project  # noqa: E402
from perfmodel.projection import project_resolved, serving_times  # noqa: E402
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile, resolve_scenario  # noqa: E402
from perfmodel.scenario import Scenario  # noqa: E402
from perfmodel.spec import spec_with  # noqa: E402

PLAN = ["plan", "--arch", "h200-sxm", "--model", "llama-3.1-70b", "--gpus", "8", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "50"]
PROJECT = ["project", "--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8"]


def _timed(fn, reps: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of ``fn()`` over ``reps`` runs after one warm-up run."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall), statistics.median(cpu)


def warm_projection(reps: int) -> dict:
    by_name = _timed(lambda: project("h200-sxm", "llama-3.1-70b", tp=8), reps)
    hw, model = resolve_hardware("h200-sxm"), resolve_model("llama-3.1-70b")
    sc = resolve_scenario(Scenario(tp=8).validated(), hw, None)  # as perfmodel.resolve.setup hands it over
    prof = resolve_profile(None, hw, sc.engine)
    resolved = _timed(lambda: project_resolved(hw, model, sc, prof), reps)
    return {"project_ms": by_name[0] * 1e3, "project_cpu_ms": by_name[1] * 1e3,
            "project_resolved_ms": resolved[0] * 1e3, "project_resolved_cpu_ms": resolved[1] * 1e3}


def sweeps(reps: int) -> dict:
    from perfmodel.outputs.sweep import Axis, parse_vary, run_sweep

    hw = resolve_hardware("b200")
    model, prof = resolve_model("llama70b"), resolve_profile(None, hw)
    axes = [parse_vary("hbm_bandwidth=2TB/s:16TB/s:100"), Axis("batch", list(range(1, 101)))]
    sc = Scenario().validated()
    run = _timed(lambda: run_sweep(hw, model, sc, prof, axes), reps)
    sc8 = resolve_scenario(Scenario(isl=1024, osl=128, dtype="fp8").validated(), hw, None)
    bws, batch = np.linspace(4e12, 12e12, 100)[:, None], np.arange(1, 101)[None, :]
    vec = _timed(lambda: serving_times(model, spec_with(hw, hbm_bandwidth=bws), sc8, prof, batch), reps)
    return {"run_sweep_10k_s": run[0], "run_sweep_10k_cpu_s": run[1], "serving_times_10k_s": vec[0],
            "serving_times_10k_cpu_s": vec[1]}


def _process(args: list[str], reps: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of a fresh process."""
    wall, cpu = [], []
    for _ in range(reps):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
        wall.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(wall), statistics.median(cpu)


def cli_start(reps: int) -> dict:
    bare = _process(["-c", "pass"], reps)
    helps = _process(["-m", "perfmodel", "--help"], reps)
    cold = _process(["-m", "perfmodel", *PROJECT], max(3, reps // 3))
    return {"bare_python_s": bare[0], "bare_python_cpu_s": bare[1],
            "cli_help_above_bare_s": helps[0] - bare[0], "cli_help_above_bare_cpu_s": helps[1] - bare[1],
            "cli_project_above_bare_s": cold[0] - bare[0], "cli_project_above_bare_cpu_s": cold[1] - bare[1]}


def plan(reps: int) -> dict:
    wall, cpu = _process(["-m", "perfmodel", *PLAN], reps)
    return {"plan_70b_8gpu_s": wall, "plan_70b_8gpu_cpu_s": cpu}


GOALS = {"project_ms": 5.0, "project_cpu_ms": 5.0, "project_resolved_ms": 5.0, "project_resolved_cpu_ms": 5.0,
         "run_sweep_10k_s": 1.0, "run_sweep_10k_cpu_s": 1.0, "serving_times_10k_s": 1.0, "serving_times_10k_cpu_s": 1.0,
         "cli_help_above_bare_s": 0.3, "cli_help_above_bare_cpu_s": 0.3, "cli_project_above_bare_s": 0.3,
         "cli_project_above_bare_cpu_s": 0.3, "plan_70b_8gpu_s": 5.0, "plan_70b_8gpu_cpu_s": 5.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--reps", type=int, default=9, help="runs per figure (the warm projection: 10x as many)")
    ap.add_argument("--no-plan", action="store_true", help="skip the plan (tens of seconds on a busy machine)")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    res = {**warm_projection(10 * a.reps), **sweeps(a.reps), **cli_start(a.reps)}
    if not a.no_plan:
        res.update(plan(max(1, a.reps // 3)))
    res["load_average"] = [load, os.getloadavg()[0]]
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)")
    print(f"{'benchmark':<30}{'measured':>12}{'goal':>10}")
    for k, v in res.items():
        if k in GOALS:
            print(f"{k:<30}{v:>12.4g}{GOALS[k]:>10g}  {'ok' if v < GOALS[k] else 'MISSED'}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
