"""Results kept on disk between processes: work a fresh ``perfmodel`` process would otherwise redo on every start
(the verdict on each class of an imported table, :func:`perfmodel.cost.tables.build_class`: about 0.2 s of a cold
``perfmodel project``, and the first use of every table class in a test session).

An entry is keyed by a digest of everything its value is computed from: the caller's inputs (:func:`digest`) and
:func:`code_stamp` (the package's source, Python's, numpy's and scipy's versions), so a hit is the value the
computation gives. The entries of a namespace and code stamp are one small JSON file in :func:`cache_dir`, written
whole and atomically (a temporary file renamed over it); a cache that cannot be read or written (missing, corrupt,
read-only) is a miss, never an error, and two processes writing at once at worst lose an entry (computed again).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

# files of one namespace kept (one per code stamp: worktrees and versions used side by side), the oldest dropped
KEEP_FILES = 8

_STAMP: list[str] = []
_READ: dict[Path, dict] = {}  # file -> its entries as read or written by this process


def cache_dir() -> Path | None:
    """``$PERFMODEL_CACHE_DIR`` (empty: no cache), else ``$XDG_CACHE_HOME/perfmodel``, else ``~/.cache/perfmodel``."""
    env = os.environ.get("PERFMODEL_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfmodel"


def code_stamp() -> str:
    """A digest of the code a cached value was computed by: every ``.py`` file of the package (5 ms, once a
    process), and the versions and places of Python, numpy and scipy (their arithmetic, and the linear algebra
    library they were built with, decides the last bits)."""
    if not _STAMP:
        import numpy
        import scipy

        h = hashlib.sha256(f"{sys.version}|{sys.executable}|{numpy.__version__}|{numpy.__file__}|"
                           f"{scipy.__version__}|{scipy.__file__}".encode())
        package = Path(__file__).resolve().parent
        for path in sorted(package.rglob("*.py")):
            h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
        _STAMP.append(h.hexdigest())
    return _STAMP[0]


def digest(*parts: str | bytes) -> str:
    """One key from ``parts`` (each length-prefixed, so no two sequences of parts give the same bytes)."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def get(namespace: str, key: str):
    """The value stored under ``key``, or None."""
    file = _file(namespace)
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
    entries = {**_read(file), key: value}
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


def _file(namespace: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / f"{namespace}-{code_stamp()[:16]}.json"


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
