"""Attention data parallelism in the serving simulation (perfmodel.serve.dp_ranks): every rank schedules its own
requests within its own budget, a prompt's piece runs whole on one rank, and a step lasts as long as its busiest
rank and the MoE group's part."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.graph import Step, build_ops
from perfmodel.projection import evaluate_step
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile, resolve_scenario
from perfmodel.scenario import Scenario
from perfmodel.serve.dp_ranks import RankBudgets, decode_split, place
from perfmodel.serve.engine import EngineConfig, simulate_instance
from perfmodel.serve.workload import Requests


@given(st.integers(0, 5000), st.integers(1, 16))
def test_decoding_sequences_are_dealt_evenly(n, ranks):
    split = decode_split(n, ranks)
    assert sum(split) == n and max(split) - min(split) <= 1 and split == sorted(split, reverse=True)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 300), st.sampled_from([1, 2, 4]),
       st.lists(st.integers(1, 8192), max_size=12), st.integers(256, 16384))
def test_the_step_model_puts_every_piece_where_the_scheduler_sized_it(ranks, n_dec, q, wanted, budget):
    # the scheduler (perfmodel.serve.engine) sizes each piece within the emptiest rank's budget and charges it there;
    # the step model (perfmodel.serve.steptime) lays the same pieces with place(): the same rank each time
    budgets = RankBudgets(ranks, budget, n_dec, q)
    taken, where = [], []
    for w in wanted:
        room = budgets.room()
        if room <= 0:
            break
        piece = min(w, room)
        taken.append((piece, 0))
        where.append(budgets.take(piece))
    laid = place(ranks, n_dec, q, taken)
    assert [d for d, _ in laid] == decode_split(n_dec, ranks)
    for r, (_, own) in enumerate(laid):
        assert own == [p for p, at in zip(taken, where) if at == r]
        # within its own budget, less its decoding sequences' tokens (none carries more than the budget)
        assert sum(p for p, _ in own) <= max(budget - q * laid[r][0], 0) or not own


class _Recorder:
    """A step model that takes one second a step and remembers each step's pieces."""

    def __init__(self):
        self.steps = []

    def step(self, n_dec, ctx, pieces):
        self.steps.append((n_dec, list(pieces)))
        return 1.0, 0.0

    def decode_span(self, n, ctx0, k, ctx1=None):
        return 1.0, 1.0, 0.0, 0.0


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_each_rank_takes_a_prompt_of_its_own_budget_a_step(ranks):
    # four prompts of a whole budget each arrive together: one scheduler takes one a step, four ranks take all four
    n = 4
    reqs = Requests(np.zeros(n), np.full(n, 4096), np.full(n, 8), np.full(n, -1), np.zeros(n, dtype=int))
    rec = _Recorder()
    r = simulate_instance(rec, EngineConfig(max_seqs=64, token_budget=4096, kv_blocks=100000, ranks=ranks), reqs)
    first = rec.steps[0]
    assert first == (0, [(4096, 0)] * ranks)
    assert (r.first_token == 1.0).sum() == ranks  # the first step's prompts have their first token


@pytest.fixture(scope="module")
def b200():
    hw = resolve_hardware("b200")
    return hw, resolve_profile(None, hw)


def _dep(hw, **kw):
    sc = Scenario(**{"tp": 1, "attention_dp": 8, "ep": 8, "dtype": "fp4", "batch": 64, "isl": 8192, **kw})
    return resolve_scenario(sc.validated(), hw, None)


def test_a_lone_prompt_runs_on_one_rank(b200):
    # DeepSeek-V3 on 8 B200s with attention DP 8: one 8,192-token prompt is one rank's attention and dense work
    # (the other ranks idle), not an eighth of it on each; the experts meet its 8,192 tokens either way
    hw, prof = b200
    m = resolve_model("deepseek-v3")
    sc = _dep(hw)
    lone = evaluate_step(m, hw, sc, prof, Step("prefill", 1, 8192, 0)).time_s
    full = evaluate_step(m, hw, sc, prof, Step("prefill", 8, 8192, 0)).time_s  # every rank a prompt
    assert lone < full < 8 * lone
    assert full / lone < 2.5  # the ranks' attention runs side by side: only the experts see 8x the tokens
    ops = {op.name: op for op in build_ops(m, Step("prefill", 1, 8192, 0), sc)}
    rank = {op.name: op for op in build_ops(m, Step("prefill", 1, 8192, 0, group_tokens=8192), sc)}
    assert ops["attn.core"].flops == pytest.approx(rank["attn.core"].flops)
    assert ops["moe.router"].flops == pytest.approx(rank["moe.router"].flops)


@pytest.mark.parametrize("batch", [1, 5, 8, 64])
def test_an_instance_step_is_its_busiest_ranks(b200, batch):
    # an instance's step deals its sequences whole: the busiest rank runs ceil(batch / 8) of them, the MoE layers
    # meet every rank's actual tokens
    hw, prof = b200
    m = resolve_model("deepseek-v3")
    sc = _dep(hw)
    busiest = -(-batch // 8)
    ops = build_ops(m, Step("decode", batch, 1, 4096), sc)
    rank = build_ops(m, Step("decode", busiest, 1, 4096, group_tokens=batch), sc)
    assert [(o.name, o.flops, o.bytes) for o in ops] == [(o.name, o.flops, o.bytes) for o in rank]


def test_the_serving_table_names_each_ranks_budget(capsys):
    # the layout line of `perfmodel serve` says the budget is each rank's (SGLang's: the chunk / DP)
    from perfmodel.cli import main

    rc = main(["serve", "--arch", "b200", "--model", "deepseek-v3", "--dtype", "fp4", "--tp", "1", "--attention-dp",
               "8", "--ep", "8", "--engine", "sglang", "--concurrency", "16", "--requests", "40", "--isl", "1024",
               "--osl", "32"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "(TP 1 x attention DP 8, EP 8, PP 1) = 8 GPUs" in out and "2048 tokens a step on each of 8 ranks" in out


def test_the_busiest_rank_is_the_slowest_at_the_steps_clock():
    # Mixtral at attention DP 4 on the H200: a rank of three small prompt pieces (launch-bound) leads a rank of one
    # 256-token piece at the boost clock, but not once the power-limited clock stretches the compute-bound one; the
    # step is the latter's, so a small piece more on the former never shortens it (it did: 13.04 -> 12.88 ms)
    from perfmodel.cost.tables import without_tables
    from perfmodel.serve.steptime import StepModel

    hw = resolve_hardware("h200")
    prof = without_tables(resolve_profile(None, hw))
    m = resolve_model("mixtral-8x7b")
    sc = resolve_scenario(Scenario(tp=1, attention_dp=4, ep=4, batch=64).validated(), hw, m)
    sm = StepModel(m, hw, sc, prof, max_tokens=4096, max_seqs=64, max_context=4096)
    pieces = [(2, 0), (3, 30), (161, 0), (256, 72), (1, 63)]
    assert sm.step(0, 16.0, pieces + [(9, 25)])[0] >= sm.step(0, 16.0, pieces)[0]


@pytest.mark.parametrize("engine, phase, padded", [("vllm", "decode", True), ("vllm", "prefill", False),
                                                   ("sglang", "decode", False)])
def test_vllm_pads_the_ranks_in_cuda_graph_steps(b200, engine, phase, padded):
    # vLLM 0.24.0 (v1/worker/dp_utils.py) pads every DP rank to the busiest rank's tokens when every rank replays a
    # CUDA graph (decode under --launch auto): 9 sequences over 8 ranks meet the experts as 16
    hw, _ = b200
    m = resolve_model("deepseek-v3")
    sc = _dep(hw, engine=engine)
    seq = 1 if phase == "decode" else 512
    ops = {op.name: op for op in build_ops(m, Step(phase, 9, seq, 2048), sc)}
    assert ops["moe.gate_up"].params["moe_tokens"] == (16 if padded else 9) * seq
