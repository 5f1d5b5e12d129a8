"""Reading an arrival trace: one request a row, CSV with a header or JSON lines.

Fields (names case-insensitive; the first of each alias list is the documented one):

- ``arrival_s`` (or ``arrival``, ``timestamp``, ``time``): seconds from any origin, non-negative; rows
  are sorted by it and shifted so that the first request arrives at 0;
- ``isl`` (or ``input_tokens``, ``prompt_tokens``, ``input_length``): prompt tokens, a positive integer;
- ``osl`` (or ``output_tokens``, ``completion_tokens``, ``output_length``): output tokens, positive;
- optional ``prefix_id`` (any text or number naming a shared prefix) and ``prefix_len`` (its tokens).

Every problem is one line naming the file, the line and the field.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from ..errors import InputError
from .workload import Requests

MAX_TRACE_BYTES = 512 << 20  # about 10^7 requests of CSV or JSONL; larger is refused unread
MAX_ROW_DEPTH = 8  # a request is one flat object; deeper JSON is refused before any line is parsed

ALIASES = {
    "arrival_s": ("arrival_s", "arrival", "timestamp", "time"),
    "isl": ("isl", "input_tokens", "prompt_tokens", "input_length"),
    "osl": ("osl", "output_tokens", "completion_tokens", "output_length"),
    "prefix_id": ("prefix_id",),
    "prefix_len": ("prefix_len",),
}


def _pick(row: dict, field: str):
    lower = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for name in ALIASES[field]:
        if name in lower and lower[name] not in (None, ""):
            return lower[name]
    return None


def _number(v, *, where: str, field: str, integer: bool, minimum: float):
    from ..inputs import number

    return number(v, field, at=where, lo=minimum, integer=integer)


def _rows(path: Path):
    from ..io import check_json_depth, read_input_text

    text = read_input_text(path, what="a request trace (CSV or JSONL: arrival_s, isl, osl)",
                           max_bytes=MAX_TRACE_BYTES, errors="replace")
    first = text.lstrip()[:1]
    if path.suffix.lower() in (".jsonl", ".json") or first == "{":
        # one pass over the whole text before any line is parsed: a request is a flat object
        check_json_depth(text, file=str(path), what="one flat JSON object per line", max_depth=MAX_ROW_DEPTH)
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"line {n}: not valid JSON ({e.msg})", file=str(path)) from None
            except RecursionError:
                raise InputError(f"line {n}: nested too deeply; expected a flat JSON object", file=str(path)) from None
            if not isinstance(obj, dict):
                raise InputError(f"line {n}: expected a JSON object per line", file=str(path))
            yield n, obj
        return
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise InputError("empty trace (expected a CSV header: arrival_s,isl,osl)", file=str(path))
    heads = {h.strip().lower() for h in reader.fieldnames if h}
    for field in ("arrival_s", "isl", "osl"):
        if not heads & set(ALIASES[field]):
            raise InputError(f"no {field} column (header: {', '.join(reader.fieldnames)}; expected "
                             f"{' or '.join(ALIASES[field])})", file=str(path))
    n = 1
    try:
        for n, row in enumerate(reader, 2):
            yield n, row
    except csv.Error as e:  # a field over csv's 128 KiB limit, a NUL byte: a malformed CSV, one line
        raise InputError(f"line {n + 1}: not a CSV row ({e})", file=str(path)) from None


def read_trace(path: str | Path, limit: int | None = None) -> Requests:
    """Requests from a trace file (module doc); the first ``limit`` arrivals when given."""
    from ..io import check_input_path

    check_input_path(path, what="a request trace (CSV or JSONL)")
    p = Path(path)
    if not p.is_file():
        raise InputError("no such trace file", file=str(path))
    arr, isl, osl, pid, plen = [], [], [], [], []
    groups: dict[str, int] = {}
    from .workload import MAX_REQUESTS, check_request_count

    for n, row in _rows(p):
        if len(arr) >= MAX_REQUESTS:
            check_request_count(MAX_REQUESTS + 1, field="--arrival", cap=MAX_REQUESTS, what=f"{p} holds more than {MAX_REQUESTS:,} "
                                "requests (split it)")
        where = f"line {n}"
        vals = {}
        for field in ("arrival_s", "isl", "osl"):
            v = _pick(row, field)
            if v is None:
                raise InputError(f"{where}: missing {field}", file=str(p), field=field)
            vals[field] = v
        try:
            arr.append(_number(vals["arrival_s"], where=where, field="arrival_s", integer=False, minimum=0.0))
            i = _number(vals["isl"], where=where, field="isl", integer=True, minimum=1)
            isl.append(i)
            osl.append(_number(vals["osl"], where=where, field="osl", integer=True, minimum=1))
            g = _pick(row, "prefix_id")
            pl = _pick(row, "prefix_len")
            if g is None:
                pid.append(-1)
                plen.append(0)
            else:
                pid.append(groups.setdefault(str(g), len(groups)))
                length = _number(pl, where=where, field="prefix_len", integer=True, minimum=0) if pl is not None else 0
                plen.append(min(length, i - 1))
        except InputError as e:
            raise InputError(e.detail, file=str(p), field=e.field) from None
    if not arr:
        raise InputError("no requests in the trace", file=str(p))
    order = np.argsort(np.asarray(arr, dtype=float), kind="stable")
    if limit is not None:
        order = order[:limit]
    a = np.asarray(arr, dtype=float)[order]
    return Requests(a - a[0], np.asarray(isl, dtype=np.int64)[order], np.asarray(osl, dtype=np.int64)[order],
                    np.asarray(pid, dtype=np.int64)[order], np.asarray(plen, dtype=np.int64)[order])
