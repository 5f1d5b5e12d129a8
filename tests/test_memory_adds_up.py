"""Memory adds up (issue 26): the bytes a layout holds per GPU, summed over the GPUs that split them, are the
model's; a sequence's KV cache times the batch is the cache; the parts of a total are the total. Run over every
model of the library, so a family whose weights the capacity formulas miss (DeepSeek Sparse Attention's indexer,
Gated DeltaNet layers, a gated attention's gate, the MTP module a speculative decode loads: all found by these
checks) fails here."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.resolve import resolve_scenario
from perfmodel.capacity import kv_bytes_per_token, memory, mtp_weight_bytes, weight_bytes
from perfmodel.models import is_moe_layer, list_models, load_model
from perfmodel.scenario import Scenario
from perfmodel.train import memory as train_memory
from perfmodel.train.scenario import TrainScenario

MODELS = sorted(m if isinstance(m, str) else m.key for m in list_models())
# checkpoints whose experts are stored narrower than the scenario's format (gpt-oss: MXFP4, Kimi K2.5: INT4)
NARROW_EXPERTS = {name for name in MODELS if load_model(name).expert_dtype}


@pytest.mark.parametrize("name", MODELS)
def test_weights_on_one_gpu_are_the_models_parameters(name):
    """bf16 weights on one GPU are two bytes a parameter, the parameter count being the one checked against the
    published counts (tests/test_models.py): within 0.02% (GPT-3-style biases are not in the capacity formula)."""
    if name in NARROW_EXPERTS:
        pytest.skip("experts stored narrower (test_narrow_experts_are_held_at_their_own_size)")
    m = load_model(name)
    assert weight_bytes(m, Scenario(dtype="bf16")) == pytest.approx(2.0 * m.param_count(), rel=2e-4)


@pytest.mark.parametrize("name", sorted(NARROW_EXPERTS))
def test_narrow_experts_are_held_at_their_own_size(name):
    """gpt-oss's MXFP4 and Kimi K2.5's INT4 experts: what they save against bf16 is the experts' parameters
    times (2 - their bytes a parameter), nothing else."""
    from perfmodel.dtypes import bytes_per_element

    m = load_model(name)
    full = weight_bytes(m, Scenario(dtype="bf16"))
    per_expert_layer = 3 * m.hidden * m.moe.expert_intermediate * m.moe.num_experts
    moe_layers = sum(1 for i in range(m.layers) if is_moe_layer(m, i))
    saved = per_expert_layer * moe_layers * (2.0 - bytes_per_element(m.expert_dtype))
    assert 2.0 * m.param_count() - full == pytest.approx(saved, rel=2e-3)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("split", [("tp", 8), ("pp", 4), ("tp", 2)])
def test_weights_split_over_gpus_add_up_to_the_whole(name, split):
    """Summed over the GPUs that split them, the weights are at least the whole (what is replicated: norms,
    routers, MLA's latent projections, the DSA indexer) and not much more; the fullest of pp stages holds at
    least a pp-th."""
    m = load_model(name)
    field, n = split
    whole = weight_bytes(m, Scenario(dtype="bf16"))
    part = weight_bytes(m, Scenario(dtype="bf16", **{field: n}))
    assert whole * (1 - 1e-9) <= n * part
    if field == "tp":
        assert n * part <= whole * 1.03  # replication is small
    else:
        assert part <= whole


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), batch=st.integers(1, 512), isl=st.integers(16, 8192), osl=st.integers(1, 4096),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_inference_memory_parts_add_up(name, batch, isl, osl, tp):
    m = load_model(name)
    sc = resolve_scenario(Scenario(tp=tp, isl=isl, osl=osl), None, None)
    mem = memory(m, sc, batch, 141e9)
    assert mem.total == pytest.approx(mem.weights + mem.kv_cache + mem.activations + mem.workspace)
    assert mem.kv_cache == pytest.approx(batch * mem.kv_per_sequence)
    twice = memory(m, sc, 2 * batch, 141e9)
    assert twice.kv_cache == pytest.approx(2 * mem.kv_cache)
    assert twice.weights == mem.weights


@pytest.mark.parametrize("name", [n for n in MODELS if load_model(n).mtp_layers])
def test_a_speculative_decode_holds_its_mtp_module(name):
    """With --mtp the MTP modules' weights and their KV cache are held (DeepSeek-V3: 11.5B unique MTP parameters,
    report sec. 2.2), and without it they are not."""
    m = load_model(name)
    off, on = Scenario(dtype="bf16"), Scenario(dtype="bf16", mtp=1, mtp_accept=0.8)
    extra = weight_bytes(m, on) - weight_bytes(m, off)
    assert extra == pytest.approx(mtp_weight_bytes(m, on)) and extra > 0
    assert mtp_weight_bytes(m, off) == 0
    layers = m.layers - sum(t == "linear" for t in m.layer_types)
    assert kv_bytes_per_token(m, on) == pytest.approx(kv_bytes_per_token(m, off) * (layers + m.mtp_layers) / layers)
    if name == "deepseek-v3":
        assert extra / 2 == pytest.approx(11.5e9, rel=0.02)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"])
@pytest.mark.parametrize("dp", [2, 4, 8])
def test_sharded_training_states_add_up(name, dp):
    """ZeRO shards: optimizer states at ZeRO-1 (and gradients at 2, weights at 3) times the data-parallel ranks
    are the replicated states of a dense model."""
    m = load_model(name)
    base = dict(gpus=dp, tp=1, pp=1, global_batch=8 * dp, seq=2048)
    whole = train_memory.memory(m, TrainScenario(zero=0, **base), 141e9)
    for zero, field in ((1, "optimizer_states"), (2, "gradients")):
        shard = train_memory.memory(m, TrainScenario(zero=zero, **base), 141e9)
        assert getattr(shard, field) * dp == pytest.approx(getattr(whole, field), rel=1e-9)
    t = train_memory.memory(m, TrainScenario(zero=1, **base), 141e9)
    assert t.total == pytest.approx(t.weights + t.gradients + t.optimizer_states + t.activations
                                    + t.activation_working + t.reserve)
