"""Timing as the field does it.

CUDA: warm up (at least ``warmup_s`` and two calls), estimate one call, choose reps to fill
``target_s`` (clamped to [min_reps, max_reps]); then for each rep enqueue an L2 flush (zero a buffer
of max(2*L2, 256 MB)), record a start event, run, record an end event; synchronize once at the end.
Median, p10 and p90 of the per-rep event times.

CPU: time.perf_counter around each call, rotating among the input copies given, median.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch


@dataclass
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    reps: int
    samples: list[float] = field(default_factory=list, repr=False)


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), no numpy needed."""
    s = sorted(xs)
    if not s:
        return float("nan")
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> Timing:
    return Timing(
        median_s=statistics.median(samples),
        p10_s=quantile(samples, 0.10),
        p90_s=quantile(samples, 0.90),
        reps=len(samples),
        samples=list(samples),
    )


def timing_fields(t: Timing) -> dict:
    """A measurement row's timing columns."""
    return {"time_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps}


def choose_reps(est_s: float, target_s: float, min_reps: int, max_reps: int) -> int:
    if not (est_s > 0):
        return max_reps
    return int(max(min_reps, min(max_reps, round(target_s / est_s))))


def set_tf32(enabled: bool) -> None:
    """Set TF32 for cuBLAS matmuls explicitly (the legacy flag; the new API where the legacy fails)."""
    try:
        torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    except Exception:
        try:
            torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
        except Exception:
            pass


def cuda_sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class quiet_gc:
    """No garbage collection inside a timed region (a gen-2 pass over a model's objects takes 100s of ms);
    the garbage is collected after it, outside the timing."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        if self.was:
            gc.enable()
        return False


def settle_gc() -> None:
    """Collect, then freeze what survives (a model, torch, transformers) out of later collections."""
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()


def host_loop(device: str, fn: Callable[[], object], n: int, *, reps: int = 5, warmup: int = 2) -> dict:
    """Per call of ``n`` calls of ``fn`` back to back, µs: wall (after a sync), issue (before it: the host's own
    time where the host is the bottleneck) and device-elapsed (CUDA events; None on CPU); medians over ``reps``
    after ``warmup`` calls, GC off inside, and the fastest wall. No L2 flush: this is launch and host cost."""
    cuda = device.startswith("cuda")
    walls, issues, devs = [], [], []
    for _ in range(warmup):
        fn()
    for _ in range(reps):
        cuda_sync(device)
        with quiet_gc():
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t_issue = time.perf_counter() - t0
            if cuda:
                e1.record()
            cuda_sync(device)
            t_wall = time.perf_counter() - t0
        walls.append(t_wall / n * 1e6)
        issues.append(t_issue / n * 1e6)
        if cuda:
            devs.append(e0.elapsed_time(e1) * 1e3 / n)
    return {"wall_us": statistics.median(walls), "issue_us": statistics.median(issues),
            "device_us": statistics.median(devs) if devs else None, "wall_min_us": min(walls)}


class Timer:
    def __init__(
        self,
        device: str,
        *,
        target_s: float = 0.08,
        min_reps: int = 10,
        max_reps: int = 200,
        warmup_s: float = 0.025,
        min_warmup_calls: int = 2,
        flush: bool = True,
    ):
        self.device = device
        self.is_cuda = device.startswith("cuda")
        self.target_s = target_s
        self.min_reps = min_reps
        self.max_reps = max_reps
        self.warmup_s = warmup_s
        self.min_warmup_calls = min_warmup_calls
        self.flush_enabled = flush and self.is_cuda
        self._flush_buf = None
        if self.flush_enabled:
            l2 = 0
            try:
                l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                                 "L2_cache_size", 0) or 0)
            except Exception:
                l2 = 0
            nbytes = max(2 * l2, 256 * 1024 * 1024)
            self.flush_bytes = nbytes
            self._flush_buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    # -- helpers --------------------------------------------------------------------------------
    def flush(self) -> None:
        if self._flush_buf is not None:
            self._flush_buf.zero_()

    def _warmup_cuda(self, fn: Callable[[], object]) -> float:
        """Warm up; returns an estimate of one call in seconds (with events, no flush)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        calls = 0
        while True:
            fn()
            calls += 1
            if calls >= self.min_warmup_calls:
                torch.cuda.synchronize()
                if time.perf_counter() - t0 >= self.warmup_s:
                    break
            if calls >= 10000:
                torch.cuda.synchronize()
                break
        # a few event-timed calls, flushed, for the estimate
        n = 3
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends))

    # -- the timers -----------------------------------------------------------------------------
    def time(self, fns: Callable[[], object] | Sequence[Callable[[], object]], *,
             max_reps: int | None = None, target_s: float | None = None) -> Timing:
        """Time ``fns`` (one callable, or several equivalent ones over different input copies)."""
        if callable(fns):
            fns = [fns]
        fns = list(fns)
        max_reps = self.max_reps if max_reps is None else max_reps
        target_s = self.target_s if target_s is None else target_s
        if self.is_cuda:
            return self._time_cuda(fns[0], max_reps, target_s)
        return self._time_cpu(fns, max_reps, target_s)

    def _time_cuda(self, fn: Callable[[], object], max_reps: int, target_s: float) -> Timing:
        est = self._warmup_cuda(fn)
        reps = choose_reps(est, target_s, min(self.min_reps, max_reps), max_reps)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush()  # enqueued before the start event: outside the timed region
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
        return summarize(samples)

    def _time_cpu(self, fns: list[Callable[[], object]], max_reps: int, target_s: float) -> Timing:
        t0 = time.perf_counter()
        calls = 0
        while True:
            fns[calls % len(fns)]()
            calls += 1
            if calls >= max(self.min_warmup_calls, len(fns)) and time.perf_counter() - t0 >= self.warmup_s:
                break
            if calls >= 10000:
                break
        est = (time.perf_counter() - t0) / calls
        reps = choose_reps(est, target_s, min(self.min_reps, max_reps), max_reps)
        samples = []
        for i in range(reps):
            f = fns[i % len(fns)]
            t = time.perf_counter()
            f()
            samples.append(time.perf_counter() - t)
        return summarize(samples)

    def time_batched(self, fn: Callable[[], object], inner: int, *, repeats: int = 7) -> Timing:
        """Per-call time of ``fn`` when ``inner`` calls run back to back (no flush): launch cost."""
        fn()
        cuda_sync(self.device)
        samples = []
        if self.is_cuda:
            for _ in range(repeats):
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(inner):
                    fn()
                e.record()
                torch.cuda.synchronize()
                samples.append(s.elapsed_time(e) / 1e3 / inner)
        else:
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(inner):
                    fn()
                samples.append((time.perf_counter() - t) / inner)
        return summarize(samples)

    def close(self) -> None:
        self._flush_buf = None


def capture_graph(fn: Callable[[], object], *, warmup: int = 3):
    """Warm ``fn`` up on a side stream (as CUDA-graph capture requires), capture one call of it in a
    graph and replay it once; returns (graph, the call's output, which the graph keeps up to date)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out
