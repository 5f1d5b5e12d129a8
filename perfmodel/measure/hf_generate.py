"""Hugging Face ``transformers`` ``generate()`` measured on one GPU: the host-side costs of eager decode.

Run as ``python -m perfmodel.measure.hf_generate --out DIR [--quick] [--budget-s S] [--resume]`` (or ``perfmodel
calibrate --only hf``). Models are built from a config dict with random weights
(``AutoModelForCausalLM.from_config``, bf16, ``attn_implementation="sdpa"``, on the GPU): nothing is downloaded. The configs are ``calibration/hf/configs/*.json`` (each a checkpoint's
``config.json``).

What it measures, each row appended to ``--out``'s ``measurements.jsonl`` as soon as it is measured (the
measurement store, :mod:`perfmodel.measure.store`: a killed run keeps every row; ``--resume`` goes on from them)
and shown in the tables below, rewritten from the rows after each one (:mod:`perfmodel.measure.hf_rows`):

``generate.csv``
    whole-model ``generate()`` (greedy, eos disabled, ``min_new_tokens = max_new_tokens``): TTFT = the time of
    ``generate`` with ``max_new_tokens=1``; TPOT = (time(N) - time(1)) / (N - 1); CUDA-synchronised wall clock,
    one warm-up, median of repeats. Caches: ``dynamic`` (the default, ``torch.cat`` growth), ``static``
    (eager: ``disable_compile=True``; ``max_cache_len`` pinned to isl + N for both calls) and, budget allowing,
    ``static-compile`` (transformers' own automatic ``torch.compile``, mode reduce-overhead), run in a child
    process that is killed at the budget.
``host.csv``
    host-side costs measured directly: eager launch cost of tiny ops, ``nn.Module.__call__`` dispatch, one
    CPU-GPU sync, the dynamic cache's ``torch.cat`` against the static cache's ``index_copy_``, per decoder
    layer host time (a 2-layer and a 4-layer model of each architecture), and the decomposition of a decode
    step: forward alone (no sync), forward + one sync a step, and generate's time per token.
``kernels.csv``
    CUDA kernels by name from ``torch.profiler`` (chrome trace): one prefill, one decode step (generate(1+K)
    minus generate(1), over K), one decoder layer (4-layer minus 2-layer model, over 2), with device-busy
    time (union of kernel, memcpy and memset intervals) against wall time.
``summary.json``, ``environment.json``
    the figures above condensed, errors and skipped parts with their reasons; the machine as the suite
    describes it (:class:`perfmodel.measure.environment.Environment`: GPU, driver, clocks, power limits), the
    host CPU's model, frequency and load, torch and transformers versions.

This module is the run: its arguments, the order of the parts, the budget, the compiled path's child process.
The parts are :mod:`.hf_plan` (configs, plan, budget, TPOT arithmetic), :mod:`.hf_rows` (the rows and their
tables), :mod:`.hf_trace` (profiler traces condensed), :mod:`.hf_model` and :mod:`.hf_host` (the torch side).
Importing this module never imports torch or transformers (tests/test_hf_generate.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .environment import Environment, cpu_info
from .hf_plan import MODELS, ROOT, Budget, plan
from .hf_rows import Record
from .store import ENVIRONMENT, iter_rows, set_aside, write_json_atomic


def _adopt_child(ctx, sub: Path) -> int:
    """A compile child's rows (its own store under ``sub``) into this run's; the number of generate rows."""
    return ctx.rec.adopt(iter_rows(sub / "measurements.jsonl"), where="compile child: ")


def run_compile(ctx, argv_base: list[str]) -> None:
    """Each model of the plan's ``compile`` points in a child process (a fresh torch.compile state, killed at
    its share of the budget), merged into this run's tables."""
    import subprocess

    models: dict[str, list[tuple[int, int]]] = {}
    for name, batch, isl in ctx.plan["compile"]:
        models.setdefault(name, []).append((batch, isl))
    models = {name: pts for name, pts in models.items() if not ctx.rec.has_part(f"compile|{name}")}  # --resume
    for i, (name, pts) in enumerate(models.items()):
        left = ctx.budget.left() - ctx.budget.reserve_s
        share = left / (len(models) - i)
        if share < 60:
            ctx.skip(f"static-compile {name}", f"budget: {left:.0f}s left, compile needs ~60s or more")
            continue
        sub = ctx.out / f"compile-{name}"
        cmd = _self_command() + ["--out", str(sub), "--compile-child", name, "--budget-s", str(int(share - 5)),
                                 "--points", ";".join(f"{b},{s_}" for b, s_ in pts)] + argv_base
        ctx.log(f"compile child: {' '.join(cmd)}")
        try:
            r = subprocess.run(cmd, timeout=share, capture_output=True, text=True, cwd=str(ROOT))
            ctx.log("compile child output tail:\n" + (r.stdout + r.stderr)[-3000:])
            status = f"exit {r.returncode}"
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            ctx.log("compile child killed at its budget; tail:\n" + out[-2000:])
            status = "killed at its budget"
        n = _adopt_child(ctx, sub)
        if not n:
            ctx.skip(f"static-compile {name}", f"child {status}; no point measured (see log)")
        ctx.part(f"compile|{name}", {"status": status, "points": n})
        # keep only the adopted rows in --out (the device returns at most 8 files)
        for f in sorted(sub.glob("*")) if sub.is_dir() else []:
            try:
                f.unlink()
            except OSError:
                pass
        try:
            sub.rmdir()
        except OSError:
            pass



def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s)
    p = plan(args.quick)
    if args.models:
        keep = [m.strip() for m in args.models.split(",") if m.strip()]
        p["grid"] = [(m, pts) for m, pts in p["grid"] if m in keep]
        p["layer_models"] = [m for m in p["layer_models"] if m in keep]
        p["compile"] = [c for c in p["compile"] if c[0] in keep]
        p["models"] = [m for m in p["models"] if m in keep]
    import torch

    try:
        import transformers
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception as exc:
        print(f"transformers does not import: {exc!r}", file=sys.stderr)
        raise
    from .hf_host import cache_update_costs, host_costs, request_setup
    from .hf_model import (Ctx, build_model, compile_child, decompose, layer_scaling, measure_point,
                           profile_generate, release)
    from .hf_rows import generate_id
    from .timing import set_tf32

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device (pass --device cpu for a functional check)")
    set_tf32(False)
    notes = [] if args.resume else [n for n in (set_aside(out),) if n]
    rec = Record(out, p, resume=args.resume)
    env = Environment(device)
    ctx = Ctx(rec, p, budget, device, args.shrink, env)
    if args.compile_child:
        pts = [tuple(int(x) for x in s.split(",")) for s in args.points.split(";") if s]
        compile_child(ctx, args.compile_child, pts)
        return 0
    started = env.document(status="running", cpu=cpu_info(), transformers=transformers.__version__, notes=notes,
                           resumed_rows=len(rec.rows))
    write_json_atomic(out / ENVIRONMENT, started)
    ctx.log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}, "
            f"budget {args.budget_s:.0f}s, plan {'quick' if args.quick else 'full'}"
            + (f", resuming from {len(rec.rows)} rows" if args.resume else ""))

    def guarded(label: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:
            ctx.error(label, exc)

    if args.request_only:
        for name in p["models"]:
            if rec.has_part(f"request|{name}"):
                continue
            if not budget.allows(30):
                ctx.skip(f"request setup {name}", "budget")
                continue
            try:
                model = build_model(ctx, name)
                request_setup(ctx, model, name)
            except Exception as exc:
                ctx.error(f"request setup {name}", exc)
            model = None
            release(ctx)
        return 0
    if args.compile_only:
        p["grid"], p["layer_models"] = [], []
    else:
        if not rec.has_part("host"):
            guarded("host costs", lambda: host_costs(ctx))
        if not rec.has_part("cache_update"):
            guarded("cache update", lambda: cache_update_costs(ctx))
    for name, pts in p["grid"]:
        points = [pt for pt in pts if not rec.has(generate_id(name, pt[0], pt[1], pt[2], p["osl"]))]
        profiles = [(batch, isl, cache) for batch, isl in p["profile"] for cache in ("dynamic", "static")
                    if not rec.has_part(f"profile|{name}|{cache}|b{batch}|isl{isl}")]
        if not points and not profiles and rec.has_part(f"decompose|{name}"):
            ctx.log(f"resume: {name}'s generate points, profiles and decomposition are measured")
        elif not budget.allows(20):
            ctx.skip(f"model {name}", "budget")
            continue
        else:
            try:
                t0 = time.perf_counter()
                model = build_model(ctx, name)
                params_b = sum(x.numel() for x in model.parameters()) / 1e9
                ctx.log(f"built {name}: {params_b:.2f} B parameters in {time.perf_counter() - t0:.1f}s")
            except Exception as exc:
                ctx.error(f"build {name}", exc)
                continue
            for cache, batch, isl in points:
                measure_point(ctx, model, name, cache, batch, isl, p["osl"], params_b)
            if not rec.has_part(f"decompose|{name}"):
                guarded(f"decompose {name}", lambda: decompose(ctx, model, name))
            for batch, isl, cache in profiles:
                if not budget.allows(15):
                    ctx.skip(f"profile {name} {cache} b{batch} isl{isl}", "budget")
                    continue
                try:
                    r = profile_generate(ctx, model, name, cache, batch, isl)
                    ctx.part(f"profile|{name}|{cache}|b{batch}|isl{isl}", r)
                except Exception as exc:
                    ctx.error(f"profile {name} {cache} b{batch} isl{isl}", exc)
            del model
            release(ctx)
        if name in p["layer_models"] and not rec.has_part(f"layers|{name}"):
            guarded(f"layers {name}", lambda: layer_scaling(ctx, name))
    for name in p["layer_models"]:
        if name not in [m for m, _ in p["grid"]] and not rec.has_part(f"layers|{name}"):
            guarded(f"layers {name}", lambda: layer_scaling(ctx, name))
    if p["compile"] and not args.no_compile:
        extra = (["--quick"] if args.quick else []) + (["--device", device]) + (["--shrink"] if args.shrink else [])
        guarded("compile", lambda: run_compile(ctx, extra))
    rec.summary_extra["finished_at_s"] = budget.elapsed()
    try:
        env.refresh_clocks()
        rec.summary_extra["environment_at_end"] = {"env": env.row_env(), "cpu": cpu_info()}
    except Exception as exc:
        ctx.error("environment at end", exc)
    rec.export_summary()
    write_json_atomic(out / ENVIRONMENT, {**started, "status": "done", "rows": len(rec.rows),
                                          "wall_seconds": round(budget.elapsed(), 2)})
    ctx.log(f"done in {budget.elapsed():.0f}s: {len(ctx.gen.rows)} generate rows, {len(ctx.host.rows)} host rows, "
            f"{len(ctx.kern.rows)} kernel rows, {len(rec.table('error'))} errors, "
            f"{len(rec.table('skip'))} skipped")
    _print_table(ctx)
    return 0


def _print_table(ctx) -> None:
    print("\nmodel          cache           b    isl    TTFT ms   TPOT ms")
    for r in ctx.gen.rows:
        if r["status"] == "ok":
            print(f"{r['model']:14s} {r['cache']:14s} {int(r['batch']):3d} {int(r['isl']):6d} "
                  f"{float(r['ttft_ms']):10.2f} {float(r['tpot_ms']):9.2f}")
    print("\nhost:")
    for r in ctx.host.rows:
        if r["family"] in ("launch", "dispatch", "sync"):
            print(f"  {r['name']:24s} wall {r['wall_us'] or 0:8.2f} us  issue {r['issue_us'] or 0:8.2f} us  "
                  f"device {r['device_us'] or 0:8.2f} us")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.measure.hf_generate", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the CSV/JSON results")
    ap.add_argument("--quick", action="store_true", help="a one-minute smoke run (Llama-3.2-1B, batch 1, N 16)")
    ap.add_argument("--budget-s", type=float, default=470.0, help="stop starting new parts after this many seconds")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="", help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile (static-compile) points")
    ap.add_argument("--request-only", action="store_true",
                    help="only generate()'s per-request setup (batch 1, 128 tokens) and the bare launch, per model")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the torch.compile (static-compile) points and their kernels")
    ap.add_argument("--resume", action="store_true",
                    help="go on from the rows already in --out (a killed or budget-stopped run): skip the generate "
                         "points and parts measured there")
    ap.add_argument("--shrink", action="store_true", help="tiny widths (functional test on CPU)")
    ap.add_argument("--compile-child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--points", default="", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _self_command() -> list[str]:
    return [sys.executable, "-m", __name__ if __name__ != "__main__" else f"{__package__}.hf_generate"]


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
