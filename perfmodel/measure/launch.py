"""Launch paths a step's kernels take, measured: what a kernel costs when the host is not in the way, and what
issuing one costs a C++ runtime rather than Python.

The launch family's first two modes (``perfmodel.measure.kernels.run_launch``) time tiny kernels issued from
Python (``eager``: the host binds, about 6 us a kernel on the lent H200) and replayed from a CUDA graph
(``graph``: about 1.1 us). Two questions lie between them, and engines sit there: TensorRT-LLM, vLLM and SGLang
run their prefill steps without CUDA graphs, issuing kernels from C++ (or from Python far ahead of the GPU). A
third mode times what every request's first token pays after its prefill.

- ``queued``: tiny kernels issued eagerly while the stream is held by a sleeping kernel, so that every launch is
  queued before the first runs; CUDA events around them then time the device's own per-kernel cost of stream
  launches (the front end fetching each launch), with the host out of the critical path.
- ``driver``: ``cuLaunchKernel`` of an empty kernel called through ``ctypes``, less a ``ctypes`` call of a
  trivial driver function (``cuCtxGetCurrent``): the host time a C++ runtime spends per launch.
- ``round_trip``: one sequence's logits to its token on the host (sampler kernels, copy, wait), greedy or top-p.

Each returns the family's row fields (``timing_fields``) plus what it checked. Imports torch.
"""
from __future__ import annotations

import ctypes
import time
from typing import Any

import torch

from .timing import Timing, summarize, timing_fields

QUEUED_INNER = 256  # launches queued behind one sleep: well under the driver's pending-launch queue
DRIVER_INNER = 2000
_NOOP_PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry perfmodel_noop()
{
    ret;
}
"""


def _sleep_cycles(seconds: float) -> int:
    """GPU clock cycles for ``torch.cuda._sleep`` to hold the stream about ``seconds`` (SM clock from the
    device properties; 2 GHz where it is not reported)."""
    try:
        hz = float(torch.cuda.get_device_properties(0).clock_rate) * 1e3  # kHz
    except (AttributeError, RuntimeError):
        hz = 0.0
    return int(seconds * (hz if hz > 0 else 2.0e9))


def queued(fn, *, inner: int = QUEUED_INNER, repeats: int = 7, issue_s_guess: float = 10e-6) -> dict[str, Any]:
    """Per-kernel device time of ``inner`` eager launches of ``fn`` (one kernel each) queued behind a sleep."""
    fn()
    torch.cuda.synchronize()
    samples, held = [], 0
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(_sleep_cycles(3.0 * inner * issue_s_guess))
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        # the sleep must still hold the stream now: else the host, not the queue, fed the kernels
        held += 0 if start.query() else 1
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    t = summarize(samples)
    return {**timing_fields(t), "queued_repeats": held,
            "impl": f"x.add_(1) on 1 element, {inner} launched eagerly behind torch.cuda._sleep, events around "
                    f"them; {held} of {repeats} repeats fully queued"}


class _Driver:
    """The CUDA driver API through ctypes: an empty kernel loaded from PTX into the current context."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the runtime makes the primary context current on this thread
        self.module = ctypes.c_void_p()
        self.func = ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(_NOOP_PTX)), "load")
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(self.func), self.module, b"perfmodel_noop"), "get")
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.ctx = ctypes.c_void_p()
        self.launch_fn = self.lib.cuLaunchKernel
        self.launch_fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [
            ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.launch_fn.restype = ctypes.c_int

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"CUDA driver call {what} returned {code}")

    def launch(self) -> int:
        return self.launch_fn(self.func, 1, 1, 1, 1, 1, 1, 0, self.stream, None, None)

    def trivial(self) -> int:
        return self.lib.cuCtxGetCurrent(ctypes.byref(self.ctx))

    def close(self) -> None:
        self.lib.cuModuleUnload(self.module)


def _loop_s(fn, inner: int) -> float:
    t = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t) / inner


def driver(*, inner: int = DRIVER_INNER, repeats: int = 7) -> dict[str, Any]:
    """Host time of one ``cuLaunchKernel`` (empty kernel, one thread), ctypes' own cost taken off."""
    d = _Driver()
    try:
        if d.launch() != 0:
            raise RuntimeError("cuLaunchKernel of the empty kernel failed")
        torch.cuda.synchronize()
        net, gross, base = [], [], []
        for _ in range(repeats):  # alternating, so that a drifting host clock hits both alike
            g = _loop_s(d.launch, inner)
            torch.cuda.synchronize()
            b = _loop_s(d.trivial, inner)
            gross.append(g)
            base.append(b)
            net.append(max(g - b, 0.0))
        # device side of the same launches, queued behind a sleep (the empty kernel: no work of its own)
        dev = queued(d.launch, repeats=repeats, issue_s_guess=max(gross))
    finally:
        torch.cuda.synchronize()
        d.close()
    t: Timing = summarize(net)
    return {**timing_fields(t), "gross_s": summarize(gross).median_s, "ctypes_s": summarize(base).median_s,
            "queued_device_s": dev["time_s"], "queued_repeats": dev["queued_repeats"],
            "impl": f"cuLaunchKernel of an empty PTX kernel through ctypes, {inner} back to back, less as many "
                    "ctypes calls of cuCtxGetCurrent; queued_device_s: the same launches' device time queued "
                    "behind a sleep"}


def round_trip(vocab: int, sampling: str, *, inner: int = 200, repeats: int = 7) -> dict[str, Any]:
    """Wall time from a step's logits (one sequence, bf16, on the device) to its token on the host: the sampler's
    kernels, the device-to-host copy and the wait for it, as an engine pays once a step and a request's first
    token pays before it is returned. ``sampling``: greedy (argmax) or top_p (softmax in fp32, sort, cumulative
    sum, mask at 0.9, renormalise, multinomial: the plain-PyTorch top-p path)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(1, vocab, device="cuda", dtype=torch.bfloat16, generator=g)

    def greedy() -> int:
        return int(torch.argmax(logits, dim=-1).item())

    def top_p() -> int:
        probs = torch.softmax(logits.float(), dim=-1)
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < 0.9
        sorted_p = sorted_p * keep
        pick = torch.multinomial(sorted_p / sorted_p.sum(dim=-1, keepdim=True), 1, generator=g)
        return int(idx.gather(-1, pick).item())

    fn = {"greedy": greedy, "top_p": top_p}[sampling]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = [_loop_s(fn, inner) for _ in range(repeats)]
    return {**timing_fields(summarize(samples)),
            "impl": f"logits [1, {vocab}] bf16 on the device -> {sampling} token -> .item(), {inner} back to back"}
