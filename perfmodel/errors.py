"""Errors meant for people: one line, naming the file, the field and what was expected.

The CLI turns any :class:`InputError` into that line on stderr and exit code 2, with no traceback. The line is
made printable here, whichever door the error came from: a control character in a file name, a field or an
echoed value (an escape sequence, a NUL, a line break, a bidirectional override) shows as ``?``, so that nothing
a user handed the tool can rewrite a terminal line or split the error in two.
"""
from __future__ import annotations

import re

# C0 controls (tab and newline too: the message is one line), DEL, C1 controls, line/paragraph separators,
# bidirectional overrides and isolates (perfmodel.safeyaml.CONTROL, plus tab and newline)
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """``text`` with every control character shown as ``?``: one printable line."""
    return UNPRINTABLE.sub("?", str(text))


class InputError(Exception):
    """Bad input from the user: a spec, a model, a scenario flag or an operator table."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        self.detail = message
        parts = [p for p in (file, field) if p]
        prefix = ": ".join(str(p) for p in parts)
        super().__init__(one_line(f"{prefix}: {message}" if prefix else message))
