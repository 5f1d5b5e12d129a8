"""Time standalone operators given one per row of a CSV table (``perfmodel predict``).

Each row names an ``op`` and its shape; the row comes back with ``time_ms``, ``bound``, ``flops`` and
``bytes`` (HBM bytes moved) added. Times are standalone: one op timed on its own with device events, its
launch latency and (for multi-call eager ops) host dispatch included, as a microbenchmark sees it. A ``copy`` row's ``bytes`` is its input, the buffer size, and stays as
given: the copy moves twice that. Standalone means a single kernel timed on its own (as a microbenchmark times it): no
launch gap of a graph or eager stream is added.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from . import ops as O
from .dtypes import DTYPES
from .errors import InputError

# op -> (required columns, optional columns with defaults)
OP_COLUMNS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "gemm": (("m", "n", "k", "dtype"), {"groups": "1"}),
    "attention": (("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "dtype"),
                  {"head_dim_v": "", "kv_dtype": ""}),
    "rmsnorm": (("tokens", "hidden", "dtype"), {}),
    "layernorm": (("tokens", "hidden", "dtype"), {}),
    "swiglu": (("tokens", "width", "dtype"), {}),
    "gelu": (("tokens", "width", "dtype"), {}),
    "rotary": (("tokens", "heads", "head_dim", "dtype"), {}),
    "residual": (("tokens", "hidden", "dtype"), {}),
    "copy": (("bytes",), {}),
    "reduce": (("bytes",), {}),
}
PASSTHROUGH = {"id", "name", "label", "note", "notes", "group", "measured_ms", "source"}
OUTPUT_COLUMNS = ("time_ms", "bound", "flops", "bytes")
_INT_COLUMNS = {"m", "n", "k", "groups", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "head_dim_v",
                "tokens", "hidden", "width", "heads", "bytes"}


def _known_columns() -> set[str]:
    cols = {"op"} | PASSTHROUGH | set(OUTPUT_COLUMNS)
    for req, opt in OP_COLUMNS.values():
        cols |= set(req) | set(opt)
    return cols


def _int(value: str, col: str, where: str) -> int:
    try:
        v = float(value)
    except ValueError:
        raise InputError(f"expected a positive integer, got {value!r}", file=where, field=col) from None
    if v <= 0 or v != int(v):
        raise InputError(f"expected a positive integer, got {value!r}", file=where, field=col)
    return int(v)


def _bool(value: str, col: str, where: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "y", "t"):
        return True
    if v in ("0", "false", "no", "n", "f"):
        return False
    raise InputError(f"expected true or false, got {value!r}", file=where, field=col)


def row_to_op(row: dict[str, str], where: str) -> O.Op:
    kind = (row.get("op") or "").strip().lower()
    if kind not in OP_COLUMNS:
        raise InputError(f"unknown op {kind!r}; expected one of {', '.join(OP_COLUMNS)}", file=where, field="op")
    required, optional = OP_COLUMNS[kind]
    v: dict[str, object] = {}
    for col in required + tuple(optional):
        raw = (row.get(col) or "").strip()
        if not raw:
            if col in required:
                raise InputError(f"op={kind} needs column {col!r}", file=where, field=col)
            raw = optional[col]
            if not raw:
                continue
        if col in _INT_COLUMNS:
            v[col] = _int(raw, col, where)
        elif col == "causal":
            v[col] = _bool(raw, col, where)
        else:
            if raw not in DTYPES:
                raise InputError(f"unknown dtype {raw!r}; expected one of {', '.join(DTYPES)}", file=where, field=col)
            v[col] = raw
    return op_from_params(kind, v)


def op_from_params(kind: str, v: dict) -> O.Op:
    """The standalone operator a measured or requested row describes (params as in the CSV columns)."""
    d = v.get("dtype", "bf16")
    if kind == "gemm":
        return O.gemm("gemm", v["m"], v["n"], v["k"], d, groups=v.get("groups", 1))
    if kind == "attention":
        return O.attention("attention", v["batch"], v["heads_q"], v["heads_kv"], v["seq_q"], v["seq_kv"],
                           v["head_dim"], causal=bool(v["causal"]), dtype=d, head_dim_v=v.get("head_dim_v") or None,
                           kv_dtype=v.get("kv_dtype") or None)
    if kind in ("rmsnorm", "layernorm", "residual"):
        return getattr(O, kind)(kind, v["tokens"], v["hidden"], d)
    if kind in ("swiglu", "gelu"):
        return getattr(O, kind)(kind, v["tokens"], v["width"], d)
    if kind == "rotary":
        return O.rotary(kind, v["tokens"], v["heads"], v["head_dim"], d)
    if kind == "copy":
        return O.copy("copy", v["bytes"])
    if kind == "reduce":
        return O.Op("reduce", "reduce", "standalone", v["bytes"] / 2.0, float(v["bytes"]), {"bytes": v["bytes"]})
    raise KeyError(kind)


def read_rows(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", file=str(path))
    text = p.read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "op" not in [f.strip() for f in reader.fieldnames]:
        raise InputError("expected a CSV header with an 'op' column", file=str(path))
    fields = [f.strip() for f in reader.fieldnames]
    unknown = [f for f in fields if f not in _known_columns()]
    if unknown:
        raise InputError(f"unknown column(s) {', '.join(map(repr, unknown))}", file=str(path))
    rows = [{(k or "").strip(): (val or "") for k, val in r.items()} for r in reader]
    return fields, rows


def predict_rows(rows: list[dict[str, str]], hw, prof, *, mode: str = "latency", source: str = "ops") -> list[dict]:
    from .cost import time_op

    out = []
    for i, row in enumerate(rows, start=2):
        op = row_to_op(row, f"{source}:{i}")
        t = time_op(op, hw, prof, mode=mode, standalone=True)
        new = dict(row)
        new.update({"time_ms": f"{float(t.time) * 1e3:.6g}", "bound": str(t.bound), "flops": f"{float(op.flops):.10g}"})
        # a copy's own `bytes` column is its buffer size (it moves twice that): an input is never overwritten
        if not (row.get("bytes") or "").strip():
            new["bytes"] = f"{float(op.bytes):.10g}"
        out.append(new)
    return out


def write_rows(fields: list[str], rows: list[dict], path: str | Path | None) -> str:
    cols = list(fields) + [c for c in OUTPUT_COLUMNS if c not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c, "") for c in cols})
    text = buf.getvalue()
    if path:
        from .io import write_text_atomic

        write_text_atomic(path, text)
    return text
