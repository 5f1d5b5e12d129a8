"""Small helpers shared by the report, the workbook and sweeps."""
from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

def file_sha256(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "(unreadable)"


def spec_files(hw) -> list[dict]:
    """The spec's extends chain, each file with its own sha256."""
    return [{"path": shown_path(f), "sha256": file_sha256(f)} for f in hw.files]


def shown_path(path) -> str:
    """A path relative to the repository when it lies inside it (reports get forwarded: no home folders)."""
    from ..paths import repo_root

    p = Path(path)
    try:
        return str(p.resolve().relative_to(repo_root().resolve()))
    except (ValueError, OSError):
        return str(p)


def command_line(argv: list[str] | None = None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    return "perfmodel " + " ".join(shlex.quote(a) for a in args)


def unit_of(dimension: str) -> str:
    return {"flop_rate": "FLOP/s", "bandwidth": "B/s", "bytes": "B", "frequency": "Hz", "time": "s",
            "power": "W", "count": ""}.get(dimension, "")


def require_openpyxl():
    """openpyxl, or a one-line InputError saying how to get it (it is in the optional 'report' extra)."""
    try:
        import openpyxl
    except ImportError:
        from ..errors import InputError

        raise InputError("xlsx output needs openpyxl: pip install 'perfmodel[report]' (or pip install openpyxl)",
                         field="--format") from None
    return openpyxl


def write_output(path, data: bytes | str, *, overwrite: bool = True) -> None:
    """Write one output file (perfmodel.io: atomic, links followed, special files written through)."""
    from ..io import write_bytes_atomic

    write_bytes_atomic(path, data.encode("utf-8") if isinstance(data, str) else data, overwrite=overwrite)


def write_outputs(files: dict, *, overwrite: bool = True) -> None:
    """Write several output files all or nothing (perfmodel.io.write_files_atomic)."""
    from ..io import write_files_atomic

    write_files_atomic(files, overwrite=overwrite)
