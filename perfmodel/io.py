"""Every file the tool writes goes through here, and every CSV cell through :func:`csv_safe`.

Writing (:func:`write_bytes_atomic`, :func:`write_text_atomic`, :func:`write_files_atomic`):

- a regular file (new or existing) is written to a temporary file beside it, flushed to disk and renamed
  over it: a reader never sees half a file, a failed write leaves the old one;
- an existing file keeps its permission bits; a new one gets the usual ``0666 & ~umask``;
- a symbolic link is followed: its target is replaced, the link stays;
- a special file (``/dev/null``, ``/dev/stdout``, a FIFO, a terminal) is written through, never renamed
  over (renaming would put a regular file in ``/dev``);
- a missing parent folder is refused, never created (a typo in a folder name is an error);
- a folder, a missing or read-only folder, a full disk (``/dev/full``: ENOSPC) are one-line
  :class:`~perfmodel.errors.InputError` s naming the path, never tracebacks;
- ``overwrite=False`` refuses to replace a file that exists (a default output name the user did not give);
- :func:`write_files_atomic` writes several files all or nothing: each is staged first, and if one
  cannot be written none of them changes.

CSV: one rule for every table the tool writes (spreadsheets run text that starts with ``= + - @`` or a tab
or carriage return as a formula): such text gets a leading apostrophe, numbers stay numbers, nothing
non-finite is written (:func:`csv_safe`, :func:`write_csv_rows`, :func:`csv_text`).
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .errors import InputError

# ---------------------------------------------------------------------------------------------------
# Writing files
# ---------------------------------------------------------------------------------------------------


def _fail(path, what: str, e: OSError | None = None) -> InputError:
    reason = f" ({e.strerror or e})" if e is not None else ""
    return InputError(f"{what}{reason}", file=str(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Target:
    """Where the bytes for a path the user gave will really go, decided before anything is written."""

    def __init__(self, given, *, overwrite: bool):
        text = os.fspath(given)
        if not str(text).strip():
            raise InputError("expected a file path, got an empty one", field="--out")
        if str(text).endswith(("/", os.sep)):
            raise InputError("ends with a path separator; expected a file path, not a folder", file=str(text))
        self.given = Path(text)
        self.path = self.given
        self.mode: int | None = None  # permission bits to keep
        self.special = False
        self.exists = False
        try:
            st = os.stat(self.given)  # follows symbolic links
        except FileNotFoundError:
            st = None
            if os.path.islink(self.given):  # a link to a file not there yet: create the file it names
                self.path = Path(os.path.realpath(self.given))
        except OSError as e:
            raise _fail(given, "cannot write", e) from None
        if st is None:
            self._check_parent()
            return
        self.exists = True
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a folder; expected a file path (give a file name inside it)", file=str(given))
        if not stat.S_ISREG(st.st_mode):
            self.special = True  # a device, FIFO or terminal (also through /dev/stdout): written through
            return
        self.path = Path(os.path.realpath(self.given))  # replace the file a link names, keep the link
        if not overwrite:
            raise InputError("exists; give the path explicitly with --out, or --force to replace it",
                             file=str(given))
        if not os.access(self.path, os.W_OK):
            raise InputError("is read-only; not replaced", file=str(given))
        self.mode = stat.S_IMODE(st.st_mode)

    def _check_parent(self) -> None:
        """A new file's folder must exist: writers never create folders (docs/outputs.md), so a typo in a
        folder name is an error, not a new tree of folders."""
        parent = self.path.parent
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            raise InputError(f"the folder {parent} does not exist (create it first)", file=str(self.given)) from None
        except OSError as e:
            raise _fail(self.given, f"cannot use the folder {parent}", e) from None
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(f"{parent} is not a folder", file=str(self.given))

    def stage(self, data: bytes) -> str | None:
        """Write ``data`` to a temporary file beside the target (None for a special file, written later)."""
        if self.special:
            return None
        parent = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{self.path.name}.", suffix=".tmp")
        except OSError as e:
            raise _fail(self.given, f"cannot create a file in {parent}", e) from None
        try:
            os.chmod(tmp, self.mode if self.mode is not None else 0o666 & ~_umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException as e:
            _unlink(tmp)
            if isinstance(e, OSError):
                raise _fail(self.given, "cannot write", e) from None
            raise
        return tmp

    def write_through(self, data: bytes) -> None:
        try:
            with open(self.path, "wb") as f:
                f.write(data)
                f.flush()
        except OSError as e:
            raise _fail(self.given, "cannot write", e) from None


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _encode(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def write_files_atomic(files: Mapping[str | Path, bytes | str], *, overwrite: bool = True) -> None:
    """Write several files all or nothing (see the module doc). Text is written as UTF-8."""
    targets = []
    seen: dict[Path, Path] = {}
    for given, data in files.items():
        t = _Target(given, overwrite=overwrite)
        if t.path in seen:
            raise InputError(f"written twice in one command (also as {seen[t.path]})", file=str(given))
        seen[t.path] = Path(given)
        targets.append((t, _encode(data)))
    staged: list[tuple[_Target, str | None, bytes]] = []
    try:
        for t, data in targets:
            staged.append((t, t.stage(data), data))
    except BaseException:
        for _, tmp, _ in staged:
            if tmp:
                _unlink(tmp)
        raise
    _commit(staged)


def _commit(staged) -> None:
    """Rename every staged file over its target; on a failure, put back what was already replaced."""
    backups: list[tuple[_Target, str | None]] = []  # (target, hard-link copy of the old file or None)
    try:
        for t, tmp, data in staged:
            if tmp is None:
                continue
            old = None
            if t.exists and len(staged) > 1:
                old = f"{tmp}.old"
                try:
                    os.link(t.path, old)
                except OSError:
                    old = None
            try:
                os.replace(tmp, t.path)
            except OSError as e:
                if old:
                    _unlink(old)
                raise _fail(t.given, "cannot write", e) from None
            backups.append((t, old))
        # special files last: they cannot be taken back, so they go once every regular file is in place
        for t, tmp, data in staged:
            if tmp is None:
                t.write_through(data)
    except BaseException:
        for t, tmp, _ in staged:
            if tmp:
                _unlink(tmp)
        for t, old in reversed(backups):
            if old:
                try:
                    os.replace(old, t.path)
                except OSError:
                    pass
            else:
                _unlink(t.path)
        raise
    for _, old in backups:
        if old:
            _unlink(old)


def write_bytes_atomic(path: str | Path, data: bytes, *, overwrite: bool = True) -> None:
    """Write one file (see the module doc)."""
    write_files_atomic({path: data}, overwrite=overwrite)


def write_text_atomic(path: str | Path, text: str, *, overwrite: bool = True) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), overwrite=overwrite)


# ---------------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------------

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def csv_safe(value):
    """One CSV cell, safe to open in a spreadsheet.

    Numbers (int, float, numpy scalars, and text that is a plain finite number such as ``-2.5e3``) stay
    numbers; NaN, infinities and None become an empty cell; booleans ``True``/``False``; any other text
    that starts with ``= + - @``, a tab or a carriage return gets a leading apostrophe, so no spreadsheet
    runs it as a formula (``=1+2`` is written ``'=1+2``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return value if isinstance(value, int) or math.isfinite(value) else ""
    item = getattr(value, "item", None)  # numpy scalars, without importing numpy
    if item is not None and getattr(value, "shape", None) == ():
        return csv_safe(item())
    s = str(value)
    if s.startswith(FORMULA_LEADS) and not _plain_number(s):
        return "'" + s
    return s


def _plain_number(s: str) -> bool:
    return bool(_PLAIN_NUMBER.match(s)) and math.isfinite(float(s))


def write_csv_rows(writer, rows: Iterable[Sequence]) -> None:
    """Write ``rows`` to a ``csv.writer`` with every cell passed through :func:`csv_safe`."""
    for row in rows:
        writer.writerow([csv_safe(x) for x in row])


def csv_text(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A whole CSV table (header and rows, ``\\n`` line ends), every cell through :func:`csv_safe`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    write_csv_rows(w, [list(header)])
    write_csv_rows(w, rows)
    return buf.getvalue()


def csv_dicts_text(fields: Sequence[str], rows: Iterable[Mapping]) -> str:
    """As :func:`csv_text` for rows given as mappings (missing keys: empty cells)."""
    return csv_text(fields, ([r.get(f) for f in fields] for r in rows))


# ---------------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------------

MAX_JSON_DEPTH = 64  # no input the tool reads nests deeper than a dozen levels; Python's parser fails near 1,000


def check_input_path(path, *, what: str, field: str | None = None) -> None:
    """Refuse, in one line naming the file, a path no reader could open because of its name: a component over
    255 bytes (ENAMETOOLONG), a whole path over PATH_MAX, a NUL byte, or a loop of links. A path that simply
    does not exist passes (the reader says what it expected there)."""
    text = os.fspath(path)
    if "\x00" in str(text):
        raise InputError(f"a NUL byte in the path; expected {what}", field=field)
    try:
        os.stat(text)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as e:
        from .safeyaml import printable

        raise InputError(f"cannot read {what} ({e.strerror or e})", file=printable(str(text), 120),
                         field=field) from None


def read_input_bytes(path, *, what: str, max_bytes: int | None = None, gz: bool = False) -> bytes:
    """The bytes of an input file, every OS failure (missing, a folder, no permission, a name component over
    255 bytes: ENAMETOOLONG, a path too long, an I/O error) a one-line :class:`InputError` naming the file and
    ``what`` was expected; a file over ``max_bytes`` refused without reading it all (``gz``: gunzipped)."""
    import gzip
    import zlib

    limit = -1 if max_bytes is None else max_bytes + 1
    check_input_path(path, what=what)
    try:
        if gz:
            with gzip.open(path, "rb") as f:
                data = f.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
    except FileNotFoundError:
        raise InputError(f"no such file; expected {what}", file=str(path)) from None
    except IsADirectoryError:
        raise InputError(f"is a folder; expected {what}", file=str(path)) from None
    except OSError as e:
        raise InputError(f"cannot read {what} ({e.strerror or e})", file=str(path)) from None
    except (EOFError, zlib.error) as e:
        raise InputError(f"cannot read {what}: not a complete gzip file ({e})", file=str(path)) from None
    if max_bytes is not None and len(data) > max_bytes:
        size = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise InputError(f"larger than {size}{' unpacked' if gz else ''}; refused unread as {what}", file=str(path))
    return data


def read_input_text(path, *, what: str, max_bytes: int | None = None, errors: str = "strict") -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (a leading BOM dropped); undecodable bytes a one-line error."""
    data = read_input_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start}); expected {what}", file=str(path)) from None


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON text, brackets inside strings not counted. Linear time
    at C and numpy speed (escaped backslashes and quotes dropped, then a bracket counts when an even number of
    quotes precede it), in chunks of 32 MiB, so it runs before ``json.loads``, whose recursion would otherwise
    end in a RecursionError traceback."""
    import numpy as np

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    best = depth = 0
    quotes = 0
    step = 32 << 20
    for i in range(0, len(raw), step):
        a = np.frombuffer(raw, dtype=np.uint8, count=min(step, len(raw) - i), offset=i)
        qpos = np.flatnonzero(a == ord('"'))
        bpos = np.flatnonzero((a == ord("[")) | (a == ord("{")) | (a == ord("]")) | (a == ord("}")))
        outside = ((np.searchsorted(qpos, bpos) + quotes) & 1) == 0  # an even number of quotes before it
        quotes = (quotes + qpos.size) & 1
        bpos = bpos[outside]
        opens = (a[bpos] == ord("[")) | (a[bpos] == ord("{"))
        if bpos.size:
            d = depth + np.cumsum(np.where(opens, 1, -1), dtype=np.int64)
            best = max(best, int(d.max()))
            depth = int(d[-1])
    return best


def check_json_depth(data: bytes | str, *, file: str, what: str, max_depth: int = MAX_JSON_DEPTH,
                     field: str | None = None) -> None:
    d = json_depth(data)
    if d > max_depth:
        raise InputError(f"JSON nested {d} levels deep; expected {what} (at most {max_depth} levels)", file=file,
                         field=field)


def loads_json(data: bytes | str, *, file: str, what: str, max_depth: int = MAX_JSON_DEPTH,
               field: str | None = None, **kwargs):
    """``json.loads`` after :func:`check_json_depth`: a syntax error or deep nesting is one line naming ``file``."""
    import json

    check_json_depth(data, file=file, what=what, max_depth=max_depth, field=field)
    try:
        return json.loads(data, **kwargs)
    except json.JSONDecodeError as e:
        where = f"{field}: " if field else ""
        raise InputError(f"{where}not valid JSON ({e.msg}, line {e.lineno} column {e.colno}); expected {what}",
                         file=file) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start}); expected {what}", file=file, field=field) from None
    except RecursionError:
        raise InputError(f"nested too deeply; expected {what}", file=file, field=field) from None


def csv_dict_rows(text: str, *, file: str) -> list[dict]:
    """Every row of a CSV text as a dict; a malformed one (a field over csv's 128 KiB limit, a NUL byte) is one
    line naming the file and the line, never a traceback."""
    import csv
    import io as _io

    reader = csv.DictReader(_io.StringIO(text))
    rows: list[dict] = []
    try:
        for row in reader:
            rows.append(row)
    except csv.Error as e:
        raise InputError(f"line {reader.line_num}: not a CSV row ({e})", file=file) from None
    return rows
