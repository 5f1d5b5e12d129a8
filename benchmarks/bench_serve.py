"""Speed goals of the serving simulation, measured (never asserted in tests).

    python benchmarks/bench_serve.py [--json FILE]

Goal (issue 10): 10,000 requests simulated in under 1 s. Each figure is the median of ``--reps`` runs of
the whole `simulate` call: building the step-time tables for the scenario, the event loop, the metrics
and the energy. Also timed: the table build alone, `perfmodel serve` as a fresh process, and `perfmodel
plan` for 8 GPUs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile  # noqa: E402
from perfmodel.scenario import Scenario  # noqa: E402
from perfmodel.serve.simulate import ServeOptions, simulate  # noqa: E402
from perfmodel.serve.workload import parse_dist, synthetic_requests  # noqa: E402

CASES = [  # (label, model, scenario fields, rate req/s, isl, osl)
    ("Llama-3.1-8B, H200, 0.5 req/s (light)", "llama8b", {}, 0.5, "1024", "128"),
    ("Llama-3.1-8B, H200, 5 req/s", "llama8b", {}, 5.0, "1024", "128"),
    ("Llama-3.1-8B, H200, 20 req/s (near saturation)", "llama8b", {}, 20.0, "1024", "128"),
    ("Llama-3.1-8B, H200, 100 req/s (overloaded)", "llama8b", {}, 100.0, "1024", "128"),
    ("Llama-3.1-70B TP4, H200, 4 req/s, mixed lengths", "llama70b", {"tp": 4}, 4.0, "uniform:200:4000",
     "lognormal:200:0.8"),
    ("DeepSeek-V3 TP8 fp8, H200, 2 req/s", "deepseek-v3", {"tp": 8, "dtype": "fp8"}, 2.0, "2048", "256"),
    ("DeepSeek-V3 attention DP 8, EP 8, fp8, H200, 2 req/s", "deepseek-v3",
     {"tp": 1, "attention_dp": 8, "ep": 8, "dtype": "fp8"}, 2.0, "2048", "256"),
]


def simulate_10k(model, fields, rate, isl, osl, reps) -> tuple[float, dict]:
    hw = resolve_hardware("h200")
    prof = resolve_profile(None, hw)
    m = resolve_model(model)
    sc = Scenario(batch="max", **fields)
    reqs = synthetic_requests(10000, rate, parse_dist(isl, field="isl"), parse_dist(osl, field="osl"), seed=0)
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = simulate(hw, m, sc, prof, reqs, ServeOptions(slo_ttft_s=1.0, slo_tpot_s=0.05))
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def cli(args: list[str], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "perfmodel", *args], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    results = []
    print(f"{'case':<52} {'10k requests':>12} {'tables':>8} {'steps':>10}  goal < 1 s")
    for label, model, fields, rate, isl, osl in CASES:
        t, out = simulate_10k(model, fields, rate, isl, osl, a.reps)
        sim = out["simulation"]
        results.append({"case": label, "seconds": t, "build_s": sim["build_s"], "steps": sim["steps"]})
        print(f"{label:<52} {t:>10.3f} s {sim['build_s']:>6.3f} s {sim['steps']:>10,}")
    t_cli = cli(["serve", "--arch", "h200", "--model", "llama8b", "--rate", "5", "--requests", "10000",
                 "--format", "json"], a.reps)
    print(f"{'perfmodel serve ... --requests 10000 (fresh process)':<52} {t_cli:>10.3f} s")
    t_plan = cli(["plan", "--arch", "h200", "--model", "llama70b", "--gpus", "8", "--isl", "2048", "--osl", "256",
                  "--slo-ttft-ms", "1000", "--slo-tpot-ms", "30"], 1)
    print(f"{'perfmodel plan, Llama-3.1-70B on 8 H200 (fresh process)':<52} {t_plan:>10.3f} s")
    results += [{"case": "cli serve 10k", "seconds": t_cli}, {"case": "cli plan 70B 8 GPUs", "seconds": t_plan}]
    if a.json:
        from perfmodel.io import write_text_atomic

        write_text_atomic(a.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
