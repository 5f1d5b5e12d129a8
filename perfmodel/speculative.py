"""Where a speculative decode's draft tokens come from, and what drafting them costs.

A decode step with speculation verifies 1 + K tokens a sequence (``Scenario.mtp`` = K; the verify step is an
ordinary decode step of that many query rows, :mod:`perfmodel.projection`), or a token tree's nodes
(``Scenario.verify_tokens``: each draft step after the first expands ``spec_topk`` candidates a sequence). The
K draft tokens come from

- the model's own multi-token-prediction modules (DeepSeek-V3's MTP: one decoder layer and the shared LM head
  per draft token; the model's ``mtp_layers``), or
- a separate draft model (``Scenario.draft``: a smaller model of the family, sharing the target's tokenizer),
  run K decode steps of one token a sequence before each verify step, on the same GPUs and layout, with a KV
  cache and weights of its own; it prefills every prompt too (vLLM's and SGLang's draft-model speculation), or
- an EAGLE head (``--draft`` an EAGLE or EAGLE-3 config.json): one decoder layer over the target's fused hidden
  states, drafting the same way (K steps, its own KV cache, the prompt prefilled), its LM head over EAGLE-3's
  smaller draft vocabulary.

Acceptance is a distribution: position i is accepted with probability a_i given the ones before it were
(``Scenario.acceptance``), so a verify step emits 1 to K + 1 tokens (``Scenario.accepted_run``); TPOT is the
time of a verify step and its drafts over the tokens it emits on average.
"""
from __future__ import annotations

import functools

from .errors import InputError
from .models import Model
from .scenario import Scenario


@functools.lru_cache(maxsize=16)
def _load(name: str) -> Model:
    from .resolve import resolve_model

    return resolve_model(name)


def draft_model(sc: Scenario) -> Model | None:
    """The separate draft model of the scenario, or None (no speculation, or the model's own MTP modules)."""
    if not sc.mtp or sc.draft is None:
        return None
    try:
        return _load(sc.draft)
    except InputError as e:
        raise InputError(f"draft model: {e.detail}", file=e.file, field="--draft") from None


def draft_scenario(sc: Scenario) -> Scenario:
    """The scenario the draft model runs: the target's layout and formats, without speculation of its own."""
    return sc.with_(mtp=0, mtp_accept=None, draft=None)


def mtp_scenario(model: Model, sc: Scenario) -> Scenario:
    """The scenario the model's own MTP layer drafts in: bf16 where the scenario runs the model's NVFP4 checkpoint
    and that checkpoint keeps its MTP layers unquantized (``Model.fp4_unquantized``), else ``sc``."""
    from .geometry import module_format

    fmt = module_format(model, sc, "mtp")
    return sc if fmt == sc.dtype else sc.with_(dtype=fmt)


def check_draft(model: Model, sc: Scenario) -> None:
    """Refuse a draft model no engine runs: one of another vocabulary, or one whose heads the layout cannot split
    (a model without MTP layers and without a draft model is refused by :func:`perfmodel.graph.check_layout`)."""
    if not sc.mtp or sc.draft is None:  # no speculation, or the model's own MTP layers (graph.check_layout)
        return
    draft = draft_model(sc)
    vocab = draft.target_vocab or draft.vocab  # an EAGLE-3 head's draft vocabulary maps onto its target's
    if vocab != model.vocab:
        raise InputError(f"draft model {draft.name} has a vocabulary of {vocab} tokens, {model.name} of "
                         f"{model.vocab}: speculation needs one tokenizer", field="--draft")
    if draft.draft_fuses and draft.hidden != model.hidden:
        raise InputError(f"EAGLE head {draft.name} fuses hidden states {draft.hidden} wide, {model.name}'s are "
                         f"{model.hidden}: a head of another model", field="--draft")
    from .graph import check_layout

    try:
        check_layout(draft, draft_scenario(sc))
    except InputError as e:
        raise InputError(f"draft model {draft.name}: {e.detail}", field="--draft") from None


def describe(model: Model, sc: Scenario) -> str:
    """The assumption line of a speculative decode."""
    a = sc.acceptance
    rates = f"{a[0]:g}" if len(set(a)) == 1 else ", ".join(f"{x:g}" for x in a)
    drafter = draft_model(sc)
    kind = "EAGLE head" if drafter is not None and drafter.draft_fuses else "draft model"
    source = (f"the {kind} {drafter.name} (its own decode step of one token per draft, its prefill "
              "in TTFT, its weights and KV cache in memory)" if drafter is not None else
              "the model's own multi-token-prediction layer (one decoder layer and the LM head each)")
    run = ", ".join(f"{p:.2f}" for p in sc.accepted_run)
    tree = (f"; a token tree: each draft step after the first expands the {sc.spec_topk} best candidates of a "
            f"sequence ({sc.spec_topk} tokens a sequence a step) and the verify step checks {sc.verify_tokens} of "
            "its nodes, the acceptance being the tree's accepted path at each depth" if sc.tree else "")
    tokens = "token" if sc.mtp == 1 else "tokens"
    return (f"speculative decoding: {sc.mtp} draft {tokens} a step from {source}{tree}, accepted with probability "
            f"{rates} given the ones before: a verify step of {sc.verify_tokens} tokens emits 1..{1 + sc.mtp} with "
            f"probability {run} ({sc.tokens_per_step:.2f} on average); TPOT is the time per emitted token")
