"""``perfmodel project``, ``perfmodel step`` and ``perfmodel predict``: a serving scenario, one forward step,
standalone operators. Only argparse at import time; the model loads inside the commands."""
from __future__ import annotations

import sys

from ..errors import InputError
from .common import emit, json_text, scenario_flags, scenario_from_args

MODEL_HELP = "model name, descriptor YAML or config.json"
OUT_HELP = "write to this file (atomically) instead of stdout"


def register(sub) -> None:
    from ..engines import CHOICES as ENGINES

    p = sub.add_parser("project", help="project a serving scenario: TTFT, TPOT, throughput, memory")
    p.add_argument("--arch", action="append", required=True, help="hardware spec name or path (repeatable)")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    scenario_flags(p, images=True)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table (default), json (one object; a list of them with several --arch) or csv (a row "
                        "per --arch)")
    p.add_argument("--ops", action="store_true", help="list every operator in the table")
    p.add_argument("--gpu-hour-usd", type=float, default=None,
                   help="price of one GPU-hour: adds dollars per million output tokens")
    p.add_argument("--out", help=OUT_HELP)
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("step", help="time one forward step (prefill or decode)")
    p.add_argument("--arch", action="append", required=True, help="hardware spec name or path (repeatable)")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--phase", choices=("prefill", "decode"), required=True,
                   help="prefill: --seq new tokens a sequence after --context cached ones (defaults 1024 and 0); "
                        "decode: --seq tokens (default 1) after --context cached ones (default 1024)")
    p.add_argument("--batch", type=int, default=1, help="sequences in the step (default 1)")
    p.add_argument("--seq", type=int, default=None, help="new tokens per sequence (prefill; default 1024)")
    p.add_argument("--context", type=int, default=None, help="cached tokens per sequence (decode; default 1024)")
    scenario_flags(p, serving=False)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (default) or json (one object; a list of them with several --arch)")
    p.add_argument("--out", help=OUT_HELP)
    p.set_defaults(func=cmd_step)

    p = sub.add_parser("predict", help="time standalone operators listed one a row in a CSV file")
    p.add_argument("--arch", required=True, help="hardware spec name or path")
    p.add_argument("--ops", required=True, help="CSV with an 'op' column (gemm, attention, rmsnorm, swiglu, copy...)")
    p.add_argument("--out", help="CSV to write (default stdout)")
    p.add_argument("--mode", choices=("latency", "sol"), default="latency",
                   help="latency: calibrated model (default); sol: pure roofline")
    p.add_argument("--engine", choices=ENGINES, default=STANDALONE_ENGINE,
                   help="whose kernels price the ops: torch (default): the part's own standalone calibration, "
                        "plain PyTorch timed as a microbenchmark times it; trtllm, vllm, sglang: that engine's "
                        "kernel tables (calibration/<part>-<engine>); hf: transformers (as torch); auto: the "
                        "part's default serving engine")
    p.add_argument("--calibration", default=None,
                   help="profile folder or profile.json; 'none' for documented defaults (default: automatic, "
                        "each family from the best evidence for --engine)")
    p.set_defaults(func=cmd_predict)


# The engine a standalone price stands for unless --engine says otherwise: plain PyTorch, as this project's
# calibration suite times kernels (perfmodel.resolve.STANDALONE_ENGINE; repeated here so that the CLI imports
# nothing heavy at start-up)
STANDALONE_ENGINE = "torch"


def cmd_project(args) -> int:
    from ..projection import project_resolved
    from ..resolve import resolve_model, setup

    model = resolve_model(args.model)
    sc = scenario_from_args(args)
    results = []
    for arch in args.arch:
        s = setup(arch, model, sc, args.calibration)
        results.append(project_resolved(s.hardware, s.model, s.scenario, s.profile))
    usd = _gpu_hour_usd(args)
    if args.format == "json":
        from ..serialize import projection_dict

        data = [projection_dict(p, gpu_hour_usd=usd) for p in results]
        emit(json_text(data[0] if len(data) == 1 else data), args.out)
    elif args.format == "csv":
        from ..io import csv_dicts_text
        from ..serialize import PROJECTION_CSV_FIELDS, projection_csv_row

        emit(csv_dicts_text(PROJECTION_CSV_FIELDS, [projection_csv_row(p, gpu_hour_usd=usd) for p in results]),
             args.out)
    else:
        from ..text import projection_table

        emit("\n\n".join(projection_table(p, verbose=args.ops, gpu_hour_usd=usd) for p in results) + "\n",
             args.out)
    return 0


def _gpu_hour_usd(args) -> float | None:
    import math

    v = getattr(args, "gpu_hour_usd", None)
    if v is not None and not (math.isfinite(v) and 0 < v <= MAX_GPU_HOUR_USD):
        raise InputError(f"expected a price per GPU-hour in (0, {MAX_GPU_HOUR_USD:g}] US dollars, got {v:g}",
                         field="--gpu-hour-usd")
    return v


MAX_GPU_HOUR_USD = 1e4  # no GPU rents for more; 1e308 printed a 300-digit cost


def cmd_step(args) -> int:
    from ..graph import Step, check_layout
    from ..projection import evaluate_step
    from ..resolve import resolve_model, setup
    from ..serialize import step_dict

    model = resolve_model(args.model)
    sc = scenario_from_args(args)
    for name in ("batch", "seq", "context"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "context" else 1):
            raise InputError(f"expected a {'non-negative' if name == 'context' else 'positive'} integer, got {v}",
                             field=f"--{name}")
    if args.phase == "prefill":
        seq, context = args.seq or 1024, args.context or 0
    else:
        seq, context = args.seq or 1, args.context if args.context is not None else 1024
    check_layout(model, sc.with_(isl=context + seq, osl=1))
    dicts = []
    for arch in args.arch:
        s = setup(arch, model, sc, args.calibration)
        phase = evaluate_step(model, s.hardware, s.scenario, s.profile, Step(args.phase, args.batch, seq, context))
        dicts.append(step_dict(s.hardware, model, s.scenario, s.profile, phase))
    if args.format == "json":
        emit(json_text(dicts[0] if len(dicts) == 1 else dicts), args.out)
    else:
        from ..text import step_table

        emit("\n\n".join(step_table(d) for d in dicts) + "\n", args.out)
    return 0


def cmd_predict(args) -> int:
    from ..predict import predict_rows, read_rows, write_rows
    from ..resolve import setup

    s = setup(args.arch, calibration=args.calibration, engine=args.engine)
    hw, prof = s.hardware, s.profile
    fields, rows = read_rows(args.ops)
    out = predict_rows(rows, hw, prof, mode=args.mode, source=args.ops)
    text = write_rows(fields, out, args.out)
    if args.out:
        print(f"wrote {args.out} ({len(out)} rows, calibration: {prof.label})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
