"""``perfmodel validate``: predicted against published results. Only argparse at import time."""
from __future__ import annotations

from ..errors import InputError
from .common import emit, json_text


def register(sub) -> None:
    from ..scenario import CLOSED_LOOP_STARTS, SCHEDULES

    p = sub.add_parser("validate", help="predicted against published results")
    p.add_argument("--csv", default=None,
                   help="validation table (default workloads/validation/public_validation.csv)")
    p.add_argument("--engine", default="auto",
                   help="engine preset for every row (default: read off each row's source, e.g. TensorRT-LLM)")
    p.add_argument("--calibration", default=None,
                   help="profile folder or profile.json; 'none' for documented defaults (default: automatic)")
    p.add_argument("--mode", choices=("latency", "sol"), default="latency",
                   help="latency: calibrated model (default); sol: pure roofline")
    p.add_argument("--where", default=None, metavar="COL=V[|V..][,COL=V..]",
                   help="keep rows whose columns match, e.g. hardware=b200,engine=trtllm (case-insensitive)")
    p.add_argument("--limit", default=None, help="keep the first N rows (after --where)")
    tables = p.add_mutually_exclusive_group()
    tables.add_argument("--release-tables", action="store_const", const=True, default=None,
                        help="price each row's MoE layers with the tables of the engine release it records (its "
                             "engine_version) wherever tables of that release were imported; by default only where "
                             "they time the same kernels as the engine folder's own (docs/engines.md)")
    tables.add_argument("--no-release-tables", dest="release_tables", action="store_const", const=False,
                        help="price every row with the engine folder's own tables")
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="the serving simulation's schedule for every aggregated closed-loop row (docs/serving.md, "
                        "Schedules; default: each engine's preset)")
    p.add_argument("--closed-loop-start", choices=CLOSED_LOOP_STARTS, default="burst",
                   help="how each closed-loop row's first C requests start: burst (default: all at once, lock-step "
                        "waves) or spread (the desynchronized steady state; docs/serving.md, Closed-loop "
                        "concurrency)")
    p.add_argument("--summary", action="store_true", help="table format: the summaries without a line per row")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table (default: a line per row and the summaries), json or csv (a record per row)")
    p.add_argument("--out", help="write to this file (atomically) instead of stdout")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args) -> int:
    from ..validate import run_validation, validation_table

    limit = None
    if args.limit is not None:
        try:
            limit = int(args.limit)
        except ValueError:
            limit = 0
        if limit < 1:
            raise InputError(f"expected a positive number of rows, got {args.limit!r}", field="--limit")
    from .common import progress

    with progress(None, "validate"):
        rows = run_validation(args.csv, calibration=args.calibration, mode=args.mode, engine=args.engine,
                              where=args.where, limit=limit, release_tables=args.release_tables,
                              schedule=args.schedule, closed_loop_start=args.closed_loop_start)
    if args.format == "json":
        emit(json_text(rows), args.out)
    elif args.format == "csv":
        from ..validate import validation_csv

        emit(validation_csv(rows), args.out)
    else:
        emit(validation_table(rows, summary_only=args.summary) + "\n", args.out)
    return 0
