"""How unevenly a trained router spreads tokens over experts, as the engines' measured MoE tables time it
(perfmodel.cost.tables: classes ``balanced``, ``power_law_1.01``, ``power_law_1.2``: per-expert token counts drawn
from a power law of that exponent, the larger the more skewed).

Source of each family's skew: aiconfigurator-core 0.12.0, whose models time MoE with ``workload_distribution =
"power_law"`` by default and alpha 1.01 for the DeepSeek family (its sdk/models/deepseek.py, deepseek_v32.py:
DeepSeek-V3/R1, Kimi K2, DeepSeek-V3.2, GLM-5's GlmMoeDsa) and Llama 4 (hybrid_moe.py), 1.2 for every other MoE
(moe.py, qwen35.py: Mixtral, Qwen2/3-MoE, Qwen3.5, gpt-oss, MiniMax-M2). Families it does not name (DeepSeek-V2,
GLM-4.5, Qwen3-Next) take the generic 1.2. A scenario's --moe-routing replaces it (balanced: every expert the same
share, what a load balancer such as EPLB aims at). Standard library only: the CLI reads the choices at start.

Also how many expert-parallel ranks and nodes a token reaches (:func:`ranks_per_token`, :func:`nodes_per_token`):
what an all-to-all that sends a token once per rank or once per node moves.
"""
from __future__ import annotations

import math

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


def ranks_per_token(num_experts: int, top_k: int, ep: int) -> float:
    """Expected number of distinct EP ranks a token's top_k experts live on (uniform routing, num_experts/ep
    experts a rank): ep * (1 - C(E - E/ep, k) / C(E, k)). A DeepEP-style dispatch sends a token once to each such
    rank and combines one partial sum from each, not one copy per expert: 8 of 256 experts over EP 8 reach 5.3
    ranks, not 8 (0.66 of the bytes); over EP 64, 7.7. A group-limited router reaches fewer
    (:func:`copies_per_token`)."""
    per_rank = num_experts // ep
    if ep <= 1 or per_rank <= 0:
        return float(min(top_k, max(ep, 1)))
    miss = 1.0
    for i in range(top_k):  # C(E - E/ep, k) / C(E, k) as a product
        miss *= max(num_experts - per_rank - i, 0) / (num_experts - i)
    return ep * (1.0 - miss)


def nodes_per_token(num_experts: int, top_k: int, nodes: int, groups: int = 1, chosen: int = 1) -> float:
    """Expected number of distinct nodes a token's top_k experts live on, the experts laid out in order over
    ``nodes`` nodes (num_experts / nodes each), routing uniform within the model's group limit (``chosen`` of
    ``groups`` expert groups a token: ``MoE.expert_groups``, ``groups_per_token``): with whole groups on a node
    a token reaches at most ``chosen`` nodes. DeepSeek-V3 (8 groups, 4 a token) over 8 nodes: 3.6 nodes, against
    5.3 unlimited; over 4 nodes 2.9 (3.6 unlimited). DeepEP's normal kernels send a token once to each such node over the network and
    forward it inside the node over NVLink, so these copies, not the ranks', cross the NICs."""
    e, k = num_experts, top_k
    if nodes <= 1:
        return 1.0
    limited = 1 < groups and chosen < groups and (groups % nodes == 0 or nodes % groups == 0)
    if not limited:  # uniform over all experts: ranks_per_token with a node as the rank
        return ranks_per_token(e, k, nodes)
    per_group = e // groups
    eligible = chosen * per_group  # the experts of the token's chosen groups
    if nodes % groups == 0:  # a group spans nodes / groups nodes: a node is eligible when its group is chosen
        return nodes * chosen / groups * (1.0 - math.comb(eligible - e // nodes, k) / math.comb(eligible, k))
    held = groups // nodes  # whole groups on a node; c of them chosen (hypergeometric)
    hit = 0.0
    for c in range(1, min(held, chosen) + 1):
        p_c = math.comb(held, c) * math.comb(groups - held, chosen - c) / math.comb(groups, chosen)
        hit += p_c * (1.0 - math.comb(eligible - c * per_group, k) / math.comb(eligible, k))
    return nodes * hit


def remote_node_copies(tokens, num_experts: int, top_k: int, nodes: int, groups: int = 1, chosen: int = 1):
    """The copies of ``tokens`` a send-once-per-node all-to-all puts on a rank's NIC: :func:`nodes_per_token` less
    each token's own node (by symmetry, (nodes - 1) / nodes of them)."""
    return tokens * nodes_per_token(num_experts, top_k, nodes, groups, chosen) * (nodes - 1.0) / nodes


def copies_per_token(moe, ranks: int) -> float:
    """Copies of a token an all-to-all that sends once per rank (or per node, with ``ranks`` the nodes) moves over
    ``ranks`` ranks of ``moe``'s experts: :func:`nodes_per_token` within the model's group limit (DeepSeek-V3 over EP
    8: 3.6, not the 5.3 of unlimited routing)."""
    return nodes_per_token(moe.num_experts, moe.top_k, ranks, moe.expert_groups, moe.groups_per_token) \
        if ranks > 1 else 1.0
