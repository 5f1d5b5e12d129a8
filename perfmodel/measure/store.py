"""The measurement store: one JSON object a line in ``measurements.jsonl``.

Rows are appended as each case is measured (write, flush, fsync), so a run that is killed loses at
most the row being written. Reading tolerates a torn last line; :func:`repair` cuts the file back to
its last complete line before a resumed run appends to it. Nothing here imports torch.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

MEASUREMENTS = "measurements.jsonl"
ENVIRONMENT = "environment.json"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def make_id(kind: str, params: dict[str, Any]) -> str:
    """``kind|dtype|key=value|...``: dtype (when there is one) second, then the params in order."""
    parts = [kind]
    if "dtype" in params:
        parts.append(str(params["dtype"]))
    parts.extend(f"{k}={_fmt(v)}" for k, v in params.items() if k != "dtype")
    return "|".join(parts)


def is_held_out(case_id: str, share: float, seed: int = 0) -> bool:
    """Whether a measured shape is held out of a fit (``perfmodel fit``'s split, by a hash of its id; the held-out
    validation of the measured tables uses the same). The attention backend is not part of the key: a shape is
    held out under every backend or under none, so no backend's rows leak a held-out shape into the fit."""
    key = "|".join(part for part in case_id.split("|") if not part.startswith("backend="))
    h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < share


def clean_json(value: Any) -> Any:
    """JSON-safe: NaN/inf become None (json would write bare NaN, which strict readers reject)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


# Caps on a measurement file (the shipped ones: 7.6 MB decompressed, 16,000 rows, each under 2 KB): a 1.2 MB gzip
# of 1.2 GB of newlines ran for minutes, a row nested 100,000 deep raised RecursionError
MAX_ROWS_BYTES = 256 << 20  # decompressed
MAX_LINES = 2_000_000
MAX_ROW_BYTES = 1 << 20
MAX_DEPTH = 64


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete, parseable row; a torn or garbled line (a kill mid-write) is skipped. A file past the caps
    (decompressed size, lines, row size, nesting) is refused in one line naming it."""
    from ..errors import InputError

    path = Path(path)
    if not path.exists():
        return

    def refuse(what: str):
        return InputError(f"{what}; not a measurement file", file=str(path))

    opener = gzip.open if path.suffix == ".gz" else open  # imported tables ship compressed
    seen = lines = 0
    rest = b""
    with opener(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break  # what is left has no newline: a torn last line, never trusted even if it parses
            seen += len(chunk)
            if seen > MAX_ROWS_BYTES:
                raise refuse(f"more than {MAX_ROWS_BYTES >> 20} MB of rows (decompressed)")
            *complete, rest = (rest + chunk).split(b"\n")
            if len(rest) > MAX_ROW_BYTES:
                raise refuse(f"a row longer than {MAX_ROW_BYTES >> 10} KB")
            lines += len(complete)
            if lines > MAX_LINES:
                raise refuse(f"more than {MAX_LINES:,} lines")
            for raw in complete:
                line = raw.strip()
                if not line:
                    continue
                if len(line) > MAX_ROW_BYTES:
                    raise refuse(f"a row longer than {MAX_ROW_BYTES >> 10} KB")
                if _depth(line) > MAX_DEPTH:
                    raise refuse(f"a row nested more than {MAX_DEPTH} deep")
                try:
                    row = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue
                if isinstance(row, dict):
                    yield row


def _depth(line: bytes) -> int:
    """An upper bound of a JSON line's nesting: its opening brackets, counted only when there are many."""
    opens = line.count(b"[") + line.count(b"{")
    if opens <= MAX_DEPTH:
        return opens
    depth = most = 0
    for ch in line:
        if ch in (91, 123):  # [ {
            depth += 1
            most = max(most, depth)
        elif ch in (93, 125):
            depth -= 1
    return most


def read_rows(path: Path) -> list[dict[str, Any]]:
    return list(iter_rows(path))


def repair(path: Path) -> int:
    """Truncate the file to its last complete line; returns the bytes cut off (0 if none)."""
    path = Path(path)
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as fh:
        # scan back from the end for the last newline
        block = 1 << 16
        pos = size
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        if keep < size:
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
        return size - keep


class Store:
    """Append-only writer of rows, durable row by row."""

    def __init__(self, out_dir: Path, *, resume: bool = False):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / MEASUREMENTS
        self.done: set[str] = set()
        self.torn_bytes = 0
        if resume:
            self.torn_bytes = repair(self.path)
            self.done = {str(r["id"]) for r in iter_rows(self.path) if "id" in r}
        self.written = 0

    def __contains__(self, row_id: str) -> bool:
        return row_id in self.done

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps(clean_json(row), sort_keys=False, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.done.add(str(row.get("id")))
        self.written += 1

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append several rows in one write and one fsync (a profile's kernels): durable together."""
        rows = list(rows)
        if not rows:
            return
        text = "".join(json.dumps(clean_json(row), sort_keys=False, default=str) + "\n" for row in rows)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        self.done.update(str(row.get("id")) for row in rows)
        self.written += len(rows)


def set_aside(out_dir: Path) -> str | None:
    """A fresh run (no resume) into a folder that has rows: move them to ``measurements.jsonl.<time>.bak`` rather
    than append to or overwrite them; returns a note saying so, or None."""
    import time

    path = Path(out_dir) / MEASUREMENTS
    if not path.exists() or path.stat().st_size == 0:
        return None
    backup = path.with_name(f"{MEASUREMENTS}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
    os.replace(path, backup)
    return f"existing {MEASUREMENTS} moved to {backup.name} (run without --resume)"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to a temp file in the same folder, fsync, then os.replace it in."""
    from ..io import write_text_atomic

    write_text_atomic(path, json.dumps(clean_json(obj), indent=2, sort_keys=True, default=str) + "\n")
