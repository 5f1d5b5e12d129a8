"""YAML (and JSON) for files a user hands the tool (hardware specs, model descriptors, config.json), with
hard limits.

``yaml.safe_load`` builds no arbitrary objects, but it still:

- expands anchors and aliases: a ten-level "billion laughs" document is a few hundred bytes and a value
  of 10**9 nodes; the structure itself is shared, yet anything that walks or prints it (an error message
  showing the bad value, a schema walk) never finishes;
- lets an alias point into the node that holds it (``&a [*a]``), a recursive value;
- recurses once per nesting level while composing, so ``[[[[...]]]]`` a few hundred deep raises
  RecursionError instead of a message;
- keeps the last of two equal keys without a word;
- reads a file of any size (a 200 MB spec took 98 s to refuse);
- takes control characters (NUL, ESC, CR, bidirectional overrides), written raw (a ``ReaderError``
  traceback) or escaped in a quoted value (``"\\e[31m"``), into names that reach terminals, CSV, HTML and
  xlsx cells raw.

:func:`load` refuses each of these with a one-line :class:`~perfmodel.errors.InputError` naming the
file and the line, before anything is built, and never echoes the offending value. Its limits are far
above what a real spec or descriptor needs (the shipped ones are under 3 KB, four levels deep, with no
anchors), so they only ever stop hostile or broken files.

A document read with ``cached=True`` (the specs and model descriptors: a cold ``perfmodel project`` reads some
fifty, 0.1 s of parsing) is kept on disk once parsed (:mod:`perfmodel.disk_cache`), keyed by its text and the
limits, under a stamp of this module's source, PyYAML's and Python's: the next process takes the value the parse
gave instead of parsing again. Only a document that parsed is kept, and only one made of what JSON gives back
exactly (mappings with text keys, lists, text, integers, finite floats, booleans, null): a date, a set or a
binary value is parsed each time.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from . import disk_cache
from .errors import InputError

MAX_BYTES = 256 * 1024  # a file; the shipped specs and descriptors are under 3 KB
MAX_DEPTH = 32  # nested mappings/sequences; a spec is four deep
MAX_NODES = 100_000  # nodes after alias expansion: what walking the loaded value costs
MAX_ALIASES = 100  # alias uses in one file
MAX_SCALAR = 64 * 1024  # characters in one value
# the on-disk cache of parsed documents (load's cached=True), the newest PARSED_KEPT kept: the library's specs and
# model descriptors are about seventy, 2-3 KB each
PARSED = "yaml-parsed"
PARSED_KEPT = 256


# C0 controls but tab and newline, DEL, C1 controls, line/paragraph separators, bidirectional overrides and
# isolates: no name, key or note needs one, and each can rewrite a terminal line or break a spreadsheet cell
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# in the raw text a carriage return is a line break (CRLF files)
_RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def control_message(ch: str) -> str:
    return f"control character U+{ord(ch):04X}; names, keys and notes must be printable text"


def printable(text, limit: int = 40) -> str:
    """``text`` shortened to ``limit`` characters with every control character shown as ``?``: safe to echo in
    an error line."""
    return _short(CONTROL.sub("?", str(text)), limit)


_KEY_LIKE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,39}")


def key_text(key) -> str:
    """An unknown key as an error line may show it: the key itself when it looks like a field name (letters,
    digits, ``_ . + -``, at most 40), else only its length, so that a system file handed over as a spec or
    model (``/etc/shadow``'s ``root:$6$...``) has none of its content echoed."""
    k = str(key)
    if _KEY_LIKE.fullmatch(k):
        return k
    return f"<a key of {len(k)} characters, not a field name>"


def check_printable(value, *, file: str, where: str = "") -> None:
    """Refuse (one line naming ``file`` and the key path) a control character in any key or text value of a
    loaded document (JSON: ``config.json``)."""
    stack = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and (m := CONTROL.search(k)):
                    raise InputError(f"key {printable(k)!r}: {control_message(m.group())}", file=file,
                                     field=at or None)
                stack.append((x, f"{at}.{k}" if at else str(k)))
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in enumerate(v))
        elif isinstance(v, str) and (m := CONTROL.search(v)):
            raise InputError(control_message(m.group()), file=file, field=printable(at) or None)


class _Refused(Exception):
    """A limit hit while composing: message and 1-based line."""

    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.message = message
        self.line = line


def _line(mark) -> int | None:
    return mark.line + 1 if mark is not None else None


_LOADER: list[type] = []


def _loader_class() -> type:
    """PyYAML's safe loader with the limits: the standard composer, counting depth, nodes (an alias counts as the
    size of what it names), aliases and scalar sizes, and refusing recursive aliases and duplicate keys. Built when
    a document is first parsed: importing PyYAML takes 10 ms of a start that finds every document it reads kept on
    disk (module doc)."""
    if _LOADER:
        return _LOADER[0]
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
    from yaml.nodes import ScalarNode
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.resolver import Resolver
    from yaml.scanner import Scanner

    class LimitedComposer(Composer):
        """The standard composer, counting depth, nodes (an alias counts as the size of what it names),
        aliases and scalar sizes, and refusing recursive aliases and duplicate keys."""

        def __init__(self, limits: dict):
            super().__init__()
            self._limits = limits
            self._depth = 0
            self._nodes = 0
            self._aliases = 0
            self._sizes: dict[int, int] = {}  # id(node) -> expanded node count, once the node is complete

        def _count(self, n: int, mark) -> None:
            self._nodes += n
            if self._nodes > self._limits["max_nodes"]:
                raise _Refused(f"more than {self._limits['max_nodes']:,} values (after expanding aliases); "
                               f"a spec or model file needs a few hundred", _line(mark))

        def compose_node(self, parent, index):
            if self.check_event(AliasEvent):
                event = self.peek_event()
                self._aliases += 1
                if self._aliases > self._limits["max_aliases"]:
                    raise _Refused(f"more than {self._limits['max_aliases']} aliases (*name); write the values out",
                                   _line(event.start_mark))
                anchor = event.anchor
                if anchor in self.anchors:
                    node = self.anchors[anchor]
                    size = self._sizes.get(id(node))
                    if size is None:
                        raise _Refused(f"alias *{_short(anchor)} refers to a value that contains it (a recursive "
                                       f"value)", _line(event.start_mark))
                    self._count(size, event.start_mark)
                # an undefined alias: the standard composer raises its own error
                return super().compose_node(parent, index)
            event = self.peek_event()
            if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                self._depth += 1
                if self._depth > self._limits["max_depth"]:
                    raise _Refused(f"nested more than {self._limits['max_depth']} levels deep", _line(event.start_mark))
            before = self._nodes
            node = super().compose_node(parent, index)
            if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                self._depth -= 1
            self._count(1, event.start_mark)
            self._sizes[id(node)] = self._nodes - before
            return node

        def compose_scalar_node(self, anchor):
            event = self.peek_event()
            if isinstance(event, ScalarEvent) and len(event.value) > self._limits["max_scalar"]:
                raise _Refused(f"a value of {len(event.value):,} characters (limit {self._limits['max_scalar']:,})",
                               _line(event.start_mark))
            if isinstance(event, ScalarEvent) and (m := CONTROL.search(event.value)):
                raise _Refused(control_message(m.group()), _line(event.start_mark))
            return super().compose_scalar_node(anchor)

        def compose_mapping_node(self, anchor):
            node = super().compose_mapping_node(anchor)
            seen: dict = {}
            for key, _ in node.value:
                if isinstance(key, ScalarNode):
                    k = (key.tag, key.value)
                    if k in seen:
                        raise _Refused(f"key {_short(key.value)!r} given twice in one mapping (first at line "
                                       f"{seen[k]})", _line(key.start_mark))
                    seen[k] = _line(key.start_mark)
            return node

    class Loader(Reader, Scanner, Parser, LimitedComposer, SafeConstructor, Resolver):
        def __init__(self, stream, limits: dict):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            LimitedComposer.__init__(self, limits)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _LOADER.append(Loader)
    return Loader


def _short(text, limit: int = 40) -> str:
    s = " ".join(CONTROL.sub("?", str(text)).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def read_limited(path: Path, *, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``, refusing (one line) anything larger than ``max_bytes`` without reading it all."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except IsADirectoryError:
        raise InputError(f"is a folder; expected a {what}", file=str(path)) from None
    except OSError as e:
        raise InputError(f"cannot read {what} ({e.strerror or e})", file=str(path)) from None
    if len(data) > max_bytes:
        raise InputError(f"larger than {max_bytes // 1024} KiB; a {what} is a few KB (refused unread)",
                         file=str(path))
    return data


def load(data: bytes | str, *, file: str, what: str = "YAML file", max_depth: int = MAX_DEPTH,
         max_nodes: int = MAX_NODES, max_aliases: int = MAX_ALIASES, max_scalar: int = MAX_SCALAR,
         max_bytes: int = MAX_BYTES, cached: bool = False):
    """Parse one YAML document from ``data`` with the limits above (see the module doc).

    Returns plain dicts, lists and scalars, as ``yaml.safe_load``. Errors are one-line InputErrors
    naming ``file`` and, where known, the line; they never contain the document's values beyond a
    short key. ``cached``: the value kept on disk, parsed once (module doc).
    """
    if isinstance(data, bytes):
        if len(data) > max_bytes:
            raise InputError(f"larger than {max_bytes // 1024} KiB; a {what} is a few KB", file=file)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text (byte {e.start}); expected a {what}", file=file) from None
    else:
        text = data
        if len(text) > max_bytes:
            raise InputError(f"larger than {max_bytes // 1024} KiB; a {what} is a few KB", file=file)
    m = _RAW_CONTROL.search(text)
    if m:  # PyYAML's Reader would raise ReaderError while the loader is built, outside any message
        line = text.count("\n", 0, m.start()) + 1
        column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        raise InputError(control_message(m.group()), file=file, field=f"line {line}, column {column}")
    limits = {"max_depth": max_depth, "max_nodes": max_nodes, "max_aliases": max_aliases, "max_scalar": max_scalar}
    if not cached:
        return _parse(text, limits, file, what)
    key = disk_cache.digest(text.encode("utf-8", "surrogatepass"), repr(sorted(limits.items())))
    kept = disk_cache.get(PARSED, key, stamp=_parser_stamp())
    if isinstance(kept, str):
        try:
            return json.loads(kept)  # a fresh value each time: a caller may change what it is given
        except ValueError:
            pass  # not what this module wrote: parsed again
    value = _parse(text, limits, file, what)
    if _json_exact(value):
        disk_cache.put_later(PARSED, key, json.dumps(value), keep=PARSED_KEPT, stamp=_parser_stamp())
    return value


def _parse(text: str, limits: dict, file: str, what: str):
    import yaml

    loader = _loader_class()(text, limits)
    try:
        return loader.get_single_data()
    except _Refused as e:
        where = f"line {e.line}" if e.line else None
        raise InputError(e.message, file=file, field=where) from None
    except RecursionError:  # a limit above should always come first; belt and braces
        raise InputError(f"nested too deeply; expected a {what}", file=file) from None
    except yaml.YAMLError as e:
        raise InputError(_yaml_message(e), file=file, field=_yaml_where(e)) from None
    except (ValueError, TypeError, OverflowError):  # an explicit tag whose text it cannot build (!!int x)
        raise InputError(f"a value whose explicit tag (!!int, !!float, !!timestamp, !!binary...) does not fit its "
                         f"text; expected a {what}", file=file) from None
    finally:
        loader.dispose()


_STAMP: list[str] = []


def _parser_stamp() -> str:
    """What a parsed value depends on besides its text and limits: this module's source, PyYAML's place and its
    ``__init__.py`` (which holds its version; read, not imported), Python's version."""
    if not _STAMP:
        import importlib.util

        spec = importlib.util.find_spec("yaml")
        origin = (spec.origin or "") if spec is not None else ""
        try:
            pyyaml = Path(origin).read_bytes()
        except OSError:
            pyyaml = b""
        _STAMP.append(disk_cache.digest(Path(__file__).read_bytes(), origin, pyyaml, sys.version))
    return _STAMP[0]


def _json_exact(value) -> bool:
    """Whether JSON gives ``value`` back exactly, types included (module doc)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int))  # bool is an int


def _yaml_where(e) -> str | None:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None


def _yaml_message(e) -> str:
    """The parser's own words (they describe tokens, never quote the document), on one line."""
    problem = getattr(e, "problem", None) or "not valid YAML"
    context = getattr(e, "context", None)
    mark = getattr(e, "problem_mark", None)
    cmark = getattr(e, "context_mark", None)
    if context and cmark is not None and mark is not None and cmark.line != mark.line:
        context = f"{context} started at line {cmark.line + 1}"
    msg = f"YAML syntax error: {problem}" + (f" ({context})" if context else "")
    return " ".join(msg.split())


def load_json(data: bytes | str, *, file: str, what: str = "JSON file", max_bytes: int = MAX_BYTES):
    """Parse a JSON document (a Hugging Face ``config.json``) with the same promises as :func:`load`: a size
    limit, one-line errors naming the line, no RecursionError on deep nesting, and no NaN or Infinity
    (which Python's json module accepts and no JSON file should hold)."""
    if isinstance(data, bytes):
        if len(data) > max_bytes:
            raise InputError(f"larger than {max_bytes // 1024} KiB; a {what} is a few KB", file=file)
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text (byte {e.start}); expected a {what}", file=file) from None
    elif len(data) > max_bytes:
        raise InputError(f"larger than {max_bytes // 1024} KiB; a {what} is a few KB", file=file)

    def no_constant(name):
        raise ValueError(f"{name} is not a JSON number")

    def unique(pairs):  # json keeps the last of a repeated key silently; a config that says two things is refused
        out = {}
        for k, v in pairs:
            if k in out:
                raise ValueError(f"the key {key_text(k)} appears twice in one object")
            out[k] = v
        return out

    try:
        value = json.loads(data, parse_constant=no_constant, object_pairs_hook=unique)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {e.msg}", file=file, field=f"line {e.lineno}, column {e.colno}") from None
    except ValueError as e:  # NaN / Infinity
        raise InputError(f"not valid JSON: {e}", file=file) from None
    except RecursionError:
        raise InputError(f"nested too deeply; expected a {what}", file=file) from None
    check_printable(value, file=file)
    return value
