"""Ops -> a projection: TTFT, TPOT, throughput, memory, the binding resource, an uncertainty band.

Definitions (also in the README):

- A *step* is one forward pass (see :mod:`perfmodel.graph`). Its latency is the sum of its operators'
  times (every layer, every pipeline stage in turn), with collectives reduced by ``Scenario.overlap``,
  plus a launch gap per kernel (``Scenario.launch``: graph replay or eager dispatch); how they add up is
  :mod:`perfmodel.step_accounting`'s alone.
- TTFT is the prefill step of the requests that prefill together: the whole batch under static batching,
  ``n = max(1, min(batch, prefill_chunk // isl))`` requests under continuous batching.
- TPOT is the mean decode step over the generation (contexts isl .. isl + osl - 2), by Simpson's rule
  over three contexts. With pipeline parallelism the batch is cut into ``pp`` micro-batches that fill
  the stages; a token's step is one micro-batch's pass through every stage.
- Throughput (output tokens/s for the replica of tp x pp GPUs):
  static: batch * osl / (TTFT + (osl - 1) * TPOT);
  continuous: batch / (TPOT + batch * prefill_per_request / osl), the prefill of each request amortised
  over the stream of decode steps it shares with the others.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import capacity
from .cost import OpTime, family, time_ops, time_steps
from .cost.backend import NP
from .cost.overlap import resolve_method
from .errors import InputError
from .graph import Step, allreduce_norm_layout, check_layout, exchange_quantized, moe_exchange
from .host_costs import host_rules, request_overhead_s, scenario_host_costs
from .models import Model
from .routing import default_routing
from .op_graphs import ops_for
from .ops import COMM_KINDS
from .profile import Profile
from .scenario import Scenario, require_resolved
from .spec import HardwareSpec
from .speculative import check_draft, draft_model, draft_scenario, mtp_scenario
from .speculative import describe as describe_speculation
from .step_accounting import (Rules, StepAccount, account, api_servers, engine_scheduling, scheduler_rules,
                              step_time, streamed_tokens)
from .step_accounting import host_cost  # noqa: F401  (for the callers that import it from here)
from .vision import describe as describe_images
from .vision import with_images

Z90 = 1.2815515655446004  # standard normal quantile of 0.9


@dataclass
class Phase:
    """One evaluated step."""

    name: str
    batch: object
    seq: object
    context: object
    times: list[OpTime]
    time_s: object  # the step's latency
    kernels_s: object  # part of it that is launch gaps
    layers: int
    account: StepAccount | None = None  # how the ops add up to time_s (perfmodel.step_accounting)

    @property
    def comm_runs(self) -> list | None:
        """Per op: the time one run of a collective adds after overlap (None: not a collective)."""
        return None if self.account is None else self.account.comm_runs

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in self.times:
            out[t.op.kind] = out.get(t.op.kind, 0.0) + t.total
        return out

    def layer_time_s(self):
        """Mean time of one decoder layer (embedding, final norm and LM head excluded)."""
        return layer_time(self.times, self.layers)

    def flops(self):
        return sum(t.op.flops * t.op.count for t in self.times)

    def bytes(self):
        return sum(t.op.bytes * t.op.count for t in self.times if t.op.kind not in COMM_KINDS)


@dataclass
class Projection:
    hardware: HardwareSpec
    model: Model
    scenario: Scenario  # with the batch resolved to a number
    profile: Profile
    prefill: Phase
    decode: Phase | None  # at the mean context of the generation; None when osl == 1
    ttft_s: float
    tpot_s: float
    e2e_s: float
    throughput_tok_s: float
    memory: capacity.Memory
    mfu: float
    mbu: float
    bands: dict[str, tuple[float, float, float]]  # metric -> (p10, p50, p90)
    assumptions: list[str] = field(default_factory=list)
    prefill_requests: int = 1

    @property
    def throughput_tok_s_per_gpu(self) -> float:
        return self.throughput_tok_s / self.scenario.gpus

    @property
    def batch(self) -> int:
        return int(self.scenario.batch)


def evaluate_step(model: Model, hw: HardwareSpec, sc: Scenario, prof: Profile, step: Step) -> Phase:
    require_resolved(sc, "projection.evaluate_step")
    ops = ops_for(model, step, sc)
    return _phase(model, hw, sc, prof, step, time_ops(ops, hw, prof, mode=sc.mode, world=sc.gpus))


def evaluate_steps(model: Model, hw: HardwareSpec, sc: Scenario, prof: Profile, steps) -> list[Phase]:
    """:func:`evaluate_step` of each of several steps of one layout (the decode steps at a generation's contexts),
    the ops they have alike priced once (:func:`perfmodel.cost.time_steps`)."""
    require_resolved(sc, "projection.evaluate_steps")
    timed = time_steps([ops_for(model, s, sc) for s in steps], hw, prof, mode=sc.mode, world=sc.gpus)
    return [_phase(model, hw, sc, prof, s, times) for s, times in zip(steps, timed)]


def _phase(model: Model, hw: HardwareSpec, sc: Scenario, prof: Profile, step: Step, times: list[OpTime]) -> Phase:
    rules = Rules.of(sc, step.phase, **host_rules(sc, prof), **scheduler_rules(sc, step.batch))
    acc = account(times, rules, prof, hw=hw, world=sc.gpus)
    sums = acc.sums()
    return Phase(step.phase, step.batch, step.seq, step.context, times, acc.time_s, sums["gaps"],
                 model.layers, acc)


def project(hardware, model, scenario: Scenario | None = None, *, profile: Profile | None = None,
            **overrides) -> Projection:
    """Project one scenario. ``hardware`` and ``model`` may be names, paths or loaded objects; keyword
    arguments override scenario fields (``project("b200", "llama70b", tp=2, dtype="fp8")``)."""
    from .resolve import setup

    s = setup(hardware, model, (scenario or Scenario()).with_(**overrides), profile)
    return project_resolved(s.hardware, s.model, s.scenario, s.profile)


def project_resolved(hw: HardwareSpec, model: Model, sc: Scenario, prof: Profile) -> Projection:
    sc = with_images(model, require_resolved(sc, "projection.project_resolved"))  # images become prompt tokens (unchanged without images)
    layout_notes = check_layout(model, sc)
    check_draft(model, sc)
    if sc.batch == "max":
        b = capacity.max_batch(model, sc, hw)
        capacity.check_fits(model, sc, hw, b)
        sc = sc.with_(batch=int(batch_cap(b, sc)))  # memory, and the engine's scheduler limit
    else:
        capacity.check_fits(model, sc, hw, capacity.max_batch(model, sc, hw), batch=int(sc.batch))
    batch = int(sc.batch)
    st = serving_times(model, hw, sc, prof, batch)
    prefill, decode = st.prefill, st.decode
    ttft, tpot, e2e, thr = float(st.ttft_s), float(st.tpot_s), float(st.e2e_s), float(st.throughput_tok_s)
    n_pre = int(st.prefill_requests)
    mem = capacity.memory(model, sc, batch, hw)
    mfu, mbu = _utilisation(hw, sc, prefill if decode is None else decode, tpot or ttft)
    bands = _bands(prof, prefill, decode, ttft, tpot, thr, hw, sc)
    proj = Projection(hw, model, sc, prof, prefill, decode, ttft, tpot, e2e, thr, mem, mfu, mbu, bands,
                      assumptions(hw, model, sc, prof) + layout_notes, n_pre)
    _check_finite(proj)
    return proj


def _check_finite(p: Projection) -> None:
    """Nothing non-finite leaves the tool: an overflow or underflow in the inputs stops with one line."""
    values = {"TTFT": p.ttft_s, "TPOT": p.tpot_s, "throughput": p.throughput_tok_s, "MFU": p.mfu, "MBU": p.mbu}
    values.update({f"band {k}": x for k, v in p.bands.items() for x in v})
    bad = [k for k, v in values.items() if not math.isfinite(float(v)) or float(v) < 0]
    if bad:
        raise InputError(f"the projection of {p.model.name} on {p.hardware.name} is not finite ({', '.join(bad[:3])}): "
                         "a spec figure or profile parameter is out of any physical range", file=p.hardware.files[0]
                         if p.hardware.files else None)


@dataclass
class ServingTimes:
    prefill: Phase
    decode: Phase | None
    ttft_s: object
    tpot_s: object
    e2e_s: object
    throughput_tok_s: object  # the replica's output tokens/s
    prefill_requests: object


def serving_times(model: Model, hw: HardwareSpec, sc: Scenario, prof: Profile, batch) -> ServingTimes:
    """TTFT, TPOT, end-to-end latency and throughput for ``batch`` sequences (module doc: definitions).

    ``batch`` and the spec's figures may be numpy arrays (sweeps); everything broadcasts.
    """
    require_resolved(sc, "projection.serving_times")
    plan = serving_steps(sc, batch)
    prefill = evaluate_step(model, hw, sc, prof, plan.prefill)
    decode = evaluate_steps(model, hw, sc, prof, plan.decode)
    ttft = prefill.time_s + request_overhead_s(sc, hw, model, prof)  # the request's own setup and token return
    drafter = draft_model(sc)
    draft_s = None
    if drafter is not None:  # a separate draft model: its own decode step per draft token, its prefill in TTFT
        sc_d = draft_scenario(sc)

        def one_draft(step):
            return _device_s(evaluate_step(drafter, hw, sc_d, prof, step))

        ttft = ttft + _device_s(evaluate_step(drafter, hw, sc_d, prof, plan.prefill))
    else:  # the model's own MTP module: one decoder layer and the LM head, in the checkpoint's format for it
        sc_mtp = mtp_scenario(model, sc)

        def one_draft(step):
            phase = evaluate_step(model, hw, sc_mtp, prof, step)
            return draft_time(phase.times, phase.layers)

    if plan.draft is not None:
        draft_s = drafting_time(sc, one_draft(plan.draft),
                                None if plan.draft_wide is None else one_draft(plan.draft_wide))
    if decode:
        tpot = decode_mean(sc, *(d.time_s for d in decode), draft_s=draft_s)
    else:
        tpot = 0.0 * ttft
    e2e, thr = serving_rates(sc, batch, plan.n_pre, ttft, tpot, decode=bool(decode))
    return ServingTimes(prefill, decode[1] if decode else None, ttft, tpot, e2e, thr, plan.n_pre)


def _device_s(phase):
    """A draft model's step without the engine's host work: the scheduler and the front end serve the target's
    step, which the drafting joins (their work is the cycle's, paid once, with the verify step's)."""
    acc = phase.account
    return step_time(acc.sums(), acc.serial_s)


# The serving formulas below are written once against a math backend (perfmodel.cost.backend): numbers and
# arrays here, Excel formulas of the workbook's cells there (perfmodel.outputs.workbook).

def prefill_requests(sc: Scenario, batch, xp=NP):
    """Requests that prefill together: the whole batch under static batching; under continuous batching
    ``max(1, min(batch, prefill_chunk // isl))``; with attention data parallelism every rank as many of its own
    sequences (ceil(batch / DP) of them) within its own budget (``Scenario.rank_chunk``), at most the batch."""
    if sc.batching == "static":
        return batch
    dp = sc.attention_dp
    per_chunk = xp.floor(sc.rank_chunk / sc.prompt)
    if dp == 1:
        return xp.maximum(1, xp.minimum(batch, per_chunk))
    return xp.minimum(batch, dp * xp.maximum(1, xp.minimum(xp.ceil(batch / dp), per_chunk)))


@dataclass
class ServingSteps:
    """The steps a serving projection times: the prefill of ``n_pre`` requests and, with more than one output
    token, the decode of a ``micro``-batch at the first, middle and last context of the generation (TPOT is
    their mean by Simpson's rule), and with speculative decoding one draft token's step."""

    n_pre: object
    micro: object
    prefill: Step
    decode: tuple = ()  # (first, middle, last) decode steps; empty when osl == 1
    draft: Step | None = None
    # a token tree's later draft steps: each expands the spec_topk best candidates of a sequence (None: a chain)
    draft_wide: Step | None = None


def serving_steps(sc: Scenario, batch, xp=NP, *, decode: bool | None = None) -> ServingSteps:
    """The steps of a serving scenario (module doc). With speculative decoding (``sc.mtp`` draft tokens) a decode
    step verifies ``sc.verify_tokens`` per sequence (1 + mtp for a chain, a tree's nodes); the draft steps are at
    the middle context, a tree's after the first at ``spec_topk`` tokens a sequence. ``decode``: whether there
    are decode steps (default: more than one output token; given where ``osl`` is a formula)."""
    n_pre = prefill_requests(sc, batch, xp)
    micro = batch / sc.pp if sc.pp > 1 else batch
    prefill = Step("prefill", n_pre, sc.prompt, 0)
    if not (sc.osl > 1 if decode is None else decode):
        return ServingSteps(n_pre, micro, prefill)
    lo, hi = sc.prompt, sc.prompt + xp.maximum(sc.osl - 2, 0)
    mid = (lo + hi) / 2.0
    decode = tuple(Step("decode", micro, sc.verify_tokens, c) for c in (lo, mid, hi))
    wide = Step("decode", micro, sc.spec_topk, mid) if sc.mtp > 1 and sc.spec_topk > 1 else None
    return ServingSteps(n_pre, micro, prefill, decode, Step("decode", micro, 1, mid) if sc.mtp else None, wide)


def layer_time(times, layers: int):
    """Mean time of one decoder layer of a step's timed ops (``.op``, ``.time``), each op alone."""
    return sum(t.time * t.op.count for t in times if t.op.scope == "layer") / layers


def draft_time(times, layers: int):
    """One draft token's time from its step's timed ops: a decoder layer (the step's mean) and the LM head, as
    DeepSeek-V3's MTP module runs them."""
    return layer_time(times, layers) + sum(t.time * t.op.count for t in times if t.op.name == "lm_head")


def drafting_time(sc: Scenario, first, wide=None):
    """The drafting of one verify step's tokens from one draft step's time: ``mtp`` steps of one token a sequence
    for a chain; a tree's first step at one token and the rest at ``wide`` (``spec_topk`` tokens a sequence)."""
    if wide is None:
        return sc.mtp * first
    return first + (sc.mtp - 1) * wide


def decode_mean(sc: Scenario, first, middle, last, *, draft_s=None):
    """TPOT from the times of the first, middle and last decode :func:`serving_steps`: their mean over the
    generation by Simpson's rule; with speculative decoding the drafting of a step's tokens (``draft_s``,
    :func:`drafting_time`) added and the sum shared by the tokens a step emits (``sc.tokens_per_step``)."""
    mean = (first + 4.0 * middle + last) / 6.0
    if sc.mtp:
        mean = (mean + draft_s) / sc.tokens_per_step
    return mean


def serving_rates(sc: Scenario, batch, n_pre, ttft, tpot, *, decode: bool = True) -> tuple:
    """(end-to-end latency, the replica's output tokens/s) from TTFT and TPOT (module doc: definitions);
    ``decode``: whether there are decode steps (more than one output token)."""
    e2e = ttft + (sc.osl - 1) * tpot
    if sc.batching == "static":
        thr = batch * sc.osl / e2e
    elif decode:
        thr = batch / (tpot + batch * (ttft / n_pre) / sc.osl)
    else:
        thr = n_pre / ttft
    return e2e, thr


def batch_cap(batch, sc: Scenario, xp=NP):
    """A batch within the engine's scheduler limit (``sc.max_batch``, where it has one)."""
    return batch if sc.max_batch is None else xp.minimum(batch, sc.max_batch)


def _utilisation(hw: HardwareSpec, sc: Scenario, phase: Phase, t: float) -> tuple[float, float]:
    """MFU against the dense peak of the GEMM format, and HBM bandwidth utilisation, for the phase."""
    from .cost import matmul_rate

    peak, _ = matmul_rate(hw, sc.dtype, Profile())
    micro = sc.pp if phase.name == "decode" else 1
    flops = float(phase.flops()) * sc.tp * sc.attention_dp * micro
    nbytes = float(phase.bytes()) * sc.tp * sc.attention_dp * micro
    gpus = sc.gpus
    return flops / (t * gpus * peak), nbytes / (t * gpus * hw.hbm_bandwidth)


# A spec figure marked estimate (a part that does not exist yet, an unpublished clock) is taken to be off by up
# to this much at P10/P90 (log-spread; estimate): it widens the band of the time it binds.
SPEC_ESTIMATE_SPREAD = 0.15
_BOUND_FIGURE = {"memory": "memory.bandwidth", "network": "interconnect.scale_up.bandwidth"}


def _weight_only_text(model: Model, narrow: str, sc: Scenario, hw: HardwareSpec, prof: Profile) -> str:
    """What prices experts stored narrower than the products (weight-only: gpt-oss's MXFP4, Kimi K2's INT4), by
    the best evidence the profile holds: the engine's measured tables of the format, else the format's kernel
    efficiency fitted on another part's tables, else the dense format's (a known bias, stated)."""
    from .cost.gemm import gemm_format
    from .cost.tables import family_table
    from .graph import expert_product_format

    act = expert_product_format(model, sc)
    fmt = gemm_format(act, None, narrow)
    head = (f"experts stored in {narrow} under {sc.dtype} products (weight-only, class {fmt}"
            + (", the engine's MXFP8 activations on this part" if act != sc.dtype else "") + "): ")
    table = family_table(prof, "moe", hw)
    if table is not None and ("moe", fmt, "balanced") in table.rows:
        return head + f"priced by {table.engine}'s measured MoE tables of that format on {table.part}"
    if fmt in prof.gemm_grouped_eta:
        return head + "priced by that format's grouped-kernel efficiency fitted on measured MoE tables " \
                      f"({prof.label}), no table of this part's"
    return head + (f"priced as {sc.dtype} grouped GEMMs reading {narrow} weights: no measured table of the format "
                   "for this part or engine, and the engines' weight-only kernels run slower than that "
                   "(docs/tools/moe_format_check.py measures by how much): expect this MoE too fast")


def _family_shares(phase: Phase | None, hw: HardwareSpec, prof: Profile) -> dict[str, float]:
    """Share of the step's time per residual family; attention split by the backend that times it when
    the profile has that backend's own residuals (``attention:cudnn``)."""
    from .cost import attention_kernel

    shares: dict[str, float] = {}
    if phase is None:
        return shares
    for t in phase.times:
        f = family(t.op.kind)
        if f == "attention":
            key = f"attention:{attention_kernel(t.op, hw, prof).backend}"
            f = key if key in prof.residual_quantiles else f
        shares[f] = shares.get(f, 0.0) + float(np.sum(t.total))
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}


def _estimate_share(phase: Phase | None, hw: HardwareSpec, sc: Scenario) -> float:
    """Share of the step's time bound by a spec figure that is an estimate."""
    if phase is None:
        return 0.0
    from .dtypes import TENSOR_RATE_KEY

    rate = f"compute.tensor.{TENSOR_RATE_KEY.get(sc.dtype, 'bf16')}"
    total = est = 0.0
    for t in phase.times:
        x = float(np.sum(t.total))
        total += x
        path = _BOUND_FIGURE.get(str(t.bound), rate if t.bound == "compute" else None)
        if path and hw.source_of(path) == "estimate":
            est += x
    return est / total if total else 0.0


def _band(prof: Profile, phase: Phase | None, hw: HardwareSpec, sc: Scenario) -> tuple[float, float, float]:
    """(p10, p50, p90) multipliers on a step's time: per-family log residuals weighted by time share,
    families independent, errors within a family fully correlated (a systematic bias); widened by the
    carry of the profile to another part and by spec figures that are estimates."""
    mu = 0.0
    var = 0.0
    for fam, w in _family_shares(phase, hw, prof).items():
        q = prof.residual_quantiles.get(fam, prof.residual_quantiles.get(fam.split(":")[0], [-0.3, 0.0, 0.3]))
        mu += w * q[1]
        sigma = (q[2] - q[0]) / (2 * Z90)
        var += (w * sigma) ** 2
    var += (prof.carry_spread / Z90) ** 2
    var += (_estimate_share(phase, hw, sc) * SPEC_ESTIMATE_SPREAD / Z90) ** 2
    s = math.sqrt(var)
    return math.exp(mu - Z90 * s), math.exp(mu), math.exp(mu + Z90 * s)


def _bands(prof, prefill, decode, ttft, tpot, thr, hw, sc):
    if sc.mode == "sol":  # a bound, not an estimate: no band around it
        bp = bd = (1.0, 1.0, 1.0)
    else:
        bp = _band(prof, prefill, hw, sc)
        bd = _band(prof, decode, hw, sc) if decode is not None else bp
    return {
        "ttft_ms": tuple(ttft * 1e3 * x for x in bp),
        "tpot_ms": tuple(tpot * 1e3 * x for x in bd),
        # throughput moves inversely with time: its P10 comes from the slow (P90) end
        "throughput_tok_s": tuple(thr / x for x in reversed(bd)),
    }


def _wide_default(sc: Scenario) -> bool:
    """Whether the engine's preset, not its default exchange, chose the all-to-all: wide expert parallelism
    (:meth:`perfmodel.engines.Engine.exchange_for`)."""
    from .engines import engine_for

    eng = engine_for(sc.engine)
    if sc.moe_exchange != "all_to_all" or eng.moe_exchange == "all_to_all":
        return False
    return eng.exchange_for(sc.moe_group, sc.attention_dp, sc.ep) == "all_to_all"


def _scheduler_text(sc: Scenario) -> str:
    """How the engine's own host work a step joins it (perfmodel.engines.Engine.scheduler_host, frontend_host), or
    ''."""
    found = engine_scheduling(sc)
    if found is None:
        return ""
    eng, overlapped = found
    seqs = sc.batch if isinstance(sc.batch, int) else None
    rules = scheduler_rules(sc, seqs) if seqs else {}
    speed = "" if sc.host_speed in (None, 1.0) else f", taken {sc.host_speed:g} times as fast (--host-speed)"
    text = ""
    if eng.scheduler_host:
        share = -(-seqs // sc.attention_dp) if seqs else None
        at = (f": {rules['scheduler_s'] * 1e3:.2f} ms at {share:g} sequences"
              + (" (an attention-DP rank's share)" if sc.attention_dp > 1 else "")) if rules else ""
        text = (f"{eng.name}'s host work a step (scheduling, KV-block bookkeeping, output handling) by its running "
                f"sequences, interpolated between its medians at 1 to 2,048{at}, measured on a development VM's CPU"
                f"{speed} "
                + ("while the device runs the previous step (asynchronous scheduling): the step takes the longer"
                   if overlapped else "between the device's steps (synchronous scheduling): added to each step"))
    front = _frontend_text(eng, sc, seqs, rules.get("frontend_s"), speed)
    return "; ".join(t for t in (text, front) if t)


def _frontend_text(eng, sc: Scenario, seqs: int | None, front_s, speed: str) -> str:
    """How the engine's front end (perfmodel.engines.Engine.frontend_host) bounds a step, or ''."""
    if not eng.frontend_host:
        return ""
    servers = api_servers(sc, eng)
    if not servers:
        return f"{eng.name}'s front end: none (--api-servers 0, an offline run: no token streamed)"
    at = f": {front_s * 1e3:.2f} ms at {seqs:g} streams" if seqs else ""
    many = f", the streams shared by {servers} API servers" if servers > 1 else ""
    longer = ""
    if eng.frontend_length:
        longer = (f", its work growing with the tokens each stream has sent ({streamed_tokens(sc):g} on average "
                  f"here, half the output; measured after 1,000 and 4,000 tokens)")
    return (f"{eng.name}'s front end (its detokenizer and HTTP server processes streaming every token as a "
            f"server-sent event, pipelined beside the scheduler: a step goes no faster than its slowest process's "
            f"work for the step's streams{many}), interpolated between medians measured on a development VM's "
            f"CPU{speed}{at}{longer}")


_FP4_GROUP_WORDS = {"attention_qkv": "attention's query and key-value projections", "attention_o": "attention's "
                    "output projection", "indexer": "the sparse-attention indexer", "linear_attention": "Gated "
                    "DeltaNet's projections", "shared_experts": "the shared experts", "dense_layers": "the dense "
                    "layers' FFN", "mtp": "the MTP layers"}


def _fp4_kept_text(model: Model, sc: Scenario) -> str:
    """The assumption line for the modules an fp4 scenario runs in bf16 (``Model.fp4_unquantized``), or ''."""
    if sc.dtype != "fp4" or not model.fp4_unquantized:
        return ""
    groups = ", ".join(_FP4_GROUP_WORDS[g] for g in model.fp4_unquantized)
    return (f"fp4 as the model's NVFP4 checkpoint publishes it: {groups} kept in {sc.act_dtype} (their products "
            "unquantized, their weights stored so; the model's fp4_unquantized, docs/models.md)")


def assumptions(hw: HardwareSpec, model: Model, sc: Scenario, prof: Profile) -> list[str]:
    out = []
    if sc.mode == "sol":
        out.append("speed of light: each operator at max(FLOPs / dense peak, bytes / HBM bandwidth); "
                   "collectives at link bandwidth; no launch or latency costs")
    elif not prof.fitted:
        out.append("efficiencies are documented defaults (uncalibrated); run `perfmodel calibrate` and "
                   "`perfmodel fit` to anchor them in measurements")
    else:
        carried = f", carried from {prof.carried_from} by the transfer rules" if prof.carried_from else ""
        out.append(f"efficiencies fitted on {prof.device or prof.name}{carried}")
        fams = prof.provenance.get("families") or {}
        if fams:
            out.append("calibration by family: " + "; ".join(
                f"{fam} {v.get('source', '')}" + (f" ({v['engine']})" if v.get("engine") else "")
                for fam, v in fams.items()))
        from .spec import lineage_rank, what_if_of

        inherited = [f for f, v in fams.items()
                     if isinstance(v, dict) and not v.get("carried") and lineage_rank(v.get("part", ""), hw)]
        parent = what_if_of(hw) if inherited else None  # some family measured on a part this spec extends
        if parent is not None:
            changed = ", ".join(parent[1]) or "no figure"
            out.append(f"{hw.key} extends {parent[0]} ({changed} changed): {', '.join(inherited)} from "
                       f"{parent[0]}'s measurements, priced at this spec's figures (derived figures rescaled with "
                       "what they derive from)")
        from .cost.tables import assumption as table_assumption

        line = table_assumption(hw, prof)
        if line:
            out.append(line)
        chosen = prof.provenance.get("release_tables")
        if chosen:
            out.append(f"engine release {chosen['asked']}: " + "; ".join(
                f"{fam} tables of {where}" for fam, where in chosen.items() if fam != "asked"))
    out.append(f"{sc.batching} batching; throughput definition in the README")
    if sc.mode != "sol":
        from .kernel_choices import assumption_lines, choices

        out += assumption_lines(choices(hw, sc, prof, model))
        host = _host_text(sc, prof)
        if host:
            out.append(host)
        scheduler = _scheduler_text(sc)
        if scheduler:
            out.append(scheduler)
    if sc.attention_dp > 1:
        out.append(f"attention data parallel: {sc.attention_dp} groups of TP {sc.tp} run attention and dense layers "
                   "on their own sequences (the busiest rank's share timed, the others wait for it at the MoE "
                   f"layers); the MoE layers spread over all {sc.moe_group} GPUs (EP {sc.ep}"
                   + (f", each expert split {sc.moe_group // sc.ep} ways)" if sc.moe_group // sc.ep > 1 else ")"))
    if sc.mtp:
        out.append(describe_speculation(model, sc))
    if sc.image_tokens:
        out.append(describe_images(model, sc))
    exchange = moe_exchange(sc) if model.moe is not None else "none"
    if exchange in ("all_to_all", "gather"):
        fmt = "in the experts' format" if exchange_quantized(sc) else "in bf16"
        if exchange == "all_to_all" and sc.moe_all_to_all in ("deepep", "mnnvl"):
            from .graph import deepep_payload

            def ways(kind: str) -> str:
                out, back = (deepep_payload(model, sc, f"{kind}.{d}") for d in ("dispatch", "combine"))
                return f"out in {out}, back in {back}"

            fmt = ("on DeepEP's kernels (low-latency in decode: a message per routed pair, " + ways("ll")
                   + "; normal with prefill work: a token once per rank and once per remote node, " + ways("normal")
                   + "; priced from the engine's measured DeepEP tables where a profile fitted them)"
                   if sc.moe_all_to_all == "deepep" else
                   "on TensorRT-LLM's MNNVL all-to-all (a token once per rank holding any of its experts, "
                   + ways("mnnvl") + "; priced from its measured table where a profile fitted it)")
        out.append("MoE exchange: " + (
            f"tokens dispatched to their experts' ranks and combined back by all-to-all, {fmt}"
            if exchange == "all_to_all" else
            f"every attention-DP rank's tokens all-gathered before the experts, {fmt}, and the outputs "
            "reduce-scattered after") + " (--moe-exchange; the engine's default in docs/engines.md"
            + (", all-to-all where attention DP spreads the experts over more than one node: its wide-EP deployments, "
               "an estimate" if _wide_default(sc) else "") + ")")
    if sc.moe_imbalance > 1.0:
        out.append(f"expert load imbalance {sc.moe_imbalance:g}: the busiest EP rank routes that many times the mean "
                   "and sets the pace")
    if sc.tp > 1 or sc.pp > 1 or sc.ep > 1:
        out.append(_overlap_text(sc, prof))
    kept = _fp4_kept_text(model, sc)
    if kept:
        out.append(kept)
    if model.moe is not None:
        routing = sc.moe_routing or default_routing(model.family)
        out.append("MoE routing: the expected distinct experts a step touches from uniform top-k; where the engine's "
                   f"measured MoE tables time the module, their {routing} routing class (--moe-routing; "
                   + ("the scenario's" if sc.moe_routing else "the model's, as aiconfigurator-core times it")
                   + ("), elsewhere that skew's median cost in the tables the MoE evidence came from"
                      if prof.gemm_grouped_skew and routing != "balanced" else ")"))
        from .graph import expert_format

        narrow = expert_format(model, sc)
        if narrow != sc.dtype:
            out.append(_weight_only_text(model, narrow, sc, hw, prof))
        shared = _shared_expert_text(model, sc)
        if shared:
            out.append(shared)
        from .graph import worst_case_layout

        layout = worst_case_layout(model, sc)
        if layout == "computed":
            out.append("block-fp8 experts' grouped products over the worst-case contiguous layout, every 128-row block "
                       "computed (vLLM 0.12's DeepGEMM path, docs/engines.md; --moe-padding): the blocks no token "
                       "reaches add a dense product of their rows as expert 0's, the activation and re-quantization "
                       "run over every row")
        elif layout == "skipped":
            out.append("block-fp8 experts' grouped products over the worst-case contiguous layout, the blocks no token "
                       "reaches skipped (vLLM 0.13-0.17's DeepGEMM path, docs/engines.md; --moe-padding): the "
                       "activation and re-quantization run over every row of the layout")
        if sc.moe_module and sc.dtype == "fp8" and model.fp8_scaling == "block" and layout is None:
            out.append(f"block-fp8 experts on FlashInfer's TensorRT-LLM kernel, its {sc.moe_module} class (vLLM on "
                       "SM100 for this model's router and release, docs/engines.md), priced from that kernel's "
                       "rows of the MoE table")
    if sc.mode != "sol" and allreduce_norm_layout(model, sc):
        from .engines import ALLREDUCE_NORM_TOKENS

        out.append(f"{sc.engine}: each TP all-reduce runs with the residual add and the RMSNorm after it as one kernel "
                   f"in steps of at most {ALLREDUCE_NORM_TOKENS:,} tokens (docs/engines.md)")
    if model.kv_heads < sc.tp and model.mla is None:
        out.append(f"{model.kv_heads} KV heads over TP {sc.tp}: each rank keeps a replica of one KV head")
    if model.mla is not None:
        out.append("MLA: prefill expands the latent to per-head K/V; decode attends the cached latent "
                   "(absorbed projections); every TP rank keeps the whole latent cache")
    if sc.pp > 1:
        out.append("pipeline stages balanced; decode batch split into pp micro-batches")
    out.append("LM head evaluated at the last prompt position of each prefilling sequence and at every new position "
               "of a decode step" + (f" (1 + {sc.mtp} in a verify step)" if sc.mtp else "")
               + f"; the next tokens sampled {sc.sampling} over the fp32 logits (--sampling)")
    return out


def _shared_expert_text(model: Model, sc: Scenario) -> str:
    """How the engine runs the MoE layers' shared experts beside the routed ones (docs/engines.md), or ''."""
    from .engines import SHARED_STREAM_TOKENS
    from .graph import fuses_shared_expert
    from .step_accounting import STREAM_HIDDEN

    if not model.moe.num_shared_experts:
        return ""
    if fuses_shared_expert(model, sc):
        return ("shared expert folded into the routed experts' module as one more expert every token picks "
                "(SGLang without expert parallelism; --shared-stream does not apply)")
    rule = sc.shared_stream or "never"
    if rule == "never" or sc.mode == "sol":
        return "shared experts on the routed experts' stream, one after the other (--shared-stream)"
    when = ("decode steps replayed from CUDA graphs" if rule == "graph"
            else f"steps of at most {SHARED_STREAM_TOKENS} tokens a rank")
    return (f"shared experts on a second stream beside the router and routed experts in {when}: the two paths "
            f"take the longer and {1 - STREAM_HIDDEN:.2f} of the shorter (measured, docs/engines.md; --shared-stream)")


def _host_text(sc: Scenario, prof: Profile) -> str:
    """The host costs an eager framework's steps pay, and where they came from (the profile's ``host`` family,
    :func:`perfmodel.evidence.compose`; empty for the serving engines)."""
    h = scenario_host_costs(sc, prof)
    if h is None:
        return ""
    where = (prof.provenance.get("host") or {}).get("source") if prof.host else None
    where = where or (h.source if prof.host else f"documented defaults ({h.source})")
    return (f"host costs of transformers' generate(): {h.kernel_s * 1e6:.1f} us a kernel, {h.step_s * 1e6:.0f} us a "
            f"decode step ({h.graph_step_s * 1e6:.0f} us around a graph replay), {h.request_s * 1e3:.2f} ms a "
            f"request; {where}")


def _overlap_text(sc: Scenario, prof: Profile) -> str:
    from .cost.overlap import overlap_params

    method, fraction = resolve_method(sc.overlap)
    if method == "none":
        return "collectives do not overlap compute (--overlap none, the default)"
    if method == "fixed":
        return f"collectives overlap compute by a fixed {fraction:.0%} (--overlap {fraction:g})"
    p = overlap_params(prof)
    fitted = "fitted" if prof.overlap else "documented estimates"
    return (f"collective overlap: {method} (SM share {p['sm_share']:.2f}, interference {p['interference']:.2f}; "
            f"{fitted}; docs/collectives.md)")


def step(hardware, model, phase: str, batch: int, *, seq: int | None = None, context: int = 0,
         scenario: Scenario | None = None, profile: Profile | None = None, **overrides) -> Phase:
    """One forward step: ``phase="prefill"`` with ``seq`` new tokens per sequence, or ``"decode"`` (one new
    token per sequence) against ``context`` cached tokens."""
    from .resolve import setup

    s = setup(hardware, model, (scenario or Scenario()).with_(**overrides), profile)
    new = (seq or 1) if phase == "decode" else (seq or s.scenario.isl)
    return evaluate_step(s.model, s.hardware, s.scenario, s.profile, Step(phase, batch, new, context))
