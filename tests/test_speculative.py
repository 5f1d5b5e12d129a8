"""Speculative decoding (issue 25): acceptance as a distribution over draft positions, and drafts from a
separate draft model for models without MTP layers (perfmodel/speculative.py)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel import project
from perfmodel.capacity import kv_bytes_per_token, weight_bytes
from perfmodel.errors import InputError
from perfmodel.models import load_model
from perfmodel.scenario import Scenario


@given(st.lists(st.floats(0.0, 0.99), min_size=1, max_size=8))
def test_the_accepted_run_is_a_distribution(rates):
    sc = Scenario(mtp=len(rates), mtp_accept=tuple(rates)).validated()
    run = sc.accepted_run
    assert len(run) == len(rates) + 1 and sum(run) == pytest.approx(1.0) and min(run) >= 0
    expected, reach = 1.0, 1.0
    for a in rates:
        reach *= a
        expected += reach
    assert sc.tokens_per_step == pytest.approx(expected)


def test_one_rate_is_every_positions_rate():
    k, a = 3, 0.7
    one = Scenario(mtp=k, mtp_accept=a).validated()
    each = Scenario(mtp=k, mtp_accept=(a,) * k).validated()
    assert one.tokens_per_step == pytest.approx((1 - a ** (k + 1)) / (1 - a)) == each.tokens_per_step
    assert Scenario(mtp=k, mtp_accept=(a,)).validated().tokens_per_step == pytest.approx(one.tokens_per_step)
    with pytest.raises(InputError, match="one acceptance rate or 3"):
        Scenario(mtp=3, mtp_accept=(0.9, 0.8)).validated()
    with pytest.raises(InputError, match=r"\[0, 1\)"):
        Scenario(mtp=2, mtp_accept=(0.9, 1.2)).validated()
    with pytest.raises(InputError, match="--mtp K") as e:
        Scenario(draft="llama8b").validated()
    assert e.value.field == "--draft"


def test_falling_acceptance_emits_fewer_tokens_than_its_first_rate():
    sc = Scenario(mtp=3, mtp_accept=(0.9, 0.7, 0.5)).validated()
    assert sc.tokens_per_step < Scenario(mtp=3, mtp_accept=0.9).validated().tokens_per_step
    assert sc.tokens_per_step == pytest.approx(1 + 0.9 + 0.63 + 0.315)


KW = {"tp": 4, "batch": 8}


def test_a_draft_model_speeds_a_memory_bound_decode_and_charges_its_own_steps():
    base = project("h200", "llama70b", **KW)
    draft = project("h200", "llama8b", **KW)
    good = project("h200", "llama70b", mtp=3, mtp_accept=0.8, draft="llama8b", **KW)
    none = project("h200", "llama70b", mtp=3, mtp_accept=0.0, draft="llama8b", **KW)
    assert good.tpot_s < 0.8 * base.tpot_s
    # accepting nothing pays the verify step and three of the draft's decode steps for one token
    assert none.tpot_s > base.tpot_s + 2.5 * draft.decode.time_s
    # the draft prefills every prompt: TTFT grows by the draft's prefill step
    assert good.ttft_s - base.ttft_s == pytest.approx(draft.prefill.time_s, rel=0.05)
    assert any("draft model Llama-3.1-8B" in a for a in good.assumptions)


def test_a_draft_model_holds_its_weights_and_kv_cache():
    m, d = load_model("llama70b"), load_model("llama8b")
    sc = Scenario(tp=4, mtp=2, mtp_accept=0.8, draft="llama8b")
    plain = Scenario(tp=4)
    assert weight_bytes(m, sc) == pytest.approx(weight_bytes(m, plain) + weight_bytes(d, plain))
    assert kv_bytes_per_token(m, sc) == pytest.approx(kv_bytes_per_token(m, plain) + kv_bytes_per_token(d, plain))


def test_speculation_no_engine_runs_is_refused_in_one_line():
    with pytest.raises(InputError, match="--draft") as e:
        project("h200", "llama70b", mtp=1, mtp_accept=0.7, **KW)  # no MTP layers, no draft model
    assert e.value.field == "--mtp"
    with pytest.raises(InputError, match="one tokenizer") as e:
        project("h200", "llama70b", mtp=1, mtp_accept=0.7, draft="qwen3-0.6b", **KW)
    assert e.value.field == "--draft"
    with pytest.raises(InputError, match="draft model") as e:
        project("h200", "llama70b", mtp=1, mtp_accept=0.7, draft="no-such-model", **KW)
    assert e.value.field == "--draft"


def test_the_cli_takes_one_rate_per_position(tmp_path, cli):
    import json

    done = cli(["project", "--arch", "h200", "--model", "qwen3-32b", "--mtp", "3", "--mtp-accept", "0.9,0.7,0.5",
                "--draft", "qwen3-0.6b", "--format", "json"])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["scenario"]["mtp_accept"] == [0.9, 0.7, 0.5] and out["scenario"]["draft"] == "qwen3-0.6b"
    bad = cli(["project", "--arch", "h200", "--model", "qwen3-32b", "--mtp", "2", "--mtp-accept", "0.9,x"])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--mtp-accept" in bad.stderr


def _eagle3(tmp_path, **over):
    """An EAGLE-3 head's config.json for Llama-3.1-8B, as its checkpoints publish it (LlamaForCausalLMEagle3:
    one decoder layer, the target's geometry, a 32,000-token draft vocabulary mapped onto the target's)."""
    import json

    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
           "num_hidden_layers": 1, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048, "hidden_act": "silu",
           "tie_word_embeddings": False, **over}
    d = tmp_path / "eagle3-llama-8b"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


def test_an_eagle3_head_is_one_layer_over_three_fused_states_with_its_own_vocabulary(tmp_path):
    head = load_model(_eagle3(tmp_path))
    assert (head.layers, head.draft_fuses, head.vocab, head.target_vocab) == (1, 3, 32000, 128256)
    target = load_model("llama-3.1-8b")
    layer = (target.param_count() - 2 * target.vocab * target.hidden - target.hidden) / target.layers
    fusion = 3 * 4096 * 4096 + 4096 * (32 + 16) * 128
    assert head.param_count() == pytest.approx(layer + fusion + 2 * 32000 * 4096 + 4096, rel=1e-9)


def test_an_eagle_head_drafts_cheaper_than_a_draft_model_at_the_same_acceptance(tmp_path):
    kw = dict(tp=4, batch=8, mtp=3, mtp_accept=(0.8, 0.6, 0.4))
    plain = project("h200", "llama-3.1-70b", tp=4, batch=8)
    eagle = project("h200", "llama-3.1-70b", draft=_eagle3(tmp_path, hidden_size=8192, num_attention_heads=64,
                                                               intermediate_size=28672), **kw)
    small = project("h200", "llama-3.1-70b", draft="llama-3.1-8b", **kw)
    assert eagle.tpot_s < small.tpot_s < plain.tpot_s
    assert any("EAGLE head" in a for a in eagle.assumptions)


def test_an_eagle_head_of_another_model_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="fuses hidden states 4096 wide"):
        project("h200", "llama-3.1-70b", tp=4, draft=_eagle3(tmp_path), mtp=2, mtp_accept=(0.7,))
    with pytest.raises(InputError, match="draft_vocab_size"):
        load_model(_eagle3(tmp_path, draft_vocab_size=200000))
