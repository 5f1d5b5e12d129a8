"""Speed goal of capacity planning (`perfmodel plan` without --gpus), measured (never asserted in tests).

    python benchmarks/bench_capacity.py [--reps N] [--json FILE]

Goal (issue 29): a search over 2 parts x 3 engines stays interactive (under 30 s in a fresh process). Times
`perfmodel plan --arch h200-sxm,b200 --model llama-3.1-70b --rate 20 --slo-ttft-ms 2000 --slo-tpot-ms 50
--engines trtllm,vllm,sglang` as a fresh process (median of --reps), and reads the stages' seconds from its
JSON (`search`: the closed-form screen with the step-table builds, the simulated instance rate searches, the
end-to-end checks).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CMD = ["plan", "--arch", "h200-sxm,b200", "--model", "llama-3.1-70b", "--rate", "20", "--slo-ttft-ms", "2000",
       "--slo-tpot-ms", "50", "--engines", "trtllm,vllm,sglang", "--format", "json"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    walls, stages = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "perfmodel", *CMD], capture_output=True, text=True, env=env,
                             check=True).stdout
        walls.append(time.perf_counter() - t0)
        stages.append(json.loads(out)["search"])
    s = stages[walls.index(statistics.median(walls))] if len(walls) % 2 else stages[0]
    result = {"command": "perfmodel " + " ".join(CMD), "wall_s_median": statistics.median(walls),
              "wall_s": walls, "screen_s": s["screen_s"], "instance_search_s": s["instance_search_s"],
              "end_to_end_s": s["end_to_end_s"], "layouts": s["layouts"], "candidates": s["candidates"],
              "simulated": s["simulated"], "load_1min": os.getloadavg()[0]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
