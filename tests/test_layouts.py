"""Inference layouts: attention data parallel with expert-parallel MoE ("DEP"), expert load imbalance."""
from __future__ import annotations

import math

import pytest

from perfmodel import capacity
from perfmodel.errors import InputError
from perfmodel.graph import Step, build_ops, ranks_per_token
from perfmodel.routing import copies_per_token
from perfmodel.models import load_model
from perfmodel.projection import project
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec

DS = load_model("deepseek-v3")
B200 = load_spec("b200")


def _ops(sc, batch=64):
    sc = sc.validated().for_hardware(B200)
    return {op.name: op for op in build_ops(DS, Step("decode", batch, 1, 1024), sc)}


def test_dep_runs_attention_on_its_own_sequences_and_spreads_experts_over_all_gpus():
    dep = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp4"))
    tp8 = _ops(Scenario(tp=8, ep=8, dtype="fp4"))
    # attention: all 128 heads on each GPU, for 64 / 8 = 8 sequences; no attention all-reduce
    assert dep["attn.core"].params["heads_q"] == 128 and dep["attn.core"].params["batch"] == 8
    assert tp8["attn.core"].params["heads_q"] == 16 and tp8["attn.core"].params["batch"] == 64
    assert "attn.allreduce" not in dep and "attn.allreduce" in tp8
    # MoE: each GPU computes 1/8 of all 64 x 8 token-expert pairs, whole experts; TensorRT-LLM gathers every
    # rank's NVFP4-quantized tokens before the experts and reduce-scatters the bf16 outputs after
    assert dep["moe.permute"].params["tokens"] == pytest.approx(64 * 8 / 8)
    assert dep["moe.gather"].kind == "all_gather" and dep["moe.gather"].params["group"] == 8
    assert dep["moe.gather"].bytes == pytest.approx(64 * 7168 * 0.5625)
    assert dep["moe.reduce_scatter"].bytes == pytest.approx(64 * 7168 * 2)
    assert dep["moe.gate_up"].params["n"] == 2 * 2048
    # tensor-parallel attention: every rank holds every token, the experts' outputs are all-reduced
    assert "moe.gather" not in tp8 and "moe.dispatch" not in tp8 and tp8["moe.allreduce"].params["group"] == 8


def _prefill_ops(sc, batch=8, seq=512):
    sc = sc.validated().for_hardware(B200)
    return {op.name: op for op in build_ops(DS, Step("prefill", batch, seq, 0), sc)}


def test_the_moe_exchange_follows_the_engine_or_the_flag():
    """All-to-all when asked. vLLM's and SGLang's run DeepEP: a decode step on its low-latency kernels, each of the
    rank's 8 sequences' 64 token-expert pairs a message of its own, fp8 with its scales out (7,408 bytes at hidden
    7,168, as the measured tables count them) and bf16 back; a prefill on its normal kernels, a token once per rank
    holding any of its experts, fp8 with its scales for fp8 experts. TensorRT-LLM's runs its DeepEP build on an
    HGX node (its payloads in the experts' format) and its MNNVL all-to-all, once per rank, on an NVL72 rack."""
    a2a = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="vllm", moe_exchange="all_to_all"))
    assert a2a["moe.dispatch"].kind == "all_to_all" and a2a["moe.dispatch"].params["group"] == 8
    assert a2a["moe.dispatch"].bytes == pytest.approx(64 * 7408)
    assert a2a["moe.combine"].bytes == pytest.approx(64 * 7168 * 2)
    assert "moe.gather" not in a2a
    sglang = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="sglang", moe_exchange="all_to_all"))
    assert sglang["moe.dispatch"].bytes == a2a["moe.dispatch"].bytes
    # one copy a token per rank holding any of its 8 experts, not one per expert: 5.3 of 8 ranks under uniform
    # routing, 3.6 under DeepSeek-V3's (8 of the experts of its best 4 of 8 groups, a group a rank at EP 8)
    assert ranks_per_token(256, 8, 8) == pytest.approx(8 * (1 - math.comb(224, 8) / math.comb(256, 8)))
    copies = copies_per_token(load_model("deepseek-v3").moe, 8)
    assert copies == pytest.approx(4 * (1 - math.comb(96, 8) / math.comb(128, 8)))
    pre = _prefill_ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="vllm", moe_exchange="all_to_all"))
    # 4,096 tokens over 8 ranks, DeepEP's normal dispatch in fp8 with a fp32 scale per 128 values (fp8 experts)
    assert pre["moe.dispatch"].bytes == pytest.approx(8 * 512 / 8 * copies * (7168 + 4 * 7168 / 128))
    # TensorRT-LLM on an HGX node: its DeepEP build, low-latency in decode in the experts' fp8 both ways
    trt = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="trtllm", moe_exchange="all_to_all"))
    assert trt["moe.dispatch"].bytes == pytest.approx(64 * 7408)
    assert trt["moe.combine"].bytes == pytest.approx(64 * (7168 + 4 * 7168 / 128))
    assert trt["moe.dispatch"].params["kernel"] == "ll.dispatch@fp8"
    # on an NVL72 rack its MNNVL all-to-all: once per rank holding any of a token's experts, fp8 out, bf16 back
    nvl = Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="trtllm", moe_exchange="all_to_all")
    nvl = {op.name: op for op in build_ops(DS, Step("decode", 64, 1, 1024), nvl.validated().for_hardware(
        load_spec("gb200")))}
    assert nvl["moe.dispatch"].bytes == pytest.approx(64 / 8 * copies * (7168 + 4 * 7168 / 128))
    assert nvl["moe.combine"].bytes == pytest.approx(64 / 8 * copies * 7168 * 2)
    assert nvl["moe.dispatch"].params["kernel"] == "mnnvl.dispatch@fp8"
    gather = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="vllm"))
    assert gather["moe.gather"].bytes == pytest.approx(64 * 7168 * 2)  # bf16: vLLM's allgather_reducescatter
    with pytest.raises(InputError, match="moe-exchange"):
        Scenario(moe_exchange="ring").validated()
    with pytest.raises(InputError, match="moe_all_to_all"):
        Scenario(moe_all_to_all="nccl").validated()


def test_a_rank_routes_the_pairs_an_all_to_all_delivered_and_the_group_s_after_a_gather():
    """The fused MoE's routing cost (the first grouped product's ``pairs``): after a gather every rank holds the
    group's 64 x 8 token-expert pairs and picks its own out of them; an all-to-all delivers each rank its 64."""
    gather = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="sglang"))
    a2a = _ops(Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="sglang", moe_exchange="all_to_all"))
    assert gather["moe.gate_up"].params["pairs"] == pytest.approx(64 * 8)
    assert a2a["moe.gate_up"].params["pairs"] == pytest.approx(64 * 8 / 8)


def test_deepep_low_latency_messages_are_the_sizes_its_measured_tables_count():
    """hidden + a fp32 scale per 128 + 16 bytes: the bytes per token-expert pair of aiconfigurator-core's DeepEP
    tables (their GB/s times their time) at every hidden size they timed."""
    from perfmodel.graph import deepep_ll_dispatch_bytes

    measured = {2048: 2128, 4096: 4240, 5120: 5296, 6144: 6352, 7168: 7408}
    assert {h: deepep_ll_dispatch_bytes(h) for h in measured} == measured


def test_dep_memory_holds_whole_attention_weights_and_own_sequences():
    dep = Scenario(tp=1, attention_dp=8, ep=8, dtype="fp4", isl=1024, osl=1024).validated().for_hardware(B200)
    tp8 = Scenario(tp=8, ep=8, dtype="fp4", isl=1024, osl=1024).validated().for_hardware(B200)
    assert capacity.weight_bytes(DS, dep) > capacity.weight_bytes(DS, tp8)  # attention replicated, not split
    one = capacity.memory(DS, dep, 8, B200)
    assert one.kv_cache == pytest.approx(capacity.kv_bytes_per_token(DS, dep) * 2048)  # 1 of 8 sequences here
    b = capacity.max_batch(DS, dep, B200)
    assert b % 8 == 0 and b > 0


def test_dep_projects_and_says_so():
    p = project("b200", "deepseek-v3", tp=1, attention_dp=8, ep=8, dtype="fp4", batch=256, isl=1024, osl=1024)
    assert p.scenario.gpus == 8 and p.tpot_s > 0 and p.throughput_tok_s_per_gpu > 0
    assert any("attention data parallel" in a for a in p.assumptions)


def test_expert_imbalance_slows_the_moe_and_nothing_else():
    even = project("b200", "deepseek-v3", tp=8, ep=8, dtype="fp4", batch=64)
    skew = project("b200", "deepseek-v3", tp=8, ep=8, dtype="fp4", batch=64, moe_imbalance=1.5)
    assert skew.tpot_s > even.tpot_s
    t_even = {t.op.name: t.total for t in even.decode.times}
    t_skew = {t.op.name: t.total for t in skew.decode.times}
    assert t_skew["moe.gate_up"] > t_even["moe.gate_up"]
    assert t_skew["attn.core"] == pytest.approx(t_even["attn.core"], rel=1e-3)  # only via the power-limited clock


def test_layout_checks_are_one_line():
    with pytest.raises(InputError, match="must divide"):
        Scenario(tp=1, attention_dp=8, ep=3).validated()
    with pytest.raises(InputError, match="moe-imbalance"):
        Scenario(moe_imbalance=0.5).validated()
    Scenario(tp=2, attention_dp=4, ep=8).validated()  # EP over all 8 GPUs of 4 groups of TP 2


def test_mtp_emits_more_tokens_per_step_and_charges_the_draft():
    base = project("b200", "deepseek-v3", tp=8, dtype="fp4", batch=4)
    spec = project("b200", "deepseek-v3", tp=8, dtype="fp4", batch=4, mtp=3, mtp_accept=0.7)
    k, a = 3, 0.7
    assert spec.scenario.tokens_per_step == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    # faster per token than plain decoding, but not by the whole tokens-per-step factor: verify and draft cost
    assert spec.tpot_s < base.tpot_s
    assert spec.tpot_s > base.tpot_s / spec.scenario.tokens_per_step
    # accepting nothing only adds cost
    none = project("b200", "deepseek-v3", tp=8, dtype="fp4", batch=4, mtp=2, mtp_accept=0.0)
    assert none.tpot_s > base.tpot_s
    with pytest.raises(InputError, match="mtp-accept"):
        Scenario(mtp=2).validated()


def test_training_formats_recipes_and_nvfp4():
    from perfmodel.train import project_train

    kw = dict(gpus=16, tp=8, pp=1, global_batch=16, seq=4096)
    bf16 = project_train("b200", "llama-3.1-8b", **kw)
    fp8 = project_train("b200", "llama-3.1-8b", dtype="fp8", **kw)
    cur = project_train("b200", "llama-3.1-8b", dtype="fp8", fp8_recipe="tensorwise", **kw)
    fp4 = project_train("b200", "llama-3.1-8b", dtype="fp4", **kw)
    assert fp8.step_time_s < bf16.step_time_s
    assert cur.step_time_s > fp8.step_time_s  # current scaling reads every input once more for its amax
    assert fp4.step_time_s < bf16.step_time_s
    with pytest.raises(InputError, match="fp4 tensor cores"):
        project_train("h100-sxm", "llama-3.1-8b", dtype="fp4", **kw)
    with pytest.raises(InputError, match="fp8-recipe"):
        project_train("b200", "llama-3.1-8b", dtype="fp8", fp8_recipe="nope", **kw)


def test_mtp_verify_step_is_a_decode_step_and_pays_off():
    """Issue 25: a verify step of 1 + k tokens a sequence runs the engines' decode kernel (packed rows over the
    cache; MLA absorbed), not a prefill kernel padding each to a block; with the DeepSeek-V3 report's acceptance
    (0.8 for one draft token) TPOT falls by at least a quarter at batch 1 and never rises up to batch 64."""
    for batch in (1, 8, 16, 32, 64):
        base = project("h200-sxm", "deepseek-v3", tp=8, dtype="fp8", batch=batch)
        spec = project("h200-sxm", "deepseek-v3", tp=8, dtype="fp8", batch=batch, mtp=1, mtp_accept=0.8)
        assert spec.tpot_s <= base.tpot_s, batch
        if batch == 1:
            assert spec.tpot_s <= 0.75 * base.tpot_s
        core = {t.op.name: float(t.time) for t in base.decode.times}["attn.core"]
        verify = {t.op.name: float(t.time) for t in spec.decode.times}["attn.core"]
        assert verify < 2.0 * core, batch  # the same latent cache read once, twice the query rows


def test_mtp_needs_a_model_with_mtp_layers():
    from perfmodel.models import load_model

    assert load_model("deepseek-v3").mtp_layers == 1 and load_model("llama70b").mtp_layers == 0
    with pytest.raises(InputError, match="multi-token-prediction") as e:
        project("h200-sxm", "llama70b", tp=8, mtp=1, mtp_accept=0.7)
    assert e.value.field == "--mtp"


def test_docs_speculative_table_is_regenerated(generated_block):
    from perfmodel.paths import repo_root

    doc, now = generated_block("speculative.md", "mtp-table", "mtp_table.py", "table")
    assert doc == now, "run python docs/tools/mtp_table.py and paste it into docs/speculative.md"
    base, spec1 = (float(x) for x in now.splitlines()[2].split("|")[3:5])  # | GPUs | batch | project ... |
    assert f"at batch 1 this is {base / spec1:.2f}x" in (repo_root() / "docs" / "speculative.md").read_text()
