"""What the command families share: the parser class (one-line errors), the scenario flags, the scenario
built from them, and the way a command's text reaches stdout or a file.

Only argparse and the standard library at import time: the CLI starts fast.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import UNPRINTABLE, InputError, one_line
from ..routing import ROUTINGS
from ..sampling import SAMPLING_METHODS

EXIT_INPUT = 2


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``perfmodel: error: ...``, with exit status 2 (no usage block:
    ``--help`` has it, and the line names the ``--help`` of the command that failed)."""

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", CommandParser)
        return super().add_subparsers(**kwargs)

    def error(self, message: str):
        message = one_line(" ".join(str(message).split()))  # an echoed value's escape sequences too
        self.exit(EXIT_INPUT, f"perfmodel: error: {message} (see {self.prog} --help)\n")


class CommandParser(Parser):
    """A command's parser: it reports its own unrecognized arguments (argparse would hand them up to the
    top-level parser, whose --help does not list the command's options)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def scenario_flags(p: argparse.ArgumentParser, *, serving: bool = True, images: bool = False) -> None:
    """The serving scenario's flags (``serving=False``: the layout and kernel flags only, for one step; ``images``:
    a request's images, for the commands that model a vision encoder)."""
    from ..attention_kernels import CHOICES as ATTENTION
    from ..engines import CHOICES as ENGINES

    g = p.add_argument_group("scenario")
    if serving:
        g.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
        g.add_argument("--osl", type=int, default=128, help="output tokens per request (default 128)")
        g.add_argument("--batch", default="1", help="concurrent sequences, or 'max' for the largest that fits")
        g.add_argument("--batching", choices=("continuous", "static"), default=None,
                       help="how throughput amortises prefill (README: Throughput; default: the engine's, "
                            "continuous for serving engines, static for --engine hf)")
        g.add_argument("--prefill-chunk", type=int, default=None,
                       help="prefill tokens per step (continuous; default: the engine's)")
    if images:
        g.add_argument("--images", type=int, default=0,
                       help="images per request (a multimodal config.json: Qwen2.5-VL, Qwen3-VL, Qwen3.5, Llama 4, "
                            "Gemma 3, InternVL); their tokens join the prompt and the vision encoder runs in the "
                            "prefill (docs/vision.md)")
        g.add_argument("--image-size", type=image_size_arg, default=None, metavar="WxH",
                       help="pixels of each image (and video frame), width x height: 1092x1092")
        g.add_argument("--video-frames", type=int, default=0,
                       help="frames of one video per request (Qwen-VL families), at --image-size")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    g.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    g.add_argument("--ep", type=int, default=1, help="expert-parallel degree (divides --tp x --attention-dp)")
    g.add_argument("--attention-dp", type=int, default=1,
                   help="attention data parallel: this many groups of --tp GPUs run attention on their own "
                        "sequences while the MoE layers spread over all of them (DEP: --tp 1 --attention-dp 8 --ep 8)")
    g.add_argument("--mtp", type=int, default=0,
                   help="speculative decoding: draft tokens a step, from the model's multi-token-prediction layer "
                        "or from --draft")
    g.add_argument("--mtp-accept", type=acceptance_arg, default=None,
                   help="with --mtp: probability that a draft token is accepted given the ones before it were; one "
                        "figure, or one per draft position separated by commas (0.9,0.8,0.7)")
    g.add_argument("--draft", default=None, metavar="MODEL",
                   help="with --mtp: a separate draft model (name or file) sharing the model's vocabulary, for "
                        "models without MTP layers")
    g.add_argument("--spec-topk", type=int, default=1, metavar="W",
                   help="with --mtp: a token tree, each draft step after the first expanding the W best candidates "
                        "of a sequence (EAGLE-2/3; SGLang's --speculative-eagle-topk); default 1, a chain")
    g.add_argument("--spec-verify", type=int, default=None, metavar="N",
                   help="with --mtp: tree nodes a verify step checks a sequence, the verified token included "
                        "(SGLang's --speculative-num-draft-tokens); default every node the drafts expand, 1 + --mtp x W")
    g.add_argument("--moe-exchange", choices=("gather", "all_to_all"), default=None,
                   help="how MoE layers meet other attention-DP ranks' tokens: gather (all-gather before, "
                        "reduce-scatter after) or all_to_all (DeepEP-style dispatch and combine); default: the "
                        "engine's")
    g.add_argument("--scheduling", choices=("async", "sync"), default=None,
                   help="whether the engine schedules the next step while the device runs this one (async: its host "
                        "work a step hides behind the device's) or between steps (sync: added to each); default: "
                        "the engine's (docs/engines.md)")
    g.add_argument("--api-servers", type=int, default=None, metavar="N",
                   help="HTTP server processes streaming the tokens to the clients (vLLM's --api-server-count, "
                        "SGLang's --tokenizer-worker-num): a step goes no faster than its front end's work for the "
                        "tokens it streams; 0: an offline run, no stream; default: the engine's (docs/engines.md)")
    g.add_argument("--host-speed", type=float, default=None, metavar="X",
                   help="the host CPU's speed at the engine's Python host work (its scheduler and front end) "
                        "relative to the development VMs that measured it: 1.5 takes it 1.5 times faster; default 1 "
                        "(docs/engines.md)")
    g.add_argument("--shared-stream", choices=("graph", "small", "never"), default=None,
                   help="when a MoE layer's shared experts run on a second CUDA stream beside the routed ones (the "
                        "two paths then take the longer): graph (decode steps from CUDA graphs: TensorRT-LLM, "
                        "SGLang), small (steps of at most 256 tokens a rank: vLLM 0.12 and later), never; default: "
                        "the engine's (docs/engines.md)")
    g.add_argument("--moe-padding", choices=("computed", "skipped", "none"), default=None,
                   help="the layout block-fp8 experts' grouped products run over: DeepGEMM's worst-case contiguous "
                        "layout with its padded blocks computed (vLLM 0.12 on Hopper and Blackwell) or skipped (the "
                        "activation and re-quantization still over every row: vLLM 0.13-0.17 where DeepGEMM runs), "
                        "or none (the routed rows only); default: the engine's, or its release's with "
                        "--engine-release (docs/engines.md)")
    g.add_argument("--moe-routing", choices=ROUTINGS, default=None,
                   help="how unevenly the router spreads tokens over experts, as the engines' measured MoE tables "
                        "time it (power-law token counts; balanced: what EPLB aims at); default: the model's "
                        "(1.01 for the DeepSeek family and Llama 4, 1.2 for other MoE, as aiconfigurator times them)")
    g.add_argument("--moe-imbalance", type=float, default=1.0,
                   help="busiest expert-parallel rank's routed tokens over the mean (default 1: uniform)")
    g.add_argument("--dtype", default="bf16", help="weights and GEMM format: bf16, fp16, fp8, fp4")
    g.add_argument("--kv-dtype", default=None, help="KV-cache format (default: the engine's rule)")
    g.add_argument("--sampling", choices=SAMPLING_METHODS, default="greedy",
                   help="how each step picks its tokens from the logits, as the requests ask: greedy (argmax; "
                        "default), random (temperature), top_k, top_p (sort-based)")
    g.add_argument("--mode", choices=("latency", "sol"), default="latency",
                   help="latency: calibrated model (default); sol: pure roofline")
    g.add_argument("--engine", choices=ENGINES, default="auto" if serving else "torch",
                   help="serving engine preset: kernels, fusions, launch mode, KV format, chunk size and memory "
                        "share (docs/engines.md); default " + ("auto: TensorRT-LLM on NVIDIA parts, vLLM elsewhere"
                                                               if serving else "torch: plain PyTorch"))
    g.add_argument("--engine-release", default=None, metavar="VERSION",
                   help="the engine release whose measured kernel tables price it (0.19.0, 1.3.0rc10; a dated SGLang "
                        "nightly, nightly-dev-20260317-..., the release built before it), where tables "
                        "of that release were imported: the nearest measured release stands for it; it also runs the "
                        "release's defaults read from its source (vLLM: scheduling, shared-expert stream, MoE "
                        "padding), unless flags say otherwise; default: the engine folder's own (docs/engines.md)")
    g.add_argument("--attention-kernel", choices=ATTENTION, default=None,
                   help="attention kernel (default: the engine's; auto: what plain PyTorch dispatches to)")
    g.add_argument("--launch", choices=("auto", "graph", "eager"), default=None,
                   help="auto: decode from a CUDA graph, prefill eager; graph or eager: both phases "
                        "(default: the engine's)")
    g.add_argument("--kv-cache", choices=("paged", "dynamic", "static"), default=None,
                   help="how the KV cache is kept: paged (a serving engine's block pool), dynamic or static "
                        "(transformers' DynamicCache / StaticCache; with --engine hf, static plus --launch auto "
                        "is transformers' compiled decode; default: the engine's)")
    g.add_argument("--kernels", choices=("fused", "torch", "hf"), default=None,
                   help="fused: a serving engine's kernels; torch: the plain PyTorch layer the calibration "
                        "measures; hf: transformers' eager layer (default: the engine's)")
    g.add_argument("--mem-fraction", type=float, default=None,
                   help="share of device memory (vLLM, SGLang) or of free memory (TensorRT-LLM) the engine takes")
    g.add_argument("--overlap", type=overlap_arg, default=0.0,
                   help="collective overlap: none (default), stream, decomposed, fused (docs/collectives.md), or a "
                        "fixed fraction of collective time hidden under compute")
    g.add_argument("--calibration", default=None,
                   help="profile folder or profile.json; 'none' for documented defaults (default: automatic)")


def acceptance_arg(text: str) -> float | tuple[float, ...]:
    """--mtp-accept: one probability, or one per draft position separated by commas."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability or several separated by commas, got {text!r}")
    return values[0] if len(values) == 1 else values


def image_size_arg(text: str) -> tuple[int, int]:
    """--image-size: WIDTHxHEIGHT in pixels."""
    from ..scenario import parse_image_size

    try:
        return parse_image_size(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(e.detail) from None


def overlap_arg(text: str) -> float | str:
    """--overlap: a number keeps its old meaning (a fixed fraction), anything else is a method name."""
    try:
        return float(text)
    except ValueError:
        return text.strip().lower()


def _engine_release(args) -> str | None:
    """``--engine-release`` as given, or for a dated nightly build the release it stands nearest
    (:func:`perfmodel.engines.nightly_release`: the newest built on or before its date)."""
    text = getattr(args, "engine_release", None)
    if text is None:
        return None
    from ..engines import numbered_release

    return numbered_release(getattr(args, "engine", "auto"), text) or text  # anything else: Scenario refuses it


def _scheduling(flag: str | None) -> bool | None:
    return None if flag is None else flag == "async"


def scenario_from_args(args, batch=None):
    """The validated :class:`~perfmodel.scenario.Scenario` of :func:`scenario_flags`' values."""
    from ..scenario import Scenario, parse_batch

    kw = dict(tp=args.tp, pp=args.pp, ep=args.ep, attention_dp=args.attention_dp, moe_imbalance=args.moe_imbalance,
              mtp=args.mtp, mtp_accept=args.mtp_accept, draft=args.draft,
              spec_topk=args.spec_topk, spec_verify=args.spec_verify, dtype=args.dtype, kv_dtype=args.kv_dtype, mode=args.mode,
              launch=args.launch, overlap=args.overlap, kernels=args.kernels, engine=args.engine,
              attention_kernel=args.attention_kernel, mem_fraction=args.mem_fraction,
              kv_cache=getattr(args, "kv_cache", None), moe_exchange=getattr(args, "moe_exchange", None),
              moe_routing=getattr(args, "moe_routing", None), sampling=getattr(args, "sampling", "greedy"),
              async_scheduling=_scheduling(getattr(args, "scheduling", None)), schedule=getattr(args, "schedule", None),
              api_servers=getattr(args, "api_servers", None), host_speed=getattr(args, "host_speed", None),
              shared_stream=getattr(args, "shared_stream", None), engine_release=_engine_release(args),
              moe_padding=getattr(args, "moe_padding", None))
    if hasattr(args, "isl"):
        kw.update(isl=args.isl, osl=args.osl, batch=parse_batch(str(args.batch)) if batch is None else batch,
                  batching=args.batching, prefill_chunk=args.prefill_chunk)
    if hasattr(args, "images"):
        kw.update(images=args.images, image_size=args.image_size, video_frames=args.video_frames)
    return Scenario(**kw).validated()


def emit(text: str, out: str | None) -> None:
    """``text`` to the file ``out`` (atomically, saying so on stderr), or to stdout when ``out`` is None."""
    if out:
        from ..io import write_text_atomic

        write_text_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def json_text(data, indent: int = 2) -> str:
    """JSON text; nothing non-finite may reach it (strict JSON has no NaN or Infinity)."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False) + "\n"
    except ValueError:
        raise InputError("a result is not finite: check the spec figures and the calibration profile "
                         "(a value out of any physical range)", field="--format json") from None


# flags naming a file a command writes
OUTPUT_FILE_FLAGS = {"out": "--out", "report": "--report", "export": "--export", "plot": "--plot",
                     "summary": "--summary", "refit": "--refit"}
# the one input an output may replace, by design: trace import --refit folds the traces into the --calibration
# profile it started from (docs/trace.md); any other input (the trace itself) it may not
IN_PLACE = {"--refit": "calibration"}


def check_outputs_not_inputs(args) -> None:
    """Refuse (one line, before anything is computed) an output file that is one of the command's own input
    files (a spec, a model, a profile, a CSV table, a trace): ``--out`` would replace what it was computed from;
    ``-`` as a file name (standard output is what leaving the flag out gives); and two outputs of one command
    named alike (the second write would replace the first)."""
    named = {flag: getattr(args, a) for a, flag in OUTPUT_FILE_FLAGS.items()
             if isinstance(getattr(args, a, None), str) and getattr(args, a)}
    seen: dict[str, str] = {}
    for flag, path in named.items():
        if path.strip() == "-":
            raise InputError("'-' is not a file name: leave the flag out to write to standard output", field=flag)
        key = os.path.abspath(path)
        if key in seen:
            raise InputError(f"the same file as the {seen[key]} output; give each output its own file", file=path,
                             field=flag)
        seen[key] = flag
    outs = {flag: getattr(args, a) for a, flag in OUTPUT_FILE_FLAGS.items() if isinstance(getattr(args, a, None), str)}
    outs = {flag: path for flag, path in outs.items() if path and os.path.isfile(path)}
    if not outs:
        return
    inputs = []
    for name, value in vars(args).items():
        if name in OUTPUT_FILE_FLAGS or name == "func":
            continue
        for x in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(x, str) and x and os.path.isfile(x):
                inputs.append((name, x))
            elif isinstance(x, str) and x and os.path.isdir(x):
                # an input folder (a calibration, a measurement): none of the files already in it is an output
                for flag, path in outs.items():
                    if IN_PLACE.get(flag) == name:
                        continue
                    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(x):
                        raise InputError(f"is a file of this command's --{name.replace('_', '-')} input folder; "
                                         "refusing to overwrite it (give another file name)", file=path, field=flag)
    for flag, path in outs.items():
        for name, x in inputs:
            if IN_PLACE.get(flag) == name:
                continue
            try:
                same = os.path.samefile(path, x)
            except OSError:
                same = False
            if same:
                raise InputError(f"is this command's --{name.replace('_', '-')} input; refusing to overwrite it "
                                 "(give another file name)", file=path, field=flag)


# flags naming a folder a command writes into
OUTPUT_DIR_FLAGS = {"out_dir": "--out-dir"}


def check_output_folders(args) -> None:
    """Every output a command was given, checked before anything is computed: a file's folder exists, a folder
    given for files (``--out-dir``, ``export --format csv --out DIR/``) exists. Writers never create folders
    (docs/outputs.md); perfmodel.io refuses a missing folder again at the write."""
    from pathlib import Path

    from ..safeyaml import printable

    def refuse(path: str, folder, flag: str):
        raise InputError(f"the folder {printable(str(folder), 80)} does not exist (create it first)",
                         file=printable(path, 120), field=flag)

    for attr, flag in {**OUTPUT_FILE_FLAGS, **OUTPUT_DIR_FLAGS}.items():
        path = getattr(args, attr, None)
        if isinstance(path, str) and (m := UNPRINTABLE.search(path)):
            # the name would be echoed ("wrote ...") and listed by every shell: a control character in it is a
            # slip or an attack, never a wish
            raise InputError(f"control character U+{ord(m.group()):04X} in the file name; give a printable name",
                             file=printable(path, 120), field=flag)
    for attr, flag in OUTPUT_FILE_FLAGS.items():
        path = getattr(args, attr, None)
        if not isinstance(path, str) or not path.strip():
            continue
        if path.endswith(("/", os.sep)):
            if not os.path.isdir(path):
                refuse(path, path, flag)
            continue
        parent = Path(path).parent
        if not parent.is_dir():
            refuse(path, parent, flag)
    for attr, flag in OUTPUT_DIR_FLAGS.items():
        path = getattr(args, attr, None)
        if isinstance(path, str) and path.strip() and not os.path.isdir(path):
            refuse(path, path, flag)


def check_output_file(path: str | None, flag: str, suffixes: tuple[str, ...] | None = None) -> None:
    """An output file name, checked before anything is computed or written: the extension (when the flag takes
    given ones), not a folder, and a parent folder that exists."""
    if not path:
        return
    from pathlib import Path

    from ..safeyaml import printable

    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"expected a {' or '.join(suffixes)} file name, got {printable(path)!r}", field=flag)
    if p.is_dir():
        raise InputError("is a folder; expected a file path (give a file name inside it)", file=path, field=flag)
    parent = p.parent
    if not parent.is_dir():
        raise InputError(f"the folder {printable(str(parent), 80)} does not exist (create it first)", file=path,
                         field=flag)


class _Ticker:
    """``label: done/total (pct), elapsed`` (or ``label: elapsed`` with no count) redrawn on one stderr line by a
    daemon thread five times a second (PERIOD_S), starting once a second has passed (DELAY_S: a quick command shows
    nothing), so that a computation with no hook of its own (the serving simulation) still shows it is running; the
    line is cleared at the end."""

    DELAY_S = 1.0
    PERIOD_S = 0.2

    def __init__(self, total: int | None, label: str):
        import threading
        import time

        self.total, self.label, self.done = total, label, 0
        self.clock = time.monotonic
        self.start = self.clock()
        self.shown = False
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def __call__(self, n: int = 1) -> None:
        self.done += n

    def _run(self) -> None:
        if self.stop.wait(self.DELAY_S):
            return
        while not self.stop.is_set():
            elapsed = self.clock() - self.start
            of = f"{self.done}/{self.total} ({self.done / self.total:.0%}), " if self.total else ""
            with self.lock:
                if self.stop.is_set():
                    return
                sys.stderr.write(f"\r\x1b[K{self.label}: {of}{elapsed:.0f} s")
                sys.stderr.flush()
                self.shown = True
            self.stop.wait(self.PERIOD_S)

    def close(self) -> None:
        with self.lock:
            self.stop.set()
            if self.shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
        self.thread.join(timeout=1.0)


def _quiet(n: int = 1) -> None:
    return None


class progress:
    """``with progress(total, "serve") as tick: ... tick()``: a progress line on stderr for a command that can
    run longer than a few seconds (``total`` None: elapsed time only), only when stderr is a terminal (nothing
    in pipes, files or tests; ``PERFMODEL_PROGRESS=0`` turns it off). A 40-line ticker rather than tqdm or
    rich: neither is a base dependency (tqdm is in the calibrate extra only), and one redrawn line is all the
    commands need; the standard library alone, imported when a command runs, keeps the CLI start fast."""

    def __init__(self, total: int | None, label: str):
        self.total, self.label, self.ticker = total, label, None

    def __enter__(self):
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        if tty and os.environ.get("PERFMODEL_PROGRESS", "1") != "0":
            self.ticker = _Ticker(self.total, self.label)
            return self.ticker
        return _quiet

    def __exit__(self, *exc):
        if self.ticker is not None:
            self.ticker.close()
        return False
