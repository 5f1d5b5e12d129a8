"""Energy of sustained loops: what the power model is fitted to (and checked against).

A workload (one GEMM, a copy, an attention call, a whole decoder layer) runs back to back for about
``SUSTAIN_S`` seconds with no L2 flush, as it would inside a long step; NVML's total-energy counter
(millijoules since the driver loaded) is read before and after, and CUDA events time the loop. Idle
power is the same reading around a sleep. Rows of whole layers are marked ``held_out``: the power
model never fits them, it predicts them.

Without NVML (a CPU run, an old driver) the row keeps its timing and says ``energy_source:
"unavailable"``; the fitter skips it.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

SUSTAIN_S = 1.5


class EnergyMeter:
    """NVML's energy counter for the device, falling back to integrating power samples; or nothing."""

    def __init__(self, device: str):
        self.nvml = self.handle = None
        self.source = "unavailable"
        if not device.startswith("cuda"):
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            index = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml = pynvml
        except Exception:
            return
        try:
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.source = "nvml_energy_counter"
        except Exception:
            self.source = "nvml_power_samples"

    def energy_mj(self) -> float | None:
        if self.source != "nvml_energy_counter":
            return None
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def power_w(self) -> float | None:
        if self.nvml is None:
            return None
        try:
            return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except Exception:
            return None

    def board(self) -> dict[str, Any]:
        if self.nvml is None:
            return {}
        n, h = self.nvml, self.handle
        out: dict[str, Any] = {}
        for key, fn in (("power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                        ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                        ("temperature_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))):
            try:
                out[key] = fn()
            except Exception:
                pass
        return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sustained(fn: Callable[[], object], meter: EnergyMeter, device: str, seconds: float = SUSTAIN_S) -> dict[str, Any]:
    """Run ``fn`` back to back for about ``seconds``; energy, power and the time of one iteration."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    one = max(time.perf_counter() - t0, 1e-6)
    iters = max(3, int(seconds / one))
    samples: list[float] = []
    cuda = device.startswith("cuda")
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0 = meter.energy_mj()
    w0 = time.perf_counter()
    if cuda:
        start.record()
    chunk = max(1, iters // 20)  # enqueue in chunks, sampling power between them
    done = 0
    while done < iters:
        for _ in range(min(chunk, iters - done)):
            fn()
        done += min(chunk, iters - done)
        p = meter.power_w()
        if p is not None:
            samples.append(p)
        if cuda and len(samples) % 4 == 0:
            torch.cuda.current_stream().synchronize()  # keep the host close to the device
    if cuda:
        end.record()
    _sync(device)
    wall = time.perf_counter() - w0
    e1 = meter.energy_mj()
    per_iter = (start.elapsed_time(end) / 1e3 / iters) if cuda else wall / iters
    return _row(meter, per_iter, iters, wall, e0, e1, samples)


def idle(meter: EnergyMeter, device: str, seconds: float = SUSTAIN_S) -> dict[str, Any]:
    """Energy over a sleep: the board's idle power at the clocks it settles to in that time."""
    _sync(device)
    e0 = meter.energy_mj()
    w0 = time.perf_counter()
    samples = []
    while time.perf_counter() - w0 < seconds:
        time.sleep(seconds / 10)
        p = meter.power_w()
        if p is not None:
            samples.append(p)
    wall = time.perf_counter() - w0
    return _row(meter, wall, 1, wall, e0, meter.energy_mj(), samples)


def _row(meter: EnergyMeter, time_s: float, iterations: int, wall: float, e0, e1, samples: list[float]) -> dict:
    """The row fields of a loop: energy from the counter's two readings, else the mean power sample times
    the wall time, else none."""
    if e0 is not None and e1 is not None:
        energy, source = (e1 - e0) / 1e3, meter.source
    elif samples:
        energy, source = sum(samples) / len(samples) * wall, "nvml_power_samples"
    else:
        energy, source = None, "unavailable"
    return {"time_s": time_s, "iterations": iterations, "duration_s": wall, "energy_j": energy,
            "avg_power_w": (energy / wall) if energy is not None else None, "energy_source": source,
            "power_samples_w": [round(x, 1) for x in samples[:40]], **meter.board()}
