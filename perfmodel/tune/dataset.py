"""Measured tuning rows, grouped by shape, and the deterministic split of shapes that fit and evaluate share.

A folder may hold several runs: ``DIR/tune_measurements.jsonl`` and ``DIR/*/tune_measurements.jsonl`` (or their
``.gz``: the committed runs ship compressed).
When one row id was measured by several, the row timed with the host kept behind the GPU (``"timing":
"queued"``, :meth:`perfmodel.tune.measure.Bench._timed`) replaces one timed directly: the first H200 run
timed directly and counted the host's launch time on small split-K kernels.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

ROWS = "tune_measurements.jsonl"
KINDS = ("gemm", "attention")


@dataclass
class ShapeRows:
    kind: str
    name: str
    shape: dict
    grid: str  # the configuration grid the run measured ("reduced" or "full")
    rows: dict = field(default_factory=dict)  # configuration key -> row
    reference_s: float | None = None  # torch's own kernel

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.name}"

    def times(self) -> dict[str, float]:
        """Configuration key -> seconds, for the rows that ran and checked correct."""
        return {k: float(r["time_s"]) for k, r in self.rows.items() if r.get("time_s") and not r.get("error")}


@dataclass
class Measurements:
    shapes: list[ShapeRows]
    files: list[str]
    rows: int
    superseded: int  # rows replaced by a queued-timing row of the same id


def measurement_files(path) -> list[Path]:
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise InputError("no such file or folder", file=str(path))
    # a committed run ships compressed (ROWS + ".gz", read alike by iter_rows); a run in progress appends plain rows
    files = [f for d in [p, *sorted(x for x in p.iterdir() if x.is_dir())] for f in (d / ROWS, d / f"{ROWS}.gz")
             if f.is_file()]
    if not files:
        raise InputError(f"no {ROWS} here or in its subfolders (run `python -m perfmodel.tune.measure --out DIR` "
                         f"on a GPU first)", file=str(path))
    return files


def _rank(row: dict) -> int:
    return 1 if row.get("timing") == "queued" else 0


def load_measurements(path) -> Measurements:
    from ..measure.store import iter_rows

    files = measurement_files(path)
    by_id: dict[str, dict] = {}
    total = superseded = 0
    for f in files:
        for r in iter_rows(f):
            if not isinstance(r, dict) or r.get("kind") not in KINDS or not isinstance(r.get("shape"), dict):
                continue
            total += 1
            rid = str(r.get("id") or f"{r['kind']}|{r.get('shape_name')}|{r.get('key')}")
            old = by_id.get(rid)
            if old is not None:
                superseded += 1
                if _rank(r) < _rank(old):
                    continue
            by_id[rid] = r
    return Measurements(group_shapes(by_id.values()), [str(f) for f in files], total, superseded)


def group_shapes(rows) -> list[ShapeRows]:
    out: dict[tuple, ShapeRows] = {}
    for r in rows:
        kind = r.get("kind")
        if kind not in KINDS:
            continue
        name = str(r.get("shape_name"))
        # rows of the first H200 run (2026-12-02) carry no "grid": its GEMMs were measured on the reduced grid
        default_grid = "reduced" if kind == "gemm" else "full"
        entry = out.setdefault((kind, name), ShapeRows(kind, name, r["shape"], str(r.get("grid", default_grid))))
        if r.get("key") == "torch":
            if r.get("time_s") and not r.get("error"):
                entry.reference_s = float(r["time_s"])
            continue
        entry.rows[str(r.get("key"))] = r
    return list(out.values())


# --- the split -------------------------------------------------------------------------------------------------

def _unit(key: str, seed: int) -> float:
    h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def is_held_out(shape_key: str, share: float, seed: int = 0) -> bool:
    """Whether a whole shape (``kind|name``) is held out of the fit: a deterministic hash, as
    :func:`perfmodel.fit.latency.is_held_out` does for the latency model."""
    return _unit(shape_key, seed) < share


def fold_of(shape_key: str, folds: int, seed: int = 0) -> int:
    """The k-fold cross-validation fold a whole shape belongs to (a hash independent of the hold-out's)."""
    return min(folds - 1, int(_unit(shape_key, seed + 1000) * folds))
