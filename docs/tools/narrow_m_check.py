"""Skinny GEMMs on parts with slow tensor cores per SM: the Hopper TensorRT-LLM profiles carried blind (datasheet
rule) to the L40S and RTX PRO 6000 tables of aiconfigurator-core, error by row count.

    pip install '.[import]'; python docs/tools/narrow_m_check.py      # about two minutes: imports both tables

The tables are imported into a temporary folder (never into the repository): they are the check, not evidence a
projection uses.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from perfmodel.backtest import folder_rows
from perfmodel.fit.directory import match_spec, read_environment
from perfmodel.fit.latency import load_cases, predict_cases
from perfmodel.paths import repo_root
from perfmodel.profile import load_profile
from perfmodel.resolve import resolve_hardware
from perfmodel.transfer import carry

CHECKS = (("h100-sxm-trtllm", "l40s"), ("h200-sxm-trtllm", "rtx_pro_6000_server"))
BUCKETS = ((1, 8), (9, 64), (65, 512), (513, None))


def errors(source: Path, target: Path) -> list[tuple[str, str, int, float, float]]:
    prof = load_profile(source)
    hw = match_spec(read_environment(target / "environment.json"), None)
    cases, _, _, _ = load_cases(folder_rows(target), 0.25, 0)
    gemms = [c for c in cases if c.kind == "gemm"]
    carried = carry(prof, resolve_hardware(prof.spec_key), hw, sustained=False)
    err = predict_cases(gemms, hw, carried) / np.array([c.time_s for c in gemms]) - 1.0
    m = np.array([c.params["m"] for c in gemms])
    fmt = np.array([c.params["dtype"] + (f" {c.params['scaling']}" if c.params.get("scaling") else "") for c in gemms])
    out = []
    for f in sorted(set(fmt)):
        for lo, hi in BUCKETS:
            sel = (fmt == f) & (m >= lo) & (m <= (hi or np.inf))
            if sel.any():
                rows = f"{lo}-{hi}" if hi else f">= {lo}"
                out.append((hw.key, f, rows, int(sel.sum()), float(np.median(np.abs(err[sel]))),
                            float(np.median(err[sel]))))
    return out


def main() -> None:
    from perfmodel.imports.aiconfigurator import find_source, import_system

    print("| target | format | rows m | n | median abs error | signed median |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for source, system in CHECKS:
            folder = Path(tmp) / system
            folder.mkdir()
            import_system(find_source(), system, "trtllm", folder)
            for part, f, rows, n, med, signed in errors(repo_root() / "calibration" / source, folder):
                print(f"| {part} (from {source}) | {f} | {rows} | {n} | {med:.1%} | {signed:+.1%} |")


if __name__ == "__main__":
    main()
