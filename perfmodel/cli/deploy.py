"""``perfmodel deploy``: launch files for a plan (docs/deploy.md).

Only argparse at import time; the writer loads inside the command, for start-up time.
"""
from __future__ import annotations

import sys

from ..errors import InputError

ENGINES = ("trtllm", "vllm", "sglang")  # perfmodel.deploy.options.ENGINES (a test keeps them equal)


def register(sub) -> None:
    p = sub.add_parser("deploy", help="launch files for a plan: trtllm-serve, vllm serve or SGLang commands and "
                                      "configs, per-role commands when disaggregated, a Kubernetes manifest")
    p.add_argument("plan", metavar="PLAN.json", help="a plan written by perfmodel plan --format json")
    p.add_argument("--engine", required=True, choices=ENGINES,
                   help="the engine to launch: trtllm (TensorRT-LLM), vllm or sglang")
    p.add_argument("--out", required=True, dest="out_folder", metavar="DIR",
                   help="folder for the files (created if its parent exists; files of the same names replaced)")
    p.add_argument("--rank", default=None,
                   help="the plan's layout of this rank (default: the best-ranked one planned for --engine, "
                        "else rank 1)")
    p.add_argument("--model-path", default=None,
                   help="Hugging Face id or local path of the checkpoint (default: the one the model library names "
                        "for the plan's model; else a placeholder README.txt points out)")
    p.add_argument("--image", default=None,
                   help="container image for k8s.yaml (default: the engine's published image of the version the "
                        "options follow)")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args) -> int:
    from ..deploy import build, write

    rank = None
    if args.rank is not None:
        text = str(args.rank).strip()
        if not text.isdigit() or int(text) < 1:
            raise InputError(f"expected a rank >= 1, got {args.rank!r}", field="--rank")
        rank = int(text)
    if not str(args.out_folder).strip():
        raise InputError("expected a folder, got an empty path", field="--out")
    dep = build(args.plan, args.engine, rank=rank, model_path=args.model_path, image=args.image)
    leftovers = write(dep, args.out_folder)
    print(f"wrote {dep.summary} into {args.out_folder}: {', '.join(dep.files)}", file=sys.stderr)
    for note in dep.target.notes:
        print(f"note: {note}", file=sys.stderr)
    for note in leftovers:
        print(f"note: {note}", file=sys.stderr)
    return 0
