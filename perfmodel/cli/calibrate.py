"""``perfmodel calibrate``, ``fit``, ``import``, ``backtest`` and ``sustained``: measuring kernels, fitting the
latency model to them, importing other tools' tables, and checking how a profile carries to other parts.

Only argparse at import time: torch loads inside ``calibrate`` alone, for start-up time.
"""
from __future__ import annotations

import sys

from ..errors import InputError
from .common import emit


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure microkernels on the attached device (needs torch)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda: the attached GPU (default); cpu: the CPU, to try the suite end to end (a CPU "
                        "calibration cannot be fitted: there is no CPU hardware spec for the model to fit)")
    p.add_argument("--suite", choices=("quick", "full"), default="quick",
                   help="quick: a few shapes a family (default; a minute on the CPU); full: the shapes the fit "
                        "needs (minutes on an H200)")
    p.add_argument("--out", help="folder for measurements.jsonl (default calibration/<device>)")
    p.add_argument("--resume", action="store_true", help="carry on a killed run, skipping measured cases")
    p.add_argument("--nproc", type=int, default=1, help="processes for the collective benchmarks (torchrun)")
    p.add_argument("--only", help="comma-separated families, e.g. gemm,copy; hf: transformers generate() and its "
                   "host costs (needs transformers), which --engine hf reads")
    p.add_argument("--time-budget", type=float, default=None, help="seconds; stop cleanly after this")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("fit", help="fit the latency model to a calibration folder")
    p.add_argument("dir", help="calibration folder holding measurements.jsonl (or .jsonl.gz); profile.json is "
                               "written there")
    p.add_argument("--arch", default=None, help="spec of the measured part (default: matched by device name)")
    p.add_argument("--holdout", type=float, default=0.25, help="share of shapes held out for validation, in [0, 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split (default 0)")
    p.add_argument("--only", default=None, choices=("deepep",),
                   help="fit this family alone into the folder's existing profile.json (deepep: DeepEP's "
                        "low-latency kernels from an imported wide-EP table), leaving the rest as fitted")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("import", help="measured kernel tables from another tool, as calibration rows")
    p.add_argument("source", choices=("aiconfigurator",),
                   help="aiconfigurator: NVIDIA's aiconfigurator-core tables (pip install '.[import]')")
    p.add_argument("--system", help="the package's system name, e.g. b200_sxm, gb200, h100_sxm (see --list)")
    p.add_argument("--engine", choices=("trtllm", "vllm", "sglang"), help="whose kernels")
    p.add_argument("--version", default=None, help="engine version (default: the package's current one)")
    p.add_argument("--out", help="calibration folder to write (required; the shipped ones are "
                                 "calibration/<spec>-<engine>)")
    p.add_argument("--data", default=None, help="the package's systems folder (default: the installed package)")
    p.add_argument("--families", default=None, help="comma-separated: gemm,attention,comm,moe (default all)")
    p.add_argument("--rows-per-table", type=int, default=3000, help="stratified subsample size per table")
    p.add_argument("--seed", type=int, default=0, help="seed of the stratified subsample (default 0)")
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
    p.add_argument("--summary", default=None, metavar="JSON",
                   help="also write the summary (the carry spread of carried projections' bands) to this file; the "
                        "shipped one, which projections read, is calibration/backtest.json")
    p.add_argument("--out", help="write the markdown here instead of stdout")
    p.set_defaults(func=cmd_backtest)

    p = sub.add_parser("sustained", help="a part's sustained ceilings read off a calibration folder (spec YAML)")
    p.add_argument("dir", help="calibration folder: its measurements (and profile.json when fitted)")
    p.set_defaults(func=cmd_sustained)


HF_FAMILY = "hf"  # --only hf: transformers' generate() and the host costs (perfmodel.measure.hf_generate)


def cmd_calibrate(args) -> int:
    import math
    from pathlib import Path

    from ..measure.shapes import FAMILIES

    only = {x.strip() for x in args.only.split(",") if x.strip()} if args.only else None
    known = set(FAMILIES) | {HF_FAMILY}
    if only is not None and (not only or only - known):
        raise InputError(f"unknown famil{'ies' if len(only - known) > 1 else 'y'} "
                         f"{', '.join(sorted(only - known)) or '(none given)'}; expected some of "
                         f"{', '.join((*FAMILIES, HF_FAMILY))}", field="--only")
    if args.nproc < 1:
        raise InputError(f"expected a positive integer, got {args.nproc}", field="--nproc")
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise InputError(f"expected a positive number of seconds, got {args.time_budget}", field="--time-budget")
    out = Path(args.out or f"calibration/{args.device}")
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", file=str(out), field="--out")
    try:
        import torch  # here, not at the top: for start-up time
    except ImportError:
        raise InputError("calibration needs PyTorch: pip install '.[calibrate]' (on a machine without a GPU, "
                         "install the CPU build first: pip install torch==2.13.0)", field="calibrate") from None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("no CUDA device is visible to PyTorch (torch.cuda.is_available() is False); "
                         "use --device cpu for the quick suite", field="--device")
    from ..measure.suite import run_suite

    if only is None or only - {HF_FAMILY}:
        n = run_suite(args.device, args.suite, out, resume=args.resume, nproc=args.nproc, progress=not args.quiet,
                      only=None if only is None else only - {HF_FAMILY}, time_budget_s=args.time_budget)
        print(f"{n} rows measured into {out / 'measurements.jsonl'}", file=sys.stderr)
    if only is not None and HF_FAMILY in only:
        # Hugging Face generate() on small configs built from config.json (no weights): the host costs per
        # kernel, step and request that --engine hf reads (perfmodel.host_costs), and whole-model validation rows
        from ..measure import hf_generate

        try:
            import transformers  # noqa: F401  (here: only this family needs it)
        except ImportError:
            raise InputError("the hf family needs Hugging Face transformers: pip install transformers",
                             field="--only") from None
        hf_args = ["--out", str(out / "hf"), "--device", args.device]
        if args.suite == "quick":
            hf_args.append("--quick")
        if args.time_budget is not None:
            hf_args += ["--budget-s", str(args.time_budget)]
        rc = hf_generate.main(hf_args)
        print(f"HF generate() measured into {out / 'hf'}", file=sys.stderr)
        return rc
    return 0


def _check_folder_json(folder) -> None:
    """Every JSON and JSON-lines file at the top of a calibration folder (environment.json, measurements.jsonl,
    profile.json, ...) pre-scanned for nesting depth (linear time) before the fitter parses them: Python's
    parser ends a deeply nested document in a RecursionError."""
    from pathlib import Path

    from ..io import check_input_path, check_json_depth, read_input_bytes

    check_input_path(folder, what="a calibration folder")
    root = Path(folder)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if p.suffix in (".json", ".jsonl") and p.is_file():
            check_json_depth(read_input_bytes(p, what="calibration JSON", max_bytes=1 << 30), file=str(p),
                             what="a calibration row or description (a few levels)")


def _refuse_cpu_calibration(folder) -> None:
    """A folder measured with ``calibrate --device cpu`` cannot be fitted: the latency model's parameters are
    fractions of a GPU spec's datasheet rates (tensor-core peak, HBM bandwidth, SMs), and there is no CPU spec
    for them to be fractions of. Said in one line, rather than 'no hardware spec matches' or, with --arch, a
    GPU profile fitted to CPU times."""
    import json
    from pathlib import Path

    env_file = Path(folder) / "environment.json"
    try:
        doc = json.loads(env_file.read_text(encoding="utf-8")) if env_file.is_file() else {}
    except (OSError, ValueError):
        return
    if not isinstance(doc, dict):
        return
    env = doc.get("env") if isinstance(doc.get("env"), dict) else {}
    if str(doc.get("device", env.get("device", ""))).lower() == "cpu":
        raise InputError("measured on the CPU (perfmodel calibrate --device cpu): a CPU calibration checks the "
                         "suite end to end and cannot be fitted (the model's parameters are fractions of a GPU "
                         "spec's rates; there is no CPU spec); calibrate on a GPU to fit a profile",
                         file=str(env_file))


def cmd_fit(args) -> int:
    from ..fit.directory import fit_directory, refit_family

    _check_folder_json(args.dir)
    _refuse_cpu_calibration(args.dir)
    if args.only:
        print(refit_family(args.dir, args.only), end="")
        return 0
    try:
        report = fit_directory(args.dir, spec=args.arch, holdout=args.holdout, seed=args.seed)
    except RecursionError:  # a file below the folder's top level; the scan above covers the ones fit reads
        raise InputError("a JSON file in this folder is nested too deeply to be calibration data",
                         file=str(args.dir)) from None
    print(report)
    return 0


def _refuse_another_calibration(out, system: str, engine: str) -> None:
    """An import writes into an empty folder or one holding an import of the same system and engine: never into
    another calibration, whose rows a later fit would read as this part's (H200 rows fitted as an H100's)."""
    import json

    if not out.is_dir():
        return
    if (out / "measurements.jsonl").exists():
        raise InputError("holds this project's own measurements (measurements.jsonl); give an empty folder",
                         file=str(out), field="--out")
    env = out / "environment.json"
    if not env.exists():
        if any(out.iterdir()):
            raise InputError("is not empty and holds no calibration of this system; give an empty folder",
                             file=str(out), field="--out")
        return
    try:
        imp = json.loads(env.read_text(encoding="utf-8")).get("import") or {}
    except (OSError, ValueError, AttributeError):
        imp = {}
    if not isinstance(imp, dict) or imp.get("system") != system or imp.get("engine") != engine:
        from ..safeyaml import printable

        held = f"{imp.get('system')} / {imp.get('engine')}" if isinstance(imp, dict) and imp else "another calibration"
        raise InputError(f"holds {printable(held, 60)}, not {system} / {engine}; give an empty folder or that "
                         "import's own", file=str(out), field="--out")


def cmd_import(args) -> int:
    from pathlib import Path

    from ..imports import aiconfigurator as aic

    if not args.list and args.out and args.system and args.engine:  # before the package is looked for
        _refuse_another_calibration(Path(args.out), args.system, args.engine)
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
    if not args.out:  # the shipped folders are tracked files: written only when named
        raise InputError(f"give --out DIR (the shipped folder of this part and engine is calibration/"
                         f"{aic.SYSTEMS.get(args.system, args.system)}-{args.engine})", field="--out")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", file=str(out), field="--out")
    _refuse_another_calibration(out, args.system, args.engine)
    families = [f.strip() for f in args.families.split(",")] if args.families else list(aic.FAMILIES)
    unknown = sorted(set(families) - set(aic.FAMILIES))
    if unknown:
        raise InputError(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; expected some "
                         f"of {', '.join(aic.FAMILIES)}", field="--families")
    prov = aic.import_system(src, args.system, args.engine, out, version=args.version,
                             rows_per_table=args.rows_per_table, seed=args.seed, families=families)
    print(aic.summary_text(prov), file=sys.stderr)
    wrote = "measurements.jsonl.gz, " + (aic.TABLES_FILE + " " if prov.get("whole_tables") else "")
    print(f"wrote {out}/{wrote}and environment.json", file=sys.stderr)
    if args.fit:
        from ..fit.directory import fit_directory

        print(fit_directory(out))
    return 0


def cmd_backtest(args) -> int:
    from pathlib import Path

    from ..backtest import backtest, markdown, write_summary
    from ..paths import calibration_dir

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
    if args.summary:
        write_summary([r for r in results if r["source_engine"] != "torch"], Path(args.summary))
        print(f"wrote {args.summary}", file=sys.stderr)
    emit(text + "\n", args.out)
    return 0


def cmd_sustained(args) -> int:
    from ..sustained import measure, yaml_text

    emit(yaml_text(measure(args.dir)), None)
    return 0
