"""The 2025-26 model families (issue 16): descriptors against their model cards, the config.json importer
against the descriptors, the fields these families add, and what is refused.

Fixtures: tests/data/hf_configs/ (its README says where each file comes from).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.models import (
    Model, MoE, attention_params, attention_span, attention_type_counts, ffn_params, is_moe_layer,
    layer_attention_types, load_model, model_from_hf_config, moe_layers, norms_per_layer,
)

HF = Path(__file__).parent / "data" / "hf_configs"


# ---- the model cards' figures --------------------------------------------------------------------------

@dataclass(frozen=True)
class Card:
    """A parameter count a model card (or the technical report it links) publishes.

    ``unit`` is the place of the last digit printed ("235B": 1e9; "116.83B": 1e7). The figure is matched within
    0.5%, or within the rounding of the printed figure (half a unit) where that is wider: a figure printed to two
    digits ("22B") says no more than that. ``counts`` is what the vendor counts, where it is not everything:
    "no-input-embedding" (the embedding table is a lookup; OpenAI's gpt-oss card counts active parameters so),
    "no-embeddings" (neither the embedding nor the LM head), "+mtp" (the multi-token-prediction layer too).
    Where even that does not reach, ``tol`` says how far, and ``why``.
    """

    figure: float
    unit: float
    source: str
    counts: str = "all"
    tol: float | None = None
    why: str = ""

    def tolerance(self) -> float:
        return self.tol if self.tol is not None else max(0.005, self.unit / 2 / self.figure)


QWEN3 = "huggingface.co/Qwen/{} model card, Model Overview"
CARDS: dict[str, dict[str, Card]] = {
    "qwen3-0.6b": {"total": Card(0.6e9, 1e8, QWEN3.format("Qwen3-0.6B"),
                                why="printed to one digit; the non-embedding 0.44B is the close check"),
                   "non_embedding": Card(0.44e9, 1e7, QWEN3.format("Qwen3-0.6B"))},
    "qwen3-8b": {"total": Card(8.2e9, 1e8, QWEN3.format("Qwen3-8B")),
                 "non_embedding": Card(6.95e9, 1e7, QWEN3.format("Qwen3-8B"))},
    "qwen3-32b": {"total": Card(32.8e9, 1e8, QWEN3.format("Qwen3-32B")),
                  "non_embedding": Card(31.2e9, 1e8, QWEN3.format("Qwen3-32B"))},
    "qwen3-30b-a3b": {
        "total": Card(30.5e9, 1e8, QWEN3.format("Qwen3-30B-A3B")),
        "non_embedding": Card(29.9e9, 1e8, QWEN3.format("Qwen3-30B-A3B")),
        "active": Card(3.3e9, 1e8, QWEN3.format("Qwen3-30B-A3B"), tol=0.02,
                       why="ours is 3.353B (top-8 of 128 experts, embeddings included: Qwen counts them, as its 22B "
                           "for the 235B shows); the card prints 3.3B, truncated rather than rounded"),
    },
    "qwen3-235b-a22b": {"total": Card(235e9, 1e9, QWEN3.format("Qwen3-235B-A22B")),
                        "non_embedding": Card(234e9, 1e9, QWEN3.format("Qwen3-235B-A22B")),
                        "active": Card(22e9, 1e9, QWEN3.format("Qwen3-235B-A22B"))},
    "qwen3-235b-a22b-fp8": {"total": Card(235e9, 1e9, QWEN3.format("Qwen3-235B-A22B-FP8")),
                            "active": Card(22e9, 1e9, QWEN3.format("Qwen3-235B-A22B-FP8"))},
    "qwen3-coder-480b-a35b": {"total": Card(480e9, 1e9, QWEN3.format("Qwen3-Coder-480B-A35B-Instruct")),
                              "active": Card(35e9, 1e9, QWEN3.format("Qwen3-Coder-480B-A35B-Instruct"))},
    # gpt-oss-120b & gpt-oss-20b Model Card (OpenAI, 2025; arXiv 2508.10925), the parameter table
    "gpt-oss-20b": {"total": Card(20.91e9, 1e7, "gpt-oss model card, parameter table"),
                    "active": Card(3.61e9, 1e7, "gpt-oss model card, parameter table", counts="no-input-embedding"),
                    "mlp": Card(19.12e9, 1e7, "gpt-oss model card, parameter table"),
                    "attention": Card(0.64e9, 1e7, "gpt-oss model card, parameter table")},
    "gpt-oss-120b": {"total": Card(116.83e9, 1e7, "gpt-oss model card, parameter table"),
                     "active": Card(5.13e9, 1e7, "gpt-oss model card, parameter table", counts="no-input-embedding"),
                     "mlp": Card(114.71e9, 1e7, "gpt-oss model card, parameter table"),
                     "attention": Card(0.96e9, 1e7, "gpt-oss model card, parameter table")},
    "llama-4-scout": {
        "total": Card(109e9, 1e9, "huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct model card", tol=0.015,
                      why="the card's 109B counts the vision encoder and projector, which are not modelled: ours is "
                          "the text model, 107.8B"),
        "active": Card(17e9, 1e9, "huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct model card",
                       why="printed to two digits; ours is 17.17B")},
    "llama-4-maverick": {
        "total": Card(400e9, 1e9, "huggingface.co/meta-llama/Llama-4-Maverick-17B-128E-Instruct model card"),
        "active": Card(17e9, 1e9, "huggingface.co/meta-llama/Llama-4-Maverick-17B-128E-Instruct model card",
                       why="printed to two digits; ours is 17.19B")},
    "kimi-k2": {
        "total": Card(1e12, 1e12, "huggingface.co/moonshotai/Kimi-K2-Instruct model card, Model Summary", tol=0.05,
                      why="the card prints one significant figure (1T); held to two (1.0T): ours is 1.026T"),
        "active": Card(32e9, 1e9, "huggingface.co/moonshotai/Kimi-K2-Instruct model card, Model Summary",
                       counts="no-input-embedding")},
    "kimi-k2.5": {
        "total": Card(1e12, 1e12, "huggingface.co/moonshotai/Kimi-K2.5 model card", tol=0.05,
                      why="as Kimi K2 (the same text model); the card's figure also holds the MoonViT vision tower"),
        "active": Card(32e9, 1e9, "huggingface.co/moonshotai/Kimi-K2.5 model card", counts="no-input-embedding")},
    "glm-4.5": {
        # reproduced counting the decoder layers and the MTP layer, without the embedding and LM head (total), and
        # the main model's decoder layers (active); with embeddings and without MTP the total is 352.8B (-0.6%)
        "total": Card(355e9, 1e9, "huggingface.co/zai-org/GLM-4.5 model card", counts="no-embeddings+mtp"),
        "active": Card(32e9, 1e9, "huggingface.co/zai-org/GLM-4.5 model card", counts="no-embeddings")},
    "gemma-3-27b": {"total": Card(27e9, 1e9, "huggingface.co/google/gemma-3-27b-it model card"),
                    "non_embedding": Card(25_600e6, 1e6, "Gemma 3 Technical Report (arXiv 2503.19786), Table 1")},
    "gemma-2-9b": {"total": Card(9e9, 1e9, "huggingface.co/google/gemma-2-9b model card",
                                why="printed to one digit; the non-embedding count is matched exactly below"),
                   "non_embedding": Card(8_324_201_984, 1, "Gemma 2 report (arXiv 2408.00118), parameter counts")},
    "gemma-2-27b": {"total": Card(27e9, 1e9, "huggingface.co/google/gemma-2-27b model card"),
                    "non_embedding": Card(26_047_480_320, 1, "Gemma 2 report (arXiv 2408.00118), parameter counts")},
    "minimax-m2.5": {
        "total": Card(230e9, 10e9, "huggingface.co/MiniMaxAI/MiniMax-M2 model card (M2.5 keeps its size)",
                      why="'230 billion total ... 10 billion active': round figures; ours is 228.7B"),
        "active": Card(10e9, 1e9, "huggingface.co/MiniMaxAI/MiniMax-M2 model card (M2.5 keeps its size)",
                       counts="no-embeddings",
                       why="printed to two digits; ours is 9.80B without the embedding and LM head (10.42B with the "
                           "LM head, 11.03B with both)")},
    "mixtral-8x22b": {"total": Card(141e9, 1e9, "mistral.ai/news/mixtral-8x22b: 39B active of 141B"),
                      "active": Card(39e9, 1e9, "mistral.ai/news/mixtral-8x22b: 39B active of 141B")},
    "phi-3-mini-4k": {"total": Card(3.8e9, 1e8, "huggingface.co/microsoft/Phi-3-mini-4k-instruct model card")},
    "mistral-small-3.1-24b": {
        "total": Card(24e9, 1e9, "huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503 model card",
                      why="the card's 24B holds the Pixtral vision encoder; ours is the text model, 23.6B")},
    "deepseek-v2-lite": {
        "total": Card(15.7e9, 1e8, "huggingface.co/deepseek-ai/DeepSeek-V2-Lite model card"),
        "active": Card(2.4e9, 1e8, "huggingface.co/deepseek-ai/DeepSeek-V2-Lite model card", counts="no-input-embedding",
                       tol=0.025, why="ours is 2.451B without the input embedding (2.661B with it); the card prints 2.4B")},
    # Gated DeltaNet linear attention in three of every four layers
    "qwen3-next-80b-a3b": {
        "total": Card(80e9, 1e9, "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card: 80B in total and 3B "
                      "activated, 79B non-embedding"),
        "non_embedding": Card(79e9, 1e9, "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card"),
        "active": Card(3e9, 1e9, "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card", counts="no-embeddings",
                       tol=0.1, why="printed to one digit (3B); ours is 3.25B without embeddings (3.87B with), "
                                    "held to 10%")},
    "qwen3.5-397b-a17b": {
        "total": Card(397e9, 1e9, "huggingface.co/Qwen/Qwen3.5-397B-A17B model card (397B total, 17B activated)",
                      why="the card's figure holds the vision encoder; ours is the text model, 396.35B"),
        "active": Card(17e9, 1e9, "huggingface.co/Qwen/Qwen3.5-397B-A17B model card (397B total, 17B activated)",
                       why="printed to two digits; ours is 17.35B")},
    # DeepSeek Sparse Attention (MLA and a lightning indexer)
    "deepseek-v3.2": {"total": Card(685e9, 1e9, "huggingface.co/deepseek-ai/DeepSeek-V3.2 model card, model size "
                                    "685B (the main model and its MTP layer)", counts="+mtp"),
                      "active": Card(37e9, 1e9, "DeepSeek-V3 technical report (arXiv 2412.19437): 37B activated per "
                                     "token; V3.2 is V3's architecture with the indexer added",
                                     counts="no-input-embedding", why="printed to two digits; ours is 37.48B")},
    "glm-5": {"total": Card(744e9, 1e9, "huggingface.co/zai-org/GLM-5 model card: 744B parameters, 40B active"),
              "active": Card(40e9, 1e9, "huggingface.co/zai-org/GLM-5 model card: 744B parameters, 40B active",
                             counts="no-embeddings", why="printed to two digits; ours is 39.88B")},
    "qwen2-57b-a14b": {"total": Card(57e9, 1e9, "huggingface.co/Qwen/Qwen2-57B-A14B model card"),
                       "active": Card(14e9, 1e9, "huggingface.co/Qwen/Qwen2-57B-A14B model card",
                                  why="printed to two digits; ours is 14.25B")},
}

# descriptor -> its config.json in tests/data/hf_configs
CONFIGS = {
    "qwen3-0.6b": "Qwen--Qwen3-0.6B", "qwen3-8b": "Qwen--Qwen3-8B", "qwen3-32b": "Qwen--Qwen3-32B",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B", "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
    "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8", "qwen3-coder-480b-a35b": "Qwen--Qwen3-Coder-480B-A35B-Instruct",
    "gpt-oss-20b": "openai--gpt-oss-20b", "gpt-oss-120b": "openai--gpt-oss-120b",
    "llama-4-scout": "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "llama-4-maverick": "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
    "kimi-k2": "moonshotai--Kimi-K2-Instruct", "kimi-k2.5": "moonshotai--Kimi-K2.5", "glm-4.5": "zai-org--GLM-4.5",
    "gemma-3-27b": "google--gemma-3-27b-it", "gemma-2-9b": "google--gemma-2-9b", "gemma-2-27b": "google--gemma-2-27b",
    "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5", "mixtral-8x22b": "mistralai--Mixtral-8x22B-v0.1",
    "phi-3-mini-4k": "microsoft--Phi-3-mini-4k-instruct",
    "mistral-small-3.1-24b": "mistralai--Mistral-Small-3.1-24B-Instruct-2503",
    "deepseek-v2-lite": "deepseek-ai--DeepSeek-V2-Lite", "qwen2-57b-a14b": "Qwen--Qwen2-57B-A14B",
    "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2", "glm-5": "zai-org--GLM-5",
    "qwen3-next-80b-a3b": "Qwen--Qwen3-Next-80B-A3B-Instruct", "qwen3.5-397b-a17b": "Qwen--Qwen3.5-397B-A17B",
}


def _cfg(name: str) -> Path:
    return HF / f"{name}_config.json"


def _embeddings(m: Model) -> int:
    return m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def mtp_params(m: Model) -> int:
    """One multi-token-prediction layer as DeepSeek-V3 and GLM-4.5 ship it: a decoder layer (MoE), the projection
    of [embedding; hidden] (2h -> h), and its three norms (enorm, hnorm, the shared head's); embedding and head
    are the main model's."""
    h = m.hidden
    return attention_params(m) + ffn_params(m, m.layers - 1) + norms_per_layer(m) * h + 2 * h * h + 3 * h


def _ours(m: Model, what: str, counts: str) -> int:
    if what == "total":
        n = m.param_count()
    elif what == "active":
        n = m.active_param_count()
    elif what == "non_embedding":
        return m.param_count() - _embeddings(m)
    elif what == "mlp":
        return sum(ffn_params(m, i) for i in range(m.layers))
    elif what == "attention":
        return m.layers * attention_params(m)
    else:
        raise AssertionError(what)
    if counts == "no-input-embedding":
        n -= m.vocab * m.hidden
    elif counts.startswith("no-embeddings"):
        n -= _embeddings(m)
    if counts.endswith("+mtp"):
        n += mtp_params(m)
    return n


@pytest.mark.parametrize("key,what", [(k, w) for k in sorted(CARDS) for w in sorted(CARDS[k])])
def test_parameter_counts_match_the_model_cards(key, what):
    card = CARDS[key][what]
    ours = _ours(load_model(key), what, card.counts)
    assert ours == pytest.approx(card.figure, rel=card.tolerance()), (
        f"{key} {what}: ours {ours / 1e9:.3f}B, card {card.figure / 1e9:g}B ({card.source})")


def test_every_new_descriptor_has_a_card_a_config_and_a_source():
    new = set(CONFIGS)
    assert new == set(CARDS)
    for key in new:
        m = load_model(key)
        assert m.key == key and m.source and _cfg(CONFIGS[key]).is_file()
        if m.moe is not None:
            assert "active" in CARDS[key], key  # every MoE descriptor is checked on its active count too
    required = {"qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b",
                "llama-4-scout", "llama-4-maverick", "kimi-k2", "glm-4.5", "gemma-3-27b"}
    assert required <= new


def test_tolerances_are_tight_unless_explained():
    for key, cards in CARDS.items():
        for what, card in cards.items():
            assert card.tolerance() <= 0.1, (key, what)
            if card.tol is not None or card.tolerance() > 0.025:
                assert card.why, (key, what)  # a loose or explicit tolerance says why


# ---- the importer reproduces each descriptor ----------------------------------------------------------

# fp4_unquantized describes NVIDIA's NVFP4 release of the model, another checkpoint than the config.json's
_IDENTITY = {"key", "name", "aliases", "source", "notes", "fp4_unquantized"}


def _dims(m: Model) -> dict:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in _IDENTITY}


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_importer_reproduces_the_descriptor(key):
    imported = model_from_hf_config(_cfg(CONFIGS[key]))
    shipped = load_model(key)
    assert _dims(imported) == _dims(shipped)
    assert imported.param_count() == shipped.param_count()
    assert imported.active_param_count() == shipped.active_param_count()
    assert load_model(str(_cfg(CONFIGS[key]))) == imported


@pytest.mark.parametrize("name,key", [
    ("Qwen/Qwen3-32B", "qwen3-32b"), ("openai/gpt-oss-120b", "gpt-oss-120b"), ("gpt-oss-20b", "gpt-oss-20b"),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b-fp8"), ("qwen3-235b", "qwen3-235b-a22b"),
    ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"), ("qwen3-30b", "qwen3-30b-a3b"), ("Qwen3-8B", "qwen3-8b"),
    ("moonshotai/Kimi-K2.5", "kimi-k2.5"), ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("kimi-k2", "kimi-k2"),
    ("MiniMaxAI/MiniMax-M2.5", "minimax-m2.5"), ("zai-org/GLM-4.5", "glm-4.5"), ("glm4.5", "glm-4.5"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"), ("llama4-maverick", "llama-4-maverick"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama-4-maverick"), ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("gemma-2-9b-it", "gemma-2-9b"), ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"),
    ("phi-3-mini", "phi-3-mini-4k"), ("mistral-small-3.1", "mistral-small-3.1-24b"),
])
def test_names_people_type_resolve(name, key):
    assert load_model(name).key == key


# ---- what each family maps to -------------------------------------------------------------------------

def test_gpt_oss_shapes():
    m = load_model("gpt-oss-120b")
    assert (m.family, m.heads, m.kv_heads, m.head_dim, m.sliding_window) == ("gpt_oss", 64, 8, 64, 128)
    assert m.layer_types[:4] == ("sliding", "full", "sliding", "full") and attention_type_counts(m)["sliding"] == 18
    assert attention_span(m, 0) == 128 and attention_span(m, 1) == 0
    assert m.attention_bias and m.attention_sinks and m.expert_dtype == "fp4"
    assert m.moe == MoE(128, 4, 2880, expert_bias=True, router_bias=True)
    h, d = 2880, 64
    # q, k, v, o and their biases, one sink logit per head
    assert attention_params(m) == h * 64 * d + 2 * h * 8 * d + 64 * d * h + (64 + 16) * d + h + 64
    # 128 experts: gate/up (2 x 2880 wide) and down, with biases; the router with its bias
    assert ffn_params(m, 0) == 128 * (3 * h * 2880 + 2 * 2880 + h) + h * 128 + 128


def test_llama4_interleaves_moe_and_chunks_attention():
    mav = load_model("llama-4-maverick")
    assert moe_layers(mav) == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2: layers 1, 3, 5, ...
    assert not is_moe_layer(mav, 0) and ffn_params(mav, 0) == 3 * 5120 * 16384  # intermediate_size_mlp
    # 128 routed experts and one shared expert, each 8192 wide
    assert ffn_params(mav, 1) == 129 * 3 * 5120 * 8192 + 5120 * 128
    assert ffn_params(mav, 1, active=True) == 2 * 3 * 5120 * 8192 + 5120 * 128
    scout = load_model("llama-4-scout")
    assert moe_layers(scout) == tuple(range(48))
    for m in (mav, scout):
        assert m.attention_chunk == 8192
        assert [i for i, t in enumerate(layer_attention_types(m)) if t == "full"] == list(range(3, 48, 4))  # NoPE
        assert attention_span(m, 0) == 8192 and attention_span(m, 3) == 0
    assert scout.qk_norm and scout.qk_norm_type == "l2" and not mav.qk_norm
    assert attention_params(scout) == attention_params(mav)  # Llama 4's L2 norm has no weight


def test_qwen3_and_gemma_norms():
    q = load_model("qwen3-8b")
    assert q.qk_norm and q.qk_norm_type == "head" and not q.qkv_bias
    plain = dataclasses.replace(q, qk_norm=False)
    assert attention_params(q) - attention_params(plain) == 2 * 128  # q_norm and k_norm, head_dim each
    g = load_model("gemma-3-27b")
    assert g.sandwich_norm and norms_per_layer(g) == 4 and g.tied_embeddings and g.vocab == 262208
    assert g.layer_types[:6] == ("sliding",) * 5 + ("full",) and g.layer_types[-2:] == ("sliding", "sliding")
    assert attention_type_counts(g) == {"full": 10, "sliding": 52, "chunked": 0, "linear": 0}
    g2 = load_model("gemma-2-9b")
    assert (g2.attn_softcap, g2.logit_softcap, g2.sliding_window, g2.head_dim) == (50.0, 30.0, 4096, 256)
    assert g2.layer_types[:2] == ("sliding", "full") and not g2.qk_norm


def test_minimax_normalises_q_and_k_over_all_heads():
    m = load_model("minimax-m2.5")
    assert m.qk_norm and m.qk_norm_type == "layer"
    plain = dataclasses.replace(m, qk_norm=False)
    assert attention_params(m) - attention_params(plain) == (48 + 8) * 128
    assert m.fp8_scaling == "block" and m.expert_dtype == ""


def test_shared_experts_and_their_gate():
    q = load_model("qwen2-57b-a14b")
    assert q.moe == MoE(64, 8, 2560, num_shared_experts=1, shared_intermediate=20480, shared_expert_gate=True,
                        router="softmax_unnormalized")
    h = 3584
    assert ffn_params(q, 0) == 64 * 3 * h * 2560 + 3 * h * 20480 + h + h * 64  # routed, shared, its gate, router
    assert q.qkv_bias and not q.attention_bias
    k = load_model("kimi-k2")
    assert k.family == "deepseek_v3" and k.moe == MoE(384, 8, 2048, 1, 2048, 1, router="sigmoid_bias_grouped") and k.fp8_scaling == "block"
    assert load_model("kimi-k2.5").expert_dtype == "int4"
    glm = load_model("glm-4.5")
    assert glm.qkv_bias and not glm.attention_bias and glm.qk_norm and glm.moe.first_dense_layers == 3


def test_multimodal_configs_import_the_text_model_and_say_so():
    for name in ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "google--gemma-3-27b-it", "moonshotai--Kimi-K2.5",
                 "mistralai--Mistral-Small-3.1-24B-Instruct-2503"):
        notes = " | ".join(model_from_hf_config(_cfg(name)).notes)
        assert "vision tower" in notes and "not modelled" in notes, name
    # unused text_config fields are still reported, with their path
    assert "text_config.rope_scaling" in model_from_hf_config(_cfg("meta-llama--Llama-4-Scout-17B-16E-Instruct")).notes[0]
    oss = model_from_hf_config(_cfg("openai--gpt-oss-120b")).notes
    assert oss[0] == "config.json fields not used: quantization_config, rope_scaling"


def test_descriptor_layer_types_compact_and_explicit_forms_agree(tmp_path):
    base = ("key: t\nname: T\nfamily: gemma3\nhidden: 256\nlayers: 8\nheads: 4\nintermediate: 512\nvocab: 1000\n"
            "sliding_window: 64\n")
    forms = ["layer_pattern: {sliding: 3, full: 1}\n", "layer_pattern: [sliding, sliding, sliding, full]\n",
             "layer_types: [sliding, sliding, sliding, full, sliding, sliding, sliding, full]\n"]
    got = []
    for i, form in enumerate(forms):
        p = tmp_path / f"t{i}.yaml"
        p.write_text(base + form)
        got.append(load_model(p).layer_types)
    assert got[0] == got[1] == got[2] == ("sliding",) * 3 + ("full",) + ("sliding",) * 3 + ("full",)
    p = tmp_path / "all.yaml"
    p.write_text(base)  # a window and no types: every layer slides (Mistral-7B v0.1's way)
    assert load_model(p).layer_types == ("sliding",) * 8


def test_model_built_in_code_expands_its_layer_types():
    m = Model(key="x", name="x", family="llama", hidden=64, layers=3, heads=4, kv_heads=4, head_dim=16,
              intermediate=128, vocab=100)
    assert m.layer_types == ("full",) * 3
    assert dataclasses.replace(m, sliding_window=8, layer_types=()).layer_types == ("sliding",) * 3
    with pytest.raises(ValueError):
        dataclasses.replace(m, layer_types=("full",))


# ---- refusals ------------------------------------------------------------------------------------------

def _one_line_exit_2(capsys, *argv) -> str:
    rc = main(list(argv))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("perfmodel: warning")]
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name,needle", [
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "state-space (Mamba) layers are not modelled yet"),
    ("google--gemma-4-26B-A4B", "global_head_dim"),
])
def test_unexpressible_configs_are_refused_in_one_line(capsys, name, needle):
    line = _one_line_exit_2(capsys, "project", "--arch", "h200", "--model", str(_cfg(name)))
    assert needle in line and str(_cfg(name)) in line


def _hf(tmp_path: Path, base: str, **edits) -> Path:
    cfg = json.loads(_cfg(base).read_text())
    for k, v in edits.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def test_linear_attention_is_refused_by_layer_types_whatever_the_model_type(tmp_path):
    layers = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 9
    with pytest.raises(InputError) as e:
        model_from_hf_config(_hf(tmp_path, "Qwen--Qwen3-8B", layer_types=layers))
    assert e.value.field == "layer_types" and "27 of 36 layers are linear_attention" in str(e.value)
    cfg = json.loads(_cfg("MiniMaxAI--MiniMax-M2.5").read_text())
    cfg["attn_type_list"] = [0] * 61 + [1]  # MiniMax-Text-01's lightning attention
    (tmp_path / "m.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "m.json")
    assert "lightning attention" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("base,edits,field", [
    ("openai--gpt-oss-20b", {"layer_types": ["sliding_attention", "banded"] * 12}, "layer_types"),
    ("openai--gpt-oss-20b", {"layer_types": ["full_attention"] * 3}, "layer_types"),
    ("openai--gpt-oss-20b", {"sliding_window": None}, "sliding_window"),
    ("openai--gpt-oss-20b", {"num_experts_per_tok": 64}, "num_experts_per_tok"),
    ("Qwen--Qwen3-30B-A3B", {"mlp_only_layers": [3, 7]}, "mlp_only_layers"),
    ("Qwen--Qwen3-30B-A3B", {"decoder_sparse_step": 99}, "decoder_sparse_step"),
    ("google--gemma-2-9b", {"attn_logit_softcapping": -1}, "attn_logit_softcapping"),
    ("google--gemma-2-9b", {"final_logit_softcapping": "thirty"}, "final_logit_softcapping"),
    ("MiniMaxAI--MiniMax-M2.5", {"qk_norm_type": "per_token"}, "qk_norm_type"),
    ("zai-org--GLM-4.5", {"use_qk_norm": "yes"}, "use_qk_norm"),
])
def test_malformed_config_fields_are_one_line(tmp_path, base, edits, field):
    with pytest.raises(InputError) as e:
        model_from_hf_config(_hf(tmp_path, base, **edits))
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("edit,field", [
    ({"interleave_moe_layer_step": 99}, "text_config.interleave_moe_layer_step"),
    ({"moe_layers": [0, 1]}, "text_config.moe_layers"),
    ({"no_rope_layers": [1, 0]}, "text_config.no_rope_layers"),
    ({"hidden_size": -5}, "text_config.hidden_size"),
])
def test_malformed_text_config_fields_name_their_path(tmp_path, edit, field):
    cfg = json.loads(_cfg("meta-llama--Llama-4-Maverick-17B-128E-Instruct").read_text())
    cfg["text_config"].update(edit)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(p)
    assert e.value.field == field and "\n" not in str(e.value)
    cfg["text_config"] = "llama"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(p)
    assert e.value.field == "text_config"


GOOD = """\
key: tiny
name: Tiny
family: qwen3
hidden: 256
layers: 4
heads: 4
intermediate: 512
vocab: 1000
"""


@pytest.mark.parametrize("extra,field", [
    ("qk_norm: yes-please\n", "qk_norm"),
    ("qk_norm: true\nqk_norm_type: per_head\n", "qk_norm_type"),
    ("qk_norm_type: layer\n", "qk_norm_type"),
    ("attention_bias: 1\n", "attention_bias"),
    ("attention_sinks: sometimes\n", "attention_sinks"),
    ("sandwich_norm: 4\n", "sandwich_norm"),
    ("sliding_window: -1\n", "sliding_window"),
    ("sliding_window: 1.5\n", "sliding_window"),
    ("sliding_window: 10000000000\n", "sliding_window"),
    ("layer_types: [full, full]\n", "layer_types"),
    ("layer_types: [full, full, full, global]\n", "layer_types"),
    ("layer_pattern: [full, full, full, full, full]\n", "layer_pattern"),
    ("layer_pattern: {sliding: 0, full: 1}\nsliding_window: 8\n", "layer_pattern"),
    ("layer_pattern: []\n", "layer_pattern"),
    ("layer_pattern: [full]\nlayer_types: [full, full, full, full]\n", "layer_pattern"),
    ("layer_pattern: [sliding, full]\n", "sliding_window"),
    ("sliding_window: 64\nlayer_types: [full, full, full, full]\n", "sliding_window"),
    ("layer_pattern: [chunked, full]\n", "attention_chunk"),
    ("attention_chunk: 8192\n", "attention_chunk"),
    ("logit_softcap: -30\n", "logit_softcap"),
    ("attn_softcap: .nan\n", "attn_softcap"),
    ("attn_softcap: fifty\n", "attn_softcap"),
    ("expert_dtype: fp6\n", "expert_dtype"),
    ("expert_dtype: fp4\n", "expert_dtype"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, layer_step: 0}\n", "moe.layer_step"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, layer_step: 5}\n", "moe.layer_step"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, expert_bias: 1}\n", "moe.expert_bias"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, router_bias: 2}\n", "moe.router_bias"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, shared_expert_gate: true}\n", "moe.shared_expert_gate"),
    ("moe: {num_experts: 4, top_k: 1, expert_intermediate: 8, layer_stride: 2}\n", "moe.layer_stride"),
    ("qk_norm: true\nmla: {kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 8, v_head_dim: 8}\n", "qk_norm"),
])
def test_malformed_descriptor_fields_are_one_line(tmp_path, extra, field):
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD + extra)
    with pytest.raises(InputError) as e:
        load_model(p)
    msg = str(e.value)
    assert e.value.field == field and "\n" not in msg and msg.startswith(f"{p}: {field}: "), msg


def test_a_malformed_descriptor_exits_2_with_one_line(tmp_path, capsys):
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD + "layer_pattern: [sliding, full]\n")
    line = _one_line_exit_2(capsys, "project", "--arch", "h200", "--model", str(p))
    assert "sliding_window" in line


def test_new_descriptor_fields_round_trip(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD + "qk_norm: true\nqk_norm_type: layer\nattention_bias: true\nattention_sinks: true\n"
                 "sandwich_norm: true\nsliding_window: 128\nlayer_pattern: [sliding, full]\nlogit_softcap: 30\n"
                 "attn_softcap: 50.0\nexpert_dtype: fp4\n"
                 "moe: {num_experts: 4, top_k: 2, expert_intermediate: 64, num_shared_experts: 1, "
                 "shared_intermediate: 32, first_dense_layers: 1, layer_step: 2, expert_bias: true, "
                 "router_bias: true, shared_expert_gate: true}\n")
    m = load_model(p)
    assert (m.qk_norm, m.qk_norm_type, m.attention_bias, m.attention_sinks, m.sandwich_norm) == (
        True, "layer", True, True, True)
    assert (m.sliding_window, m.layer_types, m.logit_softcap, m.attn_softcap, m.expert_dtype) == (
        128, ("sliding", "full", "sliding", "full"), 30.0, 50.0, "fp4")
    assert moe_layers(m) == (2,)  # after 1 dense layer, every 2nd: layer 2 (layer 4 would be next)
    h = 256
    assert ffn_params(m, 2) == 4 * (3 * h * 64 + 2 * 64 + h) + 3 * h * 32 + h + h * 4 + 4
    assert ffn_params(m, 2, active=True) == 2 * (3 * h * 64 + 2 * 64 + h) + 3 * h * 32 + h + h * 4 + 4
    assert ffn_params(m, 1) == 3 * h * 512
    assert attention_params(m) == 4 * h * 64 * 4 + (4 + 8) * 64 + h + (4 + 4) * 64 + 4


# ---- DeepSeek Sparse Attention ------------------------------------------------------------------------------

def test_sparse_attention_bounds_what_decode_reads_and_adds_the_indexer():
    from perfmodel.graph import Step, build_ops
    from perfmodel.scenario import Scenario

    sparse, dense = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    sc = Scenario(tp=8, dtype="fp8").for_hardware(None)

    def core_bytes(m, ctx):
        ops = {o.name: o for o in build_ops(m, Step("decode", 8, 1, ctx), sc)}
        return ops["attn.core"].bytes, ops

    # below the top-k the two attend to the same keys; far above it the sparse core reads topk rows
    short_s, ops = core_bytes(sparse, 1024)
    short_d, _ = core_bytes(dense, 1024)
    assert short_s == pytest.approx(short_d)
    long_s, ops = core_bytes(sparse, 65536)
    long_d, _ = core_bytes(dense, 65536)
    assert long_s < long_d / 20
    assert {"attn.indexer.q", "attn.indexer.k", "attn.indexer.logits", "attn.indexer.topk"} <= set(ops)
    # the indexer reads every earlier key (fp8, index_head_dim wide): it grows with the context
    assert ops["attn.indexer.logits"].bytes > 8 * 65536 * 128


def test_sparse_attention_fields_come_together(tmp_path):
    text = (Path(load_model("deepseek-v3.2").source.split("copied: ")[-1].rstrip(")")).name)
    assert text.endswith("_config.json")
    src = (Path(__file__).parents[1] / "workloads" / "models" / "deepseek-v3.2.yaml").read_text()
    bad = tmp_path / "m.yaml"
    bad.write_text(src.replace(", index_heads: 64", ""))
    with pytest.raises(InputError) as e:
        load_model(str(bad))
    assert e.value.field == "mla.index_heads"


# ---- Gated DeltaNet linear attention -------------------------------------------------------------------------

def test_linear_layers_keep_a_state_not_a_kv_cache():
    from perfmodel.graph import Step, build_ops
    from perfmodel.scenario import Scenario

    m = load_model("qwen3-next-80b-a3b")
    assert m.layer_types.count("linear") == 36 and m.layer_types[3] == "full"
    sc = Scenario(tp=2).for_hardware(None)

    def ops(ctx):
        return {o.name: o for o in build_ops(m, Step("decode", 16, 1, ctx), sc)}

    short, long = ops(1024), ops(65536)
    # the delta rule's state is the same at any context; softmax layers read more keys as it grows
    assert short["linear.core"].bytes == long["linear.core"].bytes
    assert long["attn.core"].bytes > 30 * short["attn.core"].bytes
    assert short["linear.core"].count == 36 and short["attn.core"].count == 12
    # the state: 16 sequences x 16 value heads on each of 2 GPUs x 128 x 128, bf16, read and written
    assert short["linear.core"].bytes >= 2 * 16 * 16 * 128 * 128 * 2
    # the full-attention layers' output gate widens their q projection
    assert short["attn.qkv"].params["n"] == (2 * 8 + 2 * 1) * 256


def test_linear_attention_fields_come_together(tmp_path):
    src = (Path(__file__).parents[1] / "workloads" / "models" / "qwen3-next-80b-a3b.yaml").read_text()
    bad = tmp_path / "m.yaml"
    bad.write_text("\n".join(ln for ln in src.splitlines() if not ln.startswith("linear_attention")) + "\n")
    with pytest.raises(InputError) as e:
        load_model(str(bad))
    assert e.value.field == "linear_attention"


def test_kv_capacity_of_linear_layers_and_of_the_sparse_indexer():
    from perfmodel.capacity import kv_bytes_per_sequence, kv_bytes_per_token, linear_state_bytes
    from perfmodel.scenario import Scenario

    sc = Scenario(tp=2).for_hardware(None)
    m = load_model("qwen3-next-80b-a3b")
    # 12 full-attention layers keep keys and values: 1 KV head of 256 on each of 2 GPUs, bf16
    assert kv_bytes_per_token(m, sc) == 12 * 2 * 1 * 256 * 2
    state = linear_state_bytes(m, sc)
    # 36 layers x 16 value heads x 128 x 128 (bf16), and the convolution's last 3 inputs
    assert state == 36 * (16 * 128 * 128 * 2 + (2 * 8 * 128 + 16 * 128) * 3 * 2)
    assert kv_bytes_per_sequence(m, sc, 1000) == pytest.approx(1000 * kv_bytes_per_token(m, sc) + state)
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    fp8 = Scenario(tp=8, dtype="fp8").for_hardware(None)
    assert kv_bytes_per_token(v32, fp8) - kv_bytes_per_token(v3, fp8) == 61 * (128 + 4)


def test_the_serving_block_pool_prices_windows_and_states_at_the_mean_length():
    from perfmodel.resolve import resolve_hardware
    from perfmodel.scenario import Scenario
    from perfmodel.serve.steptime import kv_pool_blocks

    hw = resolve_hardware("h200")
    sc = Scenario(engine="vllm").for_hardware(hw)
    oss = load_model("gpt-oss-120b")  # half its layers keep a 128-token window
    every_token = kv_pool_blocks(oss, hw, sc, 256, 16)
    at_mean = kv_pool_blocks(oss, hw, sc, 256, 16, mean_len=8192)
    assert 1.8 < at_mean / every_token < 2.0  # the sliding half keeps 128 of 8,192 tokens
    dense = load_model("llama-3.1-8b")
    assert kv_pool_blocks(dense, hw, sc, 256, 16, mean_len=8192) == kv_pool_blocks(dense, hw, sc, 256, 16)
