"""Read GPU kernels out of a profiler trace: a PyTorch profiler (Kineto) Chrome trace (.json or .json.gz)
or an Nsight Systems SQLite export (.sqlite).

Each kernel comes back with its name, start and duration (seconds) and, where the trace links it to the
host, the innermost user annotation (``torch.profiler.record_function`` range) that was open when it was
launched: Kineto ties a kernel to its launch call by the ``correlation`` id, and the launch's host time
falls inside the annotation ranges. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

MAX_TRACE_BYTES = 512 << 20  # a trace larger than this unpacked is refused, not read into memory
MAX_TRACE_DEPTH = 32  # a Chrome trace nests 4 levels (traceEvents, event, args, a list in args)


@dataclass(frozen=True)
class Kernel:
    name: str
    start_s: float
    dur_s: float
    annotation: str = ""  # innermost record_function range open at launch, or ""


def read_trace(path) -> list[Kernel]:
    from ..io import check_input_path

    check_input_path(path, what="a profiler trace")
    p = Path(path)
    if not p.is_file():
        raise InputError("no such trace file", file=str(path))
    if p.suffix in (".sqlite", ".db"):
        return read_nsys_sqlite(p)
    return read_kineto(p)


def _load_json(p: Path) -> dict:
    from ..io import loads_json, read_input_bytes

    raw = read_input_bytes(p, what="a JSON trace", max_bytes=MAX_TRACE_BYTES, gz=p.suffix == ".gz")
    try:
        data = loads_json(raw, file=str(p), what="a JSON trace (torch.profiler export_chrome_trace)",
                          max_depth=MAX_TRACE_DEPTH)
    except InputError as e:
        if "nested" in e.detail:
            raise
        raise InputError(f"not a JSON trace: {e.detail}", file=str(p)) from None
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


MAX_KERNEL_S = 3600.0  # a kernel longer than an hour is not a measurement


def _dur(x) -> float:
    """A duration as recorded (NaN when missing, not a number, non-finite or negative)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return float("nan")
    return v if v == v and 0.0 <= v < float("inf") else float("nan")


def _checked(items, p: Path) -> list[Kernel]:
    """Kernels of ``(name, start_s, dur_s, annotation)``; those whose duration is missing, NaN, negative or over
    :data:`MAX_KERNEL_S` are skipped with one counted warning on stderr, and a trace with none left is refused."""
    import sys

    out = [Kernel(*k) for k in items if 0.0 <= k[2] <= MAX_KERNEL_S]
    bad = len(items) - len(out)
    if not out:
        raise InputError(f"none of the {len(items)} GPU kernels has a usable duration (missing, NaN, negative or "
                         f"over {MAX_KERNEL_S:.0f} s)", file=str(p), field="dur")
    if bad:
        print(f"perfmodel: warning: {p}: skipped {bad} of {len(items)} GPU kernels with a missing, NaN, negative "
              f"or over {MAX_KERNEL_S:.0f} s duration", file=sys.stderr)
    return out


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
    kernels.sort(key=lambda e: _num(e.get("ts")))
    hosts = []
    for e in kernels:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        hosts.append(launches.get(args.get("correlation")))
    names = _innermost_all(ranges, hosts)
    return _checked([(str(e.get("name", "")), _num(e.get("ts")) * 1e-6, _dur(e.get("dur")) * 1e-6, a)
                     for e, a in zip(kernels, names)], p)


def _innermost_all(ranges, times) -> list[str]:
    """For each host time in ``times`` (None: no launch found), the name of the shortest annotation range
    containing it, or "". One sweep in time order with a heap of the open ranges keyed by length (ties: the
    one that started last), ranges that ended popped when they reach the top: O((kernels + ranges) log ranges),
    where scanning every earlier range per kernel was quadratic (60,000 kernels: 57 s)."""
    import heapq

    out = [""] * len(times)
    order = sorted((t, i) for i, t in enumerate(times) if t is not None)
    rs = sorted(ranges)
    heap: list = []
    j = 0
    for t, i in order:
        while j < len(rs) and rs[j][0] <= t:
            s, e, name = rs[j]
            heapq.heappush(heap, (e - s, -s, -j, e, name))
            j += 1
        while heap and heap[0][3] < t:
            heapq.heappop(heap)
        if heap:
            out[i] = heap[0][4]
    return out


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
    hosts = [float(launches[c]) if c in launches and ranges else None for s, e, n, c in rows]
    notes = _innermost_all(ranges, hosts)
    return _checked([(str(names.get(n, n)), _num(s) * 1e-9, _dur(None if s is None or e is None else e - s) * 1e-9,
                      a) for (s, e, n, c), a in zip(rows, notes)], p)
