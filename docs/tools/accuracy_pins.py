"""Today's accuracy figures, per part and class, as tests/data/accuracy_pins.json pins them.

    python docs/tools/accuracy_pins.py                 # prints the fast pins (a few seconds)
    python docs/tools/accuracy_pins.py --slow          # and the slow ones: the backtest and the silicon table
    python docs/tools/accuracy_pins.py --slow --write  # rewrites tests/data/accuracy_pins.json (asked for)

The figures: the public validation table (``perfmodel validate``) by part and metric; the H200's own kernels as
``perfmodel predict`` prices them (:mod:`perfmodel.kernel_check`) by class; the blind kernel-level backtest of
the H200's TensorRT-LLM profile to each measured part (:mod:`perfmodel.backtest`) by family; NVIDIA's measured
serving runs (``workloads/validation/aiconfigurator_silicon.csv``) by part and metric. tests/test_accuracy_pins.py
fails when a median |error| grows by more than a point or a signed median moves by more than two.
"""
from __future__ import annotations

import json
import sys

from perfmodel.paths import repo_root

PINS = repo_root() / "tests" / "data" / "accuracy_pins.json"
BACKTEST_TARGETS = ("b200-trtllm", "gb200-trtllm", "b300-trtllm", "gb300-trtllm", "h100-sxm-trtllm")


def _r(x: float) -> float:
    return round(float(x), 4)


def _pinned(stats: dict) -> dict:
    """The pinned fields of per-class statistics (median and signed median rounded, row count)."""
    return {k: {"median_abs_error": _r(v["median_abs_error"]), "signed_median": _r(v["signed_median"]), "n": v["n"]}
            for k, v in stats.items()}


def _by_part(path=None) -> dict:
    from perfmodel.validate import run_validation, summary

    return _pinned(summary(run_validation(path))["by_part"])


def public() -> dict:
    return _by_part()


def kernels() -> dict:
    from perfmodel.kernel_check import kernel_errors

    return _pinned(kernel_errors())


def backtest_blind() -> dict:
    from perfmodel.backtest import BLIND_SIDE, backtest, summary_by_family

    cal = repo_root() / "calibration"
    out = {}
    for target in BACKTEST_TARGETS:
        fams = summary_by_family(backtest(cal / "h200-sxm-trtllm", cal / target))
        for fam, sides in fams.items():
            x = sides.get(BLIND_SIDE)
            if x:
                out[f"{target} {fam}"] = x
    return _pinned(out)


def silicon() -> dict:
    """By part and metric, by layout class and metric (``layout tp ttft``, ``layout attention-dp tpot``, ...) and by
    architecture and metric (``architecture moe tpot``, ``architecture dense ttft``)."""
    from perfmodel.validate import run_validation, summary

    stats = summary(run_validation(repo_root() / "workloads" / "validation" / "aiconfigurator_silicon.csv"))
    layouts = {f"layout {k}": v for k, v in stats["serving"]["by_layout"].items()}
    architectures = {f"architecture {k}": v for k, v in stats["serving"]["by_architecture"].items()}
    return _pinned({**stats["by_part"], **layouts, **architectures})


FAST = {"public": public, "kernels": kernels}
SLOW = {"backtest_blind": backtest_blind, "silicon": silicon}


def main(argv: list[str]) -> int:
    parts = dict(FAST)
    if "--slow" in argv:
        parts.update(SLOW)
    figures = {name: fn() for name, fn in parts.items()}
    if "--write" in argv:
        from perfmodel.io import write_text_atomic

        old = json.loads(PINS.read_text()) if PINS.is_file() else {}
        write_text_atomic(PINS, json.dumps({**old, **figures}, indent=1, sort_keys=True) + "\n")
    print(json.dumps(figures, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
