"""Collective and compute-communication overlap benchmarks over torch.distributed (NCCL on GPUs, gloo on CPU).

``launch()`` (called by the suite's collective family when ``--nproc N`` > 1) starts
``python -m torch.distributed.run --standalone --nproc_per_node N -m perfmodel.measure.collectives``;
each rank uses cuda:LOCAL_RANK with NCCL, or the CPU with gloo. Rank 0 appends the rows to
``measurements.jsonl`` as each case is measured (resumable: ids already there are skipped).

What runs, in this order (so a run cut by its time budget keeps the most useful rows):

1. ``collective`` rows, every other size first: all_reduce, all_gather, reduce_scatter, all_to_all and
   p2p (each rank sends its buffer to the next rank of the group and receives from the previous one: the
   pair exchange at world 2, a pipeline ring shift above) over every world size 2..N, each a
   sub-communicator of the first w ranks. ``bytes`` is the per-rank input buffer (rounded down so every
   rank's share is whole); ``bus_bytes`` the nccl-tests bus-bandwidth bytes.
2. ``overlap`` rows (``perfmodel.cost.overlap`` fits its parameters to them):
   - ``stream``: the collective on a second stream, then an independent GEMM on the main stream; the row
     holds each alone (``gemm_s``, ``comm_s``) and, run together, when each finished
     (``gemm_overlapped_s``, ``comm_overlapped_s``; ``time_s`` is the later of the two).
   - ``decomposed``: a GEMM split into ``chunks`` row blocks, each block's output all-reduced (or
     reduce-scattered) on a second stream while the next block computes, as async tensor parallelism
     pipelines it; ``time_s`` is the whole pipeline, ``gemm_chunks_s`` / ``comm_chunks_s`` the chunks
     back to back alone, ``gemm_s`` / ``comm_s`` the unsplit GEMM and collective.
3. The other half of the collective sizes.
4. ``tp_layer`` rows, for validation only (never fitted): a whole Llama-style decoder layer shard at TP =
   the world size (``perfmodel.measure.layers``) with its two all-reduces (after the attention output
   projection and after the down projection) over the group; prefill and decode eager, then decode
   replayed from a CUDA graph with the NCCL all-reduces captured in it (last: a failed capture cannot spoil
   other rows). ``perfmodel fit`` reports their error in ``provenance.collectives.tp_layers``.

Timing: every rep, the group's ranks synchronize and pass a barrier; on CUDA a ~100 us
``torch.cuda._sleep`` is enqueued first (so events time the GPU work, not the host enqueueing it) and
the op runs between CUDA events; on CPU between ``perf_counter`` reads (gloo runs an async collective on
its own thread, so overlap is real there too, if meaningless in size). A rep's time is the slowest
rank's; rows hold the median and p10/p90.

Every process started here has NVLink multicast off (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``): the lent multi-GPU machines need it,
so NVLS (NVLink SHARP) collectives are never measured here.

``python -m perfmodel.measure.collectives --plan --nproc 8`` prints the cases and a rough time
estimate without torch.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .shapes import (COLLECTIVE_OPS, OVERLAP_METHODS, collective_passes, collective_sizes, collective_worlds,
                     overlap_cases, overlap_worlds, tp_layer_cases, tp_layer_worlds)
from .store import MEASUREMENTS, Store, make_id, read_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("collective", "overlap", "tp_layer")
# The lent multi-GPU machines require NVLink multicast off in every process (NCCL's NVLS algorithms,
# PyTorch symmetric memory, NVSHMEM); set for the launcher, torchrun and every rank, whatever the caller had.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MEMORY_SHARE = 0.85  # a case whose buffers need more than this share of the free device memory is skipped


def force_multicast_off(env: dict[str, str] | None = None) -> dict[str, str]:
    target = os.environ if env is None else env
    target.update(MULTICAST_OFF)
    return target


# ---------------------------------------------------------------------------------------------
# the plan (pure Python: the launcher, --plan and the tests use it without torch)
# ---------------------------------------------------------------------------------------------

def element_bytes(device: str) -> int:
    return 2 if device.startswith("cuda") else 4  # bf16 on GPUs, fp32 on CPU (gloo has no bf16 sum everywhere)


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def collective_params(op: str, target_bytes: int, world: int, device: str) -> dict[str, Any] | None:
    e = element_bytes(device)
    numel = (target_bytes // e) // world * world
    if numel <= 0:
        return None
    return {"op": op, "bytes": numel * e, "world_size": world, "backend": backend_for(device)}


def overlap_params(case: dict[str, Any], world: int, device: str) -> dict[str, Any] | None:
    """The case at this world size: rows rounded so every chunk (and, reduce-scattered, every rank's
    share of it) is whole."""
    p = dict(case)
    e = element_bytes(device)
    if p["method"] == "decomposed":
        unit = p["chunks"] * (world if p["op"] == "reduce_scatter" else 1)
        p["m"] = p["m"] // unit * unit
        if p["m"] <= 0:
            return None
        p["bytes"] = p["m"] * p["n"] * e
    else:
        numel = (p["bytes"] // e) // world * world
        if numel <= 0:
            return None
        p["bytes"] = numel * e
    p.update(world_size=world, backend=backend_for(device), dtype="bf16" if e == 2 else "fp32")
    return p


def footprint_bytes(kind: str, p: dict[str, Any], device: str) -> float:
    """Device bytes one rank allocates for a case (inputs, outputs, the copy all_reduce restores from)."""
    b, w = float(p["bytes"]), p["world_size"]
    comm = {"all_reduce": 2 * b, "all_gather": (1 + w) * b, "reduce_scatter": 2 * b + b / w,
            "all_to_all": 2 * b, "p2p": 2 * b}[p["op"]]
    if kind == "overlap":
        e = element_bytes(device)
        comm += (p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"]) * e
    return comm


def tp_layer_params(case: dict[str, Any], world: int, device: str) -> dict[str, Any] | None:
    if case["heads"] % world:
        return None  # TP must split the heads evenly
    p = dict(case, tp=world, world_size=world, backend=backend_for(device))
    if not device.startswith("cuda"):
        p["dtype"] = "fp32"  # gloo's sum takes fp32 everywhere
    return p


def tp_layer_footprint(p: dict[str, Any], device: str) -> float:
    h, d, tp = p["hidden"], p["head_dim"], p["tp"]
    nh, nkv, inter = max(1, p["heads"] // tp), max(1, p["kv_heads"] // tp), p["intermediate"] // tp
    e = element_bytes(device)
    weights = h * (nh + 2 * nkv) * d + nh * d * h + 3 * h * inter
    tokens = p["batch"] * p["seq"]
    kv = 2 * p["batch"] * nkv * (p["context"] + 1) * d
    acts = tokens * (4 * h + 3 * inter + (nh + 2 * nkv) * d)
    return float((weights + kv + acts) * e)


def plan_tasks(suite: str, device: str, nproc: int, *, families=FAMILIES, ops=COLLECTIVE_OPS,
               max_bytes: float | None = None, worlds: list[int] | None = None) -> list[tuple[str, dict]]:
    """(kind, params) in run order: the first half of the collective sizes, the overlap cases, the rest of
    the sizes, the TP-layer cases. ``worlds`` given: every family at those world sizes (1 too: a one-GPU smoke test of the code
    path, where NCCL's single-rank collectives are local copies and p2p has no peer)."""
    explicit = worlds is not None
    worlds = [w for w in (worlds or collective_worlds(nproc)) if (1 if explicit else 2) <= w <= nproc]
    sizes = [s for s in collective_sizes(suite, device) if max_bytes is None or s <= max_bytes]
    tasks: list[tuple[str, dict]] = []

    def collectives(pass_sizes):
        if "collective" not in families:
            return
        for w in worlds:
            for op in ops:
                if op == "p2p" and w < 2:
                    continue
                for s in pass_sizes:
                    p = collective_params(op, s, w, device)
                    if p is not None:
                        tasks.append(("collective", p))

    first, second = collective_passes(sizes)
    collectives(first)
    if "overlap" in families:
        for w in (worlds if explicit else [w for w in overlap_worlds(nproc) if w in worlds]):
            for case in overlap_cases(suite, device):
                if case["op"] not in ops or case["method"] not in OVERLAP_METHODS:
                    continue
                if max_bytes is not None and case["bytes"] > max_bytes:
                    continue
                p = overlap_params(case, w, device)
                if p is not None:
                    tasks.append(("overlap", p))
    collectives(second)
    if "tp_layer" in families and "all_reduce" in ops:
        # last, and CUDA-graph captures of NCCL collectives after everything else: a capture that fails
        # cannot spoil other rows
        layers = []
        for w in (worlds if explicit else [w for w in tp_layer_worlds(nproc) if w in worlds]):
            for case in tp_layer_cases(suite, device):
                p = tp_layer_params(case, w, device)
                if p is not None:
                    layers.append(("tp_layer", p))
        tasks += sorted(layers, key=lambda kp: bool(kp[1].get("graph")))
    seen: set[str] = set()
    out = []
    for kind, p in tasks:
        i = make_id(kind, p)
        if i not in seen:
            seen.add(i)
            out.append((kind, p))
    return out


def bus_bytes(op: str, nbytes: float, world: int) -> float:
    """nccl-tests' bus bytes for a per-rank input of ``nbytes``: what crosses each rank's link."""
    w = world
    if op == "all_reduce":
        return 2.0 * (w - 1) / w * nbytes
    if op == "all_gather":
        return float((w - 1) * nbytes)  # the gathered output is w * nbytes
    if op == "p2p":
        return float(nbytes)
    return (w - 1) / w * nbytes  # reduce_scatter, all_to_all


def min_bytes(op: str, nbytes: int, world: int) -> float:
    """Bytes each rank reads and writes at least (its input once, its output once)."""
    if op == "all_gather":
        return float(nbytes + nbytes * world)
    if op == "reduce_scatter":
        return float(nbytes + nbytes // world)
    return 2.0 * nbytes


# rough planning figures for an 8-GPU H200 node (estimates: NCCL small-message latency ~20 us, bus
# bandwidth ~370 GB/s; per rep the barrier, synchronize and spin cost ~0.25 ms)
_PLAN_ALPHA_S, _PLAN_BUS_BW, _PLAN_REP_OVERHEAD_S, _PLAN_CASE_OVERHEAD_S = 20e-6, 370e9, 0.25e-3, 0.03


def estimate_task_s(kind: str, p: dict[str, Any], target_s: float) -> float:
    if kind == "tp_layer":
        return 1.0  # weights, a warm-up, for decode a graph capture, then ~50 ms of reps
    if kind == "overlap":
        t = (2 * p["m"] * p["n"] * p["k"]) / 700e12 + _PLAN_ALPHA_S + bus_bytes(p["op"], p["bytes"], p["world_size"]) / _PLAN_BUS_BW
        reps = max(5, min(50, round(target_s / t)))
        return _PLAN_CASE_OVERHEAD_S + 5 * (reps + 2) * (t + _PLAN_REP_OVERHEAD_S)
    t = _PLAN_ALPHA_S + bus_bytes(p["op"], p["bytes"], p["world_size"]) / _PLAN_BUS_BW
    reps = max(10, min(200, round(target_s / t)))
    return _PLAN_CASE_OVERHEAD_S + (reps + 6) * (t + _PLAN_REP_OVERHEAD_S)


# ---------------------------------------------------------------------------------------------
# the launcher (parent side; no torch import needed)
# ---------------------------------------------------------------------------------------------

def launch(device: str, suite: str, out_dir: Path, nproc: int, *, time_budget_s: float,
           timeout_s: float | None = None, extra_args: list[str] | None = None) -> tuple[int, int, str]:
    """Run the collective and overlap benchmarks on nproc ranks; returns (returncode, rows written, note).
    ``extra_args`` go to the worker (--ops, --max-bytes, --worlds, --families)."""
    out_dir = Path(out_dir)
    before = len(read_rows(out_dir / MEASUREMENTS))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc), "-m", "perfmodel.measure.collectives",
           "--out", str(out_dir), "--device", device, "--suite", suite,
           "--time-budget", f"{max(1.0, time_budget_s):.1f}", *(extra_args or [])]
    env = force_multicast_off(os.environ.copy())
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

class _Works:
    """Several async handles waited as one (p2p's send and receive, an emulated op's second step)."""

    def __init__(self, works, then: Callable[[], None] | None = None):
        self.works = [w for w in works if w is not None]
        self.then = then

    def wait(self):
        for w in self.works:
            w.wait()
        if self.then is not None:
            self.then()
        return True


def candidates(op: str, dist, group, world: int, rank: int, x) -> list[Callable[[], tuple]]:
    """Ways to run ``op`` on input ``x`` over ``group`` (``rank`` is this rank's index in it), best first;
    each builder returns (run, prep, impl) where ``run(async_op)`` issues the op (returning a handle with
    ``wait()`` when async). Later ones cover backends (or torch versions) that lack the tensor forms."""
    import torch

    n = x.numel()
    c: list[Callable[[], tuple]] = []
    if op == "all_reduce":
        def b0():
            src = x.clone()
            return (lambda a=False: dist.all_reduce(x, group=group, async_op=a)), (lambda: x.copy_(src)), "all_reduce"
        c.append(b0)
    elif op == "all_gather":
        out = x.new_empty(n * world)
        for name in ("all_gather_single", "all_gather_into_tensor"):  # the first is the newer name
            f = getattr(dist, name, None)
            if f is not None:
                c.append(lambda f=f, name=name: ((lambda a=False: f(out, x, group=group, async_op=a)), None, name))
        outs = list(out.chunk(world))
        c.append(lambda: ((lambda a=False: dist.all_gather(outs, x, group=group, async_op=a)), None,
                          "all_gather(list)"))
    elif op == "reduce_scatter":
        out = x.new_empty(n // world)
        for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
            f = getattr(dist, name, None)
            if f is not None:
                c.append(lambda f=f, name=name: ((lambda a=False: f(out, x, group=group, async_op=a)), None, name))
        ins = list(x.chunk(world))
        c.append(lambda: ((lambda a=False: dist.reduce_scatter(out, ins, group=group, async_op=a)), None,
                          "reduce_scatter(list)"))

        def emulated():
            buf = x.clone()
            share = n // world

            def finish():
                out.copy_(buf[rank * share:(rank + 1) * share])

            def run(a=False):
                w = dist.all_reduce(buf, group=group, async_op=a)
                if not a:
                    finish()
                    return None
                return _Works([w], finish)

            return run, (lambda: buf.copy_(x)), "emulated reduce_scatter (all_reduce + slice)"
        c.append(emulated)
    elif op == "all_to_all":
        out = torch.empty_like(x)
        c.append(lambda: ((lambda a=False: dist.all_to_all_single(out, x, group=group, async_op=a)), None,
                          "all_to_all_single"))
        outs = list(out.chunk(world))
        ins = list(x.chunk(world))
        c.append(lambda: ((lambda a=False: dist.all_to_all(outs, ins, group=group, async_op=a)), None,
                          "all_to_all(list)"))
    elif op == "p2p":
        out = torch.empty_like(x)
        ranks = list(range(world))  # groups are the first `world` ranks: group rank == global rank
        dst, src = ranks[(rank + 1) % world], ranks[(rank - 1) % world]

        def batched():
            def run(a=False):
                ops = [dist.P2POp(dist.isend, x, dst, group), dist.P2POp(dist.irecv, out, src, group)]
                h = _Works(dist.batch_isend_irecv(ops))
                if not a:
                    h.wait()
                    return None
                return h
            return run, None, "batch_isend_irecv"

        def pairwise():
            def run(a=False):
                # lower rank sends first so blocking backends cannot deadlock
                if rank % 2 == 0:
                    h = _Works([dist.isend(x, dst, group=group), dist.irecv(out, src, group=group)])
                else:
                    h = _Works([dist.irecv(out, src, group=group), dist.isend(x, dst, group=group)])
                if not a:
                    h.wait()
                    return None
                return h
            return run, None, "isend/irecv"
        c += [batched, pairwise]
    else:
        raise ValueError(f"unknown collective {op!r}")
    return c


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.measure.collectives",
                                 description="collective and overlap benchmarks (one process a rank; "
                                             "--plan prints the cases without torch)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--suite", default="quick", choices=("quick", "full"))
    ap.add_argument("--time-budget", type=float, default=60.0)
    ap.add_argument("--target-s", type=float, default=None, help="timed seconds per case (reps fill it)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="collective,overlap")
    ap.add_argument("--ops", default=",".join(COLLECTIVE_OPS))
    ap.add_argument("--max-bytes", type=float, default=None, help="largest per-rank buffer")
    ap.add_argument("--worlds", default=None, help="world sizes, e.g. 2,4 (default 2..N; 1: a one-GPU smoke test)")
    ap.add_argument("--plan", action="store_true", help="print the cases and a time estimate, measure nothing")
    ap.add_argument("--nproc", type=int, default=None, help="with --plan: the ranks to plan for")
    args = ap.parse_args(argv)
    args.families = tuple(f for f in args.families.split(",") if f)
    args.ops = tuple(o for o in args.ops.split(",") if o)
    bad = [f for f in args.families if f not in FAMILIES] + [o for o in args.ops if o not in COLLECTIVE_OPS]
    if bad:
        ap.error(f"unknown families or ops: {', '.join(bad)}")
    args.worlds = [int(w) for w in args.worlds.split(",")] if args.worlds else None
    return args


def print_plan(args: argparse.Namespace) -> int:
    nproc = args.nproc or int(os.environ.get("WORLD_SIZE", "8"))
    tasks = plan_tasks(args.suite, args.device, nproc, families=args.families, ops=args.ops,
                       max_bytes=args.max_bytes, worlds=args.worlds)
    target = args.target_s if args.target_s is not None else (0.05 if args.suite == "full" else 0.01)
    by: dict[str, list[float]] = {}
    for kind, p in tasks:
        key = f"{kind}:{p.get('method', p.get('op', p.get('phase')))}"
        by.setdefault(key, []).append(estimate_task_s(kind, p, target))
    print(f"{'cases':<26}{'n':>6}{'est_s':>9}")
    for key, ts in by.items():
        print(f"{key:<26}{len(ts):>6}{sum(ts):>9.1f}")
    total = sum(sum(v) for v in by.values())
    print(f"{'total':<26}{len(tasks):>6}{total:>9.1f}   (rough: an {nproc}-GPU H200 node; plus start-up and "
          f"one communicator per world size)")
    return 0


class _Worker:
    """One rank: the process group, a sub-communicator per world size, and the timing loops."""

    def __init__(self, args: argparse.Namespace):
        import datetime

        import torch
        import torch.distributed as dist

        from .environment import Environment

        self.args, self.torch, self.dist = args, torch, dist
        self.t_start = time.monotonic()
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        self.cuda = args.device.startswith("cuda")
        self.backend = backend_for(args.device)
        timeout = datetime.timedelta(seconds=120)  # a hung collective ends the run instead of the budget
        if self.cuda:
            torch.cuda.set_device(local)
            self.dev = f"cuda:{local}"
            self.local = local
            try:
                dist.init_process_group("nccl", device_id=torch.device(self.dev), timeout=timeout)
            except TypeError:
                dist.init_process_group("nccl", timeout=timeout)
        else:
            self.dev, self.local = "cpu", None
            dist.init_process_group("gloo", timeout=timeout)
        self.worlds = [w for w in (args.worlds or collective_worlds(self.world))
                       if (1 if args.worlds else 2) <= w <= self.world]
        # every rank creates every group, in the same order (torch.distributed requires it)
        self.groups = {w: (None if w == self.world else dist.new_group(list(range(w)))) for w in sorted(self.worlds)}
        self.store = Store(Path(args.out), resume=True) if self.rank == 0 else None
        self.env = Environment(self.dev) if self.rank == 0 else None
        self.target = args.target_s if args.target_s is not None else (0.05 if args.suite == "full" else 0.01)
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        torch.manual_seed(1234 + self.rank)
        self.free_bytes = float("inf")
        if self.cuda:
            try:
                self.free_bytes = float(torch.cuda.mem_get_info()[0])
            except Exception:
                pass
        self.spin_cycles = 0
        if self.cuda and hasattr(torch.cuda, "_sleep"):
            try:
                torch.cuda._sleep(1000)
                torch.cuda.synchronize()
                self.spin_cycles = 200_000  # ~100 us at 2 GHz
            except Exception:
                self.spin_cycles = 0
        self.comm_stream = torch.cuda.Stream() if self.cuda else None
        nccl = ""
        if self.cuda:
            try:
                nccl = " NCCL " + ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:
                pass
        self.impl_note = f"{self.backend}{nccl}, {str(self.dtype).replace('torch.', '')}"
        self.written = 0

    # --- small collective helpers (on the group that runs the case) ---------------------------

    def bcast(self, vals: list[float]) -> list[float]:
        t = self.torch.tensor(vals, dtype=self.torch.float64, device=self.dev)
        self.dist.broadcast(t, 0)
        return t.tolist()

    def maxed(self, vals: list[float], group) -> list[float]:
        t = self.torch.tensor(vals, dtype=self.torch.float64, device=self.dev)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=group)
        return t.tolist()

    def barrier(self, group) -> None:
        if self.cuda:
            self.dist.barrier(group=group, device_ids=[self.local])
        else:
            self.dist.barrier(group=group)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def spin(self) -> None:
        # keep the GPU busy ~100 us while the host enqueues the case, so events time the GPU work
        if self.spin_cycles:
            self.torch.cuda._sleep(self.spin_cycles)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    # --- one rep of each measurement: seconds (or a tuple of them) -------------------------------

    def rep_comm(self, run, prep, group) -> float:
        """One collective, issued from the comm stream (as the overlap reps issue it)."""
        torch = self.torch
        if prep is not None:
            prep()
        self.sync()
        self.barrier(group)
        if not self.cuda:
            t0 = time.perf_counter()
            run(False)
            return time.perf_counter() - t0
        self.spin()
        e0, e1 = self.event(), self.event()
        e0.record()
        self.comm_stream.wait_event(e0)
        with torch.cuda.stream(self.comm_stream):
            run(False)
        e1.record(self.comm_stream)
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3

    def rep_compute(self, fns: list[Callable[[], Any]], group) -> float:
        """GEMMs back to back on the main stream."""
        self.sync()
        self.barrier(group)
        if not self.cuda:
            t0 = time.perf_counter()
            for f in fns:
                f()
            return time.perf_counter() - t0
        self.spin()
        e0, e1 = self.event(), self.event()
        e0.record()
        for f in fns:
            f()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3

    def rep_comms(self, runs: list[Callable], group) -> float:
        """Collectives back to back on the comm stream."""
        self.sync()
        self.barrier(group)
        if not self.cuda:
            t0 = time.perf_counter()
            for r in runs:
                r(False)
            return time.perf_counter() - t0
        torch = self.torch
        self.spin()
        e0, e1 = self.event(), self.event()
        e0.record()
        self.comm_stream.wait_event(e0)
        with torch.cuda.stream(self.comm_stream):
            for r in runs:
                r(False)
        e1.record(self.comm_stream)
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3

    def rep_stream(self, run, prep, gemm, group) -> tuple[float, float]:
        """The collective on the comm stream, then the GEMM on the main stream: (GEMM done, collective done),
        both from the common start."""
        torch = self.torch
        if prep is not None:
            prep()
        self.sync()
        self.barrier(group)
        if not self.cuda:
            t0 = time.perf_counter()
            handle = run(True)
            done: dict[str, Any] = {}

            def waiter():
                try:
                    if handle is not None:
                        handle.wait()
                except Exception as exc:  # surfaced below
                    done["error"] = exc
                done["t"] = time.perf_counter()

            th = threading.Thread(target=waiter)
            th.start()
            gemm()
            tg = time.perf_counter()
            th.join()
            if "error" in done:
                raise done["error"]
            return tg - t0, done["t"] - t0
        self.spin()
        e0, ec, eg = self.event(), self.event(), self.event()
        e0.record()
        self.comm_stream.wait_event(e0)
        with torch.cuda.stream(self.comm_stream):
            run(False)
        ec.record(self.comm_stream)
        gemm()
        eg.record()
        ec.synchronize()
        eg.synchronize()
        return e0.elapsed_time(eg) / 1e3, e0.elapsed_time(ec) / 1e3

    def rep_pipeline(self, gemms: list[Callable], comms: list[Callable], group) -> float:
        """GEMM chunk j on the main stream, then its collective on the comm stream while chunk j+1 computes."""
        torch = self.torch
        self.sync()
        self.barrier(group)
        if not self.cuda:
            t0 = time.perf_counter()
            handles = []
            for g, c in zip(gemms, comms):
                g()
                handles.append(c(True))
            for h in handles:
                if h is not None:
                    h.wait()
            return time.perf_counter() - t0
        self.spin()
        e0, e1 = self.event(), self.event()
        e0.record()
        main = torch.cuda.current_stream()
        for g, c in zip(gemms, comms):
            g()
            ej = torch.cuda.Event()
            ej.record()
            self.comm_stream.wait_event(ej)
            with torch.cuda.stream(self.comm_stream):
                c(False)
        main.wait_stream(self.comm_stream)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3

    def timed(self, rep: Callable[[], Any], group, min_reps: int, max_reps: int) -> list[list[float]]:
        """Warm up, agree on the reps (the max over ranks), time; per rep the slowest rank's values.
        Returns one list per value ``rep`` returns."""
        from .timing import choose_reps

        def as_tuple(v):
            return v if isinstance(v, tuple) else (v,)

        for _ in range(2):
            rep()
        est = statistics.median(max(as_tuple(rep())) for _ in range(3))
        reps = int(self.maxed([float(choose_reps(est, self.target, min_reps, max_reps))], group)[0])
        samples = [as_tuple(rep()) for _ in range(reps)]
        k = len(samples[0])
        flat = self.maxed([v for s in samples for v in s], group)
        return [flat[j::k] for j in range(k)]

    def build(self, op: str, group, w: int, x) -> tuple[Callable, Callable | None, str]:
        """The first form of ``op`` that runs here (tried once, so a backend without it falls through)."""
        tried = []
        for b in candidates(op, self.dist, group, w, self.rank, x):
            try:
                run, prep, impl = b()
                if prep is not None:
                    prep()
                run(False)
                self.sync()
                return run, prep, impl
            except Exception as exc:  # this form is not supported here: try the next
                tried.append(f"{type(exc).__name__}: {str(exc)[:100]}")
        raise RuntimeError("; ".join(tried) or "no implementation")

    # --- cases ----------------------------------------------------------------------------------

    def measure_collective(self, p: dict, group, row: dict) -> None:
        torch = self.torch
        w, nbytes = p["world_size"], p["bytes"]
        x = torch.randn(nbytes // element_bytes(self.args.device), device=self.dev, dtype=self.dtype)
        run, prep, impl = self.build(p["op"], group, w, x)
        row["impl"] = f"torch.distributed.{impl} [{self.impl_note}]"
        (samples,) = self.timed(lambda: self.rep_comm(run, prep, group), group, 10, 200)
        row.update(self._stats(samples))

    def measure_overlap(self, p: dict, group, row: dict) -> None:
        torch = self.torch
        w, m, n, k = p["world_size"], p["m"], p["n"], p["k"]
        a = torch.randn(m, k, device=self.dev, dtype=self.dtype)
        b = torch.randn(k, n, device=self.dev, dtype=self.dtype)
        c = torch.empty(m, n, device=self.dev, dtype=self.dtype)

        def gemm_of(rows: slice | None = None):
            if rows is None:
                return lambda: torch.matmul(a, b, out=c)
            ar, cr = a[rows], c[rows]
            return lambda: torch.matmul(ar, b, out=cr)

        gemm = gemm_of()
        t_gemm = self.timed(lambda: self.rep_compute([gemm], group), group, 5, 50)[0]
        if p["method"] == "stream":
            x = torch.randn(p["bytes"] // element_bytes(self.args.device), device=self.dev, dtype=self.dtype)
            run, prep, impl = self.build(p["op"], group, w, x)
            t_comm = self.timed(lambda: self.rep_comm(run, prep, group), group, 5, 50)[0]
            t_g, t_c = self.timed(lambda: self.rep_stream(run, prep, gemm, group), group, 5, 50)
            wall = [max(g, cc) for g, cc in zip(t_g, t_c)]
            row.update(self._stats(wall))
            row.update(gemm_s=statistics.median(t_gemm), comm_s=statistics.median(t_comm),
                       gemm_overlapped_s=statistics.median(t_g), comm_overlapped_s=statistics.median(t_c))
        else:
            chunks = p["chunks"]
            rows_per = m // chunks
            gemms = [gemm_of(slice(j * rows_per, (j + 1) * rows_per)) for j in range(chunks)]
            full_run, _, impl = self.build(p["op"], group, w, c.view(-1))
            comm_runs = [self.build(p["op"], group, w, c[j * rows_per:(j + 1) * rows_per].view(-1))[0]
                         for j in range(chunks)]
            t_comm = self.timed(lambda: self.rep_comms([full_run], group), group, 5, 50)[0]
            t_gc = self.timed(lambda: self.rep_compute(gemms, group), group, 5, 50)[0]
            t_cc = self.timed(lambda: self.rep_comms(comm_runs, group), group, 5, 50)[0]
            wall = self.timed(lambda: self.rep_pipeline(gemms, comm_runs, group), group, 5, 50)[0]
            row.update(self._stats(wall))
            row.update(gemm_s=statistics.median(t_gemm), comm_s=statistics.median(t_comm),
                       gemm_chunks_s=statistics.median(t_gc), comm_chunks_s=statistics.median(t_cc))
        row["impl"] = f"torch.matmul + torch.distributed.{impl} on a second stream [{self.impl_note}]"

    def measure_tp_layer(self, p: dict, group, row: dict) -> None:
        """A decoder layer shard with its two all-reduces over the group (plain PyTorch, as the layer family
        runs it: perfmodel.measure.layers)."""
        import torch.nn.functional as F

        from . import layers as L
        from .kernels import rms_norm
        from .timing import capture_graph

        torch, dist = self.torch, self.dist

        class TPLayer(L.DecoderLayer):
            def _mlp(self_, x, a):
                b, s, _ = x.shape
                o = a.transpose(1, 2).reshape(b, s, self_.nh * self_.d) @ self_.w_o
                dist.all_reduce(o, group=group)
                x = x + o
                y = rms_norm(x, self_.n2)
                g, u = (y @ self_.w_gu).split([self_.inter, self_.inter], dim=-1)
                down = (F.silu(g) * u) @ self_.w_down
                dist.all_reduce(down, group=group)
                return x + down

        class Ctx:  # what DecoderLayer reads of the suite's context
            device = self.dev

        ctx = Ctx()
        step = L.eager_step(p, ctx, TPLayer(p, ctx))
        out = step()
        finite = bool(torch.isfinite(out).all().item())
        run, impl = step, "eager"
        if p["phase"] == "decode" and p.get("graph"):
            graph, _ = capture_graph(step)
            run, impl = graph.replay, "cuda-graph replay (NCCL all-reduces captured)"
        (samples,) = self.timed(lambda: self.rep_compute([run], group), group, 10, 200)
        row.update(self._stats(samples))
        row["flops"], row["bytes"] = L.layer_counts(p)
        row["check"] = "skipped" if finite else "FAIL non-finite output"
        row["impl"] = f"plain PyTorch decoder layer with 2 all_reduce, {impl} [{self.impl_note}]"

    @staticmethod
    def _stats(samples: list[float]) -> dict[str, Any]:
        from .timing import quantile

        return {"time_s": statistics.median(samples), "p10_s": quantile(samples, 0.1),
                "p90_s": quantile(samples, 0.9), "reps": len(samples)}

    def row_for(self, kind: str, p: dict) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": make_id(kind, p), "kind": kind, "params": p, "time_s": None, "p10_s": None, "p90_s": None,
            "reps": 0, "check": "skipped", "error": None, "impl": None,
        }
        if kind == "collective":
            op, nbytes, w = p["op"], p["bytes"], p["world_size"]
            row["group"] = f"{op}-w{w}"
            row["flops"] = float((nbytes // element_bytes(self.args.device)) * (w - 1)) \
                if op in ("all_reduce", "reduce_scatter") else 0.0
            row["bytes"] = min_bytes(op, nbytes, w)
            row["bus_bytes"] = bus_bytes(op, nbytes, w)
        elif kind == "tp_layer":
            row["group"] = f"{p['model']}-tp{p['tp']}"
            row["flops"] = row["bytes"] = None  # filled by the measurement (perfmodel.measure.layers counts)
        else:
            row["group"] = f"overlap-{p['method']}-w{p['world_size']}"
            row["flops"] = 2.0 * p["m"] * p["n"] * p["k"]
            row["bytes"] = None
            row["bus_bytes"] = bus_bytes(p["op"], p["bytes"], p["world_size"])
        return row

    def run(self, tasks: list[tuple[str, dict]]) -> int:
        from .environment import now_iso

        torch = self.torch
        skipped_budget = skipped_memory = 0
        for kind, p in tasks:
            w = p["world_size"]
            row_id = make_id(kind, p)
            over = (time.monotonic() - self.t_start) > self.args.time_budget
            need = tp_layer_footprint(p, self.args.device) if kind == "tp_layer" else footprint_bytes(kind, p, self.args.device)
            too_big = need > MEMORY_SHARE * self.free_bytes
            skip, stop, big = self.bcast([float(self.rank == 0 and row_id in self.store),
                                          float(self.rank == 0 and over), float(self.rank == 0 and too_big)])
            if stop:
                skipped_budget += 1
                continue
            if big:
                skipped_memory += 1
                continue
            if skip or self.rank >= w:
                continue  # ranks outside this case's group go straight on to the next case
            group = self.groups[w]
            row = self.row_for(kind, p)
            err_local = ""
            try:
                {"collective": self.measure_collective, "overlap": self.measure_overlap,
                 "tp_layer": self.measure_tp_layer}[kind](p, group, row)
            except Exception as exc:
                err_local = f"{type(exc).__name__}: {exc}"[:300]
            # every rank of the group must agree whether the case worked (a rank that failed before its
            # timing collectives leaves the others waiting: the group timeout ends the run then)
            failed = self.maxed([1.0 if err_local else 0.0], group)[0]
            if self.rank == 0:
                if failed:
                    row.update({"time_s": None, "p10_s": None, "p90_s": None, "reps": 0,
                                "error": err_local or "failed on another rank"})
                elif self.written == 0:
                    self.env.refresh_clocks()
                row["env"] = self.env.row_env()
                row["measured_at"] = now_iso()
                self.store.append(row)
                self.written += 1
                if not failed:
                    if kind == "tp_layer":
                        what = f"{p['model']} {p['phase']} b={p['batch']} s={p['seq']} ctx={p['context']}"
                    else:
                        what = f"{p['op']:<15} {p['bytes']:>12} B"
                        if kind == "overlap":
                            what += f"  {p['method']} {p['m']}x{p['n']}x{p['k']} /{p['chunks']}"
                    print(f"[{kind}] {what}  w={w}  {row['time_s'] * 1e6:10.1f} us", file=sys.stderr, flush=True)
                else:
                    print(f"[{kind}] {row_id}: {row['error']}", file=sys.stderr, flush=True)
            if self.cuda:
                torch.cuda.empty_cache()
        if self.rank == 0:
            if skipped_budget:
                print(f"[collective] time budget reached: {skipped_budget} cases skipped (run again with --resume)",
                      file=sys.stderr)
            if skipped_memory:
                print(f"[collective] {skipped_memory} cases skipped: buffers over {MEMORY_SHARE:.0%} of free "
                      f"device memory", file=sys.stderr)
        return self.written

    def close(self) -> None:
        try:
            self.dist.barrier()
            self.dist.destroy_process_group()
        except Exception:
            pass


def worker(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.plan:
        return print_plan(args)
    if not args.out:
        print("--out is required", file=sys.stderr)
        return 2
    force_multicast_off()
    w = _Worker(args)
    try:
        tasks = plan_tasks(args.suite, args.device, w.world, families=args.families, ops=args.ops,
                           max_bytes=args.max_bytes, worlds=args.worlds)
        w.run(tasks)
    finally:
        w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(worker())
