"""Run the calibration suite: measure microkernels through PyTorch, one JSON row each.

    perfmodel calibrate --device cuda --suite full --out calibration/h200/ \
        [--resume] [--nproc N] [--only gemm,copy] [--time-budget S]

(``python -m perfmodel.measure.suite`` takes the same arguments.)

Rows go to OUT/measurements.jsonl as each case is measured (append, flush, fsync); --resume skips
the ids already there (after cutting a torn last line). OUT/environment.json describes the machine.
"""
from __future__ import annotations

import gc
import math
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from .environment import Environment, now_iso
from .shapes import BUDGET_WEIGHTS, FAMILIES, Case, plan
from .store import ENVIRONMENT, MEASUREMENTS, Store, set_aside, write_json_atomic

DEFAULT_BUDGET_S = {"quick": 300.0, "full": 510.0}


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="case", dynamic_ncols=True, leave=True)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode("utf-8")) & 0x7FFFFFFF


def _base_row(case: Case) -> dict[str, Any]:
    return {
        "id": case.id, "kind": case.kind, "params": dict(case.params), "group": case.group,
        "time_s": None, "p10_s": None, "p90_s": None, "reps": 0, "check": "skipped", "error": None,
        "flops": None, "bytes": None, "impl": None,
    }


def measure_case(case: Case, ctx, env: Environment, *, refresh_clocks: bool = False,
                 run: Callable[[Case, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One row for one case; never raises for a failing workload (the row carries the error). ``run``: the
    workload's runner where it is not a suite family's (:data:`.kernels.KERNELS`)."""
    import torch

    from .kernels import KERNELS, counts

    row = _base_row(case)
    try:
        row["flops"], row["bytes"] = counts(case.kind, case.params)
    except Exception:
        pass
    torch.manual_seed(_seed(case.id))
    try:
        res = (run or KERNELS[case.kind])(case, ctx)
        row.update(res)
        t = row.get("time_s")
        if t is None or not (isinstance(t, float) and math.isfinite(t) and t > 0):
            row["error"] = row.get("error") or f"bad time {t!r}"
            row["time_s"] = None
    except Exception as exc:  # OutOfMemoryError included: record, free, go on
        oom = type(exc).__name__ == "OutOfMemoryError"
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        row["error"] = f"{type(exc).__name__}: {msg}"[:500]
        row.update({"time_s": None, "p10_s": None, "p90_s": None, "reps": 0})
        if oom:
            row["error"] = "OutOfMemoryError: " + msg[:300]
    finally:
        try:
            from .timing import set_tf32

            set_tf32(False)
        except Exception:
            pass
    if ctx.is_cuda:
        try:
            torch.cuda.synchronize()
        except Exception as exc:  # a sticky CUDA error: note it on the row
            row["error"] = row["error"] or f"cuda sync failed: {exc}"[:300]
    if refresh_clocks:
        env.refresh_clocks()
    elif ctx.is_cuda:
        env.refresh_fast()
    row["env"] = env.row_env()
    row["measured_at"] = now_iso()
    return row


def standalone_args(prog: str, doc: str, argv: list[str] | None = None):
    """The arguments of a measurement run beside the suite (``python -m perfmodel.measure.X``)."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for measurements.jsonl and environment.json")
    ap.add_argument("--quick", action="store_true", help="a few cases (a functional run, CPU included)")
    ap.add_argument("--resume", action="store_true", help="skip the cases already in --out")
    ap.add_argument("--device", default="cuda")
    return ap.parse_args(argv)


def measure_standalone(cases_for: Callable[[bool], list[Case]], args, *, suite: str,
                       describe: Callable[[Case, dict[str, Any]], str],
                       run: Callable[[Case, Any], dict[str, Any]] | None = None) -> int:
    """Measure a list of cases outside the suite's families into ``args.out`` (:func:`standalone_args`), every
    row through the store as it is measured (a killed run keeps it; ``--resume`` skips it), one progress line a
    case (``describe``). ``cases_for(quick)``: the cases; a CPU run takes the quick ones. Exit status 2 where the
    device is missing."""
    import torch

    from .kernels import Context, fp8_supported
    from .timing import Timer

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("perfmodel: error: --device cuda: no CUDA device visible", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        set_aside(out)
    store = Store(out, resume=args.resume)
    env = Environment(device)
    cuda = device.startswith("cuda")
    timer = Timer(device, target_s=0.08 if cuda else 0.01, warmup_s=0.025 if cuda else 0.005, min_reps=10)
    ctx = Context(device=device, suite="full" if cuda else "quick", timer=timer, fp8_ok=fp8_supported(device))
    cases = [c for c in cases_for(args.quick or not cuda) if c.id not in store]
    write_json_atomic(out / ENVIRONMENT, env.document(status="running", suite=suite, started_at=now_iso()))
    t0 = time.monotonic()
    for i, case in enumerate(cases):
        row = measure_case(case, ctx, env, run=run)
        store.append(row)
        if row.get("error"):
            _free(cuda, hard=True)
        print(f"[{time.monotonic() - t0:7.1f}s] {i + 1}/{len(cases)} {describe(case, row)}", flush=True)
    write_json_atomic(out / ENVIRONMENT, env.document(status="complete", suite=suite, finished_at=now_iso()))
    return 0


def _free(is_cuda: bool, hard: bool) -> None:
    gc.collect()
    if is_cuda and hard:
        import torch

        try:
            torch.cuda.empty_cache()
        except Exception:
            pass


def _summary(rows: list[dict[str, Any]]) -> str:
    fams: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        fams.setdefault("train" if r["kind"].startswith("train_") else r["kind"], []).append(r)
    lines = [f"{'family':<12}{'cases':>7}{'errors':>8}{'fails':>7}{'median_time':>14}"]
    for fam in FAMILIES:
        rs = fams.get(fam)
        if not rs:
            continue
        ts = [r["time_s"] for r in rs if r.get("time_s")]
        errs = sum(1 for r in rs if r.get("error"))
        fails = sum(1 for r in rs if str(r.get("check", "")).startswith("FAIL"))
        med = statistics.median(ts) if ts else float("nan")
        lines.append(f"{fam:<12}{len(rs):>7}{errs:>8}{fails:>7}{_fmt_time(med):>14}")
    return "\n".join(lines)


def _fmt_time(t: float) -> str:
    if not math.isfinite(t):
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.2f} us"
    if t < 1:
        return f"{t * 1e3:.3f} ms"
    return f"{t:.3f} s"


def run_suite(
    device: str,
    suite: str,
    out_dir: Path,
    *,
    resume: bool = False,
    nproc: int = 1,
    progress: bool = True,
    only: set[str] | None = None,
    time_budget_s: float | None = None,
) -> int:
    """Measure the suite on ``device`` into ``out_dir``; returns the number of rows written."""
    import torch

    from .kernels import Context, fp8_supported
    from .timing import Timer

    t0 = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if suite not in ("quick", "full"):
        raise ValueError(f"suite must be 'quick' or 'full', not {suite!r}")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch.cuda.is_available() is False")
        if ":" in device:
            torch.cuda.set_device(torch.device(device))
        device = f"cuda:{torch.cuda.current_device()}"
    elif device != "cpu":
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    is_cuda = device.startswith("cuda")
    if only is not None:
        only = {o.strip() for o in only if o and o.strip()}
        unknown = only - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)}; expected some of {', '.join(FAMILIES)}")

    path = out_dir / MEASUREMENTS
    notes: list[str] = []
    if not resume and (note := set_aside(out_dir)):
        notes.append(note)
    store = Store(out_dir, resume=resume)
    if store.torn_bytes:
        notes.append(f"resume: cut a torn last line of {store.torn_bytes} bytes")
    env = Environment(device)
    budget = float(time_budget_s) if time_budget_s is not None else DEFAULT_BUDGET_S[suite]

    torch.manual_seed(0)
    sm_count = env.static.get("sm_count") or 132
    fp8_ok = fp8_supported(device)
    families = plan(suite, device, fp8=fp8_ok, sm_count=int(sm_count) if is_cuda else 132)
    if is_cuda and not fp8_ok:
        notes.append("fp8 gemm skipped: needs capability >= 8.9 and torch._scaled_mm")
    if only is not None:
        families = {k: v for k, v in families.items() if k in only}
    todo = {k: [c for c in v if c.id not in store] for k, v in families.items()}
    if "collective" in todo and nproc <= 1:
        notes.append("collective skipped: needs --nproc > 1")
    if "collective" in todo and nproc > 1 and is_cuda and torch.cuda.device_count() < nproc:
        notes.append(f"collective skipped: --nproc {nproc} but only {torch.cuda.device_count()} GPUs")
        nproc = 1

    if suite == "full":
        timer = Timer(device, target_s=0.08, warmup_s=0.025)
    elif is_cuda:
        timer = Timer(device, target_s=0.02, warmup_s=0.025)
    else:
        timer = Timer(device, target_s=0.01, warmup_s=0.005, min_reps=10)
    ctx = Context(device=device, suite=suite, timer=timer, fp8_ok=fp8_ok, notes=notes)

    started = now_iso()
    write_json_atomic(out_dir / ENVIRONMENT, env.document(
        status="running", suite=suite, started_at=started, nproc=nproc, notes=notes,
        families={k: len(v) for k, v in families.items()}))

    total_cases = sum(len(v) for k, v in todo.items() if k != "collective")
    tty = sys.stderr.isatty()
    bar = _progress_bar(total_cases, progress and tty)
    written_rows: list[dict[str, Any]] = []
    fam_times: dict[str, float] = {}
    order = [f for f in FAMILIES if f in todo]
    try:
        for i, fam in enumerate(order):
            cases = todo[fam]
            elapsed = time.monotonic() - t0
            remaining = budget - elapsed
            live = [f for f in order[i:] if todo[f] or (f == "collective" and nproc > 1)]
            wsum = sum(BUDGET_WEIGHTS.get(f, 1) for f in live) or 1
            fam_budget = max(0.0, remaining) * BUDGET_WEIGHTS.get(fam, 1) / wsum
            fam_t0 = time.monotonic()
            if fam == "collective":
                if nproc > 1:
                    from .collectives import launch

                    if progress:
                        _log(f"[collective] {nproc} ranks, budget {fam_budget:.0f} s")
                    rc, n, note = launch("cuda" if is_cuda else "cpu", suite, out_dir, nproc,
                                         time_budget_s=max(5.0, fam_budget))
                    if note:
                        notes.append(note)
                    store.written += n
                    from .store import read_rows

                    written_rows += [r for r in read_rows(store.path) if r.get("kind") == "collective"][-n:] if n else []
                fam_times[fam] = time.monotonic() - fam_t0
                continue
            if not cases:
                continue
            if bar is not None:
                bar.set_description(fam)
            elif progress:
                _log(f"[{fam}] {len(cases)} cases, budget {fam_budget:.0f} s")
            done = 0
            for j, case in enumerate(cases):
                if time.monotonic() - fam_t0 > fam_budget or time.monotonic() - t0 > budget:
                    left = len(cases) - j
                    notes.append(f"{fam}: time budget ({fam_budget:.0f} s) reached, {left} of "
                                 f"{len(cases)} cases skipped (run again with --resume)")
                    if bar is not None:
                        bar.update(left)
                    else:
                        _log(f"[{fam}] budget reached: {left} cases skipped")
                    break
                if bar is not None:
                    bar.set_postfix_str(f"{len(cases) - j} left in {fam}", refresh=False)
                row = measure_case(case, ctx, env, refresh_clocks=(j == 0))
                store.append(row)
                written_rows.append(row)
                done += 1
                if bar is not None:
                    bar.update(1)
                hard = is_cuda and (j % 25 == 24 or (row.get("bytes") or 0) > 2e9 or row.get("error"))
                _free(is_cuda, hard)
            ctx.attention_cache = None
            _free(is_cuda, True)
            fam_times[fam] = time.monotonic() - fam_t0
            if bar is None and progress:
                _log(f"[{fam}] {done} cases in {fam_times[fam]:.1f} s")
    finally:
        if bar is not None:
            bar.close()
        timer.close()
        write_json_atomic(out_dir / ENVIRONMENT, env.document(
            status="done", suite=suite, started_at=started, finished_at=now_iso(), nproc=nproc,
            notes=notes, rows_written=store.written,
            families={k: len(v) for k, v in families.items()},
            family_seconds={k: round(v, 2) for k, v in fam_times.items()},
            wall_seconds=round(time.monotonic() - t0, 2)))

    print(_summary(written_rows))
    for n in notes:
        print(f"note: {n}")
    print(f"{store.written} rows written to {path} in {time.monotonic() - t0:.1f} s")
    return store.written


if __name__ == "__main__":
    # ``python -m perfmodel.measure.suite ...`` is ``perfmodel calibrate ...``: one command line. The program
    # sits above every layer; the module itself never imports the CLI.
    from ..cli import main as cli_main

    raise SystemExit(cli_main(["calibrate", *sys.argv[1:]]))
