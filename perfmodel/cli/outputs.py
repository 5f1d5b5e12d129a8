"""``perfmodel report``, ``perfmodel export`` and ``perfmodel sweep``: files for people who do not run the tool.

Only argparse at import time: jinja2, openpyxl and numpy load inside the command functions, for start-up time.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InputError
from .common import check_output_file, scenario_flags, scenario_from_args


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report: summary, hardware, charts, sensitivity")
    p.add_argument("--arch", action="append", required=True, metavar="NAME[:tp=N[,pp=N][,ep=N]]",
                   help="hardware spec name or path (repeatable), optionally with its own parallelism, "
                        "e.g. h100-sxm:tp=2")
    p.add_argument("--baseline", default=None, metavar="NAME[:tp=N,...]",
                   help="hardware the others are compared against (shown first)")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    scenario_flags(p)
    # without --tp (and without a part's own tp=), each part runs at the smallest TP that fits
    p.set_defaults(tp=None)
    p.add_argument("--out", default=None, help="HTML file to write (default report.html, never replaced "
                                               "without --force)")
    p.add_argument("--force", action="store_true", help="replace the default report.html if it exists")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="what-if workbook (xlsx, live formulas) or flat CSV tables")
    p.add_argument("--arch", action="append", required=True,
                   help="hardware spec (repeatable: one file per part, suffixed with the spec key)")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    scenario_flags(p)
    p.add_argument("--format", choices=("xlsx", "csv"), default="xlsx",
                   help="xlsx: a workbook whose numbers are live formulas (default); csv: flat tables (operators, "
                        "summary, inputs)")
    p.add_argument("--vary", action="append", default=[], metavar="FIELD=RANGE",
                   help="grid for the Sweep sheet, as for `perfmodel sweep` (default: batch 1, 2, 4, ... max)")
    p.add_argument("--out", required=True,
                   help="xlsx file; for csv a prefix (PREFIX-ops.csv, -summary.csv, -inputs.csv) or a folder")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("sweep", help="evaluate a grid of hardware figures and scenario values (vectorised)")
    p.add_argument("--arch", action="append", required=True,
                   help="hardware spec name or path; repeat it to sweep several parts (an arch column)")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    scenario_flags(p)
    p.add_argument("--vary", action="append", required=True, metavar="FIELD=RANGE",
                   help="FIELD=START:STOP:COUNT (units allowed: 4TB/s:12TB/s:9) or FIELD=V1,V2,... "
                        "(batch accepts 'max'); repeatable")
    p.add_argument("--out", default=None, help="sweep.csv or sweep.xlsx (default: CSV on stdout)")
    p.add_argument("--plot", default=None, help="SVG chart: the metric against the first --vary, a line per "
                                                "value of the second")
    p.add_argument("--metric", default="throughput_tok_s_per_gpu",
                   help="metric to plot: ttft_ms, tpot_ms, e2e_ms, throughput_tok_s, throughput_tok_s_per_gpu")
    p.set_defaults(func=cmd_sweep)


def _argv() -> list[str]:
    return list(sys.argv[1:])


def _done(path, extra: str = "") -> None:
    print(f"wrote {path}{extra}", file=sys.stderr)


DEFAULT_REPORT = "report.html"


def cmd_report(args) -> int:
    from ..outputs.common import write_output
    from ..outputs.report import render_report

    auto_tp = args.tp is None
    if auto_tp:
        args.tp = 1  # the base scenario; each part's TP is chosen by render_report
    sc = scenario_from_args(args)
    out = args.out if args.out is not None else DEFAULT_REPORT
    if args.out is None and not args.force and Path(out).exists():
        raise InputError(f"{out} exists; give --out PATH, or --force to replace it", field="--out")
    check_output_file(out, "--out")
    html = render_report(args.arch, args.model, sc, baseline=args.baseline, calibration=args.calibration,
                         argv=_argv(), auto_tp=auto_tp)
    write_output(out, html, overwrite=args.out is not None or args.force)
    _done(out)
    return 0


def _setup(args, arch, sc):
    from ..resolve import setup

    return setup(arch, args.model, sc, args.calibration, getattr(args, "engine", None))


def _out_for(out: str, key: str, several: bool, suffix: str) -> Path:
    p = Path(out)
    if not several:
        return p
    stem = p.name[: -len(suffix)] if p.name.endswith(suffix) else p.name
    return p.with_name(f"{stem}-{key}{suffix}")


def cmd_export(args) -> int:
    """Every file of every part is built first, then all are written together: all or nothing."""
    from ..outputs.common import write_outputs
    from ..outputs.sweep import check_grid, parse_vary, run_sweep

    sc = scenario_from_args(args)
    axes = [parse_vary(v) for v in args.vary]
    check_grid(axes, parts=len(args.arch))
    several = len(args.arch) > 1
    files: dict[Path, bytes | str] = {}
    for arch in args.arch:
        s = _setup(args, arch, sc)
        hw, model, prof = s.hardware, s.model, s.profile
        if args.format == "xlsx":
            from ..outputs.workbook import workbook_bytes

            sweep = run_sweep(hw, model, s.asked, prof, axes) if axes else None
            files[_out_for(args.out, hw.key, several, ".xlsx")] = workbook_bytes(hw, model, s.scenario, prof,
                                                                                sweep=sweep, argv=_argv())
        else:
            from ..outputs.workbook import csv_tables

            tables = csv_tables(hw, model, s.scenario, prof)
            if axes:
                from ..outputs.sweep import sweep_csv

                tables["sweep"] = sweep_csv(run_sweep(hw, model, s.asked, prof, axes))
            base = Path(args.out)
            if base.is_dir() or args.out.endswith(("/", "\\")):
                prefix = base / (hw.key if several else "perfmodel")
            else:
                name = base.name[:-4] if base.name.endswith(".csv") else base.name
                prefix = base.with_name(f"{name}-{hw.key}" if several else name)
            for suffix, text in tables.items():
                files[prefix.with_name(f"{prefix.name}-{suffix}.csv")] = text
    write_outputs(files)
    for path in files:
        _done(path)
    return 0


def cmd_sweep(args) -> int:
    import time

    from ..outputs.common import write_outputs
    from ..outputs.sweep import METRICS, check_grid, combine, parse_vary, run_sweep, sweep_csv, sweep_svg, sweep_xlsx

    if args.metric not in METRICS:
        raise InputError(f"expected one of {', '.join(METRICS)}, got {args.metric!r}", field="--metric")
    check_output_file(args.out, "--out", (".csv", ".xlsx"))  # CSV or a workbook: nothing else under another name
    check_output_file(args.plot, "--plot", (".svg",))
    axes = [parse_vary(v) for v in args.vary]
    check_grid(axes, parts=len(args.arch))
    sc = scenario_from_args(args)
    t0 = time.perf_counter()
    results = []
    for arch in args.arch:
        s = _setup(args, arch, sc)
        results.append((s.hardware.key, run_sweep(s.hardware, s.model, s.asked, s.profile, axes)))
    keys = [k for k, _ in results]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise InputError(f"{', '.join(dup)} given twice", field="--arch")
    res = results[0][1] if len(results) == 1 else combine(results)
    dt = time.perf_counter() - t0
    files: dict[str, bytes | str] = {}
    if args.out:
        files[args.out] = sweep_xlsx(res) if args.out.endswith(".xlsx") else sweep_csv(res)
    if args.plot:
        files[args.plot] = sweep_svg(res, args.metric)
    if files:
        write_outputs(files)
    if args.out:
        _done(args.out, f" ({len(res)} points in {dt:.2f} s)")
    else:
        sys.stdout.write(sweep_csv(res))
    if args.plot:
        _done(args.plot)
    return 0
