"""Results kept on disk between processes: work a fresh ``perfmodel`` process would otherwise redo on every start
(the verdict on each class of an imported table, :func:`perfmodel.cost.tables.build_class`: about 0.2 s of a cold
``perfmodel project``, and the first use of every table class in a test session; the lines a class's table
interpolates along its first dim, :class:`perfmodel.cost.tables.ClassTable`, whose first computation in a process
prices every row of the class and imports scipy.spatial: 0.2-0.4 s).

An entry is keyed by a digest of everything its value is computed from: the caller's inputs (:func:`digest`) and
:func:`code_stamp` (the package's source, Python's, numpy's and scipy's versions, the CPU's features; a namespace
may name a narrower stamp of its own), so a hit is the value the computation gives. The entries of a namespace and code stamp are one small JSON file in :func:`cache_dir`, written
whole and atomically (a temporary file renamed over it): at once (:func:`put`), or once as the process exits
(:func:`put_later`: a namespace that gains entries all through a run, written once, its oldest entries dropped
beyond a bound). A cache that cannot be read or written (missing, corrupt, read-only) is a miss, never an error,
and two processes writing at once at worst lose an entry (computed again). Arrays of floats are kept as the
base64 text of their bytes (:func:`pack`): exact, and a third the size of their decimal text.
"""
from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# files of one namespace kept (one per code stamp: worktrees and versions used side by side), the oldest dropped
KEEP_FILES = 8

_STAMP: list[str] = []
_READ: dict[Path, dict] = {}  # file -> its entries as read or written by this process
_LATER: dict[Path, tuple[str, dict, int | None]] = {}  # file -> (namespace, entries to write at exit, bound)


def cache_dir() -> Path | None:
    """``$PERFMODEL_CACHE_DIR`` (empty: no cache), else ``$XDG_CACHE_HOME/perfmodel``, else ``~/.cache/perfmodel``."""
    env = os.environ.get("PERFMODEL_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfmodel"


def code_stamp() -> str:
    """A digest of the code a cached value was computed by: every ``.py`` file of the package (5 ms, once a
    process), the versions and places of Python, numpy and scipy (their arithmetic, and the linear algebra
    library they were built with, decides the last bits), and the CPU features numpy dispatches on (its
    vectorised ``exp`` and ``log`` and the BLAS kernels differ in the last bit between CPUs; a cache in a home
    folder that several machines share keeps their values apart)."""
    if not _STAMP:
        import numpy

        features = getattr(sys.modules.get("numpy._core._multiarray_umath"), "__cpu_features__", None) or {}
        h = hashlib.sha256(f"{sys.version}|{sys.executable}|{numpy.__version__}|{numpy.__file__}|"
                           f"{sorted(k for k, on in features.items() if on)}".encode())
        h.update(_scipy_version())
        package = Path(__file__).resolve().parent
        for path in sorted(package.rglob("*.py")):
            h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
        _STAMP.append(h.hexdigest())
    return _STAMP[0]


def _scipy_version() -> bytes:
    """scipy's place and its ``version.py`` (the version and the commit it was built from), read without importing
    scipy (10 ms a process that may not use it)."""
    import importlib.util

    spec = importlib.util.find_spec("scipy")
    if spec is None or spec.origin is None:
        return b"no scipy"
    try:
        return spec.origin.encode() + b"\0" + (Path(spec.origin).parent / "version.py").read_bytes()
    except OSError:
        return spec.origin.encode()


def digest(*parts: str | bytes) -> str:
    """One key from ``parts`` (each length-prefixed, so no two sequences of parts give the same bytes)."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def get(namespace: str, key: str, stamp: str | None = None):
    """The value stored under ``key`` (by this process too, :func:`put_later`), or None. ``stamp``: the code the
    namespace's values depend on, where that is less than the whole package's (default :func:`code_stamp`)."""
    file = _file(namespace, stamp)
    if file is None:
        return None
    if file not in _READ:
        _READ[file] = _read(file)
    return _READ[file].get(key)


def put(namespace: str, key: str, value) -> None:
    """Store ``value`` (JSON) under ``key``, merged with what the file holds now; silently nothing where the cache
    cannot be written."""
    file = _file(namespace)
    if file is None:
        return
    _write(file, namespace, {key: value}, None)


def put_later(namespace: str, key: str, value, keep: int | None = None, stamp: str | None = None) -> None:
    """Store ``value`` (JSON) under ``key`` when the process exits (:func:`flush`), merged with what the file holds
    then, keeping the newest ``keep`` entries; :func:`get` sees it at once. ``stamp`` as there."""
    file = _file(namespace, stamp)
    if file is None:
        return
    if file not in _READ:
        _READ[file] = _read(file)
    _READ[file][key] = value
    _LATER.setdefault(file, (namespace, {}, keep))[1][key] = value


@atexit.register
def flush() -> None:
    """Write what :func:`put_later` holds (once per file; run at exit)."""
    while _LATER:
        file, (namespace, entries, keep) = _LATER.popitem()
        _write(file, namespace, entries, keep)


def pack(values) -> str:
    """An array of floats as text: the base64 of its little-endian float64 bytes (exact)."""
    import numpy as np

    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")


def unpack(text) -> np.ndarray | None:
    """The floats :func:`pack` wrote, or None where ``text`` is not such a value."""
    import numpy as np

    try:
        data = base64.b64decode(text, validate=True)
    except (TypeError, ValueError):
        return None
    return np.frombuffer(data, dtype="<f8").copy() if len(data) % 8 == 0 else None


def _write(file: Path, namespace: str, new: dict, keep: int | None) -> None:
    """``new`` merged into the file's entries (the newest ``keep`` of them kept), written whole and atomically;
    silently nothing where the cache cannot be written."""
    import tempfile  # only where a value is written (3 ms of a process's start)

    entries = {**_read(file), **new}
    if keep is not None and len(entries) > keep:
        entries = dict(list(entries.items())[len(entries) - keep:])
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f)
            os.replace(tmp, file)
        except BaseException:
            os.unlink(tmp)
            raise
        _READ[file] = entries
        _prune(file, namespace)
    except OSError:
        pass


def _file(namespace: str, stamp: str | None = None) -> Path | None:
    d = cache_dir()
    return None if d is None else d / f"{namespace}-{(stamp or code_stamp())[:16]}.json"


def _read(file: Path) -> dict:
    try:
        entries = json.loads(file.read_bytes())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _prune(file: Path, namespace: str) -> None:
    """Keep the :data:`KEEP_FILES` most recently written files of ``namespace``."""
    files = sorted(file.parent.glob(f"{namespace}-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in files[KEEP_FILES:]:
        old.unlink(missing_ok=True)
