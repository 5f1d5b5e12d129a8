"""Errors meant for people: one line, naming the file, the field and what was expected.

The CLI turns any :class:`InputError` into that line on stderr and exit code 2, with no traceback.
"""
from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: a spec, a model, a scenario flag or an operator table."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        self.detail = message
        parts = [p for p in (file, field) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
