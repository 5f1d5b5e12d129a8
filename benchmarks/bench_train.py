"""Speed of the training projection (goals measured here, never asserted in tests).

    python benchmarks/bench_train.py

Goals: one training projection in-process under 50 ms; ``--search`` over a 1024-GPU job of Llama-3.1-70B
(every TP, PP, CP, micro-batch and schedule that fits) under 15 s; ``perfmodel train`` cold start
(CLI process, one projection, JSON) under 2 s.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
    from perfmodel.train.project import project_training
    from perfmodel.train.scenario import TrainScenario
    from perfmodel.train.search import search

    hw = resolve_hardware("h100-sxm")
    model = resolve_model("llama-3.1-70b")
    prof = resolve_profile(None, hw)
    ts = TrainScenario(gpus=1024, tp=8, pp=4, global_batch=1024, seq=8192, sequence_parallel=True,
                       recompute="selective", schedule="interleaved", interleave=2)
    project_training(hw, model, ts, prof)  # warm caches
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        project_training(hw, model, ts, prof)
    one = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    results, considered = search(hw, model, ts, prof, top=10)
    t_search = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfmodel", "train", "--arch", "h100-sxm", "--model", "llama-3.1-70b",
                    "--gpus", "64", "--tp", "8", "--pp", "4", "--global-batch", "256", "--seq", "8192",
                    "--format", "json"], cwd=ROOT, check=True, capture_output=True)
    cold = time.perf_counter() - t0
    print(f"one training projection in-process: {one * 1e3:.1f} ms (goal 50 ms)")
    print(f"--search, 1024 GPUs, Llama-3.1-70B: {t_search:.2f} s for {considered} layouts (goal 15 s)")
    print(f"perfmodel train cold start (one projection, JSON): {cold:.2f} s (goal 2 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
