"""Time standalone operators given one per row of a CSV table (``perfmodel predict``).

Each row names an ``op`` and its shape; the row comes back with ``time_ms``, ``bound``, ``flops`` and
``bytes`` (HBM bytes moved) added. Times are standalone: one op timed on its own with device events, its
launch latency and (for multi-call eager ops) host dispatch included, as a microbenchmark sees it. A ``copy``
row's ``bytes`` is its input, the buffer size, and stays as given: the copy moves twice that. Standalone means a
single kernel timed on its own (as a microbenchmark times it): no launch gap of a graph or eager stream is added.

The kernels are plain PyTorch's by default (``--engine torch``): each family from the part's own standalone
calibration (``calibration/h200`` on the H200), where it measured one (:mod:`perfmodel.evidence`); ``--engine``
prices them with an engine's kernel tables instead. :mod:`perfmodel.kernel_check` checks these prices on the
H200's own measured kernels.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from . import ops as O
from .dtypes import DTYPES
from .errors import InputError

# op -> (required columns, optional columns with defaults)
OP_COLUMNS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "gemm": (("m", "n", "k", "dtype"), {"groups": "1"}),
    "attention": (("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "dtype"),
                  {"head_dim_v": "", "kv_dtype": "", "kernel": ""}),
    "rmsnorm": (("tokens", "hidden", "dtype"), {}),
    "layernorm": (("tokens", "hidden", "dtype"), {}),
    "swiglu": (("tokens", "width", "dtype"), {}),
    "gelu": (("tokens", "width", "dtype"), {}),
    "rotary": (("tokens", "heads", "head_dim", "dtype"), {}),
    "residual": (("tokens", "hidden", "dtype"), {}),
    "quantize": (("tokens", "hidden", "dtype"), {}),
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


MAX_INT = 2**53  # the largest integer a float holds exactly; any real shape is far below


def _int(value: str, col: str, where: str) -> int:
    """A positive whole number: ``4096``, ``4096.0`` or ``4e3``; never NaN, an infinity or beyond MAX_INT."""
    text = value.strip()
    try:
        v = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise InputError(f"expected a positive integer, got {_shown(value)}", file=where, field=col) from None
        if not math.isfinite(f):
            raise InputError(f"expected a finite positive integer, got {_shown(value)}", file=where, field=col)
        if f != int(f):
            raise InputError(f"expected a whole number, got {_shown(value)}", file=where, field=col)
        v = int(f)
    if v <= 0:
        raise InputError(f"expected a positive integer, got {_shown(value)}", file=where, field=col)
    if v > MAX_INT:
        raise InputError(f"expected at most 2**53, got {_shown(value)}", file=where, field=col)
    return v


def _shown(value: str, limit: int = 40) -> str:
    """A cell as an error message shows it: quoted, cut short."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def _bool(value: str, col: str, where: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "y", "t"):
        return True
    if v in ("0", "false", "no", "n", "f"):
        return False
    raise InputError(f"expected true or false, got {_shown(value)}", file=where, field=col)


def row_to_op(row: dict[str, str], where: str) -> O.Op:
    kind = (row.get("op") or "").strip().lower()
    if kind not in OP_COLUMNS:
        raise InputError(f"unknown op {_shown(kind)}; expected one of {', '.join(OP_COLUMNS)}", file=where,
                         field="op")
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
        elif col == "kernel":
            from .attention_kernels import canonical

            try:
                v[col] = canonical(raw.lower())
            except InputError as e:
                raise InputError(e.detail, file=where, field=col) from None
        else:
            if raw not in DTYPES:
                raise InputError(f"unknown dtype {_shown(raw)}; expected one of {', '.join(DTYPES)}", file=where,
                                 field=col)
            v[col] = raw
    return op_from_params(kind, v)


def op_from_params(kind: str, v: dict) -> O.Op:
    """The standalone operator a measured or requested row describes (params as in the CSV columns)."""
    d = v.get("dtype", "bf16")
    if kind == "gemm":
        op = O.gemm("gemm", v["m"], v["n"], v["k"], d, groups=v.get("groups", 1))
        # how a quantized format is scaled, and whether the module quantizes its input (imported engine tables)
        extra = {key: v[key] for key in ("scaling", "quant_input") if v.get(key)}
        return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra}) if extra else op
    if kind == "attention":
        op = O.attention("attention", v["batch"], v["heads_q"], v["heads_kv"], v["seq_q"], v["seq_kv"],
                         v["head_dim"], causal=bool(v["causal"]), dtype=d, head_dim_v=v.get("head_dim_v"),
                         kv_dtype=v.get("kv_dtype") or None)
        # packed: a serving engine's decode kernel (real query rows only); includes: what else the timed module did;
        # kernel: the attention kernel (perfmodel.attention_kernels; absent: what the profile's engine runs)
        extra = {key: v[key] for key in ("packed", "includes", "kernel") if v.get(key)}
        return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra}) if extra else op
    if kind in ("rmsnorm", "layernorm", "residual"):
        return getattr(O, kind)(kind, v["tokens"], v["hidden"], d)
    if kind in ("swiglu", "gelu"):
        return getattr(O, kind)(kind, v["tokens"], v["width"], d)
    if kind == "rotary":
        return O.rotary(kind, v["tokens"], v["heads"], v["head_dim"], d)
    if kind == "quantize":
        return O.quantize(kind, v["tokens"], v["hidden"], d)
    if kind == "copy":
        return O.copy("copy", v["bytes"])
    if kind == "reduce":
        return O.Op("reduce", "reduce", "standalone", v["bytes"] / 2.0, v["bytes"] * 1.0, {"bytes": v["bytes"]})
    raise KeyError(kind)


MAX_FILE_BYTES = 64 * 2**20  # an operator table of a million rows is about 50 MB
MAX_ROWS = 200_000
MAX_CELL = 4096  # characters; a shape, a dtype or a note


class Row(dict):
    """One row of an operator table: column -> text, and the line of the file it started on."""

    line: int = 0


def read_rows(path: str | Path) -> tuple[list[str], list[Row]]:
    """The header and rows of an operator table. Anything malformed (not UTF-8, a ragged row, a repeated or
    unknown column, an over-long cell, a file too large) is a one-line InputError naming file:line and
    the column."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file" if not p.exists() else "not a regular file", file=str(path))
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror or e})", file=str(path)) from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"larger than {MAX_FILE_BYTES // 2**20} MiB; split the table", file=str(path))
    text = data.decode("utf-8", errors="surrogateescape")
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = csv.reader(io.StringIO(text, newline=""))
    old_limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FILE_BYTES + 1)  # long cells are refused below, with their column
    try:
        try:
            header = next(reader, None)
        except csv.Error as e:
            raise _csv_error(e, path, reader.line_num) from None
        if not header:
            raise InputError("empty; expected a CSV header with an 'op' column", file=str(path))
        fields = [h.strip() for h in header]
        _check_cells(fields, fields, path, 1, header=True)
        if "op" not in fields:
            raise InputError("expected a CSV header with an 'op' column", file=f"{path}:1")
        for i, f in enumerate(fields):
            if not f:
                raise InputError(f"column {i + 1} has no name", file=f"{path}:1")
            if fields.index(f) != i:
                raise InputError(f"column {f!r} appears twice (columns {fields.index(f) + 1} and {i + 1})",
                                 file=f"{path}:1", field=f)
        unknown = [f for f in fields if f not in _known_columns()]
        if unknown:
            raise InputError(f"unknown column(s) {', '.join(_shown(u) for u in unknown)}; expected: "
                             f"{', '.join(sorted(_known_columns()))}", file=f"{path}:1")
        rows: list[Row] = []
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader, None)
            except csv.Error as e:
                raise _csv_error(e, path, line) from None
            if cells is None:
                break
            if not cells or all(not c.strip() for c in cells):
                continue  # a blank line
            if len(cells) != len(fields):
                raise InputError(f"{len(cells)} values, but the header has {len(fields)} columns",
                                 file=f"{path}:{line}")
            _check_cells(cells, fields, path, line)
            if len(rows) >= MAX_ROWS:
                raise InputError(f"more than {MAX_ROWS:,} rows; split the table", file=f"{path}:{line}")
            row = Row(zip(fields, cells))
            row.line = line
            rows.append(row)
    finally:
        csv.field_size_limit(old_limit)
    return fields, rows


def _csv_error(e: csv.Error, path, line: int) -> InputError:
    return InputError(f"not a valid CSV row ({e})", file=f"{path}:{line}")


def _check_cells(cells, fields, path, line: int, *, header: bool = False) -> None:
    for cell, col in zip(cells, fields):
        name = None if header else col
        if len(cell) > MAX_CELL:
            raise InputError(f"a cell of {len(cell):,} characters (limit {MAX_CELL})", file=f"{path}:{line}",
                             field=name)
        try:
            cell.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = ord(cell[e.start]) - 0xDC00
            raise InputError(f"not UTF-8 text (byte 0x{bad:02x}); save the table as UTF-8",
                             file=f"{path}:{line}", field=name) from None
        if "\x00" in cell:
            raise InputError("a NUL byte; expected text", file=f"{path}:{line}", field=name)


_NUMERIC_PASSTHROUGH = ("measured_ms",)


def _check_passthrough(row: dict, where: str) -> None:
    """A measured time passed through must be a finite number (it is compared, and written back)."""
    for col in _NUMERIC_PASSTHROUGH:
        raw = (row.get(col) or "").strip()
        if not raw:
            continue
        try:
            v = float(raw)
        except ValueError:
            raise InputError(f"expected a number of milliseconds, got {_shown(raw)}", file=where, field=col) from None
        if not math.isfinite(v) or v < 0:
            raise InputError(f"expected a finite, non-negative number of milliseconds, got {_shown(raw)}",
                             file=where, field=col)


def predict_rows(rows: list[dict[str, str]], hw, prof=None, *, mode: str = "latency", source: str = "ops") -> list[dict]:
    """Each row with its standalone time. ``prof`` None: the part's standalone calibration (plain PyTorch's
    kernels, :data:`perfmodel.resolve.STANDALONE_ENGINE`), as ``perfmodel predict`` uses by default."""
    from .cost import time_op
    from .resolve import STANDALONE_ENGINE, resolve_hardware, resolve_profile

    hw = resolve_hardware(hw)
    if prof is None:
        prof = resolve_profile(None, hw, STANDALONE_ENGINE)

    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{source}:{getattr(row, 'line', 0) or i}"
        _check_passthrough(row, where)
        op = _engine_kernel(row_to_op(row, where), prof)
        t = time_op(op, hw, prof, mode=mode, standalone=True)
        time_s, flops = float(t.time), float(op.flops)
        if not (math.isfinite(time_s) and math.isfinite(flops) and math.isfinite(float(op.bytes))):
            raise InputError("the shape gives a non-finite time or size; check the values", file=where)
        new = dict(row)
        new.update({"time_ms": f"{time_s * 1e3:.6g}", "bound": str(t.bound), "flops": f"{flops:.10g}"})
        # a copy's own `bytes` column is its buffer size (it moves twice that): an input is never overwritten
        if not (row.get("bytes") or "").strip():
            new["bytes"] = f"{float(op.bytes):.10g}"
        out.append(new)
    return out


def _engine_kernel(op: O.Op, prof) -> O.Op:
    """An attention row with no ``kernel`` column runs the kernel of the engine its profile was composed for
    (``provenance["families"]["attention"]["kernels"]``, :mod:`perfmodel.evidence`): cuDNN's SDPA on the H200
    for plain PyTorch, TensorRT-LLM's FMHA/XQA for ``--engine trtllm``. A single profile given by path: auto."""
    from .cost import attention_phase

    if op.kind != "attention" or op.params.get("kernel"):
        return op
    kernels = ((prof.provenance.get("families") or {}).get("attention") or {}).get("kernels") or {}
    kernel = kernels.get(attention_phase(op))
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "kernel": kernel}) if kernel else op


def write_rows(fields: list[str], rows: list[dict], path: str | Path | None) -> str:
    """The table with the output columns added (every cell through perfmodel.io.csv_safe); written
    atomically to ``path`` when given."""
    from .io import csv_dicts_text

    cols = list(fields) + [c for c in OUTPUT_COLUMNS if c not in fields]
    text = csv_dicts_text(cols, rows)
    if path:
        from .io import write_text_atomic

        write_text_atomic(path, text)
    return text
