"""Collectives as measured (perfmodel.cost.comm_tables): an engine folder's own collective rows anchor the fitted
alpha-beta model on its part, in the ratio form a what-if spec keeps."""
from __future__ import annotations

import gzip
import json
import statistics

import pytest

from perfmodel import ops as O
from perfmodel.cost import comm_tables, table_ratio, time_op
from perfmodel.cost.comm import collective_time
from perfmodel.paths import repo_root
from perfmodel.resolve import resolve_hardware, setup
from perfmodel.spec import spec_with


def _engine_median(folder: str, world: int, nbytes: int) -> float:
    rows = [json.loads(line) for line in gzip.open(repo_root() / "calibration" / folder / "measurements.jsonl.gz", "rt")]
    times = [r["time_s"] for r in rows if r.get("kind") == "collective" and r["params"].get("op") == "all_reduce"
             and r["params"].get("backend") == "trtllm" and r["params"]["world_size"] == world
             and r["params"]["bytes"] == nbytes]
    return statistics.median(times)


def _ar(nbytes, group):
    return O.collective("ar", "all_reduce", nbytes, group, phase="decode")


@pytest.fixture(scope="module")
def h100():
    hw = resolve_hardware("h100-sxm")
    return hw, setup(hw, calibration=None, engine="trtllm").profile


def test_the_part_prices_its_own_rows(h100):
    hw, prof = h100
    assert prof.comm_table.endswith("h100-sxm-trtllm")
    for world, nbytes in ((8, 131072), (8, 2097152), (4, 524288)):
        measured = _engine_median("h100-sxm-trtllm", world, nbytes)
        nccl_or_engine = time_op(_ar(nbytes, world), hw, prof, world=world).time
        assert nccl_or_engine == pytest.approx(measured, rel=1e-9) or nccl_or_engine < measured
    # the fit alone is short there: the anchor is what moved it
    assert collective_time("all_reduce", 131072 * 4, 8, 8, hw, prof) < 0.5 * time_op(_ar(131072 * 4, 8), hw, prof,
                                                                                      world=8).time


def test_sizes_between_and_beyond_the_rows(h100):
    hw, prof = h100
    lo, mid, hi = (time_op(_ar(b, 8), hw, prof, world=8).time for b in (131072, 185363, 262144))
    assert lo < mid < hi  # log-linear between two measured sizes
    # beyond the largest measured size the ratio stays the edge's: the time keeps the fit's slope
    edge = table_ratio(_ar(2 ** 34, 8), hw, prof)
    assert table_ratio(_ar(2 ** 36, 8), hw, prof) == pytest.approx(edge)


def test_a_what_if_spec_keeps_the_ratio_and_moves(h100):
    hw, prof = h100
    base = time_op(_ar(1 << 20, 8), hw, prof, world=8).time
    faster = spec_with(hw, scaleup_bandwidth=2 * hw.scaleup_bandwidth)
    moved = time_op(_ar(1 << 20, 8), faster, prof, world=8).time
    assert moved < base
    assert table_ratio(_ar(1 << 20, 8), faster, prof) == pytest.approx(table_ratio(_ar(1 << 20, 8), hw, prof))


def test_where_no_table_applies(h100):
    hw, prof = h100
    assert table_ratio(_ar(1 << 20, 3), hw, prof) is None  # a world size the folder did not measure
    assert comm_tables.ratio(O.collective("x", "all_to_all", 1 << 20, 8, phase="decode", kernel="ll.dispatch",
                                          experts=256), hw, prof) is None  # an engine's own exchange kernel
    other = resolve_hardware("b200")
    assert table_ratio(_ar(1 << 20, 8), other, prof) is None  # another part: the profile's table is not its own
    torch = setup(hw, calibration=None, engine="torch").profile
    assert table_ratio(_ar(1 << 20, 8), hw, torch) is None or torch.comm_table == ""


def test_the_silicon_doc_quotes_the_tool_and_the_readme(docs_tool):
    """docs/validation-silicon.md's section on this change quotes the H100 TensorRT-LLM all-reduce at 8 GPUs and
    512 KiB as docs/tools/comm_fit_check.py gives it, and the public table's medians as README.md's block prints."""
    import re

    doc = " ".join((repo_root() / "docs" / "validation-silicon.md").read_text().split())
    para = doc.split("**After the collectives' own tables**")[1].split("**After ")[0]
    row = next(r for r in docs_tool("comm_fit_check.py").compare() if (r["folder"], r["gpus"]) == ("h100-sxm-trtllm", 8))
    measured, fitted, _ = row["cells"][1]
    assert f"at 512 KiB: {measured * 1e6:.1f} us measured, {fitted * 1e6:.1f} us fitted" in para
    readme = (repo_root() / "README.md").read_text()
    overall, ttft = re.search(r"median \|error\| over \d+ projected rows: ([\d.]+%) .*?ttft ([\d.]+%)", readme).groups()
    assert f"-> {overall} (its TTFT 13.6% -> {ttft}" in para
