"""Math backends for the cost formulas: numpy (numbers and arrays) or Excel (formula text).

Every cost formula is written once against a small namespace (``ceil``, ``floor``, ``maximum``,
``minimum``, ``where``, ``clip``, ``logical_and``, ``logical_or``, ``mod``, ``exp``, ``power``) and ordinary
arithmetic. With :data:`NP` it computes; with :data:`XL` and :class:`Expr` arguments (cell references) it returns
the same formula as Excel text, which is how the what-if workbook stays identical to the Python model.
:data:`STACKED` computes several scalar evaluations laid side by side in one array (the GEMM's candidate tiles),
each element exactly as :data:`NP` computes it on numbers.
"""
from __future__ import annotations

import operator

import numpy as np


class _Numpy:
    numeric = True
    ceil = staticmethod(np.ceil)
    floor = staticmethod(np.floor)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)
    logical_and = staticmethod(np.logical_and)
    logical_or = staticmethod(np.logical_or)
    mod = staticmethod(np.mod)
    exp = staticmethod(np.exp)

    power = staticmethod(operator.pow)  # ``a ** b``: numbers through the C library, arrays through numpy's loops

    @staticmethod
    def clip(x, lo, hi):
        return np.minimum(np.maximum(x, lo), hi)


NP = _Numpy()


class _Stacked(_Numpy):
    """Scalar evaluations stacked along an array: elementwise arithmetic, min/max, floor/ceil and numpy's ``exp``
    give each element what the scalar evaluation gives; numpy's vectorised ``power`` does not (its SIMD loop differs
    from the C library's ``pow`` in the last bit for about one value in twenty), so ``power`` goes element by
    element, on numpy scalars as the scalar evaluation does."""

    @staticmethod
    def power(a, b):
        if np.ndim(b) != 0:
            raise TypeError("STACKED.power takes a scalar exponent")
        if np.ndim(a) == 0:
            return a ** b
        a = np.asarray(a, dtype=float)
        try:  # Python floats: the C library's pow, as numpy's scalar power
            return np.array([x ** b for x in a.ravel().tolist()], dtype=float).reshape(a.shape)
        except (OverflowError, ValueError, TypeError):  # where Python refuses, numpy's scalar gives inf or NaN
            return np.array([x ** b for x in a.flat], dtype=float).reshape(a.shape)


STACKED = _Stacked()


def _t(x) -> str:
    if isinstance(x, Expr):
        return x.text
    if isinstance(x, (bool, np.bool_)):
        return "TRUE" if x else "FALSE"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return repr(float(x))


class Expr:
    """An Excel formula fragment that composes with Python arithmetic."""

    __array_priority__ = 1000  # win over numpy scalars in mixed arithmetic

    def __init__(self, text: str):
        self.text = text

    def _bin(self, op: str, other, reverse: bool = False) -> "Expr":
        a, b = (_t(other), self.text) if reverse else (self.text, _t(other))
        return Expr(f"({a}{op}{b})")

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __pow__(self, o): return self._bin("^", o)
    def __rpow__(self, o): return self._bin("^", o, True)
    def __neg__(self): return Expr(f"(-{self.text})")
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __and__(self, o): return Expr(f"AND({self.text},{_t(o)})")
    def __rand__(self, o): return Expr(f"AND({_t(o)},{self.text})")

    def __bool__(self):
        raise TypeError("an Excel expression has no truth value; use the backend's where()")

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


class _Excel:
    numeric = False

    @staticmethod
    def min_of(xs): return Expr(f"MIN({','.join(_t(x) for x in xs)})")
    @staticmethod
    def ceil(x): return Expr(f"ROUNDUP({_t(x)},0)")
    @staticmethod
    def floor(x): return Expr(f"ROUNDDOWN({_t(x)},0)")
    @staticmethod
    def maximum(a, b): return Expr(f"MAX({_t(a)},{_t(b)})")
    @staticmethod
    def minimum(a, b): return Expr(f"MIN({_t(a)},{_t(b)})")
    @staticmethod
    def where(c, a, b): return Expr(f"IF({_t(c)},{_t(a)},{_t(b)})")
    @staticmethod
    def logical_and(a, b): return Expr(f"AND({_t(a)},{_t(b)})")
    @staticmethod
    def logical_or(a, b): return Expr(f"OR({_t(a)},{_t(b)})")
    @staticmethod
    def mod(a, b): return Expr(f"MOD({_t(a)},{_t(b)})")
    @staticmethod
    def exp(x): return Expr(f"EXP({_t(x)})")
    power = staticmethod(operator.pow)  # Expr's ``^``

    @staticmethod
    def clip(x, lo, hi): return Expr(f"MIN(MAX({_t(x)},{_t(lo)}),{_t(hi)})")


XL = _Excel()


def formula(x) -> str:
    """``=...`` text for a cell."""
    return "=" + _t(x)
