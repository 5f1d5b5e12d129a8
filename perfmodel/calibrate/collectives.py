"""Collective benchmarks over torch.distributed: all_reduce, all_gather, reduce_scatter, all_to_all.

``launch()`` (called by the suite when nproc > 1) starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m perfmodel.calibrate.collectives``
as a subprocess; each rank uses cuda:LOCAL_RANK with NCCL, or the CPU with gloo. Rank 0 appends the
rows to ``measurements.jsonl``. ``bytes`` in params is the per-rank input buffer size of the
collective (rounded down so every rank's share is whole, for any world size).

Timing: for each rep every rank passes a barrier, then the op runs between two events (CUDA) or
perf_counter reads (CPU); a rep's time is the slowest rank's (all_reduce MAX of the samples); the
row holds the median, p10 and p90 of those.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .shapes import COLLECTIVE_OPS, collective_sizes
from .store import MEASUREMENTS, Store, make_id, read_rows

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# the launcher (parent side; no torch import needed)
# ---------------------------------------------------------------------------------------------

def launch(device: str, suite: str, out_dir: Path, nproc: int, *, time_budget_s: float,
           timeout_s: float | None = None) -> tuple[int, int, str]:
    """Run the collective benchmark on nproc ranks; returns (returncode, rows written, note)."""
    out_dir = Path(out_dir)
    before = len(read_rows(out_dir / MEASUREMENTS))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc), "-m", "perfmodel.calibrate.collectives",
           "--out", str(out_dir), "--device", device, "--suite", suite,
           "--time-budget", f"{max(1.0, time_budget_s):.1f}"]
    env = os.environ.copy()
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if timeout_s is None:
        timeout_s = time_budget_s + 120.0
    note = ""
    try:
        proc = subprocess.run(cmd, env=env, cwd=str(REPO_ROOT), timeout=timeout_s,
                              stdout=sys.stderr, stderr=sys.stderr)
        rc = proc.returncode
        if rc != 0:
            note = f"collective subprocess exited {rc}"
    except subprocess.TimeoutExpired:
        rc = -9
        note = f"collective subprocess killed after {timeout_s:.0f} s"
    except Exception as exc:  # e.g. the interpreter could not be started
        rc = -1
        note = f"collective launch failed: {exc!r}"
    after = len(read_rows(out_dir / MEASUREMENTS))
    return rc, after - before, note


# ---------------------------------------------------------------------------------------------
# the worker (one per rank)
# ---------------------------------------------------------------------------------------------

def _candidates(op: str, dist, world: int, rank: int, x) -> list[Callable[[], tuple]]:
    """Ways to run ``op`` on input ``x``, best first; each builder returns (run, prep, impl).
    Later ones cover backends (or torch versions) that lack the tensor forms."""
    import torch

    n = x.numel()
    c: list[Callable[[], tuple]] = []
    if op == "all_reduce":
        def b0():
            src = x.clone()
            return (lambda: dist.all_reduce(x)), (lambda: x.copy_(src)), "all_reduce"
        c.append(b0)
    elif op == "all_gather":
        out = x.new_empty(n * world)
        for name in ("all_gather_single", "all_gather_into_tensor"):
            f = getattr(dist, name, None)
            if f is not None:
                c.append(lambda f=f, name=name: ((lambda: f(out, x)), None, name))
        outs = list(out.chunk(world))
        c.append(lambda: ((lambda: dist.all_gather(outs, x)), None, "all_gather(list)"))
    elif op == "reduce_scatter":
        out = x.new_empty(n // world)
        for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
            f = getattr(dist, name, None)
            if f is not None:
                c.append(lambda f=f, name=name: ((lambda: f(out, x)), None, name))
        ins = list(x.chunk(world))
        c.append(lambda: ((lambda: dist.reduce_scatter(out, ins)), None, "reduce_scatter(list)"))

        def emulated():
            buf = x.clone()

            def run():
                dist.all_reduce(buf)
                out.copy_(buf[rank * (n // world):(rank + 1) * (n // world)])

            return run, (lambda: buf.copy_(x)), "emulated reduce_scatter (all_reduce + slice)"
        c.append(emulated)
    elif op == "all_to_all":
        out = torch.empty_like(x)
        c.append(lambda: ((lambda: dist.all_to_all_single(out, x)), None, "all_to_all_single"))
        outs = list(out.chunk(world))
        ins = list(x.chunk(world))
        c.append(lambda: ((lambda: dist.all_to_all(outs, ins)), None, "all_to_all(list)"))
    else:
        raise ValueError(f"unknown collective {op!r}")
    return c


def _bus_bytes(op: str, nbytes: int, world: int) -> float:
    w = world
    if op == "all_reduce":
        return 2.0 * (w - 1) / w * nbytes
    if op == "all_gather":
        return float((w - 1) * nbytes)
    return (w - 1) / w * nbytes  # reduce_scatter, all_to_all


def _min_bytes(op: str, nbytes: int, world: int) -> float:
    if op == "all_gather":
        return float(nbytes + nbytes * world)
    if op == "reduce_scatter":
        return float(nbytes + nbytes // world)
    return 2.0 * nbytes


def worker(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--time-budget", type=float, default=60.0)
    ap.add_argument("--target-s", type=float, default=None)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    from .environment import Environment, now_iso
    from .timing import choose_reps, quantile

    t_start = time.monotonic()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)
        dev = f"cuda:{local}"
        backend = "nccl"
    else:
        dev = "cpu"
        backend = "gloo"
    try:
        if cuda:
            dist.init_process_group(backend, device_id=torch.device(dev))
        else:
            dist.init_process_group(backend)
    except TypeError:
        dist.init_process_group(backend)

    store = Store(Path(args.out), resume=True) if rank == 0 else None
    env = Environment(dev) if rank == 0 else None
    target = args.target_s if args.target_s is not None else (0.05 if args.suite == "full" else 0.01)
    dtype = torch.bfloat16 if cuda else torch.float32
    esize = 2 if cuda else 4
    torch.manual_seed(1234 + rank)

    def bcast(vals: list[float]) -> list[float]:
        t = torch.tensor(vals, dtype=torch.float64, device=dev)
        dist.broadcast(t, 0)
        return t.tolist()

    def maxed(vals: list[float]) -> list[float]:
        t = torch.tensor(vals, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    spin_cycles = 0
    if cuda and hasattr(torch.cuda, "_sleep"):
        try:
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            spin_cycles = 200_000  # ~100 us at 2 GHz
        except Exception:
            spin_cycles = 0

    def time_once(run, prep) -> float:
        if prep is not None:
            prep()
        sync()
        dist.barrier()
        if cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            if spin_cycles:
                # keep the GPU busy ~100 us while the host enqueues the op, so the events time
                # the collective rather than the host's launch latency (all ranks spin alike)
                torch.cuda._sleep(spin_cycles)
            s.record()
            run()
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / 1e3
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    written = 0
    skipped_budget = 0
    for op in COLLECTIVE_OPS:
        for target_bytes in collective_sizes(args.suite, args.device):
            numel = (target_bytes // esize) // world * world
            if numel <= 0:
                continue
            nbytes = numel * esize
            params = {"op": op, "bytes": nbytes, "world_size": world, "backend": backend}
            row_id = make_id("collective", params)
            over = (time.monotonic() - t_start) > args.time_budget
            skip, stop = bcast([float(rank == 0 and row_id in store),
                                float(rank == 0 and over)])
            if stop:
                skipped_budget += 1
                continue
            if skip:
                continue
            row: dict[str, Any] = {
                "id": row_id, "kind": "collective", "params": params, "group": f"{op}-w{world}",
                "time_s": None, "p10_s": None, "p90_s": None, "reps": 0, "check": "skipped",
                "error": None, "flops": float(numel * (world - 1)) if op in ("all_reduce", "reduce_scatter") else 0.0,
                "bytes": _min_bytes(op, nbytes, world), "bus_bytes": _bus_bytes(op, nbytes, world),
                "impl": None,
            }
            err_local = ""
            run = prep = None
            try:
                x = torch.randn(numel, device=dev).to(dtype)
                tried = []
                for build in _candidates(op, dist, world, rank, x):
                    try:
                        run, prep, impl = build()
                        if prep is not None:
                            prep()
                        run()
                        break
                    except Exception as exc:  # this form is not supported here: try the next
                        tried.append(f"{type(exc).__name__}: {str(exc)[:100]}")
                        run = None
                if run is None:
                    raise RuntimeError("; ".join(tried) or "no implementation")
                sync()
                row["impl"] = f"torch.distributed.{impl} [{backend}, {str(dtype).replace('torch.', '')}]"
            except Exception as exc:
                err_local = f"{type(exc).__name__}: {exc}"[:300]
            # every rank must agree whether to go on with this case
            failed = maxed([1.0 if err_local else 0.0])[0]
            if failed:
                if rank == 0:
                    row["error"] = err_local or "failed on another rank"
                    row["env"] = env.row_env()
                    row["measured_at"] = now_iso()
                    store.append(row)
                    written += 1
                run = prep = x = None
                continue
            try:
                # warm up ~ a few calls, estimate, agree on reps (the max over ranks)
                for _ in range(3):
                    time_once(run, prep)
                est = statistics.median(time_once(run, prep) for _ in range(3))
                reps = int(maxed([float(choose_reps(est, target, 10, 200))])[0])
                samples = [time_once(run, prep) for _ in range(reps)]
                samples = maxed(samples)
                if rank == 0:
                    row.update({"time_s": statistics.median(samples), "p10_s": quantile(samples, 0.1),
                                "p90_s": quantile(samples, 0.9), "reps": reps})
            except Exception as exc:  # a failure mid-timing: the group may be broken; record, stop
                if rank == 0:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    row["env"] = env.row_env()
                    row["measured_at"] = now_iso()
                    store.append(row)
                raise
            if rank == 0:
                if written == 0:
                    env.refresh_clocks()
                row["env"] = env.row_env()
                row["measured_at"] = now_iso()
                store.append(row)
                written += 1
                print(f"[collective] {op:<15} {nbytes:>12} B  w={world}  "
                      f"{row['time_s'] * 1e6:10.1f} us", file=sys.stderr, flush=True)
            run = prep = x = None
            if cuda:
                torch.cuda.empty_cache()
    if rank == 0 and skipped_budget:
        print(f"[collective] time budget reached: {skipped_budget} cases skipped", file=sys.stderr)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(worker())
