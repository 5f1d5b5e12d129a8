"""Quantities as people write them ("4.8 TB/s", "989.4 TFLOPS", "141 GB") to SI floats, and back.

Inside the tool everything is SI: FLOP/s, bytes, bytes/s, seconds, hertz, watts. Decimal prefixes are
powers of 1000 (a vendor's GB is 1e9 bytes); binary prefixes (KiB, MiB, GiB) are powers of 1024. A
lowercase ``b`` is a bit, so "400 Gb/s" is 50e9 bytes/s.
"""
from __future__ import annotations

import re

from .errors import InputError

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

# dimension -> {unit stem: factor to SI}
_STEMS: dict[str, dict[str, float]] = {
    "flop_rate": {"FLOPS": 1.0, "FLOP/s": 1.0, "FLOPs/s": 1.0, "OPS": 1.0, "OP/s": 1.0},
    "bandwidth": {"B/s": 1.0, "b/s": 0.125, "bps": 0.125},
    "bytes": {"B": 1.0, "b": 0.125},
    "frequency": {"Hz": 1.0},
    "time": {"s": 1.0},
    "power": {"W": 1.0},
}
DIMENSIONS = tuple(_STEMS) + ("count",)

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def _unit_factor(unit: str, dimension: str) -> float | None:
    stems = _STEMS[dimension]
    for stem, factor in sorted(stems.items(), key=lambda kv: -len(kv[0])):
        if not unit.endswith(stem):
            continue
        prefix = unit[: -len(stem)]
        if prefix in _BINARY:
            return factor * _BINARY[prefix]
        if prefix in _PREFIX:
            if dimension in ("bytes", "bandwidth", "flop_rate", "frequency", "power") and prefix in ("m", "u", "µ", "n"):
                continue  # a millibyte is a typo, not a unit
            return factor * _PREFIX[prefix]
    return None


def parse_quantity(value: object, dimension: str, *, file: str | None = None, field: str | None = None) -> float:
    """Parse ``value`` (a number or a string with a unit) as a quantity of ``dimension``, in SI.

    A bare number is taken as already in SI for that dimension. Raises :class:`InputError` naming the
    file and field when the unit does not fit the dimension.
    """
    if dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {dimension}")
    if isinstance(value, bool):
        raise InputError(f"expected a {_describe(dimension)}, got {value!r}", file=file, field=field)
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise InputError(f"expected a {_describe(dimension)}, got {value!r}", file=file, field=field)
    m = _NUMBER.match(value)
    if not m:
        raise InputError(f"expected a {_describe(dimension)}, got {value!r}", file=file, field=field)
    number, unit = float(m.group(1)), m.group(2).replace(" ", "")
    if not unit:
        return number
    if dimension == "count":
        raise InputError(f"expected a plain number, got {value!r}", file=file, field=field)
    factor = _unit_factor(unit, dimension)
    if factor is None:
        raise InputError(f"unit {unit!r} is not a {_describe(dimension)} (e.g. {_EXAMPLE[dimension]})",
                         file=file, field=field)
    return number * factor


_EXAMPLE = {"flop_rate": "'989.4 TFLOPS'", "bandwidth": "'4.8 TB/s' or '400 Gb/s'", "bytes": "'141 GB' or '80 GiB'",
            "frequency": "'1980 MHz'", "time": "'2 us'", "power": "'700 W'", "count": "'132'"}


def _describe(dimension: str) -> str:
    return {"flop_rate": "rate in FLOPS", "bandwidth": "bandwidth", "bytes": "size in bytes",
            "frequency": "frequency", "time": "time", "power": "power", "count": "number"}[dimension]


def format_si(value: float, unit: str, digits: int = 3) -> str:
    """Format ``value`` (SI) with a decimal prefix: format_si(4.8e12, 'B/s') -> '4.8 TB/s'."""
    if value == 0:
        return f"0 {unit}"
    for prefix, factor in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0),
                           ("m", 1e-3), ("u", 1e-6), ("n", 1e-9)):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"
