"""Issue 27's hostile corpus (tests/hostile/corpus.py): every door, one mutation at a time, must end in one line
and exit 2 or in exit 0 with every figure finite and non-negative, with no input changed.

The default tier runs a fixed sample of every door (``corpus.sample``: the cases whose ids hash lowest); the
slow tier runs every case. A failing case names its door and case: ``python tests/hostile/count.py --case
"<id>"`` runs it again and shows what it printed. Known failures (``corpus.KNOWN``, causes in files outside this
corpus's owners' reach) are strict xfails: a fix shows up as an unexpected pass, to be removed from the list.
docs/hostile.md holds the counts by door (``python tests/hostile/count.py``).
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    name = "hostile_corpus"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "hostile" / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


C = _load()


def _params(cases, *, slow: bool):
    out = []
    for case in cases:
        marks = [pytest.mark.slow] if slow else []
        if case.id in C.KNOWN:
            marks.append(pytest.mark.xfail(reason=C.KNOWN[case.id], strict=True))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory):
    # one folder for the module, a subfolder per case removed after it: pytest's tmp_path numbers its folders by
    # listing the ones before, which over 9,000 cases cost more than the cases
    return tmp_path_factory.mktemp("hostile")


def _check(case, base: Path):
    folder = base / f"c{zlib.crc32(case.id.encode()):08x}"
    try:
        outcome = C.run_case(case, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert outcome.verdict != "fail", outcome.report()


@pytest.mark.parametrize("case", _params(C.sample(), slow=False))
def test_sample(case, cases_dir):
    _check(case, cases_dir)


def test_every_case(case, cases_dir):
    _check(case, cases_dir)


def pytest_generate_tests(metafunc):
    """test_every_case over the whole corpus where the run may select the slow tier (an ``-m`` expression, or tests
    named by id: tests/conftest.py's rule), else over its first case alone, deselected as slow like the rest would
    be: 9,289 items built only to be deselected cost the default tier about a second of collection."""
    if metafunc.function is not test_every_case:
        return
    config = metafunc.config
    whole = config.option.markexpr or any("::" in a for a in config.args)
    metafunc.parametrize("case", _params(C.corpus() if whole else C.corpus()[:1], slow=True))


# --- the corpus itself ---------------------------------------------------------------------------------------

def test_every_door_has_cases_and_the_sample_covers_each():
    cases = C.corpus()
    doors = {c.door for c in cases}
    missing = set(C.DOORS) - doors
    if missing == {"imported-tables"}:
        pytest.importorskip("pyarrow")  # that door needs the import extra
    assert not missing, missing
    assert {c.door for c in C.sample()} == doors
    assert len({c.id for c in cases}) == len(cases)
    assert set(C.KNOWN) <= {c.id for c in cases}, "a known failure names no case"


def test_flags_are_discovered_from_the_parsers():
    """Every value-taking option of every listed command gets every hostile value, without a list to edit."""
    ids = {c.id for c in C.corpus() if c.door == "flags"}
    for path in C.COMMANDS:
        flags = [f for f, _ in C.value_flags(path)]
        assert flags, path
        for f in flags:
            for v in C.VALUES:
                assert f"flags | {' '.join(path)} {f}={v}" in ids
    assert "flags | project --isl=nan" in ids and "flags | serve --rate=1e-300" in ids


def test_the_judge_catches_what_it_must(tmp_path):
    """The judge is the corpus's only assertion: a traceback, two lines, a NaN or negative figure at exit 0, a
    changed input and an accepted clobber each fail."""
    case = C.Case("flags", "x", ("project", "--format", "json"))
    f = tmp_path / "in.yaml"
    f.write_text("a: 1\n")
    before = C._snapshot(tmp_path, [str(f)])

    def verdict(rc, out="", err="", after=None, c=case):
        return C.judge(c, list(c.argv), rc, out, err, before, before if after is None else after, tmp_path).verdict

    assert verdict(2, err="perfmodel: error: --isl: expected a positive integer\n") == "refused"
    assert verdict(0, out='{"ttft_ms": 1.5, "error": -0.2}') == "clean"
    assert verdict(2, err="Traceback (most recent call last):\nValueError\n") == "fail"
    assert verdict(2, err="perfmodel: error: one\nperfmodel: error: two\n") == "fail"
    assert verdict(1, err="perfmodel: error: x\n") == "fail"
    assert verdict(0, out='{"ttft_ms": NaN}') == "fail"
    assert verdict(0, out='{"ttft_ms": -3}') == "fail"
    assert verdict(0, out='{"ttft_ms": 1}', err="x.py:3: RuntimeWarning: overflow\n") == "fail"
    assert verdict(2, err="perfmodel: error: \x1b[31m\n") == "fail"
    assert verdict(2, err="perfmodel: error: x\n", after={str(f): "changed"}) == "fail"
    refuse = C.Case("outputs", "x", ("project",), expect="refuse")
    assert verdict(0, c=refuse) == "fail"
    table = C.Case("flags", "t", ("project",))
    assert verdict(0, out="TTFT  nan ms\n", c=table) == "fail"
    assert verdict(0, out="TTFT  12 ms, info\n", c=table) == "clean"


def test_the_documented_sizes_are_the_corpus():
    """docs/hostile.md's table (python tests/hostile/count.py) counts today's corpus: its sizes and known failures
    by door are recomputed here (cheap: nothing runs); the outcome columns add up to the size."""
    text = (ROOT / "docs" / "hostile.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- hostile-counts, written by [^>]*-->\n(.*?)\n<!-- /hostile-counts -->", text, re.S)
    assert block, "docs/hostile.md has no hostile-counts block"
    rows = {}
    for line in block.group(1).splitlines()[2:]:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        rows[cells[0]] = [int(c.replace(",", "")) for c in cells[1:]]
    cases = C.corpus()
    for door in C.DOORS:
        mine = [c for c in cases if c.door == door]
        if not mine:
            continue
        size, refused, clean, known, fail = rows[door]
        assert size == len(mine), (door, size, len(mine), "rerun python tests/hostile/count.py")
        assert known == sum(c.id in C.KNOWN for c in mine), door
        assert refused + clean + known + fail == size and fail == 0, door
