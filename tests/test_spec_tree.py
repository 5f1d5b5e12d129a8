"""Token trees for speculative decoding (EAGLE-2/3, SGLang's --speculative-eagle-topk): a verify step of the
tree's nodes, draft steps that expand several candidates a sequence, the same accepted-run distribution."""
from __future__ import annotations

import pytest

from perfmodel import project
from perfmodel.errors import InputError
from perfmodel.scenario import Scenario


def _proj(**kw):
    base = dict(tp=4, batch=8, isl=1024, osl=256, draft="llama-3.1-8b", mtp=3, mtp_accept=0.8)
    return project("h200-sxm", "llama-3.1-70b", **{**base, **kw})


def test_a_chain_is_a_tree_of_width_one():
    chain = _proj()
    assert chain.scenario.verify_tokens == 4 and not chain.scenario.tree
    same = _proj(spec_topk=1, spec_verify=4)
    assert same.tpot_s == chain.tpot_s


def test_a_tree_verifies_its_nodes_and_drafts_wider_steps():
    chain, tree = _proj(), _proj(spec_topk=4, spec_verify=8)
    assert tree.scenario.tree and tree.scenario.verify_tokens == 8
    verify = {t.op.name: t.op for t in tree.decode.times}
    assert verify["lm_head"].params["m"] == 8 * 8  # every node of every sequence is scored
    # the same acceptance emits the same tokens; the tree's wider steps cost more
    assert tree.scenario.tokens_per_step == chain.scenario.tokens_per_step
    assert tree.tpot_s > chain.tpot_s
    # the default verifies every node the drafts expand: 1 + K x W
    full = _proj(spec_topk=4)
    assert full.scenario.verify_tokens == 13 and full.tpot_s > tree.tpot_s
    assert "token tree" in " ".join(tree.assumptions) and "verify step of 8 tokens" in " ".join(tree.assumptions)


def test_a_tree_with_better_acceptance_can_pay_off():
    chain = _proj(mtp_accept=0.6)
    tree = _proj(mtp_accept=0.8, spec_topk=4, spec_verify=8)  # what a wider tree buys: its accepted path's rate
    assert tree.tpot_s < chain.tpot_s


@pytest.mark.parametrize("kw,field", [
    (dict(spec_topk=4), "--spec-topk"),  # no drafts
    (dict(spec_verify=5), "--spec-verify"),
    (dict(mtp=3, mtp_accept=0.8, spec_topk=0), "--spec-topk"),
    (dict(mtp=3, mtp_accept=0.8, spec_topk=17), "--spec-topk"),
    (dict(mtp=3, mtp_accept=0.8, spec_topk=2, spec_verify=8), "--spec-verify"),  # more than 1 + 3 x 2
    (dict(mtp=3, mtp_accept=0.8, spec_topk=2, spec_verify=3), "--spec-verify"),  # fewer than the chain
    (dict(mtp=3, mtp_accept=0.8, spec_verify=True), "--spec-verify"),
])
def test_a_tree_that_does_not_fit_its_drafts_is_refused_in_one_line(kw, field):
    with pytest.raises(InputError) as e:
        Scenario(**kw).validated()
    assert e.value.field == field and "\n" not in str(e.value)


def test_the_workbook_refuses_a_tree_in_one_line(cli, tmp_path):
    r = cli(["export", "--arch", "h200-sxm", "--model", "deepseek-v3", "--tp", "8", "--dtype", "fp8", "--mtp", "3",
             "--mtp-accept", "0.8", "--spec-topk", "2", "--out", str(tmp_path / "w.xlsx")])
    assert r.returncode == 2 and "token tree" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_simulator_prices_an_unloaded_tree_as_project_does():
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
    from perfmodel.serve.simulate import simulate
    from perfmodel.serve.workload import closed_loop_requests, parse_dist

    hw = resolve_hardware("h200-sxm")
    prof = resolve_profile(None, hw)
    model = resolve_model("llama70b")
    kw = dict(tp=4, mtp=3, mtp_accept=0.7, draft="llama8b", spec_topk=4, spec_verify=8)
    reqs = closed_loop_requests(20, 1, parse_dist("1024", field="isl"), parse_dist("128", field="osl"))
    out = simulate(hw, model, Scenario(batch=1, **kw), prof, reqs)
    proj = project(hw, model, Scenario(batch=1, **kw), profile=prof)
    assert out["tpot_ms"]["mean"] == pytest.approx(proj.tpot_s * 1e3, rel=0.03)
    chain = simulate(hw, model, Scenario(batch=1, **{**kw, "spec_topk": 1, "spec_verify": None}), prof, reqs)
    assert out["tpot_ms"]["mean"] > chain["tpot_ms"]["mean"]


def test_a_trees_nodes_hold_cache_slots_beyond_the_verified_token():
    from perfmodel.serve.engine import EngineConfig

    chain = EngineConfig(max_seqs=8, token_budget=512, kv_blocks=100, spec=3)
    tree = EngineConfig(max_seqs=8, token_budget=512, kv_blocks=100, spec=3, verify=8)
    assert (chain.spec_tokens, tree.spec_tokens) == (3, 7)
    assert EngineConfig(max_seqs=8, token_budget=512, kv_blocks=100, verify=8).spec_tokens == 0


def test_plan_refuses_a_tree_in_one_line(cli):
    r = cli(["plan", "--arch", "h200-sxm", "--model", "llama70b", "--gpus", "8", "--mtp", "3", "--mtp-accept",
             "0.7", "--draft", "llama8b", "--spec-topk", "4"])
    assert r.returncode == 2 and "token tree" in r.stderr and len(r.stderr.strip().splitlines()) == 1
