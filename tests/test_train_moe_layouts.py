"""MoE training across layouts (issue 25): expert GEMMs as one kernel family forward and backward, every stage's
own gradient reduce, multi-token prediction on the last stage, pipeline layers balanced by time."""
from __future__ import annotations

import pytest

from perfmodel.train import project_train
from perfmodel.train.project import balanced_layers

DSV3 = dict(gpus=256, tp=1, global_batch=2048, seq=4096, dtype="fp8", fp8_recipe="mxfp8", recompute="full")


def _op(p, name):
    return next(x for x in p.ops if x.top.name == name)


def test_training_expert_gemm_forward_priced_like_its_backward():
    """The forward grouped GEMM had taken the serving engine's fused-MoE efficiency (B200: vLLM's, 3x slower)
    while its data gradient, the same FLOPs, took the dense one."""
    p = project_train("b200", "deepseek-v3", pp=16, ep=8, **DSV3)
    fwd, dgrad = _op(p, "moe.gate_up"), _op(p, "moe.gate_up.dgrad")
    assert fwd.top.op.flops == pytest.approx(dgrad.top.op.flops)
    assert fwd.time == pytest.approx(dgrad.time, rel=0.15)


def test_expert_gradients_reduced_over_the_expert_data_parallel_group_of_the_stage_holding_them():
    """DeepSeek-V3's first three layers are dense: stage 0 of 16 holds no experts; the stages that do reduce
    their expert gradients over dp / ep = 2 ranks one box apart (the scale-out network)."""
    p = project_train("b200", "deepseek-v3", pp=16, ep=8, **DSV3)
    names = {x.top.name for x in p.ops if x.top.pass_ == "step"}
    assert "dp.grad_reduce_scatter.expert" in names
    assert p.breakdown["gradient reduce and parameter gather (exposed)"] > 0.1
    off = project_train("b200", "deepseek-v3", pp=16, ep=8, dp_overlap=False, **DSV3)
    assert off.step_time_s > p.step_time_s


def test_mtp_module_trained_on_the_last_stage():
    with_mtp = project_train("gb200", "deepseek-v3", pp=4, ep=64, **DSV3)
    without = project_train("gb200", "deepseek-v3", pp=4, ep=64, mtp_layers=0, **DSV3)
    # Megatron counts the module: a layer, the [2h, h] projection and the LM head again
    assert with_mtp.model_flops > without.model_flops * 1.02
    assert with_mtp.step_time_s > without.step_time_s
    assert any(x.top.name.startswith("mtp.") for x in with_mtp.ops) or with_mtp.slowest_stage != 3
    assert any("multi-token-prediction" in a for a in with_mtp.assumptions)
    assert with_mtp.stages[-1].total > 0 and sum(1 for _ in with_mtp.stages) == 4


def test_mtp_layers_refused_out_of_range():
    from perfmodel.errors import InputError

    with pytest.raises(InputError):
        project_train("gb200", "deepseek-v3", pp=4, ep=64, mtp_layers=-1, **DSV3)


def test_balanced_layers_give_the_last_rank_fewer_layers_for_its_extra_work():
    # 61 layers over 16 ranks, the last also running 2.5 layers' worth (head, MTP): a rank can take 4 layers,
    # the last one 1 (1 + 2.5 <= 4)
    c = balanced_layers(61, 16, 1.0, 0.1, 2.5, [3] + [4] * 14 + [2])
    assert sum(c) == 61
    assert max(k * 1.0 + (0.1 if i == 0 else 0) + (2.5 if i == 15 else 0) for i, k in enumerate(c)) <= 4.1 + 1e-9
    # no extra work: Megatron's even split stays
    assert balanced_layers(64, 16, 1.0, 0.0, 0.0, [4] * 16) == [4] * 16


def test_deep_pipeline_with_mtp_balanced_not_paced_by_the_last_stage():
    p = project_train("b200", "deepseek-v3", pp=16, ep=8, **DSV3)
    totals = [s.total for s in p.stages]
    assert max(totals) < 1.05 * sorted(totals)[len(totals) // 2]


def test_cli_mtp_layers_flag(capsys):
    from perfmodel.cli import main

    rc = main(["train", "--arch", "gb200", "--model", "deepseek-v3", "--gpus", "256", "--pp", "4", "--ep", "64",
               "--global-batch", "2048", "--seq", "4096", "--mtp-layers", "9"])
    err = capsys.readouterr().err
    assert rc == 2 and "--mtp-layers" in err and "Traceback" not in err
