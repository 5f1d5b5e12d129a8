"""Command line: argument parsing and printing only. Heavy imports happen inside each command."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import InputError

EXIT_INPUT = 2


def _scenario_flags(p: argparse.ArgumentParser, *, serving: bool = True) -> None:
    from .attention_kernels import CHOICES as ATTENTION
    from .engines import CHOICES as ENGINES

    g = p.add_argument_group("scenario")
    if serving:
        g.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
        g.add_argument("--osl", type=int, default=128, help="output tokens per request (default 128)")
        g.add_argument("--batch", default="1", help="concurrent sequences, or 'max' for the largest that fits")
        g.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                       help="how throughput amortises prefill (README: Throughput)")
        g.add_argument("--prefill-chunk", type=int, default=None,
                       help="prefill tokens per step (continuous; default: the engine's)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    g.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    g.add_argument("--ep", type=int, default=1, help="expert-parallel degree (divides --tp x --attention-dp)")
    g.add_argument("--attention-dp", type=int, default=1,
                   help="attention data parallel: this many groups of --tp GPUs run attention on their own "
                        "sequences while the MoE layers spread over all of them (DEP: --tp 1 --attention-dp 8 --ep 8)")
    g.add_argument("--mtp", type=int, default=0,
                   help="speculative decoding: draft tokens a step from the model's multi-token-prediction layer")
    g.add_argument("--mtp-accept", type=float, default=None,
                   help="with --mtp: probability that a draft token is accepted (given the ones before it were)")
    g.add_argument("--moe-imbalance", type=float, default=1.0,
                   help="busiest expert-parallel rank's routed tokens over the mean (default 1: uniform)")
    g.add_argument("--dtype", default="bf16", help="weights and GEMM format: bf16, fp16, fp8, fp4")
    g.add_argument("--kv-dtype", default=None, help="KV-cache format (default: the engine's rule)")
    g.add_argument("--mode", choices=("latency", "sol"), default="latency",
                   help="latency: calibrated model (default); sol: pure roofline")
    g.add_argument("--engine", choices=ENGINES, default="auto" if serving else "torch",
                   help="serving engine preset: kernels, fusions, launch mode, KV format, chunk size and memory "
                        "share (docs/engines.md); default " + ("auto: TensorRT-LLM on NVIDIA parts, vLLM elsewhere"
                                                               if serving else "torch: plain PyTorch"))
    g.add_argument("--attention-kernel", choices=ATTENTION, default=None,
                   help="attention kernel (default: the engine's; auto: what plain PyTorch dispatches to)")
    g.add_argument("--launch", choices=("auto", "graph", "eager"), default=None,
                   help="auto: decode from a CUDA graph, prefill eager; graph or eager: both phases "
                        "(default: the engine's)")
    g.add_argument("--kernels", choices=("fused", "torch"), default=None,
                   help="fused: a serving engine's kernels; torch: the plain PyTorch layer the calibration "
                        "measures (default: the engine's)")
    g.add_argument("--mem-fraction", type=float, default=None,
                   help="share of device memory (vLLM, SGLang) or of free memory (TensorRT-LLM) the engine takes")
    g.add_argument("--overlap", type=_overlap_arg, default=0.0,
                   help="collective overlap: none (default), stream, decomposed, fused (docs/collectives.md), or a "
                        "fixed fraction of collective time hidden under compute")
    g.add_argument("--calibration", default=None,
                   help="profile folder or profile.json; 'none' for documented defaults (default: automatic)")


def _overlap_arg(text: str) -> float | str:
    """--overlap: a number keeps its old meaning (a fixed fraction), anything else is a method name."""
    try:
        return float(text)
    except ValueError:
        return text.strip().lower()


def _scenario(args, batch=None):
    from .scenario import Scenario, parse_batch

    kw = dict(tp=args.tp, pp=args.pp, ep=args.ep, attention_dp=args.attention_dp, moe_imbalance=args.moe_imbalance,
              mtp=args.mtp, mtp_accept=args.mtp_accept, dtype=args.dtype, kv_dtype=args.kv_dtype, mode=args.mode,
              launch=args.launch, overlap=args.overlap, kernels=args.kernels, engine=args.engine,
              attention_kernel=args.attention_kernel, mem_fraction=args.mem_fraction)
    if hasattr(args, "isl"):
        kw.update(isl=args.isl, osl=args.osl, batch=parse_batch(str(args.batch)) if batch is None else batch,
                  batching=args.batching, prefill_chunk=args.prefill_chunk)
    return Scenario(**kw).validated()


def _emit(text: str, out: str | None) -> None:
    if out:
        from .io import write_text_atomic

        write_text_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def cmd_project(args) -> int:
    from .projection import project_resolved
    from .resolve import resolve_hardware, resolve_model, resolve_profile

    model = resolve_model(args.model)
    sc = _scenario(args)
    results = []
    for arch in args.arch:
        hw = resolve_hardware(arch)
        prof = resolve_profile(args.calibration, hw, sc.engine)
        results.append(project_resolved(hw, model, sc, prof))
    usd = _gpu_hour_usd(args)
    if args.format == "json":
        from .serialize import projection_dict

        data = [projection_dict(p, gpu_hour_usd=usd) for p in results]
        _emit(_json(data[0] if len(data) == 1 else data), args.out)
    elif args.format == "csv":
        from .io import csv_dicts_text
        from .serialize import PROJECTION_CSV_FIELDS, projection_csv_row

        _emit(csv_dicts_text(PROJECTION_CSV_FIELDS, [projection_csv_row(p, gpu_hour_usd=usd) for p in results]),
              args.out)
    else:
        from .text import projection_table

        _emit("\n\n".join(projection_table(p, verbose=args.ops, gpu_hour_usd=usd) for p in results) + "\n",
              args.out)
    return 0


def _gpu_hour_usd(args) -> float | None:
    import math

    v = getattr(args, "gpu_hour_usd", None)
    if v is not None and not (math.isfinite(v) and v > 0):
        raise InputError(f"expected a positive price per GPU-hour, got {v}", field="--gpu-hour-usd")
    return v


def cmd_step(args) -> int:
    from .graph import Step, check_layout
    from .projection import evaluate_step
    from .resolve import resolve_hardware, resolve_model, resolve_profile
    from .serialize import step_dict

    model = resolve_model(args.model)
    sc = _scenario(args)
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
        hw = resolve_hardware(arch)
        prof = resolve_profile(args.calibration, hw, sc.engine)
        phase = evaluate_step(model, hw, sc, prof, Step(args.phase, args.batch, seq, context))
        dicts.append(step_dict(hw, model, sc, prof, phase))
    if args.format == "json":
        _emit(_json(dicts[0] if len(dicts) == 1 else dicts), args.out)
    else:
        from .text import step_table

        _emit("\n\n".join(step_table(d) for d in dicts) + "\n", args.out)
    return 0


def _json(data) -> str:
    """JSON text; nothing non-finite may reach it (strict JSON has no NaN or Infinity)."""
    try:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise InputError("a result is not finite: check the spec figures and the calibration profile "
                         "(a value out of any physical range)", field="--format json") from None


def cmd_predict(args) -> int:
    from .predict import predict_rows, read_rows, write_rows
    from .resolve import resolve_hardware, resolve_profile

    hw = resolve_hardware(args.arch)
    prof = resolve_profile(args.calibration, hw)
    fields, rows = read_rows(args.ops)
    out = predict_rows(rows, hw, prof, mode=args.mode, source=args.ops)
    text = write_rows(fields, out, args.out)
    if args.out:
        print(f"wrote {args.out} ({len(out)} rows, calibration: {prof.label})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_list(args) -> int:
    from .text import table

    if args.what == "hardware":
        from .spec import list_specs
        from .units import format_si

        rows = [["spec", "name", "SMs", "bf16 dense", "HBM (visible)", "bandwidth"]]
        for s in list_specs():
            rows.append([s.key, s.name, str(s.sm_count), format_si(s.tensor_flops.get("bf16", 0.0), "FLOP/s"),
                         f"{format_si(s.hbm_bytes, 'B')} ({s.hbm_visible_bytes / 2**30:.1f} GiB)",
                         format_si(s.hbm_bandwidth, "B/s")])
        print("\n".join(table(rows, "llrrrr", indent="")))
    else:
        from .models import list_models

        rows = [["model", "name", "params", "aliases"]]
        for m in list_models():
            rows.append([m.key, m.name, f"{m.param_count() / 1e9:.1f}B", ", ".join(m.aliases[:4])])
        print("\n".join(table(rows, "llrl", indent="")))
    return 0


def cmd_show(args) -> int:
    from .text import show_thing

    print(show_thing(args.name))
    return 0


def cmd_validate(args) -> int:
    from .validate import run_validation, validation_table

    limit = None
    if args.limit is not None:
        try:
            limit = int(args.limit)
        except ValueError:
            limit = 0
        if limit < 1:
            raise InputError(f"expected a positive number of rows, got {args.limit!r}", field="--limit")
    rows = run_validation(args.csv, calibration=args.calibration, mode=args.mode, engine=args.engine,
                          where=args.where, limit=limit)
    if args.format == "json":
        _emit(_json(rows), args.out)
    elif args.format == "csv":
        from .validate import validation_csv

        _emit(validation_csv(rows), args.out)
    else:
        _emit(validation_table(rows, summary_only=args.summary) + "\n", args.out)
    return 0


def cmd_calibrate(args) -> int:
    import math
    from pathlib import Path

    from .calibrate.shapes import FAMILIES

    only = {x.strip() for x in args.only.split(",") if x.strip()} if args.only else None
    if only is not None and (not only or only - set(FAMILIES)):
        raise InputError(f"unknown famil{'ies' if len(only - set(FAMILIES)) > 1 else 'y'} "
                         f"{', '.join(sorted(only - set(FAMILIES))) or '(none given)'}; expected some of "
                         f"{', '.join(FAMILIES)}", field="--only")
    if args.nproc < 1:
        raise InputError(f"expected a positive integer, got {args.nproc}", field="--nproc")
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise InputError(f"expected a positive number of seconds, got {args.time_budget}", field="--time-budget")
    out = Path(args.out or f"calibration/{args.device}")
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", file=str(out), field="--out")
    try:
        import torch
    except ImportError:
        raise InputError("calibration needs PyTorch: pip install '.[calibrate]' (on a machine without a GPU, "
                         "install the CPU build first: pip install torch==2.13.0)", field="calibrate") from None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("no CUDA device is visible to PyTorch (torch.cuda.is_available() is False); "
                         "use --device cpu for the quick suite", field="--device")
    from .calibrate.suite import run_suite

    n = run_suite(args.device, args.suite, out, resume=args.resume, nproc=args.nproc, progress=not args.quiet,
                  only=only, time_budget_s=args.time_budget)
    print(f"{n} rows measured into {out / 'measurements.jsonl'}", file=sys.stderr)
    return 0


def cmd_fit(args) -> int:
    from .calibrate.fit import fit_directory

    report = fit_directory(args.dir, spec=args.arch, holdout=args.holdout, seed=args.seed)
    print(report)
    return 0


def cmd_import(args) -> int:
    from pathlib import Path

    from .imports import aiconfigurator as aic

    src = aic.find_source(args.data)
    if args.list:
        print(f"{aic.PACKAGE} {src.version} at {src.systems}")
        print(f"{'system':<22}{'spec':<16}{'engine':<8}{'version':<12}{'nccl':<9}tables")
        for a in aic.available(src):
            print(f"{a['system']:<22}{a['spec'] or '-':<16}{a['engine']:<8}{a['version'] or '-':<12}"
                  f"{a['nccl'] or '-':<9}{', '.join(sorted(a['tables']))}")
        return 0
    if not args.system or not args.engine:
        raise InputError("give --system and --engine (or --list to see what the package holds)", field="--system")
    out = Path(args.out or f"calibration/{aic.SYSTEMS.get(args.system, args.system)}-{args.engine}")
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", file=str(out), field="--out")
    families = [f.strip() for f in args.families.split(",")] if args.families else list(aic.FAMILIES)
    unknown = sorted(set(families) - set(aic.FAMILIES))
    if unknown:
        raise InputError(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; expected some "
                         f"of {', '.join(aic.FAMILIES)}", field="--families")
    prov = aic.import_system(src, args.system, args.engine, out, version=args.version,
                             rows_per_table=args.rows_per_table, seed=args.seed, families=families)
    print(aic.summary_text(prov), file=sys.stderr)
    print(f"wrote {out}/measurements.jsonl.gz and environment.json", file=sys.stderr)
    if args.fit:
        from .calibrate.fit import fit_directory

        print(fit_directory(out))
    return 0


def cmd_backtest(args) -> int:
    from pathlib import Path

    from .backtest import SUMMARY, backtest, markdown, write_summary
    from .paths import calibration_dir

    root = calibration_dir()
    sources = args.source or [str(root / "h200"), str(root / "h200-sxm-trtllm")]
    targets = args.target or [str(p.parent) for p in sorted(root.glob("*-trtllm/environment.json"))]
    results = []
    for src in sources:
        for tgt in targets:
            if Path(src).resolve() == Path(tgt).resolve():
                continue
            r = backtest(src, tgt)
            if r["source_part"] != r["target_part"]:
                results.append(r)
    if not results:
        raise InputError("no source and target on different parts", field="--target")
    text = markdown(results, families_only=not args.classes)
    if args.write:
        write_summary([r for r in results if r["source_engine"] != "torch"], root / SUMMARY)
        print(f"wrote {root / SUMMARY}", file=sys.stderr)
    _emit(text + "\n", args.out)
    return 0


def cmd_sustained(args) -> int:
    from .sustained import measure, yaml_text

    _emit(yaml_text(measure(args.dir)), None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    ap = argparse.ArgumentParser(prog="perfmodel", description="Project LLM inference on any GPU spec.")
    ap.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("project", help="project a serving scenario: TTFT, TPOT, throughput, memory")
    p.add_argument("--arch", action="append", required=True, help="hardware spec name or path (repeatable)")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    _scenario_flags(p)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--ops", action="store_true", help="list every operator in the table")
    p.add_argument("--gpu-hour-usd", type=float, default=None,
                   help="price of one GPU-hour: adds dollars per million output tokens")
    p.add_argument("--out", help="write to this file (atomically) instead of stdout")
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("step", help="time one forward step (prefill or decode)")
    p.add_argument("--arch", action="append", required=True, help="hardware spec name or path (repeatable)")
    p.add_argument("--model", required=True)
    p.add_argument("--phase", choices=("prefill", "decode"), required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=None, help="new tokens per sequence (prefill; default 1024)")
    p.add_argument("--context", type=int, default=None, help="cached tokens per sequence (decode; default 1024)")
    _scenario_flags(p, serving=False)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--out")
    p.set_defaults(func=cmd_step)

    p = sub.add_parser("predict", help="time standalone operators listed one a row in a CSV file")
    p.add_argument("--arch", required=True)
    p.add_argument("--ops", required=True, help="CSV with an 'op' column (gemm, attention, rmsnorm, swiglu, copy...)")
    p.add_argument("--out", help="CSV to write (default stdout)")
    p.add_argument("--mode", choices=("latency", "sol"), default="latency")
    p.add_argument("--calibration", default=None)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("list", help="list hardware specs or models")
    p.add_argument("what", choices=("hardware", "models"))
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show one hardware spec or model with every figure's source")
    p.add_argument("name")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("validate", help="predicted against published results")
    p.add_argument("--csv", default=None,
                   help="validation table (default workloads/validation/public_validation.csv)")
    p.add_argument("--engine", default="auto",
                   help="engine preset for every row (default: read off each row's source, e.g. TensorRT-LLM)")
    p.add_argument("--calibration", default=None)
    p.add_argument("--mode", choices=("latency", "sol"), default="latency")
    p.add_argument("--where", default=None, metavar="COL=V[|V..][,COL=V..]",
                   help="keep rows whose columns match, e.g. hardware=b200,engine=trtllm (case-insensitive)")
    p.add_argument("--limit", default=None, help="keep the first N rows (after --where)")
    p.add_argument("--summary", action="store_true", help="table format: the summaries without a line per row")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--out")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("calibrate", help="measure microkernels on the attached device (needs torch)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--suite", choices=("quick", "full"), default="quick")
    p.add_argument("--out", help="folder for measurements.jsonl (default calibration/<device>)")
    p.add_argument("--resume", action="store_true", help="carry on a killed run, skipping measured cases")
    p.add_argument("--nproc", type=int, default=1, help="processes for the collective benchmarks (torchrun)")
    p.add_argument("--only", help="comma-separated families, e.g. gemm,copy")
    p.add_argument("--time-budget", type=float, default=None, help="seconds; stop cleanly after this")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("fit", help="fit the latency model to a calibration folder")
    p.add_argument("dir")
    p.add_argument("--arch", default=None, help="spec of the measured part (default: matched by device name)")
    p.add_argument("--holdout", type=float, default=0.25, help="share of shapes held out for validation, in [0, 1)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("import", help="measured kernel tables from another tool, as calibration rows")
    p.add_argument("source", choices=("aiconfigurator",),
                   help="aiconfigurator: NVIDIA's aiconfigurator-core tables (pip install '.[import]')")
    p.add_argument("--system", help="the package's system name, e.g. b200_sxm, gb200, h100_sxm (see --list)")
    p.add_argument("--engine", choices=("trtllm", "vllm", "sglang"), help="whose kernels")
    p.add_argument("--version", default=None, help="engine version (default: the package's current one)")
    p.add_argument("--out", help="calibration folder (default calibration/<spec>-<engine>)")
    p.add_argument("--data", default=None, help="the package's systems folder (default: the installed package)")
    p.add_argument("--families", default=None, help="comma-separated: gemm,attention,comm,moe (default all)")
    p.add_argument("--rows-per-table", type=int, default=3000, help="stratified subsample size per table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit", action="store_true", help="fit the profile right after (perfmodel fit OUT)")
    p.add_argument("--list", action="store_true", help="list systems, engines and versions, and stop")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("backtest", help="carry a profile to other measured parts and compare kernel by kernel")
    p.add_argument("--source", action="append", help="profile folder to carry (repeatable; default h200 and "
                                                     "h200-sxm-trtllm)")
    p.add_argument("--target", action="append", help="measured folder to predict (repeatable; default every "
                                                     "calibration/*-trtllm)")
    p.add_argument("--classes", action="store_true", help="every class (collectives per world size and size, "
                                                          "MoE per routing) instead of families")
    p.add_argument("--write", action="store_true",
                   help="also write calibration/backtest.json (the carry spread of carried projections' bands)")
    p.add_argument("--out", help="write the markdown here instead of stdout")
    p.set_defaults(func=cmd_backtest)

    p = sub.add_parser("sustained", help="a part's sustained ceilings read off a calibration folder (spec YAML)")
    p.add_argument("dir")
    p.set_defaults(func=cmd_sustained)

    _register_outputs(sub)
    return ap


def _register_outputs(sub) -> None:
    """Commands that live in their own packages; each module's ``register`` adds its parsers."""
    import importlib

    for mod in ("perfmodel.outputs.commands", "perfmodel.train.commands", "perfmodel.serve.commands",
                "perfmodel.tune.commands", "perfmodel.trace.commands"):
        try:
            importlib.import_module(mod).register(sub, _scenario_flags, _scenario, _emit)
        except ModuleNotFoundError as e:
            if e.name not in (mod, mod.rsplit('.', 1)[0]):
                raise


def main(argv: list[str] | None = None) -> int:
    import warnings

    # overflow in the cost formulas is caught where it matters (nothing non-finite leaves the tool, one line
    # says why); numpy's own multi-line warnings would only bury that line
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"perfmodel\.")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("perfmodel: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
