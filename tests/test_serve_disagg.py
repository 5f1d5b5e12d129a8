"""Disaggregated prefill/decode workers under a closed-loop client, and the silicon rows that describe them."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.imports.aic_silicon import disagg_layouts
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.serve.simulate import ServeOptions, simulate
from perfmodel.serve.workload import closed_loop_requests, parse_dist
from perfmodel.validate import run_validation


@pytest.fixture(scope="module")
def h200():
    hw = resolve_hardware("h200")
    return hw, resolve_profile(None, hw, "trtllm")


def _closed(n, conc, isl="1024", osl="128"):
    return closed_loop_requests(n, conc, parse_dist(isl, field="isl"), parse_dist(osl, field="osl"))


def test_closed_loop_client_keeps_its_concurrency_against_disaggregated_workers(h200):
    hw, prof = h200
    model = resolve_model("llama-3.1-8b")
    conc = 16
    out = simulate(hw, model, Scenario(batch="max"), prof, _closed(5 * conc, conc),
                   ServeOptions(disagg=(1, 2)))
    loop = out["closed_loop"]
    assert loop["concurrency"] == conc and loop["measured_requests"] > 0
    # Little's law over the steady state: C requests in the system at the measured rate
    rate, e2e = out["request_throughput_req_s"], out["e2e_ms"]["mean"] / 1e3
    assert rate * e2e == pytest.approx(conc, rel=0.02)


def test_closed_loop_waits_for_the_workers():
    # one slow prefill worker and a high concurrency: requests queue for it, so TTFT grows with concurrency
    hw = resolve_hardware("h200")
    prof = resolve_profile(None, hw, "trtllm")
    model = resolve_model("llama-3.1-8b")
    sc = Scenario(batch="max")
    opts = ServeOptions(disagg=(1, 4), prefill_layout=(("max_batch", 1),))
    low = simulate(hw, model, sc, prof, _closed(60, 4, isl="4096"), opts)
    high = simulate(hw, model, sc, prof, _closed(300, 64, isl="4096"), opts)
    assert high["ttft_ms"]["mean"] > 4 * low["ttft_ms"]["mean"]
    # the prefill worker, batch 1, is the bottleneck: one prompt at a time
    assert high["layout"]["prefill"]["max_seqs"] == 1


def test_side_layouts_round_trip_through_notes():
    sides = disagg_layouts("disagg P 1x(tp1 pp1 adp4 moetp1 ep4 b1) D 4x(tp8 pp1 adp1 moetp1 ep8 b16)")
    assert sides["P"] == {"workers": 1, "tp": 1, "pp": 1, "attention_dp": 4, "moe_tp": 1, "moe_ep": 4, "batch": 1}
    assert sides["D"]["workers"] == 4 and sides["D"]["batch"] == 16
    assert disagg_layouts("disagg P ?x(tp8 pp1 adp1 moetp1 ep8 b?) D ?x(tp8 pp1 adp1 moetp1 ep8 b?)")["P"]["workers"] is None
    assert disagg_layouts("agg") is None


COLUMNS = ("id,kind,model,hardware,gpus,tp,pp,precision,isl,osl,batch,metric,value,unit,source,notes,engine,"
           "engine_version,concurrency,attention_dp,moe_tp,moe_ep,mode,hf_model")


def _line(rid: str, notes: str, metric: str = "tpot", value: float = 10.0) -> str:
    return (f"{rid},inference,llama-3.1-8b,h200-sxm,3,,,bf16,1024,128,,{metric},{value},ms,test,{notes},"
            "trtllm,1.0,8,,,,disagg,")


def test_a_disaggregated_row_is_projected_with_its_sides_and_one_without_is_refused(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([COLUMNS, _line("ok", "disagg P 1x(tp1 pp1 adp1 moetp1 ep1 b1) D 2x(tp1 pp1 adp1 moetp1 ep1 b4)"),
                               _line("unknown", "disagg P ?x(tp1 pp1 adp1 moetp1 ep1 b?) D ?x(tp1 pp1 adp1 moetp1 ep1 b?)")])
                    + "\n")
    recs = run_validation(path)
    assert recs[0]["status"] == "ok" and np.isfinite(recs[0]["predicted"])
    assert recs[1]["reason"] == "disaggregated layout not recorded"
