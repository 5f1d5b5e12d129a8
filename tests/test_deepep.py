"""DeepEP's low-latency MoE exchange priced from an engine's measured tables: the import of aiconfigurator-core's
wide-EP tables (perfmodel.imports.aiconfigurator.convert_deepep_ll), the fit (perfmodel.fit.deepep), the cost
(perfmodel.cost.comm.deepep_time), the graph's marking of decode exchanges, the carry and the committed folders."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel import ops as O
from perfmodel.cost import time_op
from perfmodel.cost.comm import collective_time, deepep_time
from perfmodel.errors import InputError
from perfmodel.fit.deepep import DIRECTIONS, deepep_rows, fit_deepep, predict
from perfmodel.fit.directory import refit_family
from perfmodel.graph import deepep_ll_dispatch_bytes
from perfmodel.imports.aiconfigurator import convert_deepep_ll
from perfmodel.profile import DEFAULTS, _check_field, load_profile
from perfmodel.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
TRUTH = {"ll.dispatch": (15e-6, 17e-9, 0.55), "ll.combine": (13e-6, 12e-9, 0.70)}


def _table(noise: float = 0.0, seed: int = 0, nodes=(1,)) -> dict[str, list]:
    """Columns of a wide-EP table made from TRUTH on the B200's link bandwidth."""
    rng = np.random.default_rng(seed)
    bw = load_spec("b200").scaleup_bandwidth
    cols = {k: [] for k in ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_avg_t_us",
                            "combine_avg_t_us")}
    for node in nodes:
        for hidden in (2048, 4096, 7168):
            for tokens in (1, 4, 16, 64, 256, 1024):
                for top_k, experts in ((8, 256), (8, 128), (10, 512), (2, 16)):
                    pairs = tokens * top_k
                    for d, per_pair in (("dispatch", deepep_ll_dispatch_bytes(hidden)), ("combine", 2.0 * hidden)):
                        a, e, eta = TRUTH[f"ll.{d}"]
                        t = a + e * experts + pairs * per_pair / (eta * bw)
                        cols[f"{d}_avg_t_us"].append(t * 1e6 * float(np.exp(rng.normal(0, noise))))
                    for k, v in (("node_num", node), ("hidden_size", hidden), ("num_token", tokens),
                                 ("num_topk", top_k), ("num_experts", experts)):
                        cols[k].append(v)
    return cols


def test_import_makes_a_row_per_direction_with_the_bytes_each_rank_sends():
    conv = convert_deepep_ll(_table())
    assert conv.read == 2 * len(_table()["num_token"]) == len(conv.rows)  # a time per direction
    one = next(r for r in conv.rows if r["params"]["direction"] == "ll.dispatch" and r["params"]["tokens"] == 64
               and r["params"]["hidden"] == 7168 and r["params"]["experts"] == 256)
    assert one["params"]["bytes"] == 64 * 8 * 7408  # every token-expert pair a message of 7,408 bytes
    back = next(r for r in conv.rows if r["params"]["direction"] == "ll.combine" and r["id"] != one["id"]
                and all(r["params"][k] == one["params"][k] for k in ("tokens", "hidden", "experts", "top_k")))
    assert back["params"]["bytes"] == 64 * 8 * 2 * 7168
    assert len({r["id"] for r in conv.rows}) == len(conv.rows)
    bad = _table()
    bad["dispatch_avg_t_us"][0] = 0.0
    assert convert_deepep_ll(bad).skipped == {"no positive latency": 1}


def test_fit_recovers_the_constants_the_table_was_made_from():
    hw = load_spec("b200")
    prof, report = fit_deepep(DEFAULTS, convert_deepep_ll(_table(noise=0.02)).rows, hw)
    for direction, (a, e, eta) in TRUTH.items():
        assert prof.deepep_alpha_s[direction] == pytest.approx(a, rel=0.1)
        assert prof.deepep_eta[direction] == pytest.approx(eta, rel=0.05)
        assert prof.deepep_expert_s[direction] == pytest.approx(e, rel=0.3)
        held = report[direction]["held_out"]
        assert held["n"] > 0 and held["median_abs_error"] < 0.04


def test_only_one_nodes_calls_are_fitted_and_too_few_fit_nothing():
    rows = convert_deepep_ll(_table(nodes=(1, 2))).rows
    assert {r["params"]["nodes"] for r in deepep_rows(rows)} == {1}
    few = [r for r in rows if r["params"]["nodes"] == 1][:6]
    prof, report = fit_deepep(DEFAULTS, few, load_spec("b200"))
    assert report is None and prof is DEFAULTS


def test_cost_takes_the_fit_inside_the_domain_and_the_collective_model_elsewhere():
    hw = load_spec("b200")
    prof, _ = fit_deepep(DEFAULTS, convert_deepep_ll(_table()).rows, hw)
    nbytes = 64 * 8 * deepep_ll_dispatch_bytes(7168)
    a, e, eta = TRUTH["ll.dispatch"]
    want = a + e * 256 + nbytes / (eta * hw.scaleup_bandwidth)
    assert deepep_time("ll.dispatch", nbytes, 256, hw, prof) == pytest.approx(want, rel=0.05)
    assert collective_time("all_to_all", nbytes, 8, 8, hw, prof, kernel="ll.dispatch", experts=256) == \
        deepep_time("ll.dispatch", nbytes, 256, hw, prof)
    plain = collective_time("all_to_all", nbytes, 8, 8, hw, prof)
    assert collective_time("all_to_all", nbytes, 8, 8, hw, DEFAULTS, kernel="ll.dispatch", experts=256) == plain
    assert deepep_time("ll.dispatch", nbytes, 256, hw, DEFAULTS) is None
    # beyond one NVLink domain (EP 16 over two 8-GPU boards) the hierarchical model, not one node's fit
    across = collective_time("all_to_all", nbytes, 16, 16, hw, prof, kernel="ll.dispatch", experts=256)
    assert across == collective_time("all_to_all", nbytes, 16, 16, hw, prof)
    op = O.collective("moe.dispatch", "all_to_all", nbytes, 8, phase="decode", kernel="ll.dispatch", experts=256)
    assert time_op(op, hw, prof).time == pytest.approx(deepep_time("ll.dispatch", nbytes, 256, hw, prof))


def _exchange(phase: str, **kw):
    from perfmodel.projection import step

    ph = step("b200", "deepseek-v3", phase, 64 * 8, context=1024, tp=1, attention_dp=8, ep=8, dtype="fp8",
              engine="sglang", batching="static", moe_exchange="all_to_all", **kw)
    return {t.op.name: t for t in ph.times}


def test_a_decode_step_under_deepep_is_priced_by_the_engines_fit():
    ops = _exchange("decode")
    for name, kernel in (("moe.dispatch", "ll.dispatch"), ("moe.combine", "ll.combine")):
        t = ops[name]
        assert t.op.params["kernel"] == kernel and t.op.params["experts"] == 256
    prefill = _exchange("prefill")
    assert "kernel" not in prefill["moe.dispatch"].op.params  # DeepEP's normal kernels: the collective model


def test_profile_fields_are_checked_at_load():
    _check_field("deepep_expert_s", {"ll.dispatch": 0.0}, {}, "p.json")  # no per-expert term is a fit's answer
    for field, value in (("deepep_eta", {"ll.dispatch": -1.0}), ("deepep_alpha_s", {"ll.combine": 5.0}),
                         ("deepep_eta", {"ll.dispatch": 3.0})):
        with pytest.raises(InputError):
            _check_field(field, value, {}, "p.json")


def test_carried_fits_follow_the_collectives_latency_and_link_rules():
    from perfmodel.transfer import carry

    src = load_profile(ROOT / "calibration" / "b200-sglang")
    out = carry(src, load_spec("b200"), load_spec("h200-sxm"))
    for d in DIRECTIONS:
        assert out.deepep_eta[d] > 0 and out.deepep_alpha_s[d] > 0
    ratios = out.provenance["carry"]["sustained_ratios"]
    assert out.deepep_alpha_s["ll.dispatch"] == pytest.approx(
        src.deepep_alpha_s["ll.dispatch"] * ratios.get("allreduce_latency", 1.0))
    assert out.deepep_eta["ll.combine"] == pytest.approx(
        src.deepep_eta["ll.combine"] * ratios.get("allreduce_busbw", 1.0))
    # a GB200 is a B200 variant (its lineage): the board's fit applies to its own figures unchanged
    assert carry(src, load_spec("b200"), load_spec("gb200")).deepep_eta == src.deepep_eta


@pytest.mark.parametrize("folder", ["b200-sglang", "b300-sglang", "h100-sxm-sglang", "h200-sxm-sglang"])
def test_committed_fits_reproduce_the_tables_they_came_from(folder):
    """Each SGLang folder's DeepEP constants: fitted, within 10% at the median on the shapes the fit held out, and
    the same as a refit of the folder's own rows."""
    prof = load_profile(ROOT / "calibration" / folder)
    assert "deepep" in prof.provenance["measured_families"]
    for d in DIRECTIONS:
        held = prof.provenance["deepep"][d]["held_out"]
        assert held["n"] >= 20 and held["median_abs_error"] < 0.10, (d, held)
    from perfmodel.measure.store import read_rows

    rows = read_rows(ROOT / "calibration" / folder / "measurements.jsonl.gz")
    refit, _ = fit_deepep(DEFAULTS, rows, load_spec(prof.spec_key))
    for d in DIRECTIONS:
        assert refit.deepep_eta[d] == pytest.approx(prof.deepep_eta[d], rel=1e-9)


def test_fit_only_deepep_writes_the_family_and_its_section(tmp_path):
    import gzip
    import shutil

    d = tmp_path / "x-sglang"
    d.mkdir()
    for f in ("profile.json", "environment.json", "validation.md"):
        shutil.copy(ROOT / "calibration" / "b200-sglang" / f, d / f)
    rows = convert_deepep_ll(_table()).rows
    (d / "measurements.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    text = refit_family(d, "deepep")
    assert "| ll.dispatch |" in text
    prof = load_profile(d)
    assert prof.deepep_eta["ll.dispatch"] == pytest.approx(TRUTH["ll.dispatch"][2], rel=0.05)
    text = (d / "validation.md").read_text()
    assert text.count("## DeepEP low-latency dispatch and combine") == 1
    refit_family(d, "deepep")  # again: the section replaced, not repeated
    assert (d / "validation.md").read_text().count("## DeepEP low-latency dispatch and combine") == 1
    assert prof.provenance["deepep"]["ll.combine"]["train"]["n"] > 0
    assert prof.provenance["measured_families"].count("deepep") == 1
    saved = json.loads((d / "profile.json").read_text())
    assert saved["gemm_table"] == saved["attn_table"] == saved["gemm_grouped_table"] == ""  # never a path
    assert predict(deepep_rows(rows)[:3], 1e-5, 0.0, 0.5, 1e12).shape == (3,)
