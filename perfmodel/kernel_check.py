"""A measured part's own kernels, priced as ``perfmodel predict`` prices them: median |error| per class.

``calibration/h200/measurements.jsonl`` holds this project's standalone microbenchmarks of an H200 (GEMMs,
SDPA attention as plain PyTorch dispatches it, memory-bound kernels). Each row goes through the very path of
``perfmodel predict --arch h200-sxm`` (:func:`perfmodel.predict.predict_rows`: the row's op and shape as CSV
cells, the composed profile of :mod:`perfmodel.evidence`), and its predicted time is compared with the
measured median. Rows the fit held out (the same hash and share as ``perfmodel fit``: ``validation`` of the
folder's profile) are the honest figure; ``split="train"`` or ``"all"`` give the others. In-stream rows, forced
attention backends, launches and whole layers are left out: ``predict`` prices standalone operators, and its
CSV has plain dispatch unless a ``kernel`` column says otherwise.

Classes: ``gemm``; ``attention prefill`` and ``attention decode`` (one query a sequence); ``memory`` (every
memory-bound kind pooled) and ``memory <kind>`` per kind (copy, rmsnorm, swiglu, ...).

    python -m perfmodel.kernel_check                  # the default: --engine torch, held-out rows
    python -m perfmodel.kernel_check --engine trtllm  # the H200's TensorRT-LLM tables instead

Another measured part's folder (``--folder``, with ``--arch`` its part) is checked the same way;
``--calibration`` with another part's folder prices its rows with that profile carried there by the transfer
rules (:mod:`perfmodel.transfer`), a backtest of the carry:

    python -m perfmodel.kernel_check --folder h100-sxm --arch h100-sxm                            # its own fit
    python -m perfmodel.kernel_check --folder h100-sxm --arch h100-sxm --calibration calibration/h200  # carried
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FOLDER = "h200"  # under calibration/
ARCH = "h200-sxm"


def _cell(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cases(folder: str | Path | None = None) -> tuple:
    """The folder's rows as its fit split them: (cases, whole-layer rows, launch rows, collective rows)."""
    from .errors import InputError
    from .fit.latency import load_cases
    from .paths import calibration_dir

    d = Path(folder) if folder is not None else calibration_dir() / FOLDER
    if not (d / "measurements.jsonl").is_file():  # an installed package ships profiles, not raw measurements
        raise InputError("no measurements.jsonl here (the raw measurements live in a checkout of the project)",
                         file=str(d))
    # the fit's own split (its holdout share and seed), read as written: only its validation record is needed
    validation = json.loads((d / "profile.json").read_text(encoding="utf-8")).get("validation", {})
    rows = [json.loads(line) for line in (d / "measurements.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return load_cases(rows, float(validation.get("holdout_share", 0.25)), int(validation.get("seed", 0)))


def kernel_rows(folder: str | Path | None = None, split: str = "held_out") -> list[tuple[str, dict, float]]:
    """(class, predict CSV row, measured seconds) for every standalone kernel row of the folder in ``split``
    (``held_out``, ``train`` or ``all``)."""
    from .predict import OP_COLUMNS

    cases = _cases(folder)[0]
    out = []
    for c in cases:
        if not c.standalone or c.kind not in OP_COLUMNS or (split != "all" and c.held_out != (split == "held_out")):
            continue
        if c.kind == "attention":
            if c.params.get("backend", "default") != "default":
                continue  # a forced backend: predict prices plain dispatch
            cls = "attention decode" if c.params["seq_q"] <= 1 else "attention prefill"
        else:
            cls = "gemm" if c.kind == "gemm" else f"memory {c.kind}"
        required, optional = OP_COLUMNS[c.kind]
        row = {"op": c.kind, **{k: _cell(c.params[k]) for k in required + tuple(optional) if c.params.get(k) is not None}}
        out.append((cls, row, c.time_s))
    return out


def kernel_errors(prof=None, *, engine: str = "torch", folder: str | Path | None = None,
                  split: str = "held_out", arch: str = ARCH) -> dict[str, dict]:
    """Per class: ``n``, ``median_abs_error``, ``p90_abs_error`` and ``signed_median`` (predicted / measured - 1)
    of the folder's kernels (``folder`` measured on ``arch``) priced by ``prof`` (None: what ``perfmodel predict
    --arch ARCH --engine ENGINE`` composes)."""
    from .predict import predict_rows
    from .resolve import resolve_hardware, resolve_profile

    hw = resolve_hardware(arch)
    if prof is None:
        prof = resolve_profile(None, hw, engine)
    rows = kernel_rows(folder, split)
    predicted = predict_rows([r for _, r, _ in rows], hw, prof, source=str(folder or FOLDER))
    ratio: dict[str, list[float]] = {}
    for (cls, _, measured), p in zip(rows, predicted):
        r = float(p["time_ms"]) * 1e-3 / measured - 1.0
        ratio.setdefault(cls, []).append(r)
        if cls.startswith("memory "):
            ratio.setdefault("memory", []).append(r)
    order = sorted(ratio, key=lambda k: (not k.startswith("gemm"), not k.startswith("attention"), k != "memory", k))
    return {cls: _stats(ratio[cls]) for cls in order}


def layer_errors(prof, *, folder: str | Path | None = None, arch: str = ARCH) -> dict[str, dict]:
    """Per phase (prefill, decode): the same statistics for the folder's whole decoder layers (never fitted), priced
    by ``prof`` as the fit validates them (:func:`perfmodel.fit.layers.validate_layers`)."""
    from .fit.layers import validate_layers
    from .resolve import resolve_hardware

    priced = validate_layers(_cases(folder)[1], resolve_hardware(arch), prof)[1]
    return {phase: _stats([x["error"] for x in priced if x["phase"] == phase]) for phase in ("prefill", "decode")
            if any(x["phase"] == phase for x in priced)}


def _stats(ratios: list[float]) -> dict:
    """``n``, ``median_abs_error``, ``p90_abs_error`` and ``signed_median`` of predicted / measured - 1 values."""
    r = np.asarray(ratios, dtype=float)
    return {"n": len(r), "median_abs_error": float(np.median(np.abs(r))),
            "p90_abs_error": float(np.percentile(np.abs(r), 90)), "signed_median": float(np.median(r))}


def markdown(errors: dict[str, dict], title: str = "") -> str:
    lines = [f"{title}", ""] if title else []
    lines += ["| class | rows | median abs error | P90 abs error | signed median |", "|---|---|---|---|---|"]
    for cls, e in errors.items():
        lines.append(f"| {cls} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} | "
                     f"{e['signed_median']:+.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from .engines import CHOICES

    p = argparse.ArgumentParser(prog="python -m perfmodel.kernel_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=CHOICES, default="torch", help="as perfmodel predict --engine (default torch)")
    p.add_argument("--calibration", default=None, help="a profile folder or 'none' (default: automatic)")
    p.add_argument("--split", choices=("held_out", "train", "all"), default="held_out")
    p.add_argument("--folder", default=FOLDER, help=f"the measured folder under calibration/ (default {FOLDER})")
    p.add_argument("--arch", default=ARCH, help=f"the part it was measured on (default {ARCH})")
    args = p.parse_args(argv)
    from .errors import InputError
    from .paths import calibration_dir
    from .resolve import resolve_hardware, resolve_profile

    try:
        hw = resolve_hardware(args.arch)
        prof = resolve_profile(args.calibration, hw, args.engine)
        folder = calibration_dir() / args.folder
        errors = kernel_errors(prof, folder=folder, split=args.split, arch=args.arch)
    except InputError as e:  # a bad folder, part or profile: one line, no traceback
        sys.stderr.write(f"error: {e}\n")
        return 2
    sys.stdout.write(markdown(errors, f"{hw.name} standalone kernels of calibration/{args.folder} ({args.split}), "
                                      f"--engine {args.engine}: {prof.label}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
