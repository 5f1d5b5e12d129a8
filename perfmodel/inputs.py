"""Typed checks of one input value, whichever door it came through (a flag, a YAML or JSON field, a CSV cell).

Each returns the value checked, or raises an :class:`~perfmodel.errors.InputError` whose one line names the file
and field and says what was expected; the value is echoed printable and short (no control character reaches a
terminal). The doors that use them: serve's flags and workload traces, sweep ranges, config.json's text fields,
the scenario's acceptance rates, a trace's sidecar (issue 27: one input layer).
"""
from __future__ import annotations

import math

from .errors import InputError
from .safeyaml import CONTROL, control_message, printable

# the largest whole number a float holds exactly: no count of tokens, requests or elements comes near it, and
# a larger one (1e308 written as an integer) would overflow numpy's int64 further on
MAX_WHOLE = 2**53


def _shown(raw) -> str:
    return repr(printable(raw, 40)) if isinstance(raw, str) else printable(repr(raw), 40)


def _range(lo, hi, lo_open: bool, integer: bool) -> str:
    if integer:  # integer bounds: (0, 2^53] reads "from 1 to 2^53"
        first = None if lo is None else (math.floor(lo) + 1 if lo_open else math.ceil(lo))
        last = None if hi is None else ("2^53" if hi == MAX_WHOLE else f"{math.floor(hi):,}")
        if first is not None and last is not None:
            return f"an integer from {first:,} to {last}"
        return "an integer" + (f" >= {first:,}" if first is not None else "") + (
            f" <= {last}" if last is not None else "")
    if lo is not None and hi is not None:
        return f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
    if lo is not None:
        return f"a finite number {'>' if lo_open else '>='} {lo:g}"
    if hi is not None:
        return f"a finite number <= {hi:g}"
    return "a finite number"


def number(raw, field: str, *, file: str | None = None, at: str = "", lo: float | None = None,
           hi: float | None = None, lo_open: bool = False, integer: bool = False) -> float | int:
    """``raw`` (a number, or its text: ``4096``, ``4e3``, `` 0.5 ``) as a finite number in the range; with
    ``integer`` a whole number, returned as an int, at most :data:`MAX_WHOLE` unless ``hi`` says less. True and
    false are not numbers. ``at`` prefixes the message (``line 7``)."""
    if integer and (hi is None or hi > MAX_WHOLE):
        hi = MAX_WHOLE
    v = math.nan
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        v = raw
    elif isinstance(raw, str):
        text = raw.strip()
        try:
            v = int(text)
        except ValueError:
            try:
                v = float(text)
            except ValueError:
                v = math.nan
    ok = isinstance(v, int) or math.isfinite(v)
    if ok and integer:
        ok = float(v).is_integer() if not isinstance(v, int) else True
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v <= hi
    if not ok:
        prefix = f"{at}: " if at else ""
        raise InputError(f"{prefix}expected {_range(lo, hi, lo_open, integer)}, got {_shown(raw)}", file=file,
                         field=field)
    return int(v) if integer else float(v)


def text(raw, field: str, *, file: str | None = None, at: str = "", empty: bool = False) -> str:
    """``raw`` as text: a string (not a number, a list or a mapping), non-empty unless ``empty``, with no control
    character (it may reach a terminal, a CSV or an HTML page)."""
    prefix = f"{at}: " if at else ""
    if not isinstance(raw, str) or (not empty and not raw.strip()):
        raise InputError(f"{prefix}expected {'text' if empty else 'a non-empty text'}, got {_shown(raw)}", file=file,
                         field=field)
    m = CONTROL.search(raw)
    if m:
        raise InputError(prefix + control_message(m.group()), file=file, field=field)
    return raw
