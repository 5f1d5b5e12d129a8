"""Speculative decoding in the serving simulator (issue 25): verify steps priced as `project` prices them, each
sequence's accepted runs drawn with the run's seed, the drafter's memory admitted against, the metrics."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from perfmodel import project
from perfmodel.errors import InputError
from perfmodel.graph import Step
from perfmodel.projection import draft_time, evaluate_step
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.serve.engine import AcceptedRuns, EngineConfig, simulate_instance
from perfmodel.serve.metrics import speculation_metrics
from perfmodel.resolve import resolve_scenario as for_hardware
from perfmodel.serve.simulate import ServeOptions, simulate
from perfmodel.serve.steptime import StepModel
from perfmodel.serve.workload import closed_loop_requests, parse_dist, synthetic_requests
from perfmodel.speculative import draft_model, draft_scenario


@pytest.fixture(scope="module")
def h200():
    hw = resolve_hardware("h200-sxm")
    return hw, resolve_profile(None, hw)


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    """An EAGLE-3 head for Llama-3.1-8B (one decoder layer; as tests/test_speculative.py writes it)."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
           "num_hidden_layers": 1, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048, "hidden_act": "silu",
           "tie_word_embeddings": False}
    path = tmp_path_factory.mktemp("eagle3") / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _reqs(n, rate, isl="1024", osl="128", seed=0):
    return synthetic_requests(n, rate, parse_dist(isl, field="isl"), parse_dist(osl, field="osl"), seed=seed)


def _sc(hw, **kw):
    return for_hardware(Scenario(**{"batch": "max", **kw}), hw, None).validated()


def _reference(model, hw, sc, prof, n, ctx):
    """`project`'s verify step at ``n`` sequences and context ``ctx`` plus its K drafts (perfmodel.projection): a
    chain's K steps of one token a sequence; a tree's first at one token and the rest at its width."""
    verify = evaluate_step(model, hw, sc, prof, Step("decode", n, sc.verify_tokens, ctx)).time_s
    drafter = draft_model(sc)

    def one(rows):
        if drafter is None:
            ph = evaluate_step(model, hw, sc, prof, Step("decode", n, rows, ctx))
            return draft_time(ph.times, ph.layers)
        return evaluate_step(drafter, hw, draft_scenario(sc), prof, Step("decode", n, rows, ctx)).time_s

    return verify + one(1) + (sc.mtp - 1) * one(sc.spec_topk)


@pytest.mark.parametrize("name,kw", [
    ("deepseek-v3", dict(tp=8, dtype="fp8", mtp=1, mtp_accept=0.8)),
    ("llama70b", dict(tp=4, mtp=2, mtp_accept=0.7, draft="llama8b")),
    ("deepseek-v3", dict(tp=8, dtype="fp8", mtp=3, mtp_accept=0.8, spec_topk=2, spec_verify=6)),
    ("llama70b", dict(tp=4, mtp=3, mtp_accept=0.7, draft="llama8b", spec_topk=4, spec_verify=8)),
])
def test_a_verify_step_and_its_drafts_cost_what_project_says(h200, name, kw):
    hw, prof = h200
    model = resolve_model(name)
    sc = _sc(hw, **kw)
    sm = StepModel(model, hw, sc, prof, max_tokens=2048, max_seqs=256, max_context=3000)
    spec = ("mtp", "mtp_accept", "draft", "spec_topk", "spec_verify")
    base = StepModel(model, hw, _sc(hw, **{k: v for k, v in kw.items() if k not in spec}),
                     prof, max_tokens=2048, max_seqs=256, max_context=3000)
    for n in (1, 7, 64, 200):
        for ctx in (1024.0, 2500.0):
            got = sm.step(n, ctx, [])[0]
            assert got == pytest.approx(_reference(model, hw, sc, prof, n, ctx), rel=0.01)
            assert got > base.step(n, ctx, [])[0]  # a verify step and its drafts cost more than one token's step
    # a run of pure verify steps is the steps themselves at its ends
    t0, t1, _, _ = sm.decode_span(32, 1100.0, 50, 1190.0)
    assert (t0, t1) == (sm.step(32, 1100.0, [])[0], sm.step(32, 1190.0, [])[0])


def test_the_drafter_prefills_with_the_prompt(h200, eagle):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw, mtp=3, mtp_accept=0.7, draft=eagle)
    sm = StepModel(model, hw, sc, prof, max_tokens=4096, max_seqs=64, max_context=3000)
    plain = StepModel(model, hw, _sc(hw), prof, max_tokens=4096, max_seqs=64, max_context=3000)
    head = sm.drafter
    pieces = [(1024, 0), (512, 512)]
    assert sm.step(0, 0.0, pieces)[0] == pytest.approx(plain.step(0, 0.0, pieces)[0] + head.step(0, 0.0, pieces)[0],
                                                        rel=1e-9)
    # a mixed step: the drafter's step over the decoding sequences and the pieces, then K - 1 of its decode steps
    mixed = sm.step(8, 900.0, pieces)[0]
    assert mixed > plain.step(8, 900.0, pieces)[0] + head.step(8, 900.0, pieces)[0] + 2 * head.step(8, 900.0, [])[0]


def test_accepted_runs_follow_the_distribution_and_subsets_share_them():
    sc = Scenario(mtp=3, mtp_accept=(0.9, 0.6, 0.3)).validated()
    osl = np.full(4000, 100)
    runs = AcceptedRuns.draw(osl, sc.accepted_run, np.random.default_rng(1))
    draws = np.concatenate([np.diff(runs.cum[o:o + n + 1]) for o, n in zip(runs.off, runs.n)])
    assert draws.min() >= 1 and draws.max() <= 4 and draws.size == int((osl + 1).sum())
    share = np.bincount(draws, minlength=5)[1:] / draws.size
    assert share == pytest.approx(sc.accepted_run, abs=0.005)
    sub = runs.take([5, 2])
    assert sub.cum is runs.cum and list(sub.off) == [runs.off[5], runs.off[2]]


def test_speculation_emits_the_output_in_fewer_steps_with_the_acceptance_given(h200, eagle):
    hw, prof = h200
    model = resolve_model("llama8b")
    reqs = _reqs(300, 4.0, isl="uniform:200:2000", osl="uniform:50:400", seed=2)
    base = simulate(hw, model, Scenario(batch="max"), prof, reqs)
    out = simulate(hw, model, Scenario(batch="max", mtp=3, mtp_accept=0.7, draft=eagle), prof, reqs)
    spec = out["speculation"]
    assert out["simulation"]["steps"] < 0.85 * base["simulation"]["steps"]  # prefill steps are as many
    # each sequence reaches its output in about (osl - 1) / tokens-per-step verify steps (its last run may overshoot)
    decode_tokens = float((reqs.osl - 1).sum())
    assert spec["verify_steps"] == pytest.approx(decode_tokens / spec["expected_tokens_per_step"], rel=0.05)
    assert spec["observed_tokens_per_step"] == pytest.approx(spec["expected_tokens_per_step"], rel=0.02)
    assert spec["observed_acceptance"] == pytest.approx([0.7, 0.7, 0.7], abs=0.02)
    assert sum(spec["accepted_runs"].values()) == spec["verify_steps"] > 0
    # a step's gap shared by the tokens it emits: the per-token ITL is shorter than the per-step one
    assert spec["itl_per_token_ms"]["mean"] < out["itl_ms"]["mean"]
    assert "speculation" not in base


def test_per_request_tpot_varies_with_its_accepted_runs_and_the_seed(h200, eagle):
    hw, prof = h200
    model = resolve_model("llama8b")
    reqs = closed_loop_requests(40, 1, parse_dist("1000", field="isl"), parse_dist("100", field="osl"))  # one at a time
    sc = Scenario(batch="max", mtp=2, mtp_accept=0.6, draft=eagle)
    base = simulate(hw, model, Scenario(batch="max"), prof, reqs)
    assert base["tpot_ms"]["p90"] == pytest.approx(base["tpot_ms"]["p50"], rel=1e-9)
    one = simulate(hw, model, sc, prof, reqs, ServeOptions(seed=0))
    assert one["tpot_ms"]["p90"] > 1.05 * one["tpot_ms"]["p50"]
    again = simulate(hw, model, sc, prof, reqs, ServeOptions(seed=0))
    other = simulate(hw, model, sc, prof, reqs, ServeOptions(seed=1))
    assert again["tpot_ms"] == one["tpot_ms"] and other["tpot_ms"] != one["tpot_ms"]
    # unloaded, the simulator's TPOT is project's at batch 1 (project times the mean accepted run: within the
    # draws' spread over 40 requests)
    proj = project(hw, model, Scenario(batch=1, isl=1000, osl=100, mtp=2, mtp_accept=0.6, draft=eagle), profile=prof)
    assert one["tpot_ms"]["mean"] == pytest.approx(proj.tpot_s * 1e3, rel=0.04)


def test_unloaded_mtp_tpot_is_projects(h200):
    hw, prof = h200
    model = resolve_model("deepseek-v3")
    kw = dict(tp=8, dtype="fp8", mtp=1, mtp_accept=0.8)
    reqs = closed_loop_requests(12, 1, parse_dist("1024", field="isl"), parse_dist("128", field="osl"))
    out = simulate(hw, model, Scenario(batch=1, **kw), prof, reqs)
    proj = project(hw, model, Scenario(batch=1, **kw), profile=prof)
    assert out["tpot_ms"]["mean"] == pytest.approx(proj.tpot_s * 1e3, rel=0.03)
    # the MTP module's pass over the prompt (one mean layer's share) is in the simulator's TTFT, not in project's
    ttft = out["ttft_ms"]["p50"] / 1e3
    assert proj.ttft_s * (1 + 0.5 / model.layers) < ttft < proj.ttft_s * (1 + 1.5 / model.layers)


def test_unloaded_draft_model_ttft_and_tpot_are_projects(h200):
    hw, prof = h200
    model = resolve_model("llama70b")
    kw = dict(tp=4, mtp=2, mtp_accept=0.7, draft="llama8b")
    reqs = closed_loop_requests(20, 1, parse_dist("1024", field="isl"), parse_dist("128", field="osl"))
    out = simulate(hw, model, Scenario(batch=1, **kw), prof, reqs)
    proj = project(hw, model, Scenario(batch=1, **kw), profile=prof)
    assert out["ttft_ms"]["p50"] == pytest.approx(proj.ttft_s * 1e3, rel=0.005)  # the draft's prefill in both
    assert out["tpot_ms"]["mean"] == pytest.approx(proj.tpot_s * 1e3, rel=0.03)


def test_the_drafters_weights_and_cache_shrink_the_pool(h200):
    hw, prof = h200
    reqs = _reqs(20, 1.0)
    plain = simulate(hw, resolve_model("llama70b"), Scenario(tp=4), prof, reqs)
    drafted = simulate(hw, resolve_model("llama70b"), Scenario(tp=4, mtp=2, mtp_accept=0.7, draft="llama8b"), prof, reqs)
    a, b = plain["layout"]["instance"]["kv_tokens"], drafted["layout"]["instance"]["kv_tokens"]
    assert b < 0.85 * a  # 8B's weights and a KV cache of its own (a third of 70B's per token) beside 70B's


def test_preempted_speculative_sequences_resume_their_runs_and_finish(h200, eagle):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw, batch=256, mtp=2, mtp_accept=0.8, draft=eagle)
    reqs = _reqs(300, 1e4, isl="2000", osl="uniform:200:3000", seed=4)
    sm = StepModel(model, hw, sc, prof, max_tokens=8192, max_seqs=256, max_context=5001)
    cfg = EngineConfig(max_seqs=256, token_budget=8192, kv_blocks=2000, spec=2)
    runs = AcceptedRuns.draw(reqs.osl, sc.accepted_run, np.random.default_rng(0))
    r = simulate_instance(sm, cfg, reqs, runs)
    assert r.preemptions.sum() > 0
    assert r.stats["min_free_blocks"] >= 0  # runs of verify steps grow up to K + 1 tokens a step, within the pool
    assert np.all(r.finish >= r.first_token) and np.all(r.first_token >= reqs.arrival)
    # every verify step a request ran was its next draw: its steps' runs emit its output past the first token
    emitted = {}
    for p0, k in r.verified:
        i = int(np.searchsorted(runs.off, p0, side="right")) - 1
        emitted[i] = emitted.get(i, 0) + int(runs.cum[p0 + k] - runs.cum[p0])
    for i, o in enumerate(reqs.osl):
        if o > 1:
            assert emitted[i] >= o - 1 - int(r.preemptions[i])  # each recompute emits one token itself


def test_disaggregated_decode_instances_speculate(h200, eagle):
    hw, prof = h200
    out = simulate(hw, resolve_model("llama8b"), Scenario(batch="max", mtp=2, mtp_accept=0.7, draft=eagle), prof,
                   _reqs(60, 2.0), ServeOptions(disagg=(1, 1)))
    assert out["speculation"]["verify_steps"] > 0
    assert out["speculation"]["observed_tokens_per_step"] == pytest.approx(2.19, rel=0.05)


def test_speculation_metrics_share_a_steps_gap_among_its_tokens():
    sc = Scenario(mtp=1, mtp_accept=0.5).validated()
    # four verify steps of 10 ms, one sequence: runs of 1, 2, 2, 2 tokens
    got = speculation_metrics(sc, np.array([1, 3]), [(0.01, 0.01, 4, 1)], [])
    assert got["observed_tokens_per_step"] == pytest.approx(1.75)
    assert got["observed_acceptance"] == [pytest.approx(0.75)]
    # 7 tokens over 40 ms
    assert got["itl_per_token_ms"]["mean"] == pytest.approx(40.0 / 7.0)
    assert got["itl_per_token_ms"]["p50"] == pytest.approx(5.0)


def test_mtp_on_a_model_without_mtp_layers_is_refused_in_one_line(h200, cli):
    hw, prof = h200
    with pytest.raises(InputError, match="multi-token-prediction"):
        simulate(hw, resolve_model("llama8b"), Scenario(mtp=1, mtp_accept=0.7), prof, _reqs(5, 1.0))
    bad = cli(["serve", "--arch", "h200", "--model", "llama8b", "--mtp", "1", "--mtp-accept", "0.7", "--requests", "5",
               "--rate", "1"])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--mtp" in bad.stderr


def test_serve_cli_speculates_with_a_draft_model(eagle, capsys):
    from perfmodel.cli import main

    args = ["serve", "--arch", "h200", "--model", "llama8b", "--mtp", "2", "--mtp-accept", "0.8,0.6", "--draft", eagle,
            "--requests", "30", "--rate", "2", "--seed", "5"]
    got = subprocess.run([sys.executable, "-m", "perfmodel", *args, "--format", "json"], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    spec = json.loads(got.stdout)["speculation"]
    assert spec["acceptance"] == [0.8, 0.6] and spec["draft_tokens"] == 2 and spec["verify_steps"] > 0
    # the table of the same run: in this process (the entry point is the one just run)
    assert main(args) == 0 and "tokens per verify step; ITL per emitted token" in capsys.readouterr().out


def test_serve_table_with_no_verify_step(eagle, capsys):
    """Every output one token long: no verify step ran, the speculation figures are None; the table shows '-'
    for them (it once raised a TypeError formatting None)."""
    from perfmodel.cli import main

    rc = main(["serve", "--arch", "h200", "--model", "llama8b", "--mtp", "2", "--mtp-accept", "0.8",
               "--draft", eagle, "--requests", "20", "--rate", "2", "--osl", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in out.splitlines() if x.strip().startswith("speculation"))
    assert "acceptance - observed, - tokens per verify step" in line


def test_a_plans_scenario_records_the_acceptance_it_was_sized_for():
    from perfmodel.serve.report import plan_scenario

    doc = plan_scenario(Scenario(tp=8, dtype="fp8", mtp=2, mtp_accept=0.8).validated())
    assert doc["mtp"] == 2 and doc["mtp_accept"] == [0.8, 0.8]
    assert "mtp_accept" not in plan_scenario(Scenario(tp=8).validated())
