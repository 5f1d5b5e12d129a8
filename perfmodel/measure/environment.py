"""What the measurements were taken on: the ``env`` object on every row, and environment.json.

Every probe is guarded: a missing nvidia-smi, an old torch or an odd /proc yields None for that
field, never an exception.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

ENV_KEYS = (
    "device_name", "sm_count", "sm_clock_mhz", "max_sm_clock_mhz", "mem_clock_mhz", "driver",
    "cuda", "torch", "triton", "hostname", "l2_bytes", "cpu_model", "cpu_cores",
)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _pkg_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def cpu_info() -> dict[str, Any]:
    """The host CPU as a host-side cost sees it: model, cores visible, the clock /proc and cpufreq report, the
    governor and the load (what moves eager frameworks' per-kernel launch cost from one machine to the next)."""
    out: dict[str, Any] = {"machine": platform.machine(), "model": cpu_model(), "cores_visible": cpu_cores(),
                           "cpu_count": os.cpu_count()}
    mhz = []
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.lower().startswith("cpu mhz"):
            try:
                mhz.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    if mhz:
        out["cpu_mhz_proc_median"] = sorted(mhz)[len(mhz) // 2]
    for key, path in (("scaling_cur_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"),
                      ("scaling_max_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq"),
                      ("governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
                      ("loadavg", "/proc/loadavg")):
        v = _read(path)
        if v is not None:
            out[key] = v
    return out


def cpu_steal_ms() -> float | None:
    """Time the hypervisor ran something else on this VM's CPUs (all of them, ms; /proc/stat), or None."""
    text = _read("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    f = text.split("\n", 1)[0].split()
    try:
        return int(f[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


def _to_num(text: str) -> float | int | None:
    text = text.strip()
    try:
        f = float(text)
    except ValueError:
        return None
    return int(f) if f.is_integer() else f


def _nvidia_smi_query(fields: tuple[str, ...], index: int | None) -> list[str] | None:
    """One GPU's row of ``nvidia-smi --query-gpu=...`` (csv, no units), or None."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=15).stdout
    except Exception:
        return None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        return None
    pick = 0
    if index is not None and not os.environ.get("CUDA_VISIBLE_DEVICES") and 0 <= index < len(lines):
        pick = index
    row = [f.strip() for f in lines[pick].split(",")]
    return row if len(row) == len(fields) else None


def nvidia_smi_clocks(index: int | None = None) -> dict[str, Any]:
    """SM clock, max SM clock, memory clock (MHz) and driver version from nvidia-smi, or {}."""
    row = _nvidia_smi_query(("clocks.sm", "clocks.max.sm", "clocks.mem", "driver_version"), index)
    if row is None:
        return {}
    return {
        "sm_clock_mhz": _to_num(row[0]),
        "max_sm_clock_mhz": _to_num(row[1]),
        "mem_clock_mhz": _to_num(row[2]),
        "driver": row[3] or None,
    }


def nvidia_smi_board(index: int | None = None) -> dict[str, Any]:
    """What a process sees of the board: memory.total (MiB, the capacity the driver exposes, below the
    datasheet's nominal figure), the enforced power limit and the default one (W), or {}."""
    row = _nvidia_smi_query(("memory.total", "power.limit", "power.default_limit", "enforced.power.limit"), index)
    if row is None:
        return {}
    return {"memory_total_mib": _to_num(row[0]), "power_limit_w": _to_num(row[1]),
            "power_default_limit_w": _to_num(row[2]), "enforced_power_limit_w": _to_num(row[3])}


class _Nvml:
    """Cheap per-case clock/power reads through NVML (pynvml / nvidia-ml-py), when importable."""

    def __init__(self, torch_index: int):
        self.handle = None
        self.nvml = None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            idx = torch_index
            try:
                import torch

                idx = torch.cuda._get_nvml_device_index(torch_index)
            except Exception:
                pass
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
            self.nvml = pynvml
        except Exception:
            self.handle = None

    def read(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        n, h = self.nvml, self.handle
        out: dict[str, Any] = {}
        for key, fn in (
            ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            ("mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            ("power_w", lambda: round(n.nvmlDeviceGetPowerUsage(h) / 1000.0, 1)),
            ("throttle_reasons", lambda: int(n.nvmlDeviceGetCurrentClocksThrottleReasons(h))),
        ):
            try:
                out[key] = fn()
            except Exception:
                pass
        return out


class Environment:
    """Collects the static facts once; ``row_env()`` re-reads the clocks when asked to refresh."""

    def __init__(self, device: str):
        self.device = device
        self.static: dict[str, Any] = {k: None for k in ENV_KEYS}
        self.extra: dict[str, Any] = {}
        self._clocks: dict[str, Any] = {}
        self._nvml: _Nvml | None = None
        self._collect()

    def _collect(self) -> None:
        s = self.static
        s["hostname"] = socket.gethostname()
        s["cpu_model"] = cpu_model()
        s["cpu_cores"] = cpu_cores()
        s["triton"] = _pkg_version("triton")
        self.extra.update({
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "device": self.device,
        })
        try:
            import torch

            s["torch"] = torch.__version__
            s["cuda"] = torch.version.cuda
            self.extra["torch_threads"] = torch.get_num_threads()
            if self.device.startswith("cuda") and torch.cuda.is_available():
                idx = torch.cuda.current_device()
                props = torch.cuda.get_device_properties(idx)
                s["device_name"] = props.name
                s["sm_count"] = getattr(props, "multi_processor_count", None)
                s["l2_bytes"] = getattr(props, "L2_cache_size", None)
                self.extra["capability"] = list(torch.cuda.get_device_capability(idx))
                self.extra["total_memory_bytes"] = getattr(props, "total_memory", None)
                self.extra["device_index"] = idx
                self.extra["device_count"] = torch.cuda.device_count()
                try:
                    self.extra["cudnn"] = torch.backends.cudnn.version()
                except Exception:
                    pass
                try:
                    free, total = torch.cuda.mem_get_info(idx)
                    self.extra["mem_get_info_total_bytes"] = int(total)
                    self.extra["mem_get_info_free_bytes"] = int(free)
                except Exception:
                    pass
                self.extra.update(nvidia_smi_board(idx))
                try:
                    self.extra["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
                except Exception:
                    pass
            else:
                s["device_name"] = s["cpu_model"]
                s["sm_count"] = s["cpu_cores"]
        except Exception as exc:  # torch missing or broken: keep going, the suite will error rows
            self.extra["torch_error"] = repr(exc)
        self.refresh_clocks()

    def refresh_clocks(self) -> None:
        """Re-read clocks and driver through nvidia-smi (slow: once a family)."""
        if not self.device.startswith("cuda"):
            return
        clocks = nvidia_smi_clocks(self.extra.get("device_index"))
        if clocks:
            self._clocks.update(clocks)
        self.refresh_fast()

    def refresh_fast(self) -> None:
        """Re-read the current SM/memory clock, power and throttle reasons through NVML (cheap:
        after every case), so each row shows the clock it ran at; a no-op without NVML."""
        if not self.device.startswith("cuda"):
            return
        if self._nvml is None:
            self._nvml = _Nvml(int(self.extra.get("device_index") or 0))
        self._clocks.update(self._nvml.read())

    def row_env(self) -> dict[str, Any]:
        env = dict(self.static)
        env.update(self._clocks)
        return env

    def document(self, **more: Any) -> dict[str, Any]:
        doc = {"env": self.row_env(), **self.extra, "written_at": now_iso()}
        doc.update(more)
        return doc
