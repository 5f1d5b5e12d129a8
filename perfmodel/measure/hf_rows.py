"""A Hugging Face ``generate()`` run's rows: kept in the measurement store, shown as three CSV tables.

Every row is appended to ``measurements.jsonl`` through :class:`~perfmodel.measure.store.Store` as soon as it is
measured (one JSON object a line, fsync'd), with a ``kind`` (``hf_generate``, ``hf_host``, ``hf_kernels``; the
run's notes ``hf_error``, ``hf_skip``, ``hf_part``) and an ``id``: a killed run keeps every row it wrote, and
``--resume`` skips the generate points and parts already there. The tables readers use (``generate.csv``,
``host.csv``, ``kernels.csv``: :mod:`perfmodel.host_costs`, the validation rows) and ``summary.json`` are written
from the rows (temp file + ``os.replace``) after every row, in the columns and formats they always had, so an
older folder with only the CSV tables reads the same. Pure Python: nothing here imports torch.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Iterable

from ..io import write_text_atomic
from .store import Store, iter_rows, make_id, write_json_atomic

GENERATE_COLUMNS = (
    "model", "family", "layers", "cache", "batch", "isl", "osl", "ttft_ms", "tpot_ms", "e2e_ms",
    "ttft_samples_ms", "e2e_samples_ms", "reps", "tpot_min_ms", "max_cache_len", "peak_mem_gib", "steal_ms",
    "status", "notes",
)
HOST_COLUMNS = (
    "family", "name", "model", "batch", "ctx", "layers", "wall_us", "issue_us", "device_us", "wall_min_us", "n",
    "unit", "notes",
)
KERNEL_COLUMNS = (
    "model", "cache", "phase", "batch", "ctx", "category", "kernel", "count", "device_us",
)
# table -> (file, columns, the columns that name a row: its id)
TABLES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "generate": ("generate.csv", GENERATE_COLUMNS, ("model", "cache", "batch", "isl", "osl")),
    "host": ("host.csv", HOST_COLUMNS, ("family", "name", "model", "batch", "ctx")),
    "kernels": ("kernels.csv", KERNEL_COLUMNS, ("model", "cache", "phase", "batch", "ctx", "kernel")),
}
SUMMARY = "summary.json"


def kind_of(table: str) -> str:
    return f"hf_{table}"


def generate_id(model: str, cache: str, batch: int, isl: int, osl: int) -> str:
    """The id of a generate point's row: what ``--resume`` looks for."""
    return make_id(kind_of("generate"), {"model": model, "cache": cache, "batch": batch, "isl": isl, "osl": osl})


def part_id(key: str) -> str:
    return make_id(kind_of("part"), {"key": key})


def cell(v: Any) -> Any:
    """A CSV cell: floats to 6 significant digits, NaN/inf and None empty, lists joined with ``;``."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ";".join(str(cell(x)) for x in v)
    return "" if v is None else v


def table_text(rows: Iterable[dict[str, Any]], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({c: cell(row.get(c)) for c in columns})
    return buf.getvalue()


class Record:
    """A run's rows: each appended to the store as it is measured, the tables and the summary rewritten from
    them. ``resume`` keeps the rows already in ``out`` (after cutting a torn last line) and their ids."""

    def __init__(self, out: Path, plan: dict[str, Any], *, resume: bool = False):
        self.out = Path(out)
        self.store = Store(self.out, resume=resume)
        self.rows: list[dict[str, Any]] = list(iter_rows(self.store.path)) if resume else []
        self.summary_extra: dict[str, Any] = {}
        self.plan = plan
        self.export()

    # -- writing
    def _check(self, table: str, fields: dict[str, Any]) -> dict[str, Any]:
        fname, columns, key = TABLES[table]
        unknown = [k for k in fields if k not in columns]
        if unknown:
            raise KeyError(f"{fname}: unknown column(s) {', '.join(unknown)}")
        row = {c: fields.get(c) for c in columns}
        return {"id": make_id(kind_of(table), {k: row[k] for k in key}), "kind": kind_of(table), **row}

    def add(self, table: str, **fields: Any) -> dict[str, Any]:
        """One row of ``table`` ("generate", "host", "kernels"), durable before this returns."""
        row = self._check(table, fields)
        self.store.append(row)
        self.rows.append(row)
        self.export(table)
        return row

    def extend(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Several rows of ``table`` in one durable write (a profile's kernels)."""
        checked = [self._check(table, r) for r in rows]
        self.store.extend(checked)
        self.rows.extend(checked)
        self.export(table)

    def note(self, kind: str, **fields: Any) -> None:
        """A run's note (error, skip, part) as a row, so that it survives a kill like a measurement."""
        row = {"id": make_id(kind_of(kind), {k: fields[k] for k in ("key",) if k in fields}), "kind": kind_of(kind),
               **fields}
        self.store.append(row)
        self.rows.append(row)
        self.export_summary()

    def adopt(self, rows: Iterable[dict[str, Any]], where: str = "") -> int:
        """Rows another run wrote (a compile child's store) into this one; errors say where they came from.
        Returns how many generate rows came in."""
        rows = [dict(r) for r in rows if str(r.get("kind", "")).startswith("hf_")]
        for r in rows:
            if r["kind"] == kind_of("error") and where:
                r["where"] = f"{where}{r.get('where', '')}"
        self.store.extend(rows)
        self.rows.extend(rows)
        self.export()
        return sum(1 for r in rows if r["kind"] == kind_of("generate"))

    def table_of(self, table: str) -> "TableRows":
        return TableRows(self, table)

    # -- reading
    def table(self, table: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("kind") == kind_of(table)]

    def has(self, row_id: str) -> bool:
        return row_id in self.store

    def has_part(self, key: str) -> bool:
        return part_id(key) in self.store

    # -- the views
    def export(self, only: str | None = None) -> None:
        for table, (fname, columns, _) in TABLES.items():
            rows = self.table(table) if only in (None, table) else None
            if rows or (rows is not None and (self.out / fname).exists()):  # a table only once it has a row
                write_text_atomic(self.out / fname, table_text(rows, columns))
        self.export_summary()

    def summary(self) -> dict[str, Any]:
        parts = {r.get("key"): r.get("value") for r in self.table("part")}
        return {"plan": self.plan,
                "errors": [{k: r.get(k) for k in ("where", "error", "traceback")} for r in self.table("error")],
                "skipped": [{k: r.get(k) for k in ("what", "why")} for r in self.table("skip")],
                "parts": parts, **self.summary_extra}

    def export_summary(self) -> None:
        write_json_atomic(self.out / SUMMARY, self.summary())


class TableRows:
    """One table of a :class:`Record`: ``add`` and ``extend`` its rows, read them back as ``rows``."""

    def __init__(self, rec: Record, table: str):
        self.rec, self.name = rec, table

    def add(self, **fields: Any) -> dict[str, Any]:
        return self.rec.add(self.name, **fields)

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        self.rec.extend(self.name, rows)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.rec.table(self.name)
