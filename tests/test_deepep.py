"""DeepEP's MoE exchange priced from an engine's measured tables: the import of aiconfigurator-core's wide-EP tables
(perfmodel.imports.aiconfigurator.convert_deepep_ll, convert_deepep_normal), the fit (perfmodel.fit.deepep), the
cost (perfmodel.cost.comm.deepep_time, deepep_scaleout_fit), the graph's marking of the exchanges, the nodes a token
reaches (perfmodel.routing.nodes_per_token), the carry and the committed folders."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel import ops as O
from perfmodel.cost import time_op
from perfmodel.cost.comm import collective_time, deepep_scaleout_fit, deepep_time, per_node_bytes
from perfmodel.errors import InputError
from perfmodel.fit.deepep import ACROSS_DIRECTIONS, DEEPEP_DIRECTIONS as DIRECTIONS, deepep_rows, fit_deepep, predict
from perfmodel.fit.directory import refit_family
from perfmodel.graph import deepep_ll_dispatch_bytes, deepep_normal_copy_bytes
from perfmodel.imports.aiconfigurator import DEEPEP_ENGINE_SMS, convert_deepep_ll, convert_deepep_normal
from perfmodel.models import load_model
from perfmodel.routing import copies_per_token, nodes_per_token, ranks_per_token
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
    # each call with its payload's format: SGLang's low-latency dispatch in fp8, its combines in bf16
    for name, kernel in (("moe.dispatch", "ll.dispatch@fp8"), ("moe.combine", "ll.combine@bf16")):
        t = ops[name]
        assert t.op.params["kernel"] == kernel and t.op.params["experts"] == 256
    prefill = _exchange("prefill")
    for name, kernel in (("moe.dispatch", "normal.dispatch@fp8"), ("moe.combine", "normal.combine@bf16")):
        p = prefill[name].op.params
        assert p["kernel"] == kernel and p["per_node"]["routing"] == [256, 8, 8, 4]
    # fp8 out with its block scales (SGLang quantizes before a DeepEP dispatch for fp8 experts), bf16 back
    assert prefill["moe.dispatch"].op.params["per_node"]["copy_bytes"] == deepep_normal_copy_bytes(7168, 1.0)
    assert prefill["moe.combine"].op.params["per_node"]["copy_bytes"] == 2 * 7168


def test_the_assumptions_name_deepeps_kernels_under_an_engine_that_runs_them():
    from perfmodel.projection import assumptions
    from perfmodel.resolve import setup

    for engine, part, want in (("sglang", "h200-sxm", "on DeepEP's kernels (low-latency in decode: a message per "
                                                         "routed pair, out in fp8, back in bf16"),
                               ("trtllm", "h200-sxm", "on DeepEP's kernels (low-latency in decode: a message per "
                                                      "routed pair, out in fp8, back in fp8"),
                               ("trtllm", "gb200", "on TensorRT-LLM's MNNVL all-to-all"),
                               ("torch", "h200-sxm", "by all-to-all, in")):
        s = setup(part, "deepseek-v3", {"engine": engine, "attention_dp": 8, "ep": 8, "tp": 1,
                                              "moe_exchange": "all_to_all", "dtype": "fp8"})
        line = next(a for a in assumptions(s.hardware, s.model, s.scenario, s.profile) if a.startswith("MoE exchange"))
        assert want in line, line


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
    # the calls across nodes are their own evidence family where the folder measured them (Hopper's)
    assert ("deepep_across" in prof.provenance["measured_families"]) == folder.startswith("h")
    for d in DIRECTIONS:
        held = prof.provenance["deepep"][d]["held_out"]
        assert held["n"] >= 20 and held["median_abs_error"] < 0.11, (d, held)
    from perfmodel.measure.store import read_rows

    rows = read_rows(ROOT / "calibration" / folder / "measurements.jsonl.gz")
    refit, _ = fit_deepep(DEFAULTS, rows, load_spec(prof.spec_key))
    for d in DIRECTIONS:
        assert refit.deepep_eta[d] == pytest.approx(prof.deepep_eta[d], rel=1e-9)
    assert refit.deepep_scaleout_eta == pytest.approx(prof.deepep_scaleout_eta, rel=1e-9)
    across = prof.provenance["deepep"].get("across", {})
    if folder.startswith("h"):  # SGLang 0.5.6.post2's tables of 2, 4 and 8 Hopper nodes
        assert sorted(across) == sorted(f"{d}:{n}" for d in ACROSS_DIRECTIONS for n in (2, 4, 8))
        for key, f in across.items():  # two constants a node count reproduce every call (train and held out)
            assert f["train"]["median_abs_error"] < 0.10 and f["train"]["p90_abs_error"] < 0.25, (key, f)
    else:
        assert across == {} and prof.deepep_scaleout_eta == {}


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
    assert text.count("## DeepEP dispatch and combine") == 1 and "low-latency dispatch and combine" not in text
    refit_family(d, "deepep")  # again: the section replaced, not repeated
    assert (d / "validation.md").read_text().count("## DeepEP dispatch and combine") == 1
    assert prof.provenance["deepep"]["ll.combine"]["train"]["n"] > 0
    assert prof.provenance["measured_families"].count("deepep") == 1
    saved = json.loads((d / "profile.json").read_text())
    assert saved["gemm_table"] == saved["attn_table"] == saved["gemm_grouped_table"] == ""  # never a path
    assert predict(deepep_rows(rows)[:3], 1e-5, 0.0, 0.5, 1e12).shape == (3,)


# --- the normal kernels, and across nodes -----------------------------------------------------------------

ACROSS = {"normal.dispatch": {2: (60e-6, 0.65), 4: (90e-6, 0.9)}, "normal.combine": {2: (90e-6, 0.55), 4: (120e-6, 0.85)}}


def _normal_table(noise: float = 0.0, seed: int = 0) -> dict[str, list]:
    """Columns of a DeepEP normal table made from ACROSS on the H200's NIC bandwidth (two and four nodes of 8), with
    one node's rows and rows at another SM count beside them."""
    rng = np.random.default_rng(seed)
    nic = load_spec("h200-sxm").scaleout_bandwidth
    names = ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_sms", "dispatch_transmit_us",
             "dispatch_notify_us", "combine_sms", "combine_transmit_us", "combine_notify_us")
    cols = {k: [] for k in names}
    for nodes in (1, 2, 4):
        for sms in (DEEPEP_ENGINE_SMS, 8):
            for tokens in (1, 16, 128, 1024, 4096, 16384, 65536):
                for hidden, top_k, experts in ((7168, 8, 256), (4096, 8, 128)):
                    for d, value in (("dispatch", 1.0), ("combine", 2.0)):
                        if nodes == 1:
                            t = 40e-6 + tokens * 5 * hidden * value / 300e9
                        else:
                            a, eta = ACROSS[f"normal.{d}"][nodes]
                            remote = tokens * nodes_per_token(experts, top_k, nodes) * (nodes - 1) / nodes
                            t = a + remote * deepep_normal_copy_bytes(hidden, value) / (eta * nic)
                        t *= float(np.exp(rng.normal(0, noise)))
                        notify = 0.0 if nodes == 1 else 30.0  # us, part of the call
                        cols[f"{d}_transmit_us"].append(t * 1e6 - notify)
                        cols[f"{d}_notify_us"].append(notify)
                        cols[f"{d}_sms"].append(sms)
                    for k, v in (("node_num", nodes), ("hidden_size", hidden), ("num_token", tokens),
                                 ("num_topk", top_k), ("num_experts", experts)):
                        cols[k].append(v)
    return cols


def test_normal_import_keeps_the_engines_sm_count_and_counts_rank_and_node_copies():
    cols = _normal_table()
    conv = convert_deepep_normal(cols, 8)
    assert conv.read == 2 * len(cols["num_token"])
    assert conv.skipped == {f"SM count other than the engines' {DEEPEP_ENGINE_SMS}": len(cols["num_token"])}
    assert {r["params"]["sms"] for r in conv.rows} == {DEEPEP_ENGINE_SMS}
    one = next(r for r in conv.rows if r["params"]["direction"] == "normal.dispatch" and r["params"]["nodes"] == 4
               and r["params"]["tokens"] == 1024 and r["params"]["hidden"] == 7168)
    p = one["params"]
    assert p["ranks"] == 32
    assert p["bytes"] == pytest.approx(1024 * ranks_per_token(256, 8, 32) * (7168 + 4 * 7168 / 128))
    assert p["scaleout_bytes"] == pytest.approx(1024 * nodes_per_token(256, 8, 4) * 3 / 4 * (7168 + 4 * 7168 / 128))
    assert one["time_s"] == pytest.approx(ACROSS["normal.dispatch"][4][0]
                                          + p["scaleout_bytes"] / (0.9 * load_spec("h200-sxm").scaleout_bandwidth))
    back = next(r for r in conv.rows if r["params"]["direction"] == "normal.combine" and r["params"]["nodes"] == 1)
    assert back["params"]["scaleout_bytes"] == 0.0  # one node: nothing over the NIC


def test_across_fit_recovers_each_node_counts_constants_and_the_cost_takes_them():
    hw = load_spec("h200-sxm")
    rows = convert_deepep_normal(_normal_table(noise=0.02), 8).rows
    prof, report = fit_deepep(DEFAULTS, rows, hw)
    for d, by_nodes in ACROSS.items():
        for n, (a, eta) in by_nodes.items():
            assert prof.deepep_scaleout_eta[f"{d}:{n}"] == pytest.approx(eta, rel=0.05)
            assert prof.deepep_scaleout_alpha_s[f"{d}:{n}"] == pytest.approx(a, rel=0.25)
            assert report["across"][f"{d}:{n}"]["held_out"]["median_abs_error"] < 0.04
        # between the measured node counts linear, outside them the nearest
        mid = deepep_scaleout_fit(d, 3, prof)
        assert mid[1] == pytest.approx((by_nodes[2][1] + by_nodes[4][1]) / 2, rel=0.05)
        assert deepep_scaleout_fit(d, 16, prof) == deepep_scaleout_fit(d, 4, prof)
        assert deepep_scaleout_fit(d, 1, prof) == deepep_scaleout_fit(d, 2, prof)
    assert "normal.dispatch" in prof.deepep_eta  # one node's rows: the one-node fit
    # an EP 32 exchange of DeepSeek-V3 over four 8-GPU nodes: the fit on the bytes a token sends once per node
    moe = load_model("deepseek-v3").moe
    per_node = O.per_node_copies(4096.0, deepep_normal_copy_bytes(7168, 1.0), moe)
    nic_bytes = per_node_bytes(per_node, 32, hw)
    assert nic_bytes == pytest.approx(4096 * nodes_per_token(256, 8, 4, 8, 4) * 3 / 4 * (7168 + 224))
    op = O.collective("moe.dispatch", "all_to_all", 4096 * 7.0 * 7168, 32, phase="prefill",
                      kernel="normal.dispatch", experts=256, per_node=per_node)
    a, eta = deepep_scaleout_fit("normal.dispatch", 4, prof)
    assert time_op(op, hw, prof).time == pytest.approx(a + nic_bytes / (eta * hw.scaleout_bandwidth))
    # without a fit across nodes: the collective model, still on the bytes sent once per node
    plain = collective_time("all_to_all", op.bytes, 32, 32, hw, DEFAULTS, scaleout_bytes=nic_bytes)
    assert time_op(op, hw, DEFAULTS).time == pytest.approx(plain)
    assert plain < collective_time("all_to_all", op.bytes, 32, 32, hw, DEFAULTS)  # per remote rank: more bytes
    assert per_node_bytes(per_node, 8, hw) is None  # inside one node nothing crosses a NIC


@pytest.mark.parametrize("nodes", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("groups,chosen", [(8, 4), (1, 1), (8, 8)])
def test_nodes_a_token_reaches_match_sampled_group_limited_routing(nodes, groups, chosen):
    """DeepSeek-V3's router (pick ``chosen`` of ``groups`` groups, then 8 of their experts), sampled."""
    rng = np.random.default_rng(nodes * 100 + groups)
    experts, top_k, n = 256, 8, 4000
    per_group = experts // groups
    hits = []
    for _ in range(n):
        picked = rng.choice(groups, chosen, replace=False)
        eligible = np.concatenate([np.arange(g * per_group, (g + 1) * per_group) for g in picked])
        hits.append(len(set(rng.choice(eligible, top_k, replace=False) // (experts // nodes))))
    want = nodes_per_token(experts, top_k, nodes, groups, chosen)
    assert abs(np.mean(hits) - want) < 4 * np.std(hits) / np.sqrt(n) + 1e-9
    if chosen == groups:  # no limit: the ranks' formula with a node as the rank
        assert want == pytest.approx(ranks_per_token(experts, top_k, nodes))
    assert want <= min(top_k, nodes) and (chosen == groups or nodes < groups or want <= chosen * max(1, nodes // groups))


def test_group_limited_routing_is_read_from_hf_configs_and_checked():
    m = load_model("deepseek-v3")
    assert (m.moe.expert_groups, m.moe.groups_per_token) == (8, 4)
    assert (load_model("kimi-k2").moe.expert_groups, load_model("kimi-k2").moe.groups_per_token) == (1, 1)
    from perfmodel.models import _model_from_dict as model_from_dict

    base = {"key": "x", "name": "x", "family": "mixtral", "hidden": 1024, "layers": 4, "heads": 8, "kv_heads": 8, "intermediate": 2048,
            "vocab": 1000, "max_position": 4096,
            "moe": {"num_experts": 64, "top_k": 6, "expert_intermediate": 512, "expert_groups": 8, "groups_per_token": 3}}
    assert model_from_dict(base, "x.yaml").moe.groups_per_token == 3
    for bad, field in (({"expert_groups": 7}, "expert_groups"), ({"groups_per_token": 9}, "groups_per_token")):
        d = {**base, "moe": {**base["moe"], **bad}}
        with pytest.raises(InputError) as e:
            model_from_dict(d, "x.yaml")
        assert field in str(e.value) and "x.yaml" in str(e.value)


# --- training's token dispatcher ---------------------------------------------------------------------------

TRAIN = dict(gpus=256, tp=1, pp=8, ep=32, global_batch=2048, seq=4096, dtype="fp8", recompute="full")


def _a2a(p, name: str):
    """The timed training op of that name (``.top.op`` the op, ``.time`` one run)."""
    return next(t for t in p.ops if t.top.op.name == name)


def test_training_deepep_dispatcher_sends_a_token_once_per_rank_and_node_on_deepeps_fit():
    from perfmodel.train import project_train, training_profile
    from perfmodel.train.scenario import TrainScenario

    hw = load_spec("h200-sxm")
    ts = TrainScenario(**TRAIN, moe_dispatcher="deepep")
    prof = training_profile(None, hw, ts)
    assert prof.deepep_scaleout_eta and prof.deepep_eta["normal.dispatch"] > 0  # borrowed from the SGLang evidence
    assert prof.provenance["families"]["deepep"]["profile"] == "h200-sxm-sglang"
    plain = project_train("h200-sxm", "deepseek-v3", **TRAIN, moe_dispatcher="alltoall")
    deep = project_train("h200-sxm", "deepseek-v3", **TRAIN, moe_dispatcher="deepep")
    a, d = _a2a(plain, "moe.dispatch").top.op, _a2a(deep, "moe.dispatch").top.op
    assert "kernel" not in a.params and d.params["kernel"] == "normal.dispatch"
    # a copy per rank holding any of its experts (DeepSeek-V3's group-limited routing), not per routed pair
    assert d.bytes == pytest.approx(a.bytes * copies_per_token(load_model("deepseek-v3").moe, 32) / 8)
    assert d.params["per_node"]["routing"] == [256, 8, 8, 4]
    assert _a2a(deep, "moe.dispatch.bwd").top.op.params["kernel"] == "normal.combine"  # its gradient is a combine
    assert _a2a(deep, "moe.combine.bwd").top.op.params["kernel"] == "normal.dispatch"
    assert _a2a(deep, "moe.dispatch").time < _a2a(plain, "moe.dispatch").time / 2
    assert deep.tokens_per_s_per_gpu > plain.tokens_per_s_per_gpu
    # without experts across nodes nothing crosses a NIC: the one-node fit
    inside = project_train("h200-sxm", "deepseek-v3", **{**TRAIN, "pp": 16, "ep": 8}, moe_dispatcher="deepep")
    assert per_node_bytes(_a2a(inside, "moe.dispatch").top.op.params["per_node"], 8, hw) is None
    # the documented defaults stay the defaults (no DeepEP evidence borrowed)
    none = training_profile("none", hw, ts)
    assert none.deepep_eta == {} and none.deepep_scaleout_eta == {}


def test_training_dispatcher_flag_is_checked_and_shown(capsys):
    from perfmodel.cli import main
    from perfmodel.train.scenario import TrainScenario

    with pytest.raises(InputError) as e:
        TrainScenario(moe_dispatcher="nccl").validated()
    assert "--moe-dispatcher" in str(e.value) and "deepep" in str(e.value)
    args = ["train", "--arch", "h200-sxm", "--model", "deepseek-v3", "--gpus", "256", "--pp", "8", "--ep", "32",
            "--global-batch", "2048", "--seq", "4096", "--dtype", "fp8", "--recompute", "full"]
    assert main(args + ["--moe-dispatcher", "deepep"]) == 0
    out = capsys.readouterr().out
    assert "DeepEP's normal kernels" in out and "Megatron-Bridge" not in out
    assert main(args) == 0  # auto: DeepSeek-V3's recipe runs the flex dispatcher (HybridEP) on an H200
    out = capsys.readouterr().out
    assert "HybridEP" in out and "Megatron-Bridge 0.3.1's recipe" in out
    assert main(args + ["--moe-dispatcher", "nope"]) == 2
    assert "--moe-dispatcher" in capsys.readouterr().err


def test_parts_without_a_fit_across_nodes_borrow_the_nearest_measured_one():
    """aiconfigurator-core times Blackwell's DeepEP kernels on one node only: a B200 under SGLang keeps its own
    one-node fit and takes the Hopper fit across nodes (NIC-bound), and says so, as TensorRT-LLM's DeepEP build
    does; an engine that does not run DeepEP borrows nothing."""
    from perfmodel.resolve import resolve_hardware, resolve_profile

    hopper = load_profile(ROOT / "calibration" / "h200-sxm-sglang")
    own = load_profile(ROOT / "calibration" / "b200-sglang")
    b200 = resolve_profile(None, resolve_hardware("b200"), "sglang")
    assert b200.deepep_eta == pytest.approx(own.deepep_eta)
    assert b200.deepep_scaleout_eta == pytest.approx(hopper.deepep_scaleout_eta)
    assert b200.deepep_scaleout_alpha_s == pytest.approx(hopper.deepep_scaleout_alpha_s)
    fams = b200.provenance["families"]
    assert fams["deepep"]["profile"] == "b200-sglang"
    assert fams["deepep_across"]["profile"] in ("h200-sxm-sglang", "h100-sxm-sglang")
    assert fams["deepep_across"]["carried"] and "carried from" in fams["deepep_across"]["source"]
    trt = resolve_profile(None, resolve_hardware("b200"), "trtllm")  # its DeepEP build on an HGX node: the same
    assert trt.deepep_scaleout_eta == pytest.approx(hopper.deepep_scaleout_eta)
    plain = resolve_profile(None, resolve_hardware("b200"), "torch")
    assert plain.deepep_scaleout_eta == {} and "deepep_across" not in plain.provenance["families"]
    h200 = resolve_profile(None, resolve_hardware("h200-sxm"), "sglang")
    assert h200.provenance["families"]["deepep_across"]["profile"] == "h200-sxm-sglang"  # its own fit


@pytest.mark.parametrize("part,model,want", [
    ("h100-sxm", "deepseek-v3", "hybridep"), ("b200", "deepseek-v3", "hybridep"), ("gb200", "deepseek-v3", "hybridep"),
    ("h200-sxm", "qwen3-235b-a22b", "deepep"), ("b300", "qwen3-30b-a3b", "deepep"), ("gb200", "qwen3-235b-a22b",
                                                                                      "alltoall"),
    ("h100-sxm", "gpt-oss-120b", "alltoall"), ("b200", "kimi-k2", "alltoall"), ("h200-sxm", "glm-4.5", "alltoall"),
    ("rubin-estimate", "deepseek-v3", "alltoall")])
def test_auto_dispatcher_follows_megatron_bridges_recipe_on_the_part(part, model, want):
    """Megatron-Bridge 0.3.1: DeepSeek-V3's recipe runs the flex dispatcher with HybridEP on compute capability 8-10,
    the Qwen3 MoE ones with DeepEP on 8-9 and the B200/B300 (not a GB200); gpt-oss, Kimi K2 and GLM-4.5 keep
    alltoall."""
    from perfmodel.resolve import resolve_hardware
    from perfmodel.train.scenario import TrainScenario, recipe_dispatcher, resolve_dispatcher

    hw, m = resolve_hardware(part), load_model(model)
    assert recipe_dispatcher(m, hw) == want
    assert resolve_dispatcher(TrainScenario(), m, hw).moe_dispatcher == want
    assert resolve_dispatcher(TrainScenario(moe_dispatcher="alltoall"), m, hw).moe_dispatcher == "alltoall"
    assert resolve_dispatcher(TrainScenario(), load_model("llama-3.1-8b"), hw).moe_dispatcher == "alltoall"


def test_hybridep_takes_the_link_inside_a_domain_and_deepeps_fit_across_nodes():
    from perfmodel.train import project_train

    hw = load_spec("h200-sxm")
    deep = project_train("h200-sxm", "deepseek-v3", **TRAIN, moe_dispatcher="deepep")
    hybrid = project_train("h200-sxm", "deepseek-v3", **TRAIN, moe_dispatcher="hybridep")
    d, h = _a2a(deep, "moe.dispatch"), _a2a(hybrid, "moe.dispatch")
    assert h.top.op.bytes == d.top.op.bytes and "kernel" not in h.top.op.params  # the same copies, no one-node kernel
    assert h.top.op.params["per_node"]["kernel"] == "normal.dispatch"
    assert h.time == pytest.approx(d.time)  # across 4 nodes both take DeepEP's fit on the same NIC bytes
    assert _a2a(hybrid, "moe.dispatch.bwd").top.op.params["per_node"]["kernel"] == "normal.combine"
    inside = {k: project_train("h200-sxm", "deepseek-v3", **{**TRAIN, "pp": 16, "ep": 8}, moe_dispatcher=k)
              for k in ("deepep", "hybridep")}
    p = _a2a(inside["hybridep"], "moe.dispatch").top.op
    assert _a2a(inside["hybridep"], "moe.dispatch").time == pytest.approx(
        collective_time("all_to_all", p.bytes, 8, 8, hw, inside["hybridep"].profile))  # the collective model
    assert _a2a(inside["hybridep"], "moe.dispatch").time != pytest.approx(_a2a(inside["deepep"], "moe.dispatch").time)


def test_low_latency_calls_across_nodes_carry_the_remote_share_and_take_their_fit():
    """Across nodes every routed pair bound for another node's rank crosses the NIC (no forwarding): the rows keep
    the remote ranks' share of the bytes, and a call across domains takes the fit of its node count."""
    conv = convert_deepep_ll(_table(nodes=(1, 2)), 8)
    two = next(r for r in conv.rows if r["params"]["nodes"] == 2 and r["params"]["direction"] == "ll.dispatch")
    one = next(r for r in conv.rows if r["params"]["nodes"] == 1)
    assert "scaleout_bytes" not in one["params"] and "ranks" not in one["params"]  # one node's rows as they were
    assert two["params"]["ranks"] == 16
    assert two["params"]["scaleout_bytes"] == pytest.approx(two["params"]["bytes"] * 8 / 16)
    hw = load_spec("h200-sxm")
    prof = load_profile(ROOT / "calibration" / "h200-sxm-sglang")
    for n in (2, 4, 8):  # Hopper's NICs: near their 50 GB/s at every node count
        assert 0.85 < prof.deepep_scaleout_eta[f"ll.dispatch:{n}"] < 1.0
    nbytes = 64 * 8 * deepep_ll_dispatch_bytes(7168)
    a, eta = deepep_scaleout_fit("ll.dispatch", 4, prof)
    got = collective_time("all_to_all", nbytes, 32, 32, hw, prof, kernel="ll.dispatch", experts=256)
    assert got == pytest.approx(a + nbytes * 24 / 32 / (eta * hw.scaleout_bandwidth))
