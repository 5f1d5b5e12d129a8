"""The transfer rules checked on a part measured twice over: the H100's own standalone kernels
(``calibration/h100-sxm``, this project's suite on a lent H100) priced by the H100's own fit and by the H200's
profile (``calibration/h200``) carried to the H100 by :mod:`perfmodel.transfer`, as every H100 projection was
priced before the H100 was measured (docs/backtest.md).

    python docs/tools/h100_carry_check.py      # the H100's held-out kernels and whole layers, twice: seconds

Whole decoder layers (prefill eager, decode from a CUDA graph) are never fitted, in either profile.
"""
from __future__ import annotations

CLASSES = ("gemm", "attention decode", "attention prefill", "memory")


def markdown() -> str:
    from perfmodel.kernel_check import kernel_errors
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile
    from perfmodel.resolve import resolve_hardware, resolve_profile

    hw = resolve_hardware("h100-sxm")
    folder = calibration_dir() / "h100-sxm"
    own = kernel_errors(load_profile(folder), folder=folder, arch="h100-sxm")
    carried_profile = resolve_profile(str(calibration_dir() / "h200"), hw, "torch")
    carried = kernel_errors(carried_profile, folder=folder, arch="h100-sxm")
    lines = ["| class (the H100's held-out kernels) | rows | the H100's own fit: median / P90 (signed) | "
             "the H200's profile carried: median / P90 (signed) |", "|---|---|---|---|"]
    for cls in list(CLASSES) + sorted(k for k in own if k.startswith("memory ")):
        a, b = own[cls], carried[cls]
        lines.append(f"| {cls} | {a['n']} | {a['median_abs_error']:.1%} / {a['p90_abs_error']:.1%} "
                     f"({a['signed_median']:+.1%}) | {b['median_abs_error']:.1%} / {b['p90_abs_error']:.1%} "
                     f"({b['signed_median']:+.1%}) |")
    for phase, (a, b) in _layers(hw, folder, load_profile(folder), carried_profile).items():
        lines.append(f"| whole layers, {phase} (never fitted) | {a['n']} | {a['median_abs_error']:.1%} / "
                     f"{a['p90_abs_error']:.1%} ({a['signed_median']:+.1%}) | {b['median_abs_error']:.1%} / "
                     f"{b['p90_abs_error']:.1%} ({b['signed_median']:+.1%}) |")
    return "\n".join(lines)


def _layers(hw, folder, own, carried) -> dict:
    """Per phase: the error statistics of the folder's whole-layer rows under each profile."""
    import json

    import numpy as np

    from perfmodel.fit.layers import validate_layers

    rows = [json.loads(line) for line in (folder / "measurements.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    layers = [r for r in rows if r.get("kind") == "layer" and r.get("error") is None]
    out = {}
    for prof_rows in (validate_layers(layers, hw, own)[1], validate_layers(layers, hw, carried)[1]):
        for phase in ("prefill", "decode"):
            e = np.array([x["error"] for x in prof_rows if x["phase"] == phase])
            out.setdefault(phase, []).append({"n": len(e), "median_abs_error": float(np.median(np.abs(e))),
                                              "p90_abs_error": float(np.percentile(np.abs(e), 90)),
                                              "signed_median": float(np.median(e))})
    return out


if __name__ == "__main__":
    print(markdown())
