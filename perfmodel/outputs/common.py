"""Small helpers shared by the report, the workbook and sweeps."""
from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

from ..io import FORMULA_LEADS

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


def field_unit(f) -> str:
    """The unit of a spec field (a :class:`perfmodel.spec.SpecField`): as :func:`unit_of`, except the INT8
    tensor rate, which counts integer operations (OPS), not floating-point ones."""
    if f.dimension == "flop_rate":
        from ..text import rate_unit

        return rate_unit(f.attr)
    return unit_of(f.dimension)


_ERROR_STATS = ("n", "median_abs_error", "p90_abs_error")


def validation_rows(v: dict, *, limit: int = 200) -> tuple[list[dict], list[tuple[str, str]]]:
    """A profile's held-out validation record as rows people read, whatever its nesting.

    Each mapping holding error statistics (``median_abs_error``, ``p90_abs_error``, ``n``) becomes one row
    ``{"what": "ops / held_out / gemm", "n": "209", "median": "4.5%", "p90": "18.1%"}``; any other value a
    ``(what, text)`` fact (``("holdout share", "0.25")``). At most ``limit`` of each (a profile is user input)."""
    stats: list[dict] = []
    facts: list[tuple[str, str]] = []

    def pct(x) -> str:
        return f"{float(x):.1%}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"

    def walk(node, path: tuple[str, ...], depth: int) -> None:
        for k in sorted(node, key=str):
            val = node[k]
            where = " / ".join(path + (str(k).replace("_", " "),))
            if isinstance(val, dict) and depth < 6:
                if any(s in val for s in _ERROR_STATS[1:]):
                    if len(stats) < limit:
                        n = val.get("n")
                        stats.append({"what": where, "n": f"{n:,}" if isinstance(n, int) else "-",
                                      "median": pct(val.get("median_abs_error")),
                                      "p90": pct(val.get("p90_abs_error"))})
                    rest = {x: y for x, y in val.items() if x not in _ERROR_STATS}
                    if rest:
                        walk(rest, path + (str(k).replace("_", " "),), depth + 1)
                else:
                    walk(val, path + (str(k).replace("_", " "),), depth + 1)
            elif len(facts) < limit:
                if isinstance(val, float):
                    text = f"{val:.4g}"
                elif isinstance(val, (list, tuple)):
                    text = ", ".join(str(x) for x in val[:20]) + (" ..." if len(val) > 20 else "")
                else:
                    text = str(val)
                facts.append((where, text[:200]))

    if isinstance(v, dict):
        walk(v, (), 0)
    return stats, facts


def validation_text(v: dict) -> str:
    """The same record on one line (the workbook's About sheet)."""
    stats, facts = validation_rows(v)
    parts = [f"{s['what']}: median |error| {s['median']}, P90 {s['p90']} (n {s['n']})" for s in stats]
    parts += [f"{k}: {t}" for k, t in facts]
    return "; ".join(parts)


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


def set_text(ws, ref: str, text) -> None:
    """Write ``text`` as a string cell. openpyxl turns any str starting with '=' into a formula; text that
    starts with = + - @ is stored as a string with Excel's quote prefix, so it never becomes one."""
    s = "" if text is None else str(text)
    c = ws[ref]
    c.value = s
    if s.startswith(FORMULA_LEADS):
        c.data_type = "s"
        c.quotePrefix = True
