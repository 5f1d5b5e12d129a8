"""Docs that cannot drift (issue 26): every marked block of docs/ is registered in docs/tools/regenerate.py with the
script that prints it, and reproduced by it. Blocks checked beside their code elsewhere are named in CHECKED."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from perfmodel.paths import repo_root

ROOT = repo_root()
spec = importlib.util.spec_from_file_location("regenerate", ROOT / "docs" / "tools" / "regenerate.py")
regenerate = importlib.util.module_from_spec(spec)
sys.modules["regenerate"] = regenerate  # its dataclasses look their module up
spec.loader.exec_module(regenerate)

# block tag -> the test that checks it next to the code it documents
CHECKED = {
    "power-clock-tables": "tests/test_power_clock.py", "mtp-table": "tests/test_layouts.py",
    "tables-table": "tests/test_tables.py", "tables-effect": "tests/test_tables.py",
    "what-if-examples": "tests/test_what_if.py", "what-if-departures": "tests/test_what_if.py",
}


def test_every_marked_block_is_registered():
    registered = {(b.doc, b.tag) for b in regenerate.BLOCKS}
    found = {(p.name, tag) for p in (ROOT / "docs").glob("*.md") for tag in regenerate.marked(p.read_text())}
    assert found == registered, "register the block in docs/tools/regenerate.py (or remove its markers)"
    for doc in regenerate.PROSE:
        assert (ROOT / "docs" / doc).is_file()


def _check(block) -> None:
    if regenerate.missing(block):
        pytest.skip(regenerate.missing(block))
    doc = regenerate.marked((ROOT / "docs" / block.doc).read_text(encoding="utf-8"))[block.tag]
    assert doc == regenerate.tool_function(block)(), \
        f"run python docs/tools/regenerate.py --write --only {block.doc}"


@pytest.mark.parametrize("block", [b for b in regenerate.BLOCKS if b.tag not in CHECKED and not b.slow],
                         ids=lambda b: b.tag)
def test_registered_blocks_are_what_their_scripts_print(block):
    _check(block)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in regenerate.BLOCKS if b.tag not in CHECKED and b.slow],
                         ids=lambda b: b.tag)
def test_slow_blocks_are_what_their_scripts_print(block):
    _check(block)


def test_a_block_whose_package_is_missing_says_why():
    block = regenerate.Block("x.md", "x", "x.py", "x", needs="no-such-distribution-perfmodel==1.0")
    assert regenerate.missing(block) == "needs no-such-distribution-perfmodel==1.0 (not installed)"
    assert regenerate.missing(regenerate.Block("x.md", "x", "x.py", "x")) == ""
