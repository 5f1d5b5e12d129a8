"""``perfmodel tune gemm|attention|measure|fit|evaluate``: model-ranked Triton kernel configurations.

Only argparse at import time: torch and Triton load inside ``tune measure`` alone, for start-up time.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from .common import emit, json_text


def register(sub) -> None:
    tune = sub.add_parser("tune", help="rank Triton kernel configurations by the model; measure and evaluate")
    ts = tune.add_subparsers(dest="tune_command", required=True)

    def common(p, fmt=True):
        p.add_argument("--arch", default="h200", help="hardware spec name or path (default h200)")
        p.add_argument("--calibration", default=None, help="profile folder or 'none' (default: automatic)")
        p.add_argument("--constants", default=None,
                       help="tune profile (folder or tune_profile.json) or 'none' for the estimates "
                            "(default: the part's calibration/*/tune_profile.json if one exists)")
        if fmt:
            p.add_argument("--top", type=int, default=8, help="configurations to list (default 8)")
            p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
            p.add_argument("--out", default=None, help="write to this file (atomically) instead of stdout")

    p = ts.add_parser("gemm", help="rank Triton matmul configurations for C[M,N] = A[M,K] @ W[N,K]^T")
    p.add_argument("--m", type=int, required=True, help="rows of A and C (tokens)")
    p.add_argument("--n", type=int, required=True, help="columns of C: rows of W (output features)")
    p.add_argument("--k", type=int, required=True, help="the reduced dimension: columns of A and W (input features)")
    p.add_argument("--dtype", default="bf16", help="bf16, fp16 or fp8 (default bf16)")
    p.add_argument("--grid", choices=("full", "reduced"), default="full",
                   help="configuration grid: full (every knob value) or reduced (the grid the evidence measured)")
    common(p)
    p.set_defaults(func=cmd_gemm)

    p = ts.add_parser("attention", help="rank Triton flash-attention forward configurations")
    p.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    p.add_argument("--heads", type=int, required=True, help="query heads")
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    p.add_argument("--seq-q", type=int, required=True, help="query tokens per sequence")
    p.add_argument("--seq-kv", type=int, default=None, help="key/value tokens per sequence (default: --seq-q)")
    p.add_argument("--head-dim", type=int, default=128, help="channels per head (default 128)")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="causal mask (default; --no-causal: every query sees every key)")
    p.add_argument("--dtype", default="bf16", help="bf16, fp16 or fp8 (default bf16)")
    common(p)
    p.set_defaults(func=cmd_attention)

    p = ts.add_parser("measure", help="time the proposals and the valid space on the attached GPU (torch + Triton)")
    p.add_argument("--out", required=True, help="folder for tune_measurements.jsonl and environment.json")
    p.add_argument("--budget", type=float, default=270.0, help="seconds (default 270)")
    p.add_argument("--top", type=int, default=8, help="model proposals timed per shape (default 8)")
    p.add_argument("--workers", type=int, default=0,
                   help="compile processes (default 0: the cores less one, less two with --overlap-compile)")
    p.add_argument("--shapes", choices=("full", "extended", "tiny"), default="full",
                   help="full: the 38 shapes of the first run (default); extended: those and more; tiny: CPU smoke "
                        "test")
    p.add_argument("--only", default="", help="comma-separated shape names of the set to measure (default: all)")
    p.add_argument("--overlap-compile", action="store_true",
                   help="time while the workers still compile (faster; the host's launches may be delayed)")
    p.add_argument("--proposals-only", action="store_true",
                   help="time the proposals alone, not the whole valid space (no exhaustive best to compare with)")
    common(p, fmt=False)
    p.set_defaults(func=cmd_measure)

    p = ts.add_parser("fit", help="fit the tuning model's constants to measured rows; write DIR/tune_profile.json")
    p.add_argument("dir", help="folder holding tune_measurements.jsonl (and runs in its subfolders)")
    p.add_argument("--holdout", type=float, default=1.0 / 3.0, help="share of whole shapes held out (default 1/3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shape hash that splits and folds (default 0)")
    p.add_argument("--folds", type=int, default=5, help="k of the k-fold cross-validation (default 5)")
    p.add_argument("--out", default=None, help="tune profile path (default DIR/tune_profile.json)")
    p.add_argument("--tol", type=float, default=0.02, help="a proposal within this fraction of the best is a hit")
    p.add_argument("--top", type=int, default=8,
                   help="proposals scored per shape: a hit when one is within --tol of the best (default 8)")
    p.add_argument("--arch", default="h200", help="hardware spec the rows were measured on (default h200)")
    p.add_argument("--calibration", default=None, help="latency profile whose constants seed the estimates")
    p.set_defaults(func=cmd_fit)

    p = ts.add_parser("evaluate", help="the model's top-k against the exhaustive best, from measured rows")
    p.add_argument("dir", help="folder holding tune_measurements.jsonl (or one such file)")
    p.add_argument("--tol", type=float, default=0.02, help="a proposal within this fraction of the best is a hit")
    common(p)
    p.set_defaults(func=cmd_evaluate)


def _resolve(args):
    from ..resolve import STANDALONE_ENGINE, setup

    s = setup(args.arch, calibration=args.calibration, engine=STANDALONE_ENGINE)
    return s.hardware, s.profile


def _constants(args, hw, prof):
    from ..tune.constants import resolve_constants

    return resolve_constants(hw, prof, getattr(args, "constants", None))


def _top(args) -> int:
    if args.top < 1:
        raise InputError(f"expected a positive integer, got {args.top}", field="--top")
    return args.top


def _show(ranking, args) -> int:
    from ..tune.rank import ranking_dict, ranking_table

    top = _top(args)
    if args.format == "json":
        emit(json_text(ranking_dict(ranking, top), indent=1), args.out)
    else:
        emit(ranking_table(ranking, top) + "\n", args.out)
    return 0


# Largest shape a ranking takes: a dimension of 16M (tokens, features) and 4096 heads of 1024 channels are past
# any model; a query of 10^8 tokens ran for over a minute to rank one kernel
MAX_DIM = 1 << 24
MAX_HEADS = 4096
MAX_HEAD_DIM = 1024


def _bounded(args, limits: dict[str, int]) -> None:
    """Every shape flag given a whole number in [1, its limit], checked before anything is ranked."""
    for attr, top in limits.items():
        v = getattr(args, attr, None)
        if v is not None and not 1 <= v <= top:
            raise InputError(f"expected a whole number from 1 to {top}, got {v}", field="--" + attr.replace("_", "-"))


def cmd_gemm(args) -> int:
    from ..tune.rank import rank_gemm

    _bounded(args, {"m": MAX_DIM, "n": MAX_DIM, "k": MAX_DIM})
    hw, prof = _resolve(args)
    consts, source = _constants(args, hw, prof)
    return _show(rank_gemm(hw, prof, args.m, args.n, args.k, args.dtype, args.grid, consts, source), args)


def cmd_attention(args) -> int:
    from ..tune.rank import rank_attention

    _bounded(args, {"batch": MAX_DIM, "heads": MAX_HEADS, "kv_heads": MAX_HEADS, "seq_q": MAX_DIM,
                    "seq_kv": MAX_DIM, "head_dim": MAX_HEAD_DIM})
    hw, prof = _resolve(args)
    consts, source = _constants(args, hw, prof)
    kv = args.kv_heads if args.kv_heads is not None else args.heads
    skv = args.seq_kv if args.seq_kv is not None else args.seq_q
    return _show(rank_attention(hw, prof, args.batch, args.heads, kv, args.seq_q, skv, args.head_dim, args.causal,
                                args.dtype, consts, source), args)


def cmd_measure(args) -> int:
    try:
        import torch  # noqa: F401  (here, not at the top: for start-up time)
    except ImportError:
        raise InputError("measuring needs PyTorch and Triton on a GPU", field="tune measure") from None
    from pathlib import Path

    from ..tune.measure import run

    if args.budget <= 0:
        raise InputError(f"expected a positive number of seconds, got {args.budget}", field="--budget")
    run(Path(args.out), args.budget, top=args.top, workers=args.workers, shapes=args.shapes, arch=args.arch,
        calibration=args.calibration, exhaustive=not args.proposals_only, compile_first=not args.overlap_compile,
        only=tuple(x for x in args.only.split(",") if x), log=lambda s: print(s, file=sys.stderr, flush=True))
    return 0


def _tol(args) -> float:
    if not 0 < args.tol < 1:
        raise InputError(f"expected a fraction between 0 and 1, got {args.tol}", field="--tol")
    return args.tol


def cmd_fit(args) -> int:
    from pathlib import Path

    from ..tune.constants import TUNE_PROFILE, save_tune_profile
    from ..tune.fit import fit_directory, fit_text

    tol, top = _tol(args), _top(args)
    hw, prof = _resolve(args)
    if not Path(args.dir).is_dir():
        raise InputError("expected a folder of tuning measurements", file=args.dir)
    from .common import progress

    with progress(None, "tune fit"):
        tp, _ = fit_directory(args.dir, hw, prof, holdout=args.holdout, seed=args.seed, folds=args.folds, top=top,
                              tol=tol, log=lambda s: print(s, file=sys.stderr, flush=True))
    out = Path(args.out) if args.out else Path(args.dir) / TUNE_PROFILE
    save_tune_profile(tp, out)
    print(fit_text(tp))
    print(f"wrote {out}")
    return 0


def cmd_evaluate(args) -> int:
    from ..tune.evaluate import evaluate_directory, evaluation_table, to_json

    tol, top = _tol(args), _top(args)
    hw, prof = _resolve(args)
    tp = None
    if args.constants is not None and str(args.constants).lower() != "none":
        from ..tune.constants import load_tune_profile

        tp = load_tune_profile(args.constants)
    from .common import progress

    with progress(None, "tune evaluate"):
        result = evaluate_directory(args.dir, hw, prof, top=top, tol=tol, tune_profile=tp,
                                    estimates=args.constants is not None and str(args.constants).lower() == "none")
    emit(to_json(result) if args.format == "json" else evaluation_table(result) + "\n", args.out)
    return 0
