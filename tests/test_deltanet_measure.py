"""Gated DeltaNet's recurrence measurement (perfmodel.measure.deltanet) and its check against the graph."""
from __future__ import annotations

import json

from perfmodel.measure.deltanet import MODELS, TPS, deltanet_cases


def test_cases_cover_both_models_every_tp_and_both_phases():
    cases = deltanet_cases()
    assert len({c.id for c in cases}) == len(cases)
    for model, kh, vh, _, _ in MODELS:
        mine = [c.params for c in cases if c.params["model"] == model]
        assert {p["tp"] for p in mine} == set(TPS)
        assert {p["phase"] for p in mine} == {"decode", "prefill"}
        assert all(p["value_heads"] * p["tp"] == vh and p["key_heads"] * p["tp"] == kh for p in mine)


def test_check_prices_the_graphs_recurrence_and_names_the_streaming_rows(tmp_path, docs_tool):
    """Rows made at twice the graph's decode time: the tool's streaming ratio is 2 (the graph priced with the
    measurement's fp32 state), and a row without a measured time is left out."""
    tool = docs_tool("deltanet_check.py")
    from perfmodel.fit.directory import match_spec
    from perfmodel.resolve import resolve_profile

    env = {"device_name": "NVIDIA H100 80GB HBM3"}
    hw = match_spec(env, None)
    prof = resolve_profile(None, hw, "torch")
    rows = []
    for c in deltanet_cases():
        p = c.params
        row = {"kind": "deltanet", "params": p, "env": env, "time_s": 1.0,
               "state_bytes": p["batch"] * p["value_heads"] * p["dk"] * p["dv"] * 4}
        row["time_s"] = 2.0 * tool.priced(row, hw, prof)
        rows.append(row)
    rows.append({"kind": "deltanet", "params": rows[0]["params"], "env": env, "time_s": None})
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = tool.compare(tmp_path)
    assert result["streaming"] and all(abs(r - 2.0) < 1e-9 for r, _ in result["streaming"])
    assert all(abs(v["ratio"] - 2.0) < 1e-9 for v in result["rows"].values())
    assert "measured / graph 2.00" in tool.table(result, True)
