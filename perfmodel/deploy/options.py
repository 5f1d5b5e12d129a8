"""The engines' option names as data (``options/<engine>.yaml``), and the only way the writers emit options.

Each table records the engine release its names were read from and a source for every name. A writer builds a
command with :class:`Argv` and a YAML or JSON value with :func:`checked_tree`; both refuse a flag, a key or a
choice the table does not hold with :class:`OptionError` (a programming error, not bad input: a test runs every
writer), so a renamed option fails a test rather than a launch.

Table schema (docs/deploy.md, "Option tables"): ``programs.<name>`` has ``argv`` (the words that start it),
optionally ``positional`` (what its one positional argument is) and ``flags``; ``env`` the environment
variables a command may set; ``files.<name>.keys`` (TensorRT-LLM's YAML files) and ``kinds.<kind>.keys``
(Kubernetes) nested key trees. A leaf has ``value`` (``none``: a flag without a value; ``int``, ``float``,
``str``, ``bool``, ``json`` with its own ``keys``, ``int_list``, ``str_list``, ``map``: any string map,
``url_port``: a URL and a port) and optionally ``choices``; a branch has ``keys``.
"""
from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

import yaml

ENGINES = ("trtllm", "vllm", "sglang")
TABLES = ENGINES + ("kubernetes",)
OPTIONS_DIR = Path(__file__).resolve().parent / "options"


class OptionError(ValueError):
    """A writer asked for an option its engine's table does not hold (a bug in perfmodel, not bad input)."""


@lru_cache(maxsize=None)
def table(name: str) -> dict:
    """The option table ``options/<name>.yaml`` (shipped with the package)."""
    if name not in TABLES:
        raise OptionError(f"no option table {name!r}; expected one of {', '.join(TABLES)}")
    with open(OPTIONS_DIR / f"{name}.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def _check_value(spec: dict, value, where: str) -> None:
    kind = spec.get("value")
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int_list": lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
        "str_list": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "map": lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    }.get(kind)
    if ok is None:
        raise OptionError(f"{where}: the table gives no scalar type for it (value: {kind!r})")
    if not ok(value):
        raise OptionError(f"{where}: expected {kind}, got {value!r}")
    if "choices" in spec and value not in spec["choices"]:
        raise OptionError(f"{where}: {value!r} is not among the table's choices {spec['choices']}")


def checked_tree(spec: dict, data, where: str):
    """``data`` (a mapping, or a list of mappings, built by a writer) checked against the key tree ``spec``
    (a node with ``keys``); returned unchanged."""
    keys = spec.get("keys")
    if keys is None:
        _check_value(spec, data, where)
        return data
    items = data if isinstance(data, list) else [data]
    for i, item in enumerate(items):
        at = f"{where}[{i}]" if isinstance(data, list) else where
        if not isinstance(item, dict):
            raise OptionError(f"{at}: expected a mapping, got {item!r}")
        for k, v in item.items():
            if k not in keys:
                raise OptionError(f"{at}.{k}: not in the option table")
            checked_tree(keys[k], v, f"{at}.{k}")
    return data


class Argv:
    """One command line of a program in an option table: words, flags and values, each flag checked against
    the table as it is added. ``words()`` is the argv; ``shell()`` the same words quoted for a POSIX shell."""

    def __init__(self, engine: str, program: str):
        self.engine = engine
        self.program = program
        t = table(engine)
        try:
            self.spec = t["programs"][program]
        except KeyError:
            raise OptionError(f"{engine}: no program {program!r} in the option table") from None
        self.env_spec = t.get("env", {})
        self.env: dict[str, str] = {}
        self.args: list[str] = list(self.spec["argv"])
        self.head = len(self.args)  # the words before the first flag: the program and its positional argument

    def positional(self, value: str) -> "Argv":
        if "positional" not in self.spec:
            raise OptionError(f"{self.engine} {self.program}: takes no positional argument")
        if len(self.args) != self.head:
            raise OptionError(f"{self.engine} {self.program}: the positional argument goes before every flag")
        self.args.append(str(value))
        self.head += 1
        return self

    def flag(self, name: str, value=None) -> "Argv":
        spec = self.spec.get("flags", {}).get(name)
        where = f"{self.engine} {self.program} {name}"
        if spec is None:
            raise OptionError(f"{where}: not in the option table")
        kind = spec["value"]
        self.args.append(name)
        if kind == "none":
            if value is not None:
                raise OptionError(f"{where}: takes no value")
        elif kind == "json":
            checked_tree(spec, value, where)
            self.args.append(json.dumps(value, separators=(",", ":")))
        elif kind == "url_port":
            url, port = value
            _check_value({"value": "str"}, url, where)
            _check_value({"value": "int"}, port, where)
            self.args += [url, str(port)]
        else:
            _check_value(spec, value, where)
            self.args.append(_text(value))
        return self

    def setenv(self, name: str, value: str) -> "Argv":
        if name not in self.env_spec:
            raise OptionError(f"{self.engine}: environment variable {name} not in the option table")
        choices = self.env_spec[name].get("choices")
        if choices is not None and value not in choices:
            raise OptionError(f"{self.engine}: {name}={value!r} is not among the table's choices {choices}")
        self.env[name] = str(value)
        return self

    def words(self) -> list[str]:
        return list(self.args)

    def shell(self, *, env: bool = True, indent: str = "    ") -> str:
        """The command for a POSIX shell: ``NAME=value`` assignments first, every word through shlex.quote, one
        flag and its value a line (backslash continuations)."""
        head = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()] if env else []
        lines = [" ".join(head + [shlex.quote(w) for w in self.args[:self.head]])]
        cur: list[str] = []
        for w in self.args[self.head:]:
            if w.startswith("-") and cur:
                lines.append(" ".join(cur))
                cur = []
            cur.append(shlex.quote(w))
        if cur:
            lines.append(" ".join(cur))
        return (" \\\n" + indent).join(lines)


def _text(value) -> str:
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)
