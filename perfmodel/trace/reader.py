"""Read GPU kernels out of a profiler trace: a PyTorch profiler (Kineto) Chrome trace (.json or .json.gz)
or an Nsight Systems SQLite export (.sqlite).

Each kernel comes back with its name, start and duration (seconds) and, where the trace links it to the
host, the innermost user annotation (``torch.profiler.record_function`` range) that was open when it was
launched: Kineto ties a kernel to its launch call by the ``correlation`` id, and the launch's host time
falls inside the annotation ranges. Nothing here imports torch.
"""
from __future__ import annotations

import bisect
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

MAX_TRACE_BYTES = 512 << 20  # a trace larger than this unpacked is refused, not read into memory


@dataclass(frozen=True)
class Kernel:
    name: str
    start_s: float
    dur_s: float
    annotation: str = ""  # innermost record_function range open at launch, or ""


def read_trace(path) -> list[Kernel]:
    p = Path(path)
    if not p.is_file():
        raise InputError("no such trace file", file=str(path))
    if p.suffix in (".sqlite", ".db"):
        return read_nsys_sqlite(p)
    return read_kineto(p)


def _load_json(p: Path) -> dict:
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as fh:
                raw = fh.read(MAX_TRACE_BYTES + 1)
        else:
            raw = p.read_bytes()
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read the trace ({e})", file=str(p)) from None
    if len(raw) > MAX_TRACE_BYTES:
        raise InputError(f"trace larger than {MAX_TRACE_BYTES >> 20} MiB unpacked", file=str(p))
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"not a JSON trace ({e})", file=str(p)) from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError("expected a Chrome trace with a traceEvents list (torch.profiler export_chrome_trace)",
                         file=str(p), field="traceEvents")
    return data


def _num(x, default=0.0) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if v == v and abs(v) != float("inf") else default


def read_kineto(p: Path) -> list[Kernel]:
    events = [e for e in _load_json(p)["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    launches: dict = {}  # correlation -> host time of the launch (us)
    ranges = []  # (start, end, name) of user annotations on the host
    kernels = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if cat == "kernel":
            kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = _num(e.get("ts"))
        elif cat == "user_annotation":
            ts = _num(e.get("ts"))
            ranges.append((ts, ts + _num(e.get("dur")), str(e.get("name", ""))))
    if not kernels:
        raise InputError("no GPU kernel events (cat 'kernel') in the trace; was CUDA activity recorded?", file=str(p))
    ranges.sort()
    starts = [r[0] for r in ranges]
    out = []
    for e in sorted(kernels, key=lambda e: _num(e.get("ts"))):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        host = launches.get(args.get("correlation"))
        out.append(Kernel(str(e.get("name", "")), _num(e.get("ts")) * 1e-6, _num(e.get("dur")) * 1e-6,
                          _innermost(ranges, starts, host) if host is not None else ""))
    return out


def _innermost(ranges, starts, t: float) -> str:
    """Name of the shortest annotation range containing host time t."""
    best, best_len = "", float("inf")
    i = bisect.bisect_right(starts, t)
    for s, e, name in reversed(ranges[:i]):
        if s <= t <= e and e - s < best_len:
            best, best_len = name, e - s
    return best


def read_nsys_sqlite(p: Path) -> list[Kernel]:
    """Kernels of an ``nsys export --type sqlite`` file, annotated by NVTX ranges when the launches have
    host timestamps (CUPTI_ACTIVITY_KIND_RUNTIME, matched by correlationId)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        cur = con.cursor()
        names = {i: s for i, s in cur.execute("SELECT id, value FROM StringIds")}
        rows = list(cur.execute("SELECT start, end, shortName, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                "ORDER BY start"))
        launches = {}
        try:
            launches = {c: s for s, c in cur.execute("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        except sqlite3.Error:
            pass
        ranges = []
        try:
            for s, e, text in cur.execute("SELECT start, end, text FROM NVTX_EVENTS WHERE end IS NOT NULL"):
                ranges.append((float(s), float(e), str(text or "")))
        except sqlite3.Error:
            pass
        con.close()
    except sqlite3.Error as e:
        raise InputError(f"not an Nsight Systems SQLite export ({e})", file=str(p)) from None
    if not rows:
        raise InputError("no rows in CUPTI_ACTIVITY_KIND_KERNEL", file=str(p))
    ranges.sort()
    starts = [r[0] for r in ranges]
    return [Kernel(str(names.get(n, n)), s * 1e-9, (e - s) * 1e-9,
                   _innermost(ranges, starts, float(launches[c])) if c in launches and ranges else "")
            for s, e, n, c in rows]
