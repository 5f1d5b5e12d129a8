"""The time course of a kernel stream under the power limit: how a kernel's time and the SM clock move as a
compute-bound stretch goes on (issue 24: a power limit costs percent, not a factor of two).

Each *course* starts from a rested device (``rest_s`` of idle first), then runs one workload back to back for
``duration_s`` with a CUDA event after every ``stride`` kernels, while a sampler thread reads NVML every
``SAMPLE_S``: instantaneous and averaged power, SM clock, temperature, the clock-event (throttle) reasons and
the energy counter. A row holds the whole course: per-window kernel times against the elapsed device time,
and the NVML samples against the same clock. A *duty* course alternates a burst with idle (how the
controller averages power); a *mix* course interleaves GEMMs and copies (a prefill's mix of compute- and
memory-bound kernels); an *alone* row times the workload the way the calibration suite does
(:class:`perfmodel.measure.timing.Timer`: 25 ms of warmup, 80 ms of flushed repetitions), once rested and once
right after a hot course, the two conditions a table's row may have been measured in.

    python -m perfmodel.measure.clock_course --out DIR [--quick]

writes ``DIR/clock_course.jsonl`` one row a course (appended and flushed as each ends: a killed run keeps
the courses it finished) and ``DIR/environment.json``. :mod:`perfmodel.fit.clock` fits the time constants
and the power-limited clock to them.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from .environment import now_iso, nvidia_smi_board
from .timing import Timer

SAMPLE_S = 0.002
# NVML field ids (nvml.h, r535 and later): power averaged over the driver's window, and instantaneous
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186


class Sampler(threading.Thread):
    """Reads NVML every ``SAMPLE_S`` until stopped; samples are (host seconds, fields...)."""

    def __init__(self):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        index = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
        self.n = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.samples: list[tuple] = []
        self._stop = threading.Event()
        self.limit_w = self._try(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1e3)
        self.max_sm_mhz = self._try(lambda: pynvml.nvmlDeviceGetMaxClockInfo(self.h, pynvml.NVML_CLOCK_SM))
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._reasons = reasons

    @staticmethod
    def _try(fn):
        try:
            return fn()
        except Exception:
            return None

    def _fields(self) -> tuple[float | None, float | None]:
        try:
            vals = self.n.nvmlDeviceGetFieldValues(self.h, [FI_POWER_INSTANT, FI_POWER_AVERAGE])
            out = []
            for v in vals:
                out.append(v.value.uiVal / 1e3 if getattr(v, "nvmlReturn", 1) == 0 else None)
            return out[0], out[1]
        except Exception:
            return None, None

    def read(self) -> tuple:
        n, h = self.n, self.h
        inst, avg = self._fields()
        usage = self._try(lambda: n.nvmlDeviceGetPowerUsage(h) / 1e3)
        clock = self._try(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        temp = self._try(lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        reasons = self._try(lambda: int(self._reasons(h))) if self._reasons else None
        energy = self._try(lambda: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3)
        return (time.perf_counter(), inst, avg, usage, clock, temp, reasons, energy)

    def run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.read())
            time.sleep(SAMPLE_S)

    def take(self, since: float) -> list[tuple]:
        return [s for s in self.samples if s[0] >= since]

    def stop(self) -> None:
        self._stop.set()


def _gemm(m: int, n: int, k: int, dtype: str) -> tuple[Callable[[], object], float, float]:
    """A product and its FLOPs and minimal bytes; fp8 through torch._scaled_mm with tensor-wise scales."""
    dev = "cuda"
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)

        def fn():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        eb = 1
    else:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)

        def fn():
            return a @ b
        eb = 2
    return fn, 2.0 * m * n * k, float(eb * (m * k + k * n) + 2 * m * n)


def _copy(nbytes: int) -> tuple[Callable[[], object], float, float]:
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 0.0, 2.0 * nbytes


def _stream(fns: list[Callable[[], object]], duration_s: float, stride: int, gap_s: float = 0.0,
            burst_s: float = 0.0, ahead_s: float = 0.05) -> dict[str, Any]:
    """Run ``fns`` in turn for ``duration_s`` of device time, an event every ``stride`` calls. With ``burst_s``,
    ``gap_s`` of idle follows each burst (the host waits, so the device idles). The host stays at most
    ``ahead_s`` of work ahead of the device, so the events' times are the device's, not a backlog's."""
    fns[0]()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(3):
        fns[0]()
    torch.cuda.synchronize()
    per_call = max((time.perf_counter() - t) / 3, 1e-6)
    events: list[tuple[int, Any]] = []
    start = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    host0 = time.perf_counter()
    start.record()
    calls = 0
    bursts: list[tuple[float, float]] = []
    burst_start = 0.0
    ahead = max(1, int(ahead_s / per_call / stride))
    while True:
        for _ in range(stride):
            fns[calls % len(fns)]()
            calls += 1
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        events.append((calls, e))
        if len(events) > ahead:
            events[-ahead - 1][1].synchronize()
        elapsed = time.perf_counter() - host0
        if burst_s and elapsed - burst_start >= burst_s:
            torch.cuda.synchronize()
            end_burst = time.perf_counter() - host0
            bursts.append((burst_start, end_burst))
            time.sleep(gap_s)
            burst_start = time.perf_counter() - host0
            # a marker event after the gap: the next window's time counts from here, not across the idle
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            events.append((calls, e))
        if elapsed >= duration_s:
            break
    torch.cuda.synchronize()
    host1 = time.perf_counter()
    marks = [(c, start.elapsed_time(e) / 1e3) for c, e in events]
    return {"host0": host0, "host1": host1, "marks": marks, "calls": calls, "bursts": bursts}


def _windows(marks: list[tuple[int, float]], bursts: list) -> list[list[float]]:
    """(device seconds at the window's end, calls in it, seconds a call) per window between marks; a
    window that spans an idle gap (its calls count 0) is skipped."""
    out = []
    prev_c, prev_t = 0, 0.0
    for c, t in marks:
        if c > prev_c and t > prev_t:
            out.append([round(t, 6), c - prev_c, (t - prev_t) / (c - prev_c)])
        prev_c, prev_t = c, t
    return out


def _rest(sampler: Sampler, seconds: float) -> dict[str, Any]:
    torch.cuda.synchronize()
    time.sleep(seconds)
    s = sampler.read()
    return {"rest_s": seconds, "temperature_c_start": s[5], "sm_clock_mhz_start": s[4], "power_w_start": s[1] or s[3]}


def course(sampler: Sampler, name: str, workload: dict[str, Any], fns: list[Callable[[], object]], flops: float,
           nbytes: float, *, duration_s: float, rest_s: float, stride: int = 1, **stream_kw) -> dict[str, Any]:
    """One course from a rested device; the row keeps every window and sample."""
    rest = _rest(sampler, rest_s)
    run = _stream(fns, duration_s, stride, **stream_kw)
    samples = sampler.take(run["host0"] - 0.05)
    samples = [[round(s[0] - run["host0"], 5), *s[1:]] for s in samples if s[0] <= run["host1"] + 0.05]
    windows = _windows(run["marks"], run["bursts"])
    per_call = [w[2] for w in windows]
    first = sorted(per_call[: max(1, min(5, len(per_call)))])
    head = first[len(first) // 2] if first else None
    return {"kind": "clock_course", "name": name, "params": workload, "flops_per_call": flops,
            "bytes_per_call": nbytes, "duration_s": duration_s, "stride": stride, **rest,
            "calls": run["calls"], "first_call_s": head, "last_call_s": per_call[-1] if per_call else None,
            "bursts": [[round(a, 4), round(b, 4)] for a, b in run["bursts"]],
            "windows": windows,
            "samples_fields": ["t_s", "power_instant_w", "power_average_w", "power_usage_w", "sm_clock_mhz",
                               "temperature_c", "clock_event_reasons", "energy_j"],
            "samples": samples, "power_limit_w": sampler.limit_w, "max_sm_clock_mhz": sampler.max_sm_mhz,
            "measured_at": now_iso()}


def alone(sampler: Sampler, name: str, workload: dict[str, Any], fn: Callable[[], object], *, rest_s: float,
          hot: Callable[[], object] | None = None, hot_s: float = 0.0) -> dict[str, Any]:
    """The calibration suite's timing of ``fn``, rested or right after ``hot_s`` of ``hot`` back to back."""
    rest = _rest(sampler, rest_s)
    if hot is not None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < hot_s:
            for _ in range(8):
                hot()
            torch.cuda.synchronize()
    timer = Timer("cuda")
    h0 = time.perf_counter()
    t = timer.time(fn)
    h1 = time.perf_counter()
    timer.close()
    clocks = [s[4] for s in sampler.take(h0) if s[0] <= h1 and s[4]]
    return {"kind": "clock_alone", "name": name, "params": workload, **rest, "after_hot_s": hot_s if hot else 0.0,
            "time_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "wall_s": h1 - h0,
            "sm_clock_mhz_mean": (sum(clocks) / len(clocks)) if clocks else None, "measured_at": now_iso()}


def plan(quick: bool) -> list[dict[str, Any]]:
    """The courses: (name, workload, duration, rest, stride, stream options)."""
    long_s, mid_s, rest = (2.0, 1.0, 2.0) if quick else (6.0, 3.0, 6.0)
    return [
        dict(name="gemm_bf16_8192", w=dict(op="gemm", dtype="bf16", m=8192, n=8192, k=8192), duration_s=long_s, rest_s=rest),
        dict(name="gemm_fp8_8192", w=dict(op="gemm", dtype="fp8", m=8192, n=8192, k=8192), duration_s=long_s, rest_s=rest),
        dict(name="gemm_bf16_4096", w=dict(op="gemm", dtype="bf16", m=4096, n=4096, k=4096), duration_s=mid_s, rest_s=rest, stride=8),
        dict(name="gemm_bf16_prefill_ffn", w=dict(op="gemm", dtype="bf16", m=4096, n=28672, k=8192), duration_s=mid_s, rest_s=rest),
        dict(name="gemm_fp8_prefill_ffn", w=dict(op="gemm", dtype="fp8", m=4096, n=28672, k=8192), duration_s=mid_s, rest_s=rest),
        dict(name="gemm_bf16_decode_m16", w=dict(op="gemm", dtype="bf16", m=16, n=28672, k=8192), duration_s=mid_s, rest_s=rest, stride=16),
        dict(name="copy_1g", w=dict(op="copy", bytes=1 << 30), duration_s=mid_s, rest_s=rest, stride=2),
        dict(name="mix_gemm_copy", w=dict(op="mix", dtype="bf16", m=8192, n=8192, k=8192, bytes=1 << 29), duration_s=mid_s, rest_s=rest, stride=2),
        dict(name="duty_50ms_50ms", w=dict(op="gemm", dtype="bf16", m=8192, n=8192, k=8192, burst_s=0.05, gap_s=0.05),
             duration_s=mid_s, rest_s=rest, burst_s=0.05, gap_s=0.05),
        dict(name="gemm_bf16_8192_rest20", w=dict(op="gemm", dtype="bf16", m=8192, n=8192, k=8192, rest_s=20),
             duration_s=long_s, rest_s=5.0 if quick else 20.0),
    ]


def _workload_fns(w: dict[str, Any]) -> tuple[list[Callable[[], object]], float, float]:
    if w["op"] == "gemm":
        fn, f, b = _gemm(w["m"], w["n"], w["k"], w["dtype"])
        return [fn], f, b
    if w["op"] == "copy":
        fn, f, b = _copy(w["bytes"])
        return [fn], f, b
    g, f, b = _gemm(w["m"], w["n"], w["k"], w["dtype"])
    c, _, cb = _copy(w["bytes"])
    return [g, c], f / 2, (b + cb) / 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.measure.clock_course", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--quick", action="store_true", help="short courses and rests (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated course names")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("clock_course: no CUDA device; nothing measured")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    sampler = Sampler()
    sampler.start()
    env = {"measured_at": now_iso(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0), "power_limit_w": sampler.limit_w,
           "max_sm_clock_mhz": sampler.max_sm_mhz, "board": nvidia_smi_board(), "sample_s": SAMPLE_S}
    (args.out / "environment.json").write_text(json.dumps(env, indent=1))
    only = {s for s in args.only.split(",") if s}
    path = args.out / "clock_course.jsonl"
    t_start = time.perf_counter()
    with open(path, "a") as fh:
        def put(row):
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

        for c in plan(args.quick):
            if only and c["name"] not in only:
                continue
            fns, flops, nbytes = _workload_fns(c["w"])
            kw = {k: c[k] for k in ("burst_s", "gap_s") if k in c}
            row = course(sampler, c["name"], c["w"], fns, flops, nbytes, duration_s=c["duration_s"],
                         rest_s=c["rest_s"], stride=c.get("stride", 1), **kw)
            put(row)
            print(f"{c['name']:<26} first {row['first_call_s']*1e3:9.4f} ms  last {row['last_call_s']*1e3:9.4f} ms  "
                  f"ratio {row['last_call_s']/row['first_call_s']:.3f}  ({time.perf_counter()-t_start:.0f} s)", flush=True)
            if c["w"]["op"] == "gemm" and "burst_s" not in c and "rest_s" not in c["w"]:
                # the suite's own timing of the same kernel, rested and after a hot course
                rest_s = c["rest_s"]
                a0 = alone(sampler, c["name"], c["w"], fns[0], rest_s=rest_s)
                a1 = alone(sampler, c["name"], c["w"], fns[0], rest_s=0.0, hot=fns[0], hot_s=c["duration_s"])
                put(a0)
                put(a1)
                print(f"{'  alone rested / hot':<26} {a0['time_s']*1e3:9.4f} ms  {a1['time_s']*1e3:9.4f} ms  "
                      f"ratio {a1['time_s']/a0['time_s']:.3f}", flush=True)
            del fns
            torch.cuda.empty_cache()
    sampler.stop()
    print(f"wrote {path} in {time.perf_counter()-t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
