"""Bounded caches, and the value keys they are keyed by.

A cache of something derived from an input (a composed profile from a hardware spec) must key the input by its whole
value: a what-if spec with a part's very name and another bandwidth is another input. :func:`value_key` turns a
dataclass of numbers, strings and containers into a hashable tuple of all of it, or None where it holds something it
cannot key exactly (a numpy array: a sweep's figures), which the caller then computes uncached; :func:`typed_key`
keeps the type of every number as well, for computations that treat ``1`` and ``1.0`` apart.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

_SCALARS = (str, int, float, bool, bytes, type(None), np.generic)


class Bounded:
    """A dict of at most ``size`` entries, the least recently used dropped first."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict = OrderedDict()

    def get(self, key: Hashable) -> Any:
        hit = self._d.get(key)
        if hit is not None:
            self._d.move_to_end(key)
        return hit

    def put(self, key: Hashable, value: Any) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


def value_key(obj: Any) -> Hashable | None:
    """A hashable key equal for equal values (dataclasses field by field, dicts item by item in order, sequences
    element by element), or None where ``obj`` holds anything else (an array, an arbitrary object)."""
    return _key(obj, lambda x: x)


def typed_key(obj: Any) -> Hashable | None:
    """:func:`value_key` with the type of every number and string in it: ``1``, ``1.0`` and ``np.float64(1)`` are
    equal values, and a computation may still treat them apart (integer arithmetic is exact, float arithmetic
    rounds)."""
    return _key(obj, lambda x: (type(x), x))


def _key(obj: Any, scalar: Callable[[Any], Hashable]) -> Hashable | None:
    if isinstance(obj, _SCALARS):
        return scalar(obj)
    if isinstance(obj, (tuple, list)):
        values: Any = obj
        tag = type(obj).__name__
    elif isinstance(obj, dict):
        if not all(isinstance(k, _SCALARS) for k in obj):
            return None
        values = [x for kv in obj.items() for x in kv]
        tag = "dict"
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
        tag = type(obj).__qualname__
    else:
        return None
    out = []
    for v in values:
        if isinstance(v, _SCALARS):  # None among them: a value, not "cannot key"
            out.append(scalar(v))
            continue
        k = _key(v, scalar)
        if k is None:
            return None
        out.append(k)
    return (tag, tuple(out))
