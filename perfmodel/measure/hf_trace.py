"""What ``torch.profiler`` saw of a generate() run, condensed: kernels by name and category, device-busy time (the
union of kernel, memcpy and memset intervals), the Python-level aten calls, and the difference of two traces per
step or per layer. Pure Python (the trace is a chrome-trace JSON already read); the profiling itself is in
:mod:`perfmodel.measure.hf_model`.
"""
from __future__ import annotations

from typing import Any, Iterable


def busy_time_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (µs): device-busy time of overlapping kernels."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


_CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa", "efficient")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "matmul", "sm90_")),
    ("cat", ("catarray", "cat_")),
    ("index", ("index",)),
    ("reduce", ("reduce", "argmax", "max_")),
    ("memcpy", ("memcpy",)),
    ("memset", ("memset",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "fill")),
)


def kernel_category(name: str) -> str:
    low = name.lower()
    for cat, words in _CATEGORIES:
        if any(w in low for w in words):
            return cat
    return "other"


def short_kernel_name(name: str, width: int = 160) -> str:
    name = " ".join(str(name).split())
    return name if len(name) <= width else name[: width - 3] + "..."


def top_level_count(ops: Iterable[tuple[Any, float, float]]) -> int:
    """Operator events (thread, start, duration) not nested inside another one of the same thread: the aten
    calls Python made, not the ones they made in turn."""
    n = 0
    ends: dict[Any, float] = {}
    for tid, ts, dur in sorted(ops, key=lambda o: (str(o[0]), o[1], -o[2])):
        if ts >= ends.get(tid, float("-inf")):
            n += 1
            ends[tid] = ts + dur
        else:
            ends[tid] = max(ends[tid], ts + dur) if ts + dur > ends[tid] else ends[tid]
    return n


def summarise(dev: list[dict]) -> dict[str, Any]:
    by: dict[str, list] = {}
    for e in dev:
        key = e["name"] if e["cat"] == "kernel" else e["cat"]
        by.setdefault(key, [0, 0.0])
        by[key][0] += 1
        by[key][1] += e["dur"]
    return {"kernels": sum(1 for e in dev if e["cat"] == "kernel"),
            "memcpy": sum(1 for e in dev if e["cat"] == "gpu_memcpy"),
            "memset": sum(1 for e in dev if e["cat"] == "gpu_memset"),
            "busy_us": busy_time_us((e["ts"], e["ts"] + e["dur"]) for e in dev),
            "sum_us": sum(e["dur"] for e in dev), "by_name": by}


def diff_rows(a: dict, b: dict, per: float) -> dict[str, tuple[float, float]]:
    """(count, device µs) per unit of ``per``: b minus a, by kernel name."""
    names = set(a["by_name"]) | set(b["by_name"])
    out = {}
    for n in names:
        ca, ta = a["by_name"].get(n, [0, 0.0])
        cb, tb = b["by_name"].get(n, [0, 0.0])
        if cb - ca != 0 or abs(tb - ta) > 0:
            out[n] = ((cb - ca) / per, (tb - ta) / per)
    return out


def categories(table: dict[str, tuple[float, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, (count, _) in table.items():
        out[kernel_category(name)] = out.get(kernel_category(name), 0) + count
    return {k: round(v, 3) for k, v in sorted(out.items())}


def condense(events: Iterable[Any], wall_s: float) -> tuple[list[dict], dict[str, Any]]:
    """A chrome trace's complete events as (device events [{name, ts, dur, cat}], counts of host-side events:
    aten calls, launches, memcpy/memset and synchronize API calls, the aten calls Python made itself)."""
    dev, ops = [], []
    host = {"cpu_op": 0, "launch": 0, "memcpy_api": 0, "sync_api": 0, "wall_us": wall_s * 1e6}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        name = str(e.get("name", ""))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            dev.append({"name": name, "ts": float(e.get("ts", 0)), "dur": float(e.get("dur", 0)), "cat": cat})
        elif cat == "cpu_op":
            host["cpu_op"] += 1
            ops.append((e.get("tid"), float(e.get("ts", 0)), float(e.get("dur", 0))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            low = name.lower()
            if "launch" in low:
                host["launch"] += 1
            elif "memcpy" in low or "memset" in low:
                host["memcpy_api"] += 1
            elif "synchronize" in low:
                host["sync_api"] += 1
    host["cpu_op_top"] = top_level_count(ops)
    return dev, host
