"""Pipeline schedules: the bubbles of 1F1B, interleaved, zero-bubble and DualPipe."""
from __future__ import annotations

import pytest

from perfmodel.profile import DEFAULTS
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.train.project import project_training
from perfmodel.train.scenario import TrainScenario
from perfmodel.train.schedule import StageTime, bubble_fraction_1f1b, pipeline_time


@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (8, 32), (16, 16), (35, 280)])
def test_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    stages = [StageTime(1.0, 2.0, 0.8)] * p
    r = pipeline_time("1f1b", stages, m)
    assert r.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert r.bubble_fraction == pytest.approx(bubble_fraction_1f1b(p, m))
    assert r.time_s == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("v", [1, 2, 4])
def test_interleaving_divides_the_bubble(v):
    p, m = 8, 16
    r = pipeline_time("interleaved", [StageTime(1.0, 2.0, 0.8)] * p, m, v)
    assert r.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))


def test_zero_bubble_and_dualpipe_bubbles():
    p, m = 8, 16
    f, b, w = 1.0, 2.0, 0.9
    stages = [StageTime(f, b, w)] * p
    zb = pipeline_time("zero-bubble", stages, m)
    assert zb.bubble_s == pytest.approx((p - 1) * (f + (b - w) - w))  # Qi et al. 2023, ZB-H1
    dual = pipeline_time("dualpipe", stages, m)
    assert dual.bubble_s == pytest.approx((p / 2 - 1) * ((f + b) + b - 3 * w))  # DeepSeek-V3, Table 2
    one = pipeline_time("1f1b", stages, m)
    assert dual.bubble_s < zb.bubble_s < one.bubble_s
    # a weight gradient larger than the rest fills the bubble entirely, never below zero
    assert pipeline_time("zero-bubble", [StageTime(0.5, 2.0, 1.5)] * p, m).bubble_s == 0.0


def test_slowest_stage_sets_the_pace():
    stages = [StageTime(1.0, 2.0, 1.0), StageTime(1.5, 3.0, 1.0), StageTime(1.0, 2.0, 1.0)]
    r = pipeline_time("1f1b", stages, 10)
    assert r.time_s == pytest.approx(9 * 4.5 + 3 + 4.5 + 3)
    assert r.busy_s == pytest.approx(10 * 4.5)


def test_projected_pipeline_bubble_shrinks_with_microbatches_and_interleaving():
    hw = resolve_hardware("h100-sxm")
    model = resolve_model("llama-3.1-70b")
    base = TrainScenario(gpus=64, tp=8, pp=8, global_batch=64, seq=4096, sequence_parallel=True,
                         recompute="selective")
    b1 = project_training(hw, model, base, DEFAULTS).bubble_fraction
    more = project_training(hw, model, base.with_(global_batch=256), DEFAULTS).bubble_fraction
    inter = project_training(hw, model, base.with_(schedule="interleaved", interleave=2), DEFAULTS).bubble_fraction
    assert more < b1 and inter < b1
    m, p = 64, 8
    assert b1 == pytest.approx((p - 1) / (m + p - 1), rel=0.25)  # the LM head stage is a little slower
