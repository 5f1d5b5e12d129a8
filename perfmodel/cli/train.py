"""``perfmodel train``: project a training step (or ``--search`` the layouts of a GPU count).

Only argparse at import time; the model loads inside the command, for start-up time.
"""
from __future__ import annotations

import os
import sys

from ..errors import InputError
from .common import check_output_file, json_text


def register(sub) -> None:
    p = sub.add_parser("train", help="project a training step: step time, tokens/s, TFLOP/s and MFU, memory",
                       description="Project one optimizer step of LLM training on a parallel layout "
                                   "(docs/training.md has the definitions).")
    p.add_argument("--arch", required=True, help="hardware spec name or path")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    g = p.add_argument_group("layout")
    g.add_argument("--gpus", type=int, required=True, help="GPUs in the job")
    g.add_argument("--tp", type=int, default=1, help="tensor parallel (default 1)")
    g.add_argument("--pp", type=int, default=1, help="pipeline parallel (default 1)")
    g.add_argument("--cp", type=int, default=1, help="context parallel (default 1)")
    g.add_argument("--ep", type=int, default=1, help="expert parallel, carved from dp x cp (MoE models)")
    g.add_argument("--dp", type=int, default=None, help="data parallel (default gpus / (tp x pp x cp))")
    g = p.add_argument_group("batch")
    g.add_argument("--global-batch", type=int, required=True, help="sequences per optimizer step")
    g.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    g.add_argument("--seq", type=int, required=True, help="tokens per sequence")
    g = p.add_argument_group("training")
    g.add_argument("--schedule", default=None, help="1f1b (default), interleaved, zero-bubble or dualpipe")
    g.add_argument("--interleave", type=int, default=None, help="model chunks per rank (interleaved; default 2)")
    g.add_argument("--recompute", default="none",
                   help="none (default), selective, full, or auto: the least of them whose memory fits")
    g.add_argument("--sequence-parallel", action="store_true", help="split norms and dropout over the TP ranks")
    g.add_argument("--zero", type=int, default=1, help="ZeRO stage 0, 1 (default: distributed optimizer), 2 or 3")
    g.add_argument("--fsdp", action="store_true",
                   help="fully sharded data parallel (Megatron-Bridge / PyTorch FSDP): weights, gradients and "
                        "optimizer states sharded, each layer's weights all-gathered before its forward and "
                        "backward and its gradients reduce-scattered: ZeRO stage 3")
    g.add_argument("--dtype", default="bf16", help="GEMM format: bf16 (default), fp16, fp8 or fp4 (NVFP4, Blackwell)")
    g.add_argument("--fp8-recipe", default="delayed",
                   help="fp8 scaling: delayed (default), tensorwise (current scaling), block (1x128/128x128) or mxfp8")
    g.add_argument("--optimizer", default="adamw", help="adamw (default) or sgd (with momentum)")
    g.add_argument("--grad-dtype", default="fp32", help="main gradients: fp32 (default), bf16 or fp16")
    g.add_argument("--attention", default="flash", help="flash (default) or unfused (scores in HBM)")
    g.add_argument("--attention-kernel", default="auto",
                   help="fused attention kernel: auto (PyTorch's dispatch on the part, default), flash, cudnn, fa3, ...")
    g.add_argument("--dropout", action="store_true", help="hidden and attention dropout (GPT-era training)")
    g.add_argument("--kernels", default="fused", help="fused (Megatron/TransformerEngine, default) or torch")
    g.add_argument("--no-dp-overlap", action="store_true", help="gradient reduce after the backward, exposed")
    g.add_argument("--tp-overlap", type=float, default=0.0, help="share of TP collectives hidden (default 0)")
    g.add_argument("--moe-a2a-overlap", choices=("on", "off"), default=None,
                   help="expert-parallel all-to-all hidden under another micro-batch's compute (DualPipe; "
                        "Megatron's --overlap-moe-expert-parallel-comm); default: on with --schedule dualpipe")
    g.add_argument("--moe-imbalance", type=float, default=1.0,
                   help="the busiest expert-parallel rank's routed tokens over the mean (default 1: uniform)")
    g.add_argument("--moe-dispatcher", default="auto",
                   help="expert-parallel token dispatcher: auto (what Megatron-Bridge's recipe for the model runs on "
                        "the part; default), alltoall (Megatron-Core's, a copy per routed pair), deepep (its flex "
                        "dispatcher with DeepEP: a token once per rank, once per remote node) or hybridep (the same "
                        "with HybridEP, priced at the NVLink all-to-all's rate inside a domain)")
    g.add_argument("--mtp-layers", type=int, default=None,
                   help="multi-token-prediction modules trained on the last stage (default: the model's own, "
                        "DeepSeek-V3's 1; 0 to train without)")
    g.add_argument("--mode", default="latency", help="latency (calibrated, default) or sol (roofline)")
    g.add_argument("--calibration", default=None,
                   help="profile folder or profile.json; 'none' for documented defaults (default: automatic)")
    o = p.add_argument_group("output")
    o.add_argument("--search", action="store_true", help="list the fastest layouts of --gpus that fit")
    o.add_argument("--top", type=int, default=10, help="layouts --search lists (default 10)")
    o.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table (default), json (the fields docs/training.md lists) or csv (a row per layout)")
    o.add_argument("--ops", action="store_true", help="list every operator in the table")
    o.add_argument("--out", default=None, help="write to this file (atomically) instead of stdout")
    o.add_argument("--report", default=None, metavar="FILE.html", help="also write a self-contained HTML report")
    o.add_argument("--export", default=None, metavar="FILE.xlsx|FILE.csv",
                   help="also write a workbook (xlsx) or CSV tables (FILE.csv and FILE-ops.csv)")
    p.set_defaults(func=cmd_train)


def train_scenario(args):
    """The :class:`~perfmodel.train.scenario.TrainScenario` of the flags (not yet validated)."""
    from ..train.scenario import TrainScenario

    schedule = args.schedule or "1f1b"
    interleave = args.interleave if args.interleave is not None else (2 if schedule == "interleaved" else 1)
    return TrainScenario(
        gpus=args.gpus, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, dp=args.dp,
        global_batch=args.global_batch, micro_batch=args.micro_batch, seq=args.seq, schedule=schedule,
        interleave=interleave, recompute=args.recompute, sequence_parallel=args.sequence_parallel, zero=3 if args.fsdp else args.zero,
        dtype=args.dtype, fp8_recipe=args.fp8_recipe, optimizer=args.optimizer, grad_dtype=args.grad_dtype, attention=args.attention,
        attention_kernel=args.attention_kernel, dropout=args.dropout, kernels=args.kernels, dp_overlap=not args.no_dp_overlap, tp_overlap=args.tp_overlap,
        moe_a2a_overlap=None if args.moe_a2a_overlap is None else args.moe_a2a_overlap == "on",
        moe_imbalance=args.moe_imbalance, moe_dispatcher=args.moe_dispatcher, mtp_layers=args.mtp_layers,
        mode=args.mode)


def cmd_train(args) -> int:
    from ..resolve import STANDALONE_ENGINE, setup

    _check_outputs(args)  # every output name first, then the projection, then the writes
    # training runs plain PyTorch's kernels (its scenario is its own: perfmodel.train)
    s = setup(args.arch, args.model, calibration=args.calibration, engine=STANDALONE_ENGINE)
    hw, model, prof = s.hardware, s.model, s.profile
    ts = train_scenario(args)
    from ..train import training_profile

    prof = training_profile(args.calibration, hw, ts, model, base=prof)  # DeepEP's kernels, where it may run them
    if args.search:
        return _search(args, hw, model, ts, prof)
    from ..train.project import project_training
    from ..train.serialize import CSV_FIELDS, csv_row, train_dict, train_table

    proj = project_training(hw, model, ts.validated(model), prof)
    if args.format == "json":
        text = json_text(train_dict(proj))
    elif args.format == "csv":
        text = _csv([csv_row(proj)], CSV_FIELDS)
    else:
        text = train_table(proj, verbose=args.ops) + "\n"
    files = {}
    if args.report:
        from ..train.report import render_train_report

        files[args.report] = render_train_report(proj, argv=list(sys.argv[1:]))
    if args.export:
        files.update(_export_files(args.export, proj))
    _write_all(args, text, files)
    return 0


REPORT_SUFFIXES = (".html", ".htm")
EXPORT_SUFFIXES = (".xlsx", ".csv")


def _check_outputs(args) -> None:
    """--out, --report and --export (and the -ops.csv beside a CSV export) checked before anything is computed:
    the extensions, the folders, no name twice."""
    check_output_file(args.out, "--out")
    check_output_file(args.report, "--report", REPORT_SUFFIXES)
    check_output_file(args.export, "--export", EXPORT_SUFFIXES)
    names = [(f, p) for f, p in (("--out", args.out), ("--report", args.report), ("--export", args.export),
                                 ("--export", _ops_csv_name(args.export))) if p]
    seen: dict = {}
    for flag, p in names:
        key = os.path.abspath(p)
        if key in seen:
            raise InputError(f"given twice: {seen[key]} and {flag} name the same file", file=p, field=flag)
        seen[key] = flag


def _ops_csv_name(export: str | None) -> str | None:
    from pathlib import Path

    if not export or Path(export).suffix.lower() != ".csv":
        return None
    p = Path(export)
    return str(p.with_name(p.stem + "-ops.csv"))


def _write_all(args, text: str, files: dict) -> None:
    """The command's files, all or nothing, then its text (to --out among them, or stdout)."""
    from ..io import write_files_atomic

    if args.out:
        files = {args.out: text, **files}
    if files:
        write_files_atomic(files)
        for path in files:
            print(f"wrote {path}", file=sys.stderr)
    if not args.out:
        sys.stdout.write(text)


def _search(args, hw, model, ts, prof) -> int:
    from ..train.search import search
    from ..train.serialize import CSV_FIELDS, csv_row, search_table, train_dict

    if args.top < 1:
        raise InputError(f"expected a positive integer, got {args.top}", field="--top")
    for name in ("gpus", "global_batch", "seq"):
        v = getattr(args, name)
        if v < 1:
            raise InputError(f"expected a positive integer, got {v}", field=f"--{name.replace('_', '-')}")
    ts.with_(tp=1, pp=1, cp=1, ep=1, dp=None, schedule="1f1b", interleave=1, sequence_parallel=False,
             micro_batch=1, global_batch=ts.gpus).validated()  # the remaining flags, checked once
    schedules = None
    if args.schedule and args.schedule != "1f1b":
        schedules = [(args.schedule, ts.interleave)]
    from .common import progress

    with progress(None, f"train --search: layouts of {ts.gpus} GPUs"):
        results, considered = search(hw, model, ts, prof, top=args.top, schedules=schedules)
    if args.format == "json":
        text = json_text({"considered": considered, "results": [
            {k: v for k, v in train_dict(p).items() if k != "ops"} for p in results]})
    elif args.format == "csv":
        text = _csv([csv_row(p) for p in results], CSV_FIELDS)
    else:
        text = search_table(results, ts.gpus, considered) + "\n"
    files = {}
    if (args.report or args.export) and results:
        if args.report:
            from ..train.report import render_train_report

            files[args.report] = render_train_report(results[0], argv=list(sys.argv[1:]), alternatives=results)
        if args.export:
            files.update(_export_files(args.export, results[0]))
    _write_all(args, text, files)
    return 0


def _csv(rows: list[dict], fields) -> str:
    from ..io import csv_dicts_text

    return csv_dicts_text(list(fields), rows)


def _export_files(path: str, proj) -> dict:
    """{file name: bytes} of ``--export`` (a workbook, or a summary CSV and an -ops.csv beside it)."""
    from pathlib import Path

    from ..train.export import ops_csv, summary_csv, workbook_bytes

    p = Path(path)
    if p.suffix.lower() == ".xlsx":
        return {path: workbook_bytes(proj, argv=list(sys.argv[1:]))}
    if p.suffix.lower() == ".csv":
        return {path: summary_csv(proj), _ops_csv_name(path): ops_csv(proj)}
    raise InputError(f"expected a .xlsx or .csv file name, got {path!r}", field="--export")
