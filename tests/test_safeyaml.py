"""perfmodel.safeyaml keeps a parsed spec or model descriptor on disk (``cached=True``): a hit is the value the
parse gives, types included, and a fresh one each time; the text and the limits key it, so a limit still refuses;
what JSON cannot give back exactly is parsed each time; a refused document is never kept; a corrupt cache is a
miss."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from perfmodel import disk_cache, safeyaml
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

SPEC = ("name: Test part\nvendor: nvidia\naliases: [t1, t-2]\ncompute:\n  sm_count: {value: 132, source: datasheet}\n"
        "  boost: {value: 1.98, note: 'GHz: 1980 MHz'}\nmemory:\n  bandwidth: {value: 4.8 TB/s}\n"
        "flags: [true, no, ~, -0.0, 1e400x, 0x1A, 6.02e23, 12345678901234567890]\n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    disk_cache.flush()


@pytest.fixture
def parses(monkeypatch):
    """Counts the documents actually parsed."""
    calls = []
    real = safeyaml._parse

    def counting(text, *args):
        calls.append(text)
        return real(text, *args)

    monkeypatch.setattr(safeyaml, "_parse", counting)
    return calls


def _fresh_process():
    disk_cache.flush()
    disk_cache._READ.clear()


def _same(a, b) -> bool:
    """Equal with the same types throughout (1, 1.0 and True are equal in Python, not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and (not isinstance(a, float) or repr(a) == repr(b))


def test_a_kept_document_is_the_parsed_value(cache, parses):
    first = safeyaml.load(SPEC.encode(), file="spec.yaml", cached=True)
    _fresh_process()
    second = safeyaml.load(SPEC.encode(), file="spec.yaml", cached=True)
    assert len(parses) == 1, "the second process reads the kept value"
    assert _same(first, second) and _same(second, safeyaml.load(SPEC, file="spec.yaml"))
    second["compute"]["sm_count"]["value"] = 0  # a caller's change is its own
    assert safeyaml.load(SPEC, file="spec.yaml", cached=True)["compute"]["sm_count"]["value"] == 132


def test_every_shipped_spec_and_model_is_kept_exactly(cache):
    files = sorted((ROOT / "hardware").glob("*.yaml")) + sorted((ROOT / "workloads" / "models").glob("*.yaml"))
    assert len(files) > 50
    parsed = [safeyaml.load(f.read_bytes(), file=str(f), cached=True) for f in files]
    _fresh_process()
    for f, value in zip(files, parsed):
        assert _same(safeyaml.load(f.read_bytes(), file=str(f), cached=True), value), f


def test_the_text_and_the_limits_key_it(cache, parses):
    safeyaml.load(SPEC, file="spec.yaml", cached=True)
    safeyaml.load(SPEC.replace("132", "133"), file="spec.yaml", cached=True)
    assert len(parses) == 2
    with pytest.raises(InputError, match="nested more than 2 levels"):
        safeyaml.load(SPEC, file="spec.yaml", cached=True, max_depth=2)


def test_what_json_cannot_give_back_is_parsed_each_time(cache, parses):
    for text in ("made: 2024-01-02\n", "x: .inf\n", "1: one\n", "b: !!binary aGk=\n", "s: !!set {a}\n"):
        first = safeyaml.load(text, file="doc.yaml", cached=True)
        _fresh_process()
        assert _same(safeyaml.load(text, file="doc.yaml", cached=True), first)
    assert len(parses) == 10
    assert safeyaml.load("made: 2024-01-02\n", file="doc.yaml", cached=True) == {"made": datetime.date(2024, 1, 2)}


def test_a_refused_document_is_refused_every_time(cache):
    for text in ("a: 1\na: 2\n", "a: [1\n", "a: &x [*x]\n"):
        for _ in range(2):
            with pytest.raises(InputError):
                safeyaml.load(text, file="bad.yaml", cached=True)
            _fresh_process()
    assert not list(cache.glob("*.json"))


def test_a_corrupt_kept_value_is_a_miss(cache, parses):
    want = safeyaml.load(SPEC, file="spec.yaml", cached=True)
    _fresh_process()
    (file,) = cache.glob(f"{safeyaml.PARSED}-*.json")
    file.write_text(json.dumps({k: "{not json" for k in json.loads(file.read_text())}))
    assert _same(safeyaml.load(SPEC, file="spec.yaml", cached=True), want) and len(parses) == 2
    file.write_bytes(b"\x00garbage")
    disk_cache._READ.clear()
    assert _same(safeyaml.load(SPEC, file="spec.yaml", cached=True), want) and len(parses) == 3


def test_not_cached_unless_asked(cache, parses):
    safeyaml.load(SPEC, file="spec.yaml")
    safeyaml.load(SPEC, file="spec.yaml")
    disk_cache.flush()
    assert len(parses) == 2 and not cache.exists()


@pytest.mark.parametrize("value", ["!!int x", "!!float abc", "!!timestamp 2020-99-99", "!!int 1.5"])
def test_an_explicit_tag_its_text_does_not_fit_is_one_line(value):
    """An explicit tag PyYAML's constructor cannot build from the text (it raised a bare ValueError, a traceback
    at the command line) is a one-line InputError naming the file, without the value."""
    from perfmodel.errors import InputError
    from perfmodel.safeyaml import load

    with pytest.raises(InputError) as e:
        load(f"a: {{value: {value}}}\n", file="spec.yaml", what="hardware spec file")
    text = str(e.value)
    assert "spec.yaml" in text and "explicit tag" in text and "\n" not in text
