"""A folder's measured kernel tables, whole, as compact arrays: ``tables.npz`` beside its ``profile.json``.

The fit of an imported folder reads a stratified subsample of each table (``measurements.jsonl.gz``, 3,000 rows a
table: plenty for a few dozen parameters). Interpolating the tables (:mod:`perfmodel.cost.tables`) wants every
measured shape: held-out rows of the subsample are missed by 3-10% at the median, of the whole tables by 1.5-4%
(``python -m perfmodel.fit.tables``). The whole tables as JSON rows take about 7 MB a folder gzipped; as arrays
about a tenth of that:

- one entry a class (key and kernel, :func:`perfmodel.cost.tables.row_class`): the params its rows share (the
  template), the distinct measured values of each shape dim (the axes, float64, exact), the rows in grid order as
  steps between their flat grid positions (a full grid is all ones), and their times as log2 quantized to
  :data:`LOG2_STEP` (at most 0.034% off), stored as steps from the row before, high and low bytes apart (what
  deflate compresses best: neighbouring shapes take similar times);
- a header (JSON, as bytes): :data:`FORMAT`, the classes, and the provenance of the import.

No row ids are kept: the held-out split of the tables' validation is a hash of each row's family and shape
(:meth:`ClassRows.held_out`), the same for every kernel and format of a shape. Read with numpy alone,
``allow_pickle=False``; written atomically (:func:`perfmodel.io.write_bytes_atomic`); the same classes give the
same bytes.
"""
from __future__ import annotations

import io
import json
import math
import os
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FILE = "tables.npz"
FORMAT = "perfmodel-tables/1"
# log2 of a time is stored in steps of 2^-10 (relative error at most 2^-11 * ln 2 = 0.034%: far below the tables'
# own spread, 1-3% between neighbouring shapes); a step between two rows must fit 16 bits (a factor 2^32)
LOG2_STEP = 2.0 ** -10


@dataclass
class ClassRows:
    """One class's measured rows as arrays: what :mod:`perfmodel.cost.tables` interpolates."""

    key: tuple
    kernel: str
    template: dict  # the params every row of the class shares
    dims: np.ndarray  # (n, d) shape dims
    times: np.ndarray  # (n,) measured seconds
    # whether the import took this kernel for the engine's main path where a table times several for one class
    # (perfmodel.imports.aiconfigurator.main_kernels: the preferred one, else the one it measures most); the
    # others are kept as evidence (a kernel ratio carried to a part whose table lacks the engine's kernel)
    main: bool = True

    def __len__(self) -> int:
        return len(self.times)

    def held_out(self, share: float, seed: int = 0) -> np.ndarray:
        """Which rows the tables' validation holds out: those whose hash of family and shape dims (and ``seed``)
        falls below ``share`` of its range. Deterministic, independent of the kernel, format and file order."""
        h = np.full(len(self), _mix(np.uint64(zlib.crc32(f"{seed}:{self.key[0]}".encode()))), dtype=np.uint64)
        for j in range(self.dims.shape[1]):
            h = _mix(h ^ np.ascontiguousarray(self.dims[:, j], dtype=np.float64).view(np.uint64))
        return (h >> np.uint64(11)).astype(np.float64) / 2.0**53 < share


def _mix(x):
    """splitmix64's finaliser (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _tuple(value):
    if isinstance(value, list):
        return tuple(_tuple(v) for v in value)
    return value


def encode(classes: list[ClassRows], provenance: dict | None = None) -> bytes:
    """The ``tables.npz`` bytes of ``classes`` (module doc)."""
    arrays: dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "log2_step": LOG2_STEP, "provenance": provenance or {}, "classes": []}
    for i, c in enumerate(classes):
        dims = np.asarray(c.dims, dtype=float).reshape(len(c), -1)
        times = np.asarray(c.times, dtype=float)
        if len(times) == 0 or not np.all(np.isfinite(times) & (times > 0)):
            raise ValueError(f"class {c.key}: times must be positive and finite")
        axes = [np.unique(dims[:, j]) for j in range(dims.shape[1])]
        flat = np.ravel_multi_index([np.searchsorted(a, dims[:, j]) for j, a in enumerate(axes)],
                                    [len(a) for a in axes])
        order = np.argsort(flat, kind="stable")
        flat, times = flat[order], times[order]
        if np.any(np.diff(flat) == 0):
            raise ValueError(f"class {c.key}, kernel {c.kernel}: a shape measured twice")
        steps = np.round(np.log2(times) / LOG2_STEP).astype(np.int64)
        delta = np.diff(steps, prepend=0)
        first, delta = int(delta[0]), delta[1:]
        if delta.size and np.abs(delta).max() >= 2**15:
            raise ValueError(f"class {c.key}: neighbouring times differ by more than a factor 2^32")
        gaps = np.diff(flat, prepend=-1)
        arrays[f"c{i}_axes"] = np.concatenate(axes)
        arrays[f"c{i}_cells"] = gaps.astype(np.uint32 if gaps.max() < 2**32 else np.uint64)
        arrays[f"c{i}_time"] = delta.astype(np.int16).view(np.uint8).reshape(-1, 2).T.copy()  # byte planes
        header["classes"].append({"key": _jsonable(c.key), "kernel": c.kernel, "template": c.template,
                                  "main": bool(c.main), "axes": [len(a) for a in axes], "rows": len(times),
                                  "first_step": first})
    arrays["header"] = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return _deterministic_zip(buf.getvalue())


def _deterministic_zip(data: bytes) -> bytes:
    """The zip ``np.savez_compressed`` wrote, its members' timestamps set to a fixed date (the same tables, the
    same bytes: a re-import changes no tracked file that did not change)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info.filename), compresslevel=9)
    return out.getvalue()


# what reading a table that is not one raises (turned into a ValueError naming the file)
_UNREADABLE = (KeyError, IndexError, TypeError, ValueError, json.JSONDecodeError, UnicodeDecodeError, OSError,
               EOFError, zipfile.BadZipFile)


def decode(data: bytes | Path) -> tuple[list[ClassRows], dict]:
    """(the classes, the header's provenance) of ``tables.npz`` bytes or a path to them. ValueError where the
    file is not such a table."""
    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    try:
        with np.load(source, allow_pickle=False) as z:
            header = _header(z)
            out = [_class_rows(z, header, i) for i in range(len(header["classes"]))]
    except _UNREADABLE as e:
        raise _unreadable(e) from None
    return out, header.get("provenance", {})


def decode_lazily(path: Path) -> tuple[dict[tuple, KernelRows], dict]:
    """The classes of a ``tables.npz`` file per class key (:class:`KernelRows`: per kernel, each decoded when
    first asked for: a projection uses three or four of a folder's fifty; decoding all took 25 ms of a cold
    ``perfmodel project``), and the header's provenance. An InputError naming the file where it is not such a
    table, at once or when a class is decoded."""
    from ..errors import InputError

    try:
        z = np.load(io.BytesIO(Path(path).read_bytes()), allow_pickle=False)
        header = _header(z)
        kernels: dict[tuple, dict[str, int]] = {}
        for i, c in enumerate(header["classes"]):
            kernels.setdefault(_tuple(c["key"]), {})[str(c["kernel"])] = i
    except _UNREADABLE as e:
        raise InputError(str(_unreadable(e)), file=str(path)) from None

    def loader(i: int) -> Callable[[], ClassRows]:
        def load() -> ClassRows:
            try:
                return _class_rows(z, header, i)
            except _UNREADABLE as e:
                raise InputError(str(_unreadable(e)), file=str(path)) from None

        return load

    classes = header["classes"]
    return ({key: KernelRows({k: loader(i) for k, i in held.items()},
                             [k for k, i in held.items() if classes[i].get("main", True)])
             for key, held in kernels.items()}, header.get("provenance", {}))


class KernelRows(Mapping):
    """A class key's rows per kernel (kernel -> :class:`ClassRows`), each decoded when first asked for
    (:func:`decode_lazily`), and which of the kernels the import took for the engine's main path
    (:attr:`ClassRows.main`, known without decoding any)."""

    def __init__(self, loaders: dict[str, Callable[[], ClassRows]], main: list[str]):
        self._loaders, self._rows, self.main = loaders, {}, main

    @classmethod
    def of(cls, classes: list[ClassRows]) -> KernelRows:
        """Classes of one key, decoded already."""
        return cls({c.kernel: (lambda c=c: c) for c in classes}, [c.kernel for c in classes if c.main])

    def __getitem__(self, kernel: str) -> ClassRows:
        if kernel not in self._rows:
            self._rows[kernel] = self._loaders[kernel]()
        return self._rows[kernel]

    def __iter__(self):
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


def _header(z) -> dict:
    header = json.loads(bytes(z["header"]).decode("utf-8"))
    if header.get("format") != FORMAT:
        raise ValueError(f"expected format {FORMAT}, found {header.get('format')!r}")
    return header


def _class_rows(z, header: dict, i: int) -> ClassRows:
    """Class ``i`` of an open ``tables.npz`` (module doc: the encoding)."""
    c, step = header["classes"][i], float(header["log2_step"])
    sizes = [int(n) for n in c["axes"]]
    flat_axes = z[f"c{i}_axes"]
    cuts = np.cumsum([0] + sizes)
    axes = [flat_axes[cuts[j]:cuts[j + 1]] for j in range(len(sizes))]
    flat = np.cumsum(z[f"c{i}_cells"].astype(np.int64)) - 1
    index = np.unravel_index(flat, sizes)
    dims = np.stack([axes[j][index[j]] for j in range(len(sizes))], axis=1)
    planes = z[f"c{i}_time"]
    delta = planes.T.copy().view(np.int16).reshape(-1).astype(np.int64)
    steps = int(c["first_step"]) + np.concatenate([[0], np.cumsum(delta)])
    if len(steps) != int(c["rows"]) or len(flat) != int(c["rows"]):
        raise ValueError(f"class {i}: {c['rows']} rows expected")
    return ClassRows(_tuple(c["key"]), str(c["kernel"]), dict(c["template"]), dims, np.exp2(steps * step),
                     bool(c.get("main", True)))


def _unreadable(e: Exception) -> ValueError:
    if isinstance(e, ValueError) and not isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
        return e  # already says what is wrong (the format, a class's row count)
    return ValueError(f"not a readable {FILE} ({type(e).__name__}: {e})")


_HEADERS: dict = {}  # (path, modification time, size) -> header: a projection's assumptions look at every sibling


def read_header(path: Path) -> dict:
    """The header of a ``tables.npz`` alone (its classes' keys, kernels and sizes, the provenance), without the
    arrays: a look at what a folder holds. ValueError where the file is not such a table. Remembered per file state;
    the dict returned is shared: read it, do not change it."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    stamp = None if st is None else (str(path), st.st_mtime_ns, st.st_size)
    hit = _HEADERS.get(stamp) if stamp else None
    if hit is None:
        hit = _read_header(path)
        if stamp:
            if len(_HEADERS) > 256:
                _HEADERS.clear()
            _HEADERS[stamp] = hit
    return hit


def _read_header(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode("utf-8"))
    except (KeyError, json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"not a readable {FILE} ({type(e).__name__}: {e})") from None
    if header.get("format") != FORMAT:
        raise ValueError(f"expected format {FORMAT}, found {header.get('format')!r}")
    for c in header.get("classes", []):
        c["key"] = _tuple(c["key"])
    return header


def write(path: Path, classes: list[ClassRows], provenance: dict | None = None) -> Path:
    """Write ``path / tables.npz`` atomically; returns its path."""
    from ..io import write_bytes_atomic

    target = Path(path) / FILE
    write_bytes_atomic(target, encode(classes, provenance))
    return target


def quantization_error() -> float:
    """The largest relative error of a stored time (module doc)."""
    return math.expm1(LOG2_STEP / 2 * math.log(2))
