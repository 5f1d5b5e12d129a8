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
    from perfmodel.kernel_check import kernel_errors, layer_errors
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile
    from perfmodel.resolve import resolve_hardware, resolve_profile

    folder = calibration_dir() / "h100-sxm"
    own = load_profile(folder)
    carried = resolve_profile(str(calibration_dir() / "h200"), resolve_hardware("h100-sxm"), "torch")
    kernels = [kernel_errors(p, folder=folder, arch="h100-sxm") for p in (own, carried)]
    layers = [layer_errors(p, folder=folder, arch="h100-sxm") for p in (own, carried)]
    lines = ["| class (the H100's held-out kernels) | rows | the H100's own fit: median / P90 (signed) | "
             "the H200's profile carried: median / P90 (signed) |", "|---|---|---|---|"]
    classes = list(CLASSES) + sorted(k for k in kernels[0] if k.startswith("memory "))
    rows = [(cls, [k[cls] for k in kernels]) for cls in classes]
    rows += [(f"whole layers, {phase} (never fitted)", [x[phase] for x in layers]) for phase in layers[0]]
    for label, (a, b) in rows:
        lines.append(f"| {label} | {a['n']} | {_cell(a)} | {_cell(b)} |")
    return "\n".join(lines)


def _cell(e: dict) -> str:
    return f"{e['median_abs_error']:.1%} / {e['p90_abs_error']:.1%} ({e['signed_median']:+.1%})"


if __name__ == "__main__":
    print(markdown())
