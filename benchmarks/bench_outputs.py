"""Speed goals of loading, sweeping, the outputs and refusing hostile files, measured (never asserted in tests).

    python benchmarks/bench_outputs.py [--json FILE]

The timed assertions that used to sit in tests (tests/test_spec.py: 10,000 spec loads under 2 s;
tests/test_sweep.py: a 10,000-point run_sweep under 5 s) live here as goals; the tests keep the behaviour
(the cache is used, the grid has 10,000 finite points). Figures are in benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.errors import InputError  # noqa: E402
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile  # noqa: E402
from perfmodel.scenario import Scenario  # noqa: E402


def _median(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def spec_loads_10k() -> float:
    """10,000 loads of a cached spec (by name: resolution and the cache check included)."""
    from perfmodel.spec import load_spec

    load_spec("h200")
    return _median(lambda: [load_spec("h200") for _ in range(10_000)], 3)


def run_sweep_10k() -> float:
    """perfmodel.outputs.sweep.run_sweep over 100 HBM bandwidths x 100 batch sizes."""
    from perfmodel.outputs.sweep import Axis, parse_vary, run_sweep

    hw = resolve_hardware("b200")
    model, prof = resolve_model("llama70b"), resolve_profile(None, hw)
    axes = [parse_vary("hbm_bandwidth=2TB/s:16TB/s:100"), Axis("batch", list(range(1, 101)))]
    sc = Scenario().validated()
    return _median(lambda: run_sweep(hw, model, sc, prof, axes), 3)


def workbook_build(case: str) -> float:
    from perfmodel.outputs.workbook import workbook_bytes

    arch, model, sc = {
        "dense": ("b200", "llama8b", Scenario(batch=8)),
        "moe-mla-tp8": ("b200", "deepseek-v3", Scenario(batch="max", tp=8, ep=8, dtype="fp8", isl=2048, osl=256)),
    }[case]
    hw = resolve_hardware(arch)
    mdl, prof = resolve_model(model), resolve_profile(None, hw)
    return _median(lambda: workbook_bytes(hw, mdl, sc.validated(), prof), 3)


def report_render() -> float:
    """The README's report: B200 against H100 on Llama-3.1-70B, each at the smallest TP that fits."""
    from perfmodel.outputs.report import render_report

    sc = Scenario().validated()
    return _median(lambda: render_report(["b200"], "llama70b", sc, baseline="h100-sxm", auto_tp=True), 3)


def refuse(path: Path) -> float:
    from perfmodel.spec import clear_cache, load_spec

    def once():
        clear_cache()
        try:
            load_spec(path)
        except InputError:
            return
        raise AssertionError(f"{path} was accepted")

    return _median(once, 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    res = {
        "spec_loads_10k_s": spec_loads_10k(),
        "run_sweep_10k_s": run_sweep_10k(),
        "workbook_dense_s": workbook_build("dense"),
        "workbook_moe_mla_tp8_s": workbook_build("moe-mla-tp8"),
        "report_b200_vs_h100_s": report_render(),
        "refuse_alias_bomb_s": refuse(ROOT / "tests" / "hostile" / "spec-alias-bomb-note.yaml"),
    }
    with tempfile.TemporaryDirectory() as d:
        big = Path(d) / "big.yaml"
        with open(big, "w") as f:  # the 200 MB spec of issue 8 (98 s to fail before the size limit)
            f.write("name: big\nnote: \"")
            chunk = "a" * (1 << 20)
            for _ in range(200):
                f.write(chunk)
            f.write("\"\n")
        res["refuse_200MB_spec_s"] = refuse(big)
    goals = {"spec_loads_10k_s": 2.0, "run_sweep_10k_s": 1.0, "workbook_dense_s": 5.0, "workbook_moe_mla_tp8_s": 10.0,
             "report_b200_vs_h100_s": 3.0, "refuse_alias_bomb_s": 0.1, "refuse_200MB_spec_s": 0.1}
    print(f"{'benchmark':<26}{'measured':>12}{'goal':>10}")
    for k, v in res.items():
        print(f"{k:<26}{v:>12.4f}{goals[k]:>10.2f}  {'ok' if v < goals[k] else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
