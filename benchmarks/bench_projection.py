"""Speed goals of the projection path, measured (never asserted in tests).

    python benchmarks/bench_projection.py

Goals (issue 2): one projection in-process < 20 ms; 10,000 projections in a sweep < 2 s; CLI cold start
(`perfmodel project ...` as a fresh process) < 1.5 s. Prints a table; `--json FILE` writes the figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.projection import project_resolved, serving_times  # noqa: E402
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile  # noqa: E402
from perfmodel.scenario import Scenario  # noqa: E402
from perfmodel.spec import spec_with  # noqa: E402


def one_projection(reps: int = 50) -> float:
    hw = resolve_hardware("blackwell.yaml")
    model = resolve_model("llama70b")
    prof = resolve_profile(None, hw)
    sc = Scenario(isl=1024, osl=128, batch=1).validated()
    project_resolved(hw, model, sc, prof)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        project_resolved(hw, model, sc, prof)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sweep_10k(reps: int = 5) -> float:
    """100 HBM bandwidths x 100 batch sizes, vectorised."""
    hw = resolve_hardware("b200")
    model = resolve_model("llama70b")
    prof = resolve_profile(None, hw)
    sc = Scenario(isl=1024, osl=128, dtype="fp8").validated()
    bws = np.linspace(4e12, 12e12, 100)[:, None]
    batch = np.arange(1, 101)[None, :]
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        st = serving_times(model, spec_with(hw, hbm_bandwidth=bws), sc, prof, batch)
        assert st.tpot_s.shape == (100, 100)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cli_cold_start(reps: int = 5) -> float:
    cmd = [sys.executable, "-m", "perfmodel", "project", "--arch", "blackwell.yaml", "--model", "llama70b"]
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    res = {"one_projection_ms": one_projection() * 1e3, "sweep_10k_s": sweep_10k(), "cli_cold_start_s": cli_cold_start()}
    goals = {"one_projection_ms": 20.0, "sweep_10k_s": 2.0, "cli_cold_start_s": 1.5}
    print(f"{'benchmark':<22}{'measured':>12}{'goal':>10}")
    for k, v in res.items():
        print(f"{k:<22}{v:>12.3f}{goals[k]:>10.1f}  {'ok' if v < goals[k] else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
