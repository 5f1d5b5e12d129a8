"""``perfmodel trace import TRACE...``: a profiler trace in, per-operator residuals out.

Only argparse at import time.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InputError
from .common import emit, json_text


def register(sub) -> None:
    tr = sub.add_parser("trace", help="import profiler traces: per-operator residuals against the model")
    ts = tr.add_subparsers(dest="trace_command", required=True)
    p = ts.add_parser("import", help="map a Kineto trace (.json/.json.gz) or nsys SQLite export to operators")
    p.add_argument("traces", nargs="+", help="trace files; each needs its <name>.sidecar.json (or --sidecar)")
    p.add_argument("--sidecar", default=None, help="the run's description (with a single trace)")
    p.add_argument("--arch", default="h200", help="hardware spec the trace was taken on (default h200)")
    p.add_argument("--calibration", default=None, help="profile folder or 'none' (default: automatic)")
    p.add_argument("--out-dir", default=None, help="write each trace's residuals CSV and SVG into this folder "
                                                    "(default: none written; the table goes to stdout)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (default) or json (the rows and summary of each trace)")
    p.add_argument("--refit", default=None, metavar="PROFILE_JSON",
                   help="fold the mapped rows of all traces into a profile (perfmodel fit's fitter) written here")
    p.set_defaults(func=cmd_import)


def _stem(p: Path) -> str:
    name = p.name
    for suffix in (".json.gz", ".json", ".sqlite"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return p.stem


def cmd_import(args) -> int:
    from ..io import write_files_atomic
    from ..resolve import STANDALONE_ENGINE, setup
    from ..trace.mapping import read_sidecar, residual_rows, sidecar_path
    from ..trace.reader import read_trace
    from ..trace.residuals import cases_from_rows, refit, summary, to_csv, to_svg, to_table
    from .common import check_output_file, progress

    if args.sidecar and len(args.traces) > 1:
        raise InputError("--sidecar describes one trace; give each trace its <name>.sidecar.json", field="--sidecar")
    # every output named and checked (folder exists, not a folder, no name twice) before any trace is read;
    # nothing is written until every trace has been read, mapped and (with --refit) refitted
    outputs: dict[Path, str | None] = {}
    for t in args.traces if args.out_dir else ():  # files only where asked: never beside a (tracked) trace
        path = Path(t)
        out_dir = Path(args.out_dir)
        for suffix in (".residuals.csv", ".residuals.svg"):
            target = out_dir / f"{_stem(path)}{suffix}"
            check_output_file(str(target), "--out-dir")
            if target in outputs:
                raise InputError("two traces would write the same residuals file (same name in one folder); "
                                 "give them different names or --out-dir", file=str(target))
            outputs[target] = None
    if args.refit:
        check_output_file(args.refit, "--refit")
    s = setup(args.arch, calibration=args.calibration, engine=STANDALONE_ENGINE)
    hw, prof = s.hardware, s.profile
    texts, docs, cases, files, mapped = [], [], [], {}, []
    with progress(len(args.traces), "trace import") as tick:
        for t in args.traces:
            path = Path(t)
            side_file = args.sidecar or sidecar_path(path)
            side = read_sidecar(side_file)
            kernels = read_trace(path)
            try:
                rows, annotated = residual_rows(kernels, side, hw, prof)
            except InputError as e:
                if e.field != "model.layers" or e.file:
                    raise
                raise InputError(e.detail, file=str(side_file), field=e.field) from None  # the sidecar is wrong
            mapped.append((side, kernels))
            title = (f"{path.name}: {side.extra.get('model_name', 'model')} {side.phase}, batch {side.batch}, seq "
                     f"{side.seq}, context {side.context}, {side.dtype} on {side.extra.get('device', '?')} "
                     f"against {hw.key} ({prof.label})" + ("" if annotated else "; no module annotations: by family"))
            stem = _stem(path)
            if args.out_dir:
                files[Path(args.out_dir) / f"{stem}.residuals.csv"] = to_csv(rows)
                files[Path(args.out_dir) / f"{stem}.residuals.svg"] = to_svg(rows, title)
            texts.append(to_table(rows, title))
            docs.append({"trace": str(path), "sidecar": {"phase": side.phase, "batch": side.batch, "seq": side.seq,
                                                          "context": side.context, "dtype": side.dtype, **side.extra},
                         "annotated": annotated, "summary": summary(rows),
                         "rows": [{"operator": r.name, "kind": r.kind, "scope": r.scope, "kernels": r.kernels,
                                   "measured_s": r.measured_s, "predicted_s": r.predicted_s, "error": r.error}
                                  for r in rows]})
            cases += cases_from_rows(rows, f"{stem}")
            tick()
    if args.refit:
        fitted = refit(cases, hw, prof)
        fitted = fitted.with_(name=Path(args.refit).stem, fitted=True,
                              description=f"{prof.label} refitted to {len(cases)} operators of {len(args.traces)} "
                                          f"trace(s)",
                              provenance={**prof.provenance, "traces": [str(t) for t in args.traces],
                                          "command": "perfmodel trace import " + " ".join(sys.argv[3:])})
        files[Path(args.refit)] = fitted.to_json() + "\n"
        rows2 = []
        for side, kernels in mapped:
            rows2 += residual_rows(kernels, side, hw, fitted)[0]
        s = summary(rows2)
        texts.append(f"refit: {len(cases)} operators folded into {args.refit}; median |error| after the refit "
                     f"{s['median_abs_error']:.1%}" if s["median_abs_error"] is not None else "refit written")
    write_files_atomic(files)  # all or nothing: a failure on one (a full disk: /dev/full) changes none
    for t in args.traces if args.out_dir else ():
        print(f"wrote {Path(args.out_dir) / (_stem(Path(t)) + '.residuals.csv')} and .svg", file=sys.stderr)
    if args.refit:
        print(f"wrote {args.refit}", file=sys.stderr)
    if args.format == "json":
        emit(json_text(docs[0] if len(docs) == 1 else docs, indent=1), None)
    else:
        emit("\n\n".join(texts) + "\n", None)
    return 0
