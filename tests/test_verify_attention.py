"""The verify-step attention measurement (perfmodel.measure.verify_attention) and its check against the model."""
from __future__ import annotations

import json

from perfmodel.measure.verify_attention import BACKENDS, HEADS, ROWS, verify_cases


def test_cases_cover_every_row_count_per_shape_once():
    cases = verify_cases()
    assert len({c.id for c in cases}) == len(cases) == len(HEADS) * 4 * 3 * len(BACKENDS) * len(ROWS)
    assert all(c.kind == "attention" and not c.params["causal"] for c in cases)
    # rows innermost: each shape's k sweep is consecutive, k = 1 first (the ratio's base)
    assert [c.params["seq_q"] for c in cases[: len(ROWS)]] == list(ROWS)
    assert len(verify_cases(quick=True)) < len(cases)


def test_check_prices_each_row_and_reports_ratios(tmp_path, docs_tool):
    rows = []
    for k, t in ((1, 10e-6), (2, 11e-6), (4, 12e-6)):
        p = {"backend": "default", "batch": 8, "heads_q": 32, "heads_kv": 8, "seq_q": k, "seq_kv": 4096,
             "head_dim": 128, "causal": False, "dtype": "bf16"}
        rows.append({"kind": "attention", "params": p, "time_s": t})
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = docs_tool("verify_attention_check.py").compare(tmp_path)
    assert set(result) == {("default", 1), ("default", 2), ("default", 4)}
    assert result[("default", 1)]["ratio_measured"] == 1.0 and result[("default", 1)]["ratio_priced"] == 1.0
    assert abs(result[("default", 4)]["ratio_measured"] - 1.2) < 1e-9
    assert result[("default", 2)]["ratio_priced"] >= 1.0  # more query rows never cost less in the model
