"""The training expert-product measurement (perfmodel.measure.grouped_gemm) and its check against the model."""
from __future__ import annotations

import json

from perfmodel.measure.grouped_gemm import MAX_BYTES, PASSES, grouped_cases



def test_cases_are_whole_passes_within_the_memory_cap():
    cases = grouped_cases()
    assert len({c.id for c in cases}) == len(cases) > 0
    for i in range(0, len(cases), len(PASSES)):  # each shape's three passes together, forward first
        assert [c.params["pass"] for c in cases[i:i + len(PASSES)]] == list(PASSES)
    for c in cases:
        p = c.params
        m = p["experts"] * p["rows"]
        assert 2 * (m * p["k"] + m * p["n"] + p["experts"] * p["k"] * p["n"]) <= MAX_BYTES


def test_check_prices_the_three_passes_like_the_training_graph(tmp_path, docs_tool):
    rows = []
    for p_ in PASSES:
        p = {"model": "gpt-oss-120b", "product": "gate_up", "pass": p_, "experts": 16, "rows": 1024, "k": 2880,
             "n": 5760, "dtype": "bf16"}
        rows.append({"kind": "grouped_gemm", "params": p, "time_s": 1e-3})
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tool = docs_tool("grouped_gemm_check.py")
    prices = tool.priced(tool.measured_rows(tmp_path))
    assert all(t > 0 for t in prices)
    # the weight gradient also reads and writes the fp32 main gradient: never cheaper than the data gradient
    assert prices[2] >= prices[1] * 0.99
    result = tool.compare(tmp_path)
    assert result[("pass", "fwd", 1024)]["n"] == 1


def test_check_without_measurements_says_so_in_one_line(tmp_path, capsys, docs_tool):
    """A folder without measured rows: the tool says where the rows come from instead of a FileNotFoundError
    traceback."""
    import pytest

    tool = docs_tool("grouped_gemm_check.py")
    with pytest.raises(SystemExit) as e:
        tool.compare(tmp_path)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "no measurements at" in err
