"""Expert-parallel exchange across NVLink domains and its overlap in training (issue 25)."""
from __future__ import annotations

import pytest

from perfmodel.cost.comm import collective_time
from perfmodel.resolve import resolve_hardware, resolve_profile
from perfmodel.train import project_train


def test_an_all_to_all_beyond_a_domain_sends_its_remote_share_whole():
    """No reduction on the way: of a 64-rank all-to-all on 8-GPU boxes, 7/8 of each rank's buffer crosses its
    own NIC (it was priced as a hierarchical all-reduce's outer step, 1/8 of the bytes)."""
    hw = resolve_hardware("h100-sxm")
    prof = resolve_profile(None, hw, "torch")
    nbytes = 256e6
    t = collective_time("all_to_all", nbytes, 64, 64, hw, prof)
    floor = nbytes * 56 / 64 / hw.scaleout_bandwidth
    assert floor <= t <= 1.5 * floor
    inside = collective_time("all_to_all", nbytes, 8, 8, hw, prof)
    assert t > 5 * inside
    sol = collective_time("all_to_all", nbytes, 64, 64, hw, prof, sol=True)
    assert sol == pytest.approx(floor)


LAYOUT = dict(gpus=256, tp=1, global_batch=2048, seq=4096, dtype="fp8", recompute="full")


def test_wide_expert_parallelism_pays_on_8_gpu_boxes_not_in_an_nvl72():
    """DeepSeek-V3 with EP 64: on HGX B200 the dispatch and combine cross the scale-out network, in a GB200
    NVL72 they stay on NVLink; with EP 8 (one box) the two parts are alike."""
    wide = {p: project_train(p, "deepseek-v3", pp=4, ep=64, **LAYOUT).tokens_per_s_per_gpu for p in ("b200", "gb200")}
    narrow = {p: project_train(p, "deepseek-v3", pp=16, ep=8, **LAYOUT).tokens_per_s_per_gpu
              for p in ("b200", "gb200")}
    assert wide["b200"] / wide["gb200"] < 0.5
    assert narrow["b200"] / narrow["gb200"] > 0.9


def test_dualpipe_hides_the_all_to_all_and_the_flag_turns_it_on_and_off():
    kw = dict(pp=8, ep=32, **LAYOUT)
    exposed = "communication (exposed, in the pipeline)"
    plain = project_train("gb200", "deepseek-v3", **kw)
    hidden = project_train("gb200", "deepseek-v3", moe_a2a_overlap=True, **kw)
    dual = project_train("gb200", "deepseek-v3", schedule="dualpipe", **kw)
    dual_off = project_train("gb200", "deepseek-v3", schedule="dualpipe", moe_a2a_overlap=False, **kw)
    assert hidden.breakdown[exposed] < 0.2 * plain.breakdown[exposed]
    assert dual.breakdown[exposed] < 0.2 * dual_off.breakdown[exposed]
    assert hidden.step_time_s < plain.step_time_s


def test_a_weight_only_expert_format_says_what_prices_it():
    """gpt-oss's MXFP4 experts under bf16 products are a class of their own (bf16_wfp4): on a part and engine
    whose tables time the format, priced by them; with no calibration, by the bf16 model, a bias stated; a model
    without narrower experts says nothing."""
    from perfmodel import project
    from perfmodel.profile import DEFAULTS

    gpt = project("h200", "gpt-oss-120b")
    assert any("class bf16_wfp4" in a and "measured MoE tables of that format" in a for a in gpt.assumptions)
    bare = project("h200", "gpt-oss-120b", profile=DEFAULTS)
    assert any("experts stored in fp4 under bf16" in a and "too fast" in a for a in bare.assumptions)
    assert bare.tpot_s < gpt.tpot_s  # the engines' weight-only kernels run slower than bf16's streaming model
    assert not any("experts stored in" in a for a in project("h200", "mixtral", tp=2).assumptions)


def test_training_experts_stay_one_kernel_in_their_training_format():
    """Spreading experts over EP ranks changes their groups, not their kernel: at EP 1 and 8 alike they are
    TransformerEngine's per-expert GEMMs, never the serving engine's fused-MoE module (perfmodel.train.graph.
    _training_kernel); a training step reads gpt-oss's experts in bf16, not the inference checkpoint's MXFP4."""
    from perfmodel.train.graph import SERVING_MOE_PARAMS
    from perfmodel.resolve import resolve_model
    from perfmodel.train.graph import layer_ops
    from perfmodel.train.scenario import TrainScenario

    gpt = resolve_model("gpt-oss-120b")
    for ep in (1, 8):
        ts = TrainScenario(gpus=8, tp=1, ep=ep, global_batch=64, seq=4096, dtype="bf16")
        experts = [t.op for t in layer_ops(gpt, ts) if t.op.name in ("moe.gate_up", "moe.down")]
        assert len(experts) == 2
        assert all(op.params["groups"] > 1 and "weights" not in op.params for op in experts)
        assert not any(k in op.params for op in experts for k in SERVING_MOE_PARAMS)


def test_training_waits_for_the_busiest_expert_rank():
    """--moe-imbalance in training: the busiest EP rank's routed products, permutes and all-to-all grow by the
    factor, the kernels keep the mean rank's shape (so the step is continuous at 1: no unaligned fractional rows),
    the model FLOPs stay the useful work, the busiest rank keeps more permuted activations; at EP 1 there is no
    busiest rank."""
    from dataclasses import replace

    from perfmodel.errors import InputError
    from perfmodel.models import load_model
    from perfmodel.train.graph import layer_ops
    from perfmodel.train.scenario import TrainScenario

    kw = dict(pp=8, ep=8, gpus=64, tp=1, global_batch=512, seq=4096)
    base = project_train("h200-sxm", "deepseek-v3", **kw)
    same = project_train("h200-sxm", "deepseek-v3", moe_imbalance=1.0, **kw)
    near = project_train("h200-sxm", "deepseek-v3", moe_imbalance=1.0001, **kw)
    skew = project_train("h200-sxm", "deepseek-v3", moe_imbalance=1.3, **kw)
    assert same.step_time_s == base.step_time_s
    assert near.step_time_s == pytest.approx(base.step_time_s, rel=1e-3)
    assert base.step_time_s < skew.step_time_s < 1.3 * base.step_time_s
    assert skew.model_flops == pytest.approx(base.model_flops)
    assert skew.memory.activations > base.memory.activations

    model = load_model("deepseek-v3")
    ts = TrainScenario(**kw).validated(model)
    ops = {t.name: t for t in layer_ops(model, ts)}
    ops_skew = {t.name: t for t in layer_ops(model, replace(ts, moe_imbalance=1.3))}
    for name in ("moe.gate_up", "moe.down", "moe.permute"):
        assert ops_skew[name].op.count == pytest.approx(1.3 * ops[name].op.count)
        assert ops_skew[name].op.params.get("m") == ops[name].op.params.get("m")
    assert ops_skew["moe.dispatch"].op.bytes == pytest.approx(1.3 * ops["moe.dispatch"].op.bytes)
    assert ops_skew["moe.gate_up"].model_flops * ops_skew["moe.gate_up"].op.count == pytest.approx(
        ops["moe.gate_up"].model_flops * ops["moe.gate_up"].op.count)
    one = dict(kw, ep=1)
    assert project_train("h200-sxm", "deepseek-v3", moe_imbalance=1.3, **one).step_time_s == \
        project_train("h200-sxm", "deepseek-v3", **one).step_time_s
    with pytest.raises(InputError, match="busiest"):
        TrainScenario(moe_imbalance=0.5).validated()
