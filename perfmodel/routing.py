"""How unevenly a trained router spreads tokens over experts, as the engines' measured MoE tables time it
(perfmodel.cost.tables: classes ``balanced``, ``power_law_1.01``, ``power_law_1.2``: per-expert token counts drawn
from a power law of that exponent, the larger the more skewed).

Source of each family's skew: aiconfigurator-core 0.12.0, whose models time MoE with ``workload_distribution =
"power_law"`` by default and alpha 1.01 for the DeepSeek family (its sdk/models/deepseek.py, deepseek_v32.py:
DeepSeek-V3/R1, Kimi K2, DeepSeek-V3.2, GLM-5's GlmMoeDsa) and Llama 4 (hybrid_moe.py), 1.2 for every other MoE
(moe.py, qwen35.py: Mixtral, Qwen2/3-MoE, Qwen3.5, gpt-oss, MiniMax-M2). Families it does not name (DeepSeek-V2,
GLM-4.5, Qwen3-Next) take the generic 1.2. A scenario's --moe-routing replaces it (balanced: every expert the same
share, what a load balancer such as EPLB aims at). Standard library only: the CLI reads the choices at start.
"""
from __future__ import annotations

ROUTINGS = ("balanced", "power_law_1.01", "power_law_1.2")
_BY_FAMILY = {"deepseek_v3": "power_law_1.01", "deepseek_v32": "power_law_1.01", "glm_moe_dsa": "power_law_1.01",
              "llama4": "power_law_1.01"}


def default_routing(family: str) -> str:
    """The routing skew a model family's MoE layers are timed with unless a scenario says otherwise."""
    return _BY_FAMILY.get(family, "power_law_1.2")


def skew_prefix(routing: str, ep: bool) -> str:
    """The start of ``Profile.gemm_grouped_skew``'s keys for a routing with or without expert parallelism."""
    return f"{routing}:{'ep' if ep else 'local'}:"


def skew_key(routing: str, ep: bool, tokens_log2: int) -> str:
    """``Profile.gemm_grouped_skew``'s key: "<routing>:<ep|local>:<tokens in the step, a power of two>"."""
    return f"{skew_prefix(routing, ep)}{2 ** tokens_log2}"
