"""How a continuous-batching step's work lies over an instance's attention-data-parallel ranks.

With attention data parallelism every rank schedules requests of its own within a token budget of its own
(:attr:`perfmodel.scenario.Scenario.rank_chunk`: vLLM's and TensorRT-LLM's ranks the whole chunk each, SGLang's the
chunk / DP) and runs attention and the dense layers on them, while every MoE layer meets all ranks' tokens; the
ranks step together, so a step lasts as long as its busiest rank's part and the group's MoE part.

The simulation keeps one queue for the instance, as an engine's load balancer sends each request to its least
loaded rank (vLLM's coordinator; SGLang deals them round robin), and lays a step's work over the ranks as they
would share it: the decoding sequences dealt evenly (the first ``n mod DP`` ranks one more) and each prompt piece
whole on the rank with the most budget left, in the order the scheduler takes them (the ranks' own queues,
balanced: an estimate of the optimistic side). The scheduler (:mod:`perfmodel.serve.engine`) sizes the pieces
with :class:`RankBudgets`; the step model (:mod:`perfmodel.serve.steptime`) prices them with :func:`place`, the
same rule, so both put every piece on the same rank.
"""
from __future__ import annotations


def decode_split(n: int, ranks: int) -> list[int]:
    """The decoding sequences each of ``ranks`` ranks runs: ``n`` dealt evenly, the first ``n mod ranks`` one more."""
    base, extra = divmod(int(n), ranks)
    return [base + (r < extra) for r in range(ranks)]


class RankBudgets:
    """The tokens each rank's step has left while a step is scheduled: ``budget`` each, less its decoding sequences'
    ``q`` tokens apiece (:func:`decode_split`). A piece goes to the rank with the most left (the first of equals)."""

    __slots__ = ("left",)

    def __init__(self, ranks: int, budget: int, decoding: int, q: int):
        self.left = [budget - q * d for d in decode_split(decoding, ranks)]

    def room(self) -> int:
        """The most tokens one piece may take now: the emptiest rank's."""
        return max(self.left)

    def take(self, tokens: int) -> int:
        """Charge ``tokens`` to the emptiest rank; its index."""
        left = self.left
        r = left.index(max(left))
        left[r] -= tokens
        return r


def place(ranks: int, n_dec: int, q: int, pieces) -> list[tuple[int, list]]:
    """Each rank's (decoding sequences, prompt pieces) of a step of ``n_dec`` decoding sequences of ``q`` tokens
    and ``pieces`` [(new tokens, cached tokens)], as :class:`RankBudgets` lays them."""
    split = decode_split(n_dec, ranks)
    budgets = RankBudgets(ranks, 0, n_dec, q)
    out: list[tuple[int, list]] = [(d, []) for d in split]
    for piece in pieces:
        out[budgets.take(piece[0])][1].append(piece)
    return out
