"""Step time (and energy) of a continuous-batching step, from the calibrated model, fast enough for a
request-level simulation.

A continuous-batching step runs ``n`` decode sequences (one new token each, over their own cached
contexts) together with a prefill chunk of pieces (``p`` new prompt tokens of a request over ``x`` tokens
it already has cached). Structurally it is one forward pass over T = n + sum(p) tokens:

- **token ops** (QKV, output and FFN projections, norms, activations, the embedding, TP all-reduces): one
  pass over T tokens, the weights read once for decode and prefill tokens alike;
- **per-sequence ops** (final norm, LM head, its all-gather): R = n + pieces rows of logits (n (1 + K) with
  speculation);
- **decode attention** (and any op only decode runs, e.g. MLA's absorbed projections): the n sequences
  over their contexts, taken at their mean context (the KV bytes read are exact);
- **prefill attention** (and ops only prefill runs, e.g. MLA's latent expansion): each piece's causal
  attention over its cached prefix plus itself.

Which op belongs to which class is read off the operator graph (:func:`perfmodel.graph.build_ops`): an op
whose FLOPs or bytes change with the context is attention-like, one that changes with the number of
sequences at a fixed token count is per-sequence, the rest are token ops. Each class is timed by the cost
model on a grid, once per scenario, as its ops' summed shares of the step (:mod:`perfmodel.step_accounting`:
collective overlap, eager host floor, graph launch gaps): exact tables over every token count and sequence
count, bilinear tables over (sequences, context) and (piece, prefix). A step with no prefill runs with the
decode launch mode (CUDA graph under ``--launch auto``), one with prefill with the prefill mode. (The classes'
times add up because a step's shares do; a step rule that is not a sum over its ops would need the tables to
hold :data:`perfmodel.step_accounting.PARTS` apart.)

With attention data parallelism (:mod:`perfmodel.serve.dp_ranks`) the token, per-sequence and attention classes are
one rank's (the step's own sequences and pieces, as the ranks share them) and a fifth class, the **group ops** (the
routed experts and their exchange: what the other ranks' tokens change), is tabulated over every rank's tokens; a
step is its busiest rank's part plus the group's.

With pipeline parallelism the running sequences are cut into ``pp`` micro-batches that fill the stages (as
the projection's TPOT assumes): a step advancing every sequence by one token takes one micro-batch's pass
through all stages; a prefill piece is not split.

**Speculative decoding** (``sc.mtp`` = K draft tokens, :mod:`perfmodel.speculative`): a decoding sequence's row
of the step is a verify step of 1 + K query tokens, priced as :func:`perfmodel.projection.serving_steps` prices it
(the token ops over 1 + K tokens a sequence, the decode attention's 1 + K rows over the cache, the logits at each
of the 1 + K positions, as the projection's graph has them), and the step adds the drafting of the next step's K tokens:

- **MTP** (the model's own module): K times one decoder layer and the LM head at one token a sequence, from a
  table of :func:`perfmodel.projection.draft_time` over (sequences, context), the projection's own figure; and
  the module's pass over the step's prefill pieces (it keeps a KV cache of the prompt and drafts the first
  token from it): one layer's share of the pieces' token ops and attention (an estimate: the mean layer);
- **a draft model or EAGLE head**: its own :class:`StepModel` (the draft scenario, no speculation of its own):
  one step over the decoding sequences at one token each and the prefill pieces (the drafter prefills every
  prompt chunk in the step the target does, as vLLM V1's proposer runs over the step's scheduled tokens), then
  K - 1 decode steps of one token a sequence. With no pieces that is K of its decode steps, as the projection
  has it.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

import numpy as np

from ..cost import demand_parts, table_ratio, time_op, time_ops
from ..cost.tables import TABLE_KINDS, folders_state
from ..cost.overlap import resolve_method
from ..power_clock import clock_model, steady_stretch
from ..energy.model import limit_w, op_energy
from ..graph import Step, build_ops
from ..ops import COMPUTE_KINDS, STREAM
from ..host_costs import host_rules
from ..memo import Bounded, typed_key, value_key
from ..step_accounting import Rules, account, scheduled_step, scheduler_rules
from .dp_ranks import place


def _key_list(ops) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    out = []
    for op in ops:
        k = seen.get(op.name, 0)
        seen[op.name] = k + 1
        out.append((op.name, k))
    return out


def _differs(a, b) -> set:
    ka, kb = _key_list(a), _key_list(b)
    mb = dict(zip(kb, b))
    out = set()
    for k, op in zip(ka, a):
        other = mb.get(k)
        if other is None or not (np.allclose(op.flops, other.flops) and np.allclose(op.bytes, other.bytes)):
            out.add(k)
    return out


@dataclass(frozen=True)
class OpClasses:
    """Keys (name, occurrence) of the ops in each class (module doc); ``group``: with attention data parallelism, the
    token ops of the MoE group's tokens (every rank's together: the routed experts and their exchange), apart from
    ``token``, a rank's own."""

    token: frozenset
    per_seq: frozenset
    decode_attn: frozenset
    prefill_attn: frozenset
    group: frozenset = frozenset()


def own_step(sc, phase: str, batch, seq, context, group=None) -> Step:
    """One attention-DP rank's own step of ``batch`` sequences (the MoE group's tokens ``group``, by default every
    rank alike: batch x seq x DP; :func:`perfmodel.graph.rank_step` reads it as given); the step itself without
    attention DP."""
    dp = sc.attention_dp
    if dp == 1:
        return Step(phase, batch, seq, context)
    return Step(phase, batch, seq, context, batch * seq * dp if group is None else group)


def classify_ops(model, sc) -> OpClasses:
    def ops(phase, batch, seq, context, group=None):
        return build_ops(model, own_step(sc, phase, batch, seq, context, group), sc)

    pre = ops("prefill", 1, 8, 0)
    pre_ctx = _differs(pre, ops("prefill", 1, 8, 16))
    pre_seq = _differs(pre, ops("prefill", 2, 4, 0)) - pre_ctx
    dec = ops("decode", 4, 1, 8)
    dec_ctx = _differs(dec, ops("decode", 4, 1, 16))
    kp, kd = set(_key_list(pre)), set(_key_list(dec))
    decode_attn = dec_ctx | (kd - kp)
    prefill_attn = pre_ctx | (kp - kd)
    per_seq = pre_seq - decode_attn - prefill_attn
    token = (kp & kd) - decode_attn - prefill_attn - per_seq
    group = set()
    if sc.attention_dp > 1:  # what the other ranks' tokens change at a rank's own step
        group = _differs(pre, ops("prefill", 1, 8, 0, 16 * sc.attention_dp))
        group |= _differs(dec, ops("decode", 4, 1, 8, 8 * sc.attention_dp))
        if not group <= token:
            raise RuntimeError(f"ops of the MoE group's tokens that are not token ops (a bug): {sorted(group - token)}")
    return OpClasses(frozenset(token - group), frozenset(per_seq), frozenset(decode_attn), frozenset(prefill_attn),
                     frozenset(group))


# The power-limited clock of a step depends on the whole step's demand (perfmodel.cost.step_demand), which a table
# of one op class cannot know: every class is tabulated at the boost clock and at REF_DEMAND, with its share of the
# step's demand (demand-seconds and estimated seconds), and a step interpolates between the two clocks at the
# stretch its summed demand gives (linear in the stretch: exact at both ends, within a fraction of a percent
# between them and just beyond).
REF_DEMAND = 1.44  # a 1.2x stretch: the H200's large GEMMs settle at 1.19-1.21x
FIELDS = ("t", "dt", "e", "num", "den")  # boost time, time at REF_DEMAND minus it, joules, demand parts


def _class_fields(ops, keys, wanted, launch: str, sc, prof, hw, power) -> dict:
    """The table fields (FIELDS) of the ops whose key is in ``wanted``: their summed shares of a step launched
    ``launch`` (perfmodel.step_accounting) at the boost clock and at REF_DEMAND, their dynamic joules before the
    power limit, and their part of the step's power demand."""
    sel = [(op, k) for op, k in zip(ops, keys) if k in wanted]
    # a collective's share depends on the ops it overlaps: every op of the step is timed, the class's summed; with
    # no overlap (or a fixed share hidden) each op's share is its own, and the class's ops alone are timed, unless
    # the class holds part of a two-stream region (a MoE's shared experts beside routed ones of another class)
    region = [k in wanted for op, k in zip(ops, keys) if STREAM in op.params]
    alone = resolve_method(sc.overlap)[0] in ("none", "fixed") and (all(region) or not any(region))
    timed = [op for op, _ in sel] if alone else ops
    mask = None if alone else [k in wanted for k in keys]
    rules = Rules.of(sc, launch=launch, **host_rules(sc, prof))
    out = {}
    # the two clocks in two passes (stacked on one axis, the stretch of the array ops' clock would go through numpy's
    # vectorised pow, which differs from the C library's in the last bit); what the clock does not change, the ops
    # without one and the measured tables' anchors, priced once
    if sc.mode == "sol":
        out["t"] = out["ref"] = account([time_op(op, hw, prof, mode="sol", world=sc.gpus) for op in timed], rules,
                                        prof, hw=hw, world=sc.gpus).total(mask)
    else:
        ratios = [table_ratio(op, hw, prof) if op.kind in TABLE_KINDS else None for op in timed]
        first = None
        for name, demand in (("t", 0.0), ("ref", REF_DEMAND)):
            times = [time_op(op, hw, prof, mode=sc.mode, world=sc.gpus, sustained=demand, ratio=r)
                     if op.kind in COMPUTE_KINDS else first[i] if first is not None
                     else time_op(op, hw, prof, mode=sc.mode, world=sc.gpus, ratio=r)
                     for i, (op, r) in enumerate(zip(timed, ratios))]
            first = first or times
            out[name] = account(times, rules, prof, hw=hw, world=sc.gpus).total(mask)
    out["dt"] = out.pop("ref") - out["t"]
    e = 0.0
    if power is not None:
        for op, _ in sel:
            e = e + op_energy(op, power) * op.count
    out["e"] = e
    out["num"], out["den"] = demand_parts([op for op, _ in sel], hw, prof)
    return out


def _time_class(model, hw, sc, prof, step: Step, wanted, launch: str, power) -> dict:
    """The table fields of one class of a step's ops (:func:`_class_fields`)."""
    ops = build_ops(model, step, sc)
    return _class_fields(ops, _key_list(ops), wanted, launch, sc, prof, hw, power)


def _geom_grid(lo: int, hi: int, n: int, exact_below: int = 0, extra=()) -> np.ndarray:
    pts = set(range(lo, min(hi, exact_below) + 1))
    pts.update(int(round(v)) for v in np.geomspace(max(lo, 1), max(hi, lo, 1), n))
    pts.update(int(v) for v in extra if lo <= v <= hi)
    pts.add(hi)
    pts.add(hi + 1)  # at least two points on every axis
    return np.array(sorted(p for p in pts if p >= lo), dtype=float)


def _interp2(xs: list, ys: list, grid: list, x: float, y: float) -> tuple:
    """Bilinear interpolation on one rectilinear grid (clamped at the edges) of ``grid[i][j]``, a tuple of the
    :data:`FIELDS` at ``(xs[i], ys[j])``; each axis has at least two points."""
    i, fx = _axis(xs, x)
    return _blend(grid, i, fx, ys, y)


def _axis(xs: list, x: float) -> tuple[int, float]:
    """The cell of ``x`` on a grid axis and its position in it (0..1, clamped)."""
    n = len(xs) - 2
    i = bisect.bisect_right(xs, x) - 1
    i = 0 if i < 0 else (n if i > n else i)
    x0 = xs[i]
    f = (x - x0) / (xs[i + 1] - x0)
    return i, (0.0 if f < 0.0 else (1.0 if f > 1.0 else f))


def _blend(grid: list, i: int, fx: float, ys: list, y: float) -> tuple:
    """:func:`_interp2` at row cell ``i``, position ``fx`` (:func:`_axis`)."""
    j, fy = _axis(ys, y)
    r0, r1 = grid[i], grid[i + 1]
    out = []
    for p, q, r, u in zip(r0[j], r0[j + 1], r1[j], r1[j + 1]):
        a = p + (q - p) * fy
        b = r + (u - r) * fy
        out.append(a + (b - a) * fx)
    return tuple(out)


def _blend_onto(acc: tuple, grid: list, i: int, fx: float, ys: list, y: float) -> tuple:
    """``acc`` plus :func:`_blend`'s fields, field by field: a step's parts already summed and its blend added in one
    pass (the same additions, in the same order, as summing the blend's tuple afterwards)."""
    j, fy = _axis(ys, y)
    r0, r1 = grid[i], grid[i + 1]
    out = []
    for s, p, q, r, u in zip(acc, r0[j], r0[j + 1], r1[j], r1[j + 1]):
        a = p + (q - p) * fy
        b = r + (u - r) * fy
        out.append(s + (a + (b - a) * fx))
    return tuple(out)


EXACT_MAX = 32768  # token and sequence counts tabulated one by one; a geometric grid above
MEMO_MAX = 200_000  # entries one memo of a step model holds (tens of MB at most); past it, it starts over


def _lookup(table: dict, n: int) -> tuple:
    """The fields at count n from a table (``counts``, and ``rows``: a tuple of the :data:`FIELDS` a count): exact
    below EXACT_MAX, linear between grid points above, clamped at the last point."""
    counts, rows = table["counts"], table["rows"]
    if n <= EXACT_MAX and n < len(counts):
        return rows[n]
    last = len(counts) - 1
    if n >= counts[last]:
        return rows[last]
    i = bisect.bisect_right(counts, n) - 1
    w = (n - counts[i]) / (counts[i + 1] - counts[i])
    return tuple(a + (b - a) * w for a, b in zip(rows[i], rows[i + 1]))


def _rows(fields: dict, shape: tuple) -> list:
    """The :data:`FIELDS` of a table evaluated over a grid of ``shape``, as nested lists of tuples (one a point)."""
    cols = [np.broadcast_to(fields[f], shape).tolist() for f in FIELDS]
    if len(shape) == 1:
        return list(zip(*cols))
    return [list(zip(*(c[i] for c in cols))) for i in range(shape[0])]


# tables by everything they are computed from (:func:`_table_key`): a 1-D table of 8,192 tokens is ~0.4 MB of lists, a
# grid of 50 x 60 points ~0.2 MB
_TABLES = Bounded(96)


def _table_key(sm: "StepModel", phase: str, n: int, wanted, launch: str):
    """The key of one 1-D table: the model (frozen: equal models are equal values), the spec, scenario, profile and
    power parameters by their whole value with types (:mod:`perfmodel.memo`; the scenario but what no op of a step
    reads, below), the host costs of an eager framework (read from a measurement folder), the state of the profile's
    table folders, the class, phase, launch and length. None where any of them holds an array."""
    if "inputs" not in sm.__dict__:
        # what does not enter a table (its steps carry their own shapes): the scenario's batch, step budget and
        # schedule (the instances of one layout at several sequence caps share their tables) and, but for
        # transformers' static cache (whose attention reads every slot up to prompt + output), the request lengths
        free = dict(batch=None, prefill_chunk=None, schedule=None)
        if sm.sc.kv_cache != "static":
            free.update(isl=None, osl=None)
        parts = (typed_key(replace(sm.sc, **free)), value_key(sm.hw), value_key(sm.prof), typed_key(sm.power),
                 typed_key(host_rules(sm.sc, sm.prof)), folders_state(sm.prof))
        sm.inputs = None if any(p is None for p in parts) else (sm.model, *parts)
    return None if sm.inputs is None else (*sm.inputs, phase, int(n), wanted, launch)


class StepModel:
    """Step-time and step-energy surrogate for one scenario (module doc). Build once, query per step.

    ``max_tokens``: the largest step (token budget); ``max_seqs``: the most running sequences;
    ``max_context``: the longest sequence (prompt + output); ``piece_hint``: prompt lengths worth having
    exactly on the grid (a fixed prompt length makes the unloaded prefill exact). ``power``: parameters of
    :mod:`perfmodel.energy` (None: no energy)."""

    def __init__(self, model, hw, sc, prof, *, max_tokens: int, max_seqs: int, max_context: int,
                 piece_hint=(), power: dict | None = None, rows_per_seq: int | None = None,
                 streamed: float | None = None):
        self.model, self.hw, self.sc, self.prof = model, hw, sc, prof
        # the tokens a running stream has sent on average (half the workload's mean output; None: half sc.osl),
        # which the engine's front end grows with (perfmodel.engines.Engine.frontend_length)
        self.streamed = streamed
        self.pp = sc.pp
        self.ranks = sc.attention_dp
        self.max_tokens = int(max(max_tokens, max_seqs, 1))
        self.max_seqs = int(max(max_seqs, 1))
        self.max_context = int(max(max_context, 2))
        self.power = power
        self.headroom = max(limit_w(power, hw) - power["static_w"], 0.0) if power else 0.0
        self.classes = classify_ops(model, sc)
        self.spec = int(getattr(sc, "mtp", 0) or 0)  # draft tokens a verify step carries (0: no speculation)
        # query rows a decoding sequence carries: a verify step's tokens (1 + K, or a token tree's nodes); a tree's
        # drafter takes its later steps' candidates a sequence (rows_per_seq)
        self.q = int(rows_per_seq or sc.verify_tokens)
        self.max_tokens = max(self.max_tokens, self.max_seqs * self.q)
        self.mixed_launch = sc.launch_for("prefill")
        self.decode_launch = sc.launch_for("decode")
        # host work each step runs outside its ops (an eager framework's own per-step work; zero for engines)
        self.serial = {launch: Rules.of(sc, launch=launch, **host_rules(sc, prof)).serial_s
                       for launch in {self.mixed_launch, self.decode_launch}}
        # the serving engine's own host work a step, by the step's sequences (perfmodel.engines.Engine.scheduler_host)
        self.scheduled = bool(scheduler_rules(sc, 1))
        self._build(piece_hint)
        # what the simulator asks again and again, remembered (the comment of the queries section)
        self._steps: dict = {}  # (n_dec, ctx_mean, pieces) -> step()
        self._decode_steps: dict = {}  # (micro-batch, mean context) -> a decode step's (seconds, joules)
        self._pieces: dict = {}  # (p, x) -> piece()
        self._piece_sums: dict = {}  # a step's pieces ((p, x), ...) -> their summed fields
        self._rows: dict = {}  # sequences -> their cell on the decode grid's sequence axis
        self._decode_fixed: dict = {}  # micro-batch -> (token and sequence rows summed, its cell)

    # -- tables ------------------------------------------------------------------------------------
    def _tables_1d(self, phase: str, n: int, wanted, launch: str) -> dict:
        """One op class over 1..n tokens (or sequences), every field: every count up to EXACT_MAX, a geometric
        grid above (interpolated linearly: these ops are smooth there). Remembered (:data:`_TABLES`): the instances
        a plan builds for one layout at several sequence caps share the token table of their prefill chunk."""
        # a table of up to EXACT_MAX counts is exact at every count, so a longer one's head serves a shorter
        # length bit for bit (kept under one key: the longest built); above, the geometric grid depends on n
        exact = n <= EXACT_MAX
        key = _table_key(self, phase, 0 if exact else n, wanted, launch)
        hit = None if key is None else _TABLES.get(key)
        if hit is not None and exact and len(hit["counts"]) > n + 1:
            return {"counts": hit["counts"][:n + 1], "rows": hit["rows"][:n + 1]}
        if hit is None or len(hit["counts"]) != n + 1 and exact:
            hit = self._build_1d(phase, n, wanted, launch)
            if key is not None:
                _TABLES.put(key, hit)
        return hit

    def _build_1d(self, phase: str, n: int, wanted, launch: str) -> dict:
        idx = np.arange(1, min(n, EXACT_MAX) + 1, dtype=float)
        if n > EXACT_MAX:
            idx = np.concatenate([idx, np.unique(np.round(np.geomspace(EXACT_MAX, n, 64)[1:]))])
        ops = build_ops(self.model, self._table_step(phase, wanted, idx), self.sc)
        fields = _class_fields(ops, _key_list(ops), wanted, launch, self.sc, self.prof, self.hw, self.power)
        cols = [np.concatenate([[0.0], np.broadcast_to(fields[f], idx.shape)]).tolist() for f in FIELDS]
        return {"counts": np.concatenate([[0.0], idx]).tolist(), "rows": list(zip(*cols))}

    def _table_step(self, phase: str, wanted, idx) -> Step:
        """The step whose ``wanted`` ops a 1-D table times at counts ``idx``: the tokens of one sequence (token ops) or
        sequences of one token (per-sequence ops, and every op of a decode step); with attention data parallelism a
        rank's own (:func:`own_step`), and for the MoE group's ops the group's tokens, the busiest rank's share
        with them."""
        c, sc = self.classes, self.sc
        if wanted is c.group:
            rank = np.ceil(idx / sc.attention_dp)
            return Step(phase, 1, rank, 0, idx) if phase == "prefill" else Step("decode", rank, 1, 1, idx)
        if phase == "prefill":
            return own_step(sc, "prefill", 1, idx, 0) if wanted is c.token else own_step(sc, "prefill", idx, 1, 0)
        return own_step(sc, "decode", idx, 1, 1)

    def _grid(self, step: Step, wanted, launch: str, axes: tuple) -> list:
        """One op class over a 2-D grid of ``axes`` (the step's shapes), as :func:`_rows`; remembered as the 1-D tables
        are (:data:`_TABLES`)."""
        key = _table_key(self, step.phase, 0, wanted, launch)
        key = None if key is None else (*key, tuple(tuple(a.tolist()) for a in axes))
        hit = None if key is None else _TABLES.get(key)
        if hit is None:
            fields = _time_class(self.model, self.hw, self.sc, self.prof, step, wanted, launch, self.power)
            hit = _rows(fields, tuple(len(a) for a in axes))
            if key is not None:
                _TABLES.put(key, hit)
        return hit

    def _build(self, piece_hint) -> None:
        c, sc = self.classes, self.sc
        modes = {self.mixed_launch, self.decode_launch}
        # launch -> a 1-D table (_lookup); with attention data parallelism token and seq are a rank's, group the
        # MoE group's ops over every rank's tokens
        self.token, self.seq, self.group = {}, {}, {}
        for launch in modes:
            phase = "prefill" if launch == self.mixed_launch else "decode"
            n_tok = self.max_tokens if phase == "prefill" else self.max_seqs * self.q
            self.token[launch] = self._tables_1d(phase, n_tok, c.token, launch)
            # logits rows: 1 + K a decoding sequence (a verify step scores every draft position), one a prefill piece
            self.seq[launch] = self._tables_1d(phase, self.max_seqs * self.q, c.per_seq, launch)
            if self.ranks > 1:
                # every rank's tokens, padded to the busiest rank's at most (Scenario.pads_ranks)
                n_group = self.ranks * (self.max_tokens if phase == "prefill" else -(-self.max_seqs // self.ranks)
                                        * self.q)
                self.group[launch] = self._tables_1d(phase, n_group, c.group, launch)
        # decode attention over (sequences, mean context)
        n_grid = _geom_grid(1, self.max_seqs, 40, exact_below=16)
        c_grid = _geom_grid(1, self.max_context, 40, exact_below=4)
        self.dec_n, self.dec_c = n_grid.tolist(), c_grid.tolist()
        self.dec = {launch: self._grid(own_step(sc, "decode", n_grid[:, None], self.q, c_grid[None, :]),
                                       c.decode_attn, launch, (n_grid, c_grid)) for launch in modes}
        # prefill attention of one piece: p new tokens over x cached ones
        p_grid = _geom_grid(1, self.max_tokens, 48, exact_below=16, extra=piece_hint)
        x_grid = np.concatenate([[0.0], _geom_grid(1, self.max_context, 32, exact_below=2)])
        self.pre_p, self.pre_x = p_grid.tolist(), x_grid.tolist()
        self.pre = self._grid(own_step(sc, "prefill", 1, p_grid[:, None], x_grid[None, :]), c.prefill_attn,
                              self.mixed_launch, (p_grid, x_grid))
        self._build_drafts(n_grid, c_grid)
        model = clock_model(self.prof)
        self.alpha = model.alpha
        self.ref_extra = float(steady_stretch(REF_DEMAND, model.alpha)) - 1.0

    def _build_drafts(self, n_grid, c_grid) -> None:
        """The drafting of a speculative step (module doc): a draft :class:`StepModel`, or the MTP module's table
        of (seconds, joules) over (sequences, context)."""
        self.drafter = self.mtp_draft = self.drafter_wide = self.mtp_draft_wide = None
        if not self.spec:
            return
        from ..speculative import draft_model, draft_scenario

        # a token tree's draft steps after the first expand spec_topk candidates a sequence
        wide = self.sc.spec_topk if self.spec > 1 and self.sc.spec_topk > 1 else 0
        drafter = draft_model(self.sc)
        if drafter is not None:
            kw = dict(max_tokens=self.max_tokens, max_seqs=self.max_seqs, max_context=self.max_context,
                      power=self.power)
            self.drafter = StepModel(drafter, self.hw, draft_scenario(self.sc), self.prof, **kw)
            if wide:
                self.drafter_wide = StepModel(drafter, self.hw, draft_scenario(self.sc), self.prof, rows_per_seq=wide,
                                              **kw)
            return
        self.mtp_draft = self._mtp_draft_table(n_grid, c_grid, 1)
        if wide:
            self.mtp_draft_wide = self._mtp_draft_table(n_grid, c_grid, wide)

    def _mtp_draft_table(self, n_grid, c_grid, rows: int) -> list:
        """The MTP module's (seconds, joules) of one draft step of ``rows`` tokens a sequence over (sequences,
        context): a mean decoder layer and the LM head, as :func:`perfmodel.projection.draft_time`."""
        from ..projection import draft_time, evaluate_step
        from ..speculative import mtp_scenario

        ph = evaluate_step(self.model, self.hw, mtp_scenario(self.model, self.sc), self.prof,
                           Step("decode", n_grid[:, None], rows, c_grid[None, :]))
        t = np.broadcast_to(draft_time(ph.times, ph.layers), (len(n_grid), len(c_grid)))
        e = np.zeros_like(t)
        if self.power is not None:  # the same ops' dynamic joules: a mean layer and the LM head
            for x in ph.times:
                if x.op.scope == "layer":
                    e = e + op_energy(x.op, self.power) * x.op.count / ph.layers
                elif x.op.name == "lm_head":
                    e = e + op_energy(x.op, self.power) * x.op.count
        # two fields a point, as :func:`_blend` reads them
        return [list(zip(np.asarray(t)[i].tolist(), np.broadcast_to(e, t.shape)[i].tolist()))
                for i in range(len(n_grid))]

    def _mtp_prefill(self, pieces: list) -> tuple:
        """The MTP module's pass over the step's prefill pieces: the mean layer's share of their token ops and
        attention (:data:`FIELDS`; module doc)."""
        launch = self.mixed_launch
        got = [_lookup(self.token[launch], sum(p for p, _ in pieces))] + [self.piece(p, x) for p, x in pieces]
        layers = self.model.layers
        return tuple(sum(col) / layers for col in zip(*got))

    def _drafts(self, n_dec: int, ctx: float, pieces: list) -> tuple[float, float]:
        """(seconds, joules) a speculative step spends drafting the next step's tokens (module doc); ``n_dec``:
        the decoding sequences (the drafter cuts them into its own micro-batches; the MTP module runs one
        micro-batch's, as the projection's draft step)."""
        if self.drafter is not None:
            d = self.drafter
            t, e = d.step(n_dec, ctx, pieces) if (n_dec or pieces) else (0.0, 0.0)
            if n_dec and self.spec > 1:
                t1, e1 = (self.drafter_wide or d).step(n_dec, ctx, [])
                t, e = t + (self.spec - 1) * t1, e + (self.spec - 1) * e1
            return t, e
        if not n_dec:
            return 0.0, 0.0
        if self.pp > 1:
            n_dec = -(-n_dec // self.pp)
        t, e = _interp2(self.dec_n, self.dec_c, self.mtp_draft, n_dec, ctx)
        if self.mtp_draft_wide is None:
            return self.spec * t, self.spec * e
        tw, ew = _interp2(self.dec_n, self.dec_c, self.mtp_draft_wide, n_dec, ctx)
        return t + (self.spec - 1) * tw, e + (self.spec - 1) * ew

    # -- queries -----------------------------------------------------------------------------------
    # A plan's simulations ask for ~270,000 steps; what repeats is remembered: a piece (the same requests' prompts at
    # every rate), a sequence count's cell on the decode grid, a decode micro-batch's token and sequence rows summed.
    # Every figure is the same float as computed afresh (the same operations in the same order).
    def piece(self, p: int, x: int) -> tuple:
        """The :data:`FIELDS` of one prefill piece's attention-like ops."""
        hit = self._pieces.get((p, x))
        if hit is None:
            hit = _remember(self._pieces, (p, x), _interp2(self.pre_p, self.pre_x, self.pre, p, x))
        return hit

    def _pieces_total(self, pieces: tuple) -> tuple:
        """The :data:`FIELDS` of a step's prefill pieces' attention-like ops (remembered: a plan's requests come back
        at every rate with the same prompts)."""
        hit = self._piece_sums.get(pieces)
        if hit is None:
            got = [self.piece(p, x) for p, x in pieces]
            hit = tuple(sum(col) for col in zip(*got))
            if self.pp > 1:  # the pieces spread over the stages, the largest one whole
                top = max(got, key=lambda g: g[0])
                hit = tuple(max(a / self.pp, b) for a, b in zip(hit, top))
            _remember(self._piece_sums, pieces, hit)
        return hit

    def _row_cell(self, n: int) -> tuple[int, float]:
        """:func:`_axis` of ``n`` sequences on the decode grid."""
        hit = self._rows.get(n)
        if hit is None:
            hit = self._rows[n] = _axis(self.dec_n, n)
        return hit

    def decode_attn(self, launch: str, n: int, ctx: float) -> tuple:
        i, fx = self._row_cell(n)
        return _blend(self.dec[launch], i, fx, self.dec_c, ctx)

    def step(self, n_dec: int, ctx_mean: float, pieces: list[tuple[int, int]]) -> tuple[float, float]:
        """(seconds, dynamic joules of one TP rank's ops, held to the power limit) of one step: ``n_dec``
        decode sequences at mean context ``ctx_mean`` and prefill ``pieces`` [(new tokens, cached tokens)]."""
        key = (n_dec, ctx_mean, tuple(pieces))
        try:
            hit = self._steps.get(key)
        except TypeError:  # pieces given as lists, which do not hash: as tuples
            pieces = [tuple(x) for x in pieces]
            key = (n_dec, ctx_mean, tuple(pieces))
            hit = self._steps.get(key)
        if hit is None:
            hit = _remember(self._steps, key, self._step(n_dec, ctx_mean, pieces))
        return hit

    def _step(self, n_dec: int, ctx_mean: float, pieces: list[tuple[int, int]]) -> tuple[float, float]:
        launch = self.mixed_launch if pieces else self.decode_launch
        n_all = n_dec
        if self.ranks > 1:
            acc = self._ranks_fields(n_dec, ctx_mean, pieces, launch)
        else:
            acc = self._rank_fields(n_dec, ctx_mean, pieces, launch)
        if self.pp > 1:
            n_dec = -(-n_dec // self.pp)
        seqs = n_dec + len(pieces)  # a micro-batch's, as the scheduler hands one to the device
        if not self.spec:
            return self._finish(acc, launch, seqs)
        t, e = self._finish(acc, launch)
        dt, de = self._drafts(n_all, ctx_mean, pieces)
        t = self._scheduled(t + dt, seqs)
        return t, min(e + de, self.headroom * t)

    def _rank_fields(self, n_dec: int, ctx_mean: float, pieces, launch: str) -> tuple:
        """The summed :data:`FIELDS` of one rank's part of a step (the whole step's without attention data
        parallelism): ``n_dec`` decoding sequences at mean context ``ctx_mean`` and prompt ``pieces``, cut into
        micro-batches over the pipeline stages."""
        pp = self.pp
        tokens = n_dec * self.q + sum(p for p, _ in pieces)
        rows = n_dec * self.q + len(pieces)
        if pp > 1:
            biggest = max((p for p, _ in pieces), default=0)
            tokens = max(-(-tokens // pp), biggest)
            rows = -(-rows // pp)
            n_dec = -(-n_dec // pp)
        # the parts summed field by field as they come (as _total sums them): token and sequence rows, the decode
        # attention, the pieces' attention, the MTP module's prefill
        acc = _sum_fields((_lookup(self.token[launch], tokens), _lookup(self.seq[launch], rows)))
        if n_dec:
            i, fx = self._row_cell(n_dec)
            acc = _blend_onto(acc, self.dec[launch], i, fx, self.dec_c, ctx_mean)
        if pieces:
            acc = _add_fields(acc, self._pieces_total(tuple(pieces)))
            if self.mtp_draft is not None:
                acc = _add_fields(acc, self._mtp_prefill(pieces))
        return acc

    def _ranks_fields(self, n_dec: int, ctx_mean: float, pieces, launch: str) -> tuple:
        """The summed :data:`FIELDS` of a step under attention data parallelism: its busiest rank's part (each rank's
        decoding sequences and pieces as :func:`perfmodel.serve.dp_ranks.place` lays them) and the MoE group's ops
        over every rank's tokens (the MTP module's too). The ranks step together; the joules are the busiest
        rank's (an upper estimate for the others)."""
        parts, ranks_tokens, prompt = [], [], 0
        for n, own in place(self.ranks, n_dec, self.q, pieces):
            if not (n or own):
                continue
            parts.append(self._rank_fields(n, ctx_mean, own, launch))
            own_tokens = sum(p for p, _ in own)
            rank_tokens = n * self.q + own_tokens
            if self.pp > 1:  # a micro-batch's, as _rank_fields takes it
                rank_tokens = max(-(-rank_tokens // self.pp), max((p for p, _ in own), default=0))
            ranks_tokens.append(rank_tokens)
            prompt += own_tokens
        # every rank padded to the busiest's tokens in a step replayed from CUDA graphs (Scenario.pads_ranks)
        padded = self.sc.pads_ranks("prefill" if pieces else "decode")
        tokens = self.ranks * max(ranks_tokens) if padded else sum(ranks_tokens)
        group = _lookup(self.group[launch], tokens)
        if prompt and self.mtp_draft is not None:  # the MTP layer's experts over the prompts' tokens
            group = _add_fields(group, tuple(x / self.model.layers for x in _lookup(self.group[launch], prompt)))
        # the busiest rank at the step's clock (a rank of launch-bound work may lead at the boost clock and trail a
        # compute-bound one held to the power limit)
        return max((_add_fields(part, group) for part in parts), key=self._clocked)

    def _total(self, parts: list, launch: str) -> tuple[float, float]:
        """(seconds, joules) of a step from its parts' :data:`FIELDS`."""
        return self._finish(_sum_fields(parts), launch)

    def _finish(self, sums: tuple, launch: str, seqs: int = 0) -> tuple[float, float]:
        """(seconds, joules) of a step from its parts' :data:`FIELDS` summed, the engine's host work for ``seqs``
        sequences joined (:meth:`_scheduled`)."""
        t = self._scheduled(self._clocked(sums) + self.serial[launch], seqs)
        return t, min(sums[2], self.headroom * t)  # the power limit holds over the step

    def _clocked(self, sums: tuple) -> float:
        """Seconds of a step's device work from its :data:`FIELDS` summed, at the power-limited clock its summed
        demand gives (REF_DEMAND's comment)."""
        t0, dt, _, num, den = sums
        demand = num / max(den, 1e-12)
        share = (float(steady_stretch(demand, self.alpha)) - 1.0) / self.ref_extra
        return t0 + dt * share

    def _scheduled(self, device_s: float, seqs: int) -> float:
        """A step of ``device_s`` with the engine's host work for ``seqs`` sequences joined
        (:func:`perfmodel.step_accounting.scheduled_step`)."""
        return scheduled_step(device_s, self.sc, seqs, streamed=self.streamed) if self.scheduled and seqs else device_s

    def decode_span(self, n: int, ctx0: float, k: int, ctx1: float | None = None) -> tuple[float, float, float, float]:
        """k pure-decode steps of n sequences whose mean context starts at ``ctx0`` and grows by one a step (or is
        ``ctx1`` at the last step: speculation): (first step's seconds, last step's seconds, first step's joules,
        last step's joules). Over the run both are taken linear in the step index (attention reads the KV cache,
        linear in its length). Each is :meth:`step` of no pieces; the two share their token and sequence lookups."""
        if self.spec:
            t0, e0 = self.step(n, ctx0, [])
            if k <= 1:
                return t0, t0, e0, e0
            t1, e1 = self.step(n, ctx0 + k - 1 if ctx1 is None else ctx1, [])
            return t0, t1, e0, e1
        m = -(-n // self.pp) if self.pp > 1 else n  # a micro-batch's tokens, rows and sequences
        t0, e0 = self._decode_steps.get((m, ctx0)) or self._decode_step(m, ctx0)
        if k <= 1:
            return t0, t0, e0, e0
        ctx1 = ctx0 + k - 1
        t1, e1 = self._decode_steps.get((m, ctx1)) or self._decode_step(m, ctx1)
        return t0, t1, e0, e1

    def _decode_step(self, m: int, ctx: float) -> tuple[float, float]:
        """(seconds, joules) of a decode step of ``m`` sequences (a micro-batch) at mean context ``ctx``, remembered."""
        launch = self.decode_launch
        fixed, i, fx = self._decode_fixed.get(m) or self._fixed_rows(m)
        acc = _blend_onto(fixed, self.dec[launch], i, fx, self.dec_c, ctx) if m else fixed
        return _remember(self._decode_steps, (m, ctx), self._finish(acc, launch, m))

    def _fixed_rows(self, m: int) -> tuple:
        """A decode micro-batch of ``m`` sequences: its token and sequence rows summed (as :func:`_sum_fields`) and
        its cell on the decode grid (``m`` > 0), remembered. With attention data parallelism the busiest rank's
        rows (``ceil(m / DP)`` sequences) and the MoE group's ops over all ``m``."""
        launch = self.decode_launch
        if self.ranks > 1:
            own = -(-m // self.ranks)
            group = self.ranks * own if self.sc.pads_ranks("decode") else m  # padded to the busiest rank's
            fixed = _sum_fields([_lookup(self.token[launch], own), _lookup(self.seq[launch], own),
                                 _lookup(self.group[launch], group)])
            hit = self._decode_fixed[m] = (fixed, *(self._row_cell(own) if m else (0, 0.0)))
            return hit
        fixed = _sum_fields([_lookup(self.token[launch], m), _lookup(self.seq[launch], m)])
        hit = self._decode_fixed[m] = (fixed, *(self._row_cell(m) if m else (0, 0.0)))
        return hit


def _remember(memo: dict, key, value):
    """``value``, kept in ``memo`` under ``key`` (a full memo starts over: MEMO_MAX)."""
    if len(memo) >= MEMO_MAX:
        memo.clear()
    memo[key] = value
    return value


def _add_fields(acc: tuple, part: tuple) -> tuple:
    """``acc`` plus one part's :data:`FIELDS`, field by field."""
    return acc[0] + part[0], acc[1] + part[1], acc[2] + part[2], acc[3] + part[3], acc[4] + part[4]


def _sum_fields(parts) -> tuple:
    """The :data:`FIELDS` summed over the parts in order (as sum(), from an int 0)."""
    t0 = dt = e = num = den = 0
    for part in parts:
        t0 += part[0]
        dt += part[1]
        e += part[2]
        num += part[3]
        den += part[4]
    return t0, dt, e, num, den


def exact_step(model, hw, sc, prof, n_dec: int, ctx_mean: float, pieces: list[tuple[int, int]]) -> float:
    """The same mixed step timed directly from one op list (one power-limited clock for all of it); slow,
    for checking the surrogate. With attention data parallelism each rank's op list (its part as
    :func:`perfmodel.serve.dp_ranks.place` lays it, and the MoE group's ops over every rank's tokens), the slowest
    taken. Without speculation (a verify step and its drafts are checked against the projection's steps instead:
    tests/test_serve_spec.py)."""
    c = classify_ops(model, sc)
    launch = sc.launch_for("prefill") if pieces else sc.launch_for("decode")
    dp = sc.attention_dp
    laid = place(dp, n_dec, 1, pieces) if dp > 1 else [(n_dec, list(pieces))]
    group = n_dec + sum(p for p, _ in pieces)
    if sc.pads_ranks("prefill" if pieces else "decode"):  # every rank padded to the busiest's tokens
        group = dp * max(n + sum(p for p, _ in own) for n, own in laid)
    rules = Rules.of(sc, launch=launch, **host_rules(sc, prof))
    slowest = 0.0
    for n, own in laid:
        if not (n or own):
            continue
        tokens = n + sum(p for p, _ in own)
        rows = n + len(own)
        parts = []

        def take(phase, batch, seq, context, wanted):
            ops = build_ops(model, own_step(sc, phase, batch, seq, context, group), sc)
            parts.extend(op for op, k in zip(ops, _key_list(ops)) if k in wanted)

        if pieces:
            take("prefill", 1, tokens, 0, c.token | c.group)
            take("prefill", rows, 1, 0, c.per_seq)
        else:  # a decode-only step, as its tables are built (a kernel style may differ by phase: compiled decode)
            take("decode", tokens, 1, 1, c.token | c.group)
            take("decode", rows, 1, 1, c.per_seq)
        if n:
            take("decode", n, 1, ctx_mean, c.decode_attn)
        for p, x in own:
            take("prefill", 1, p, x, c.prefill_attn)
        times = time_ops(parts, hw, prof, mode=sc.mode, world=sc.gpus)
        slowest = max(slowest, float(account(times, rules, prof, hw=hw, world=sc.gpus).total()) + rules.serial_s)
    return float(scheduled_step(slowest, sc, n_dec + len(pieces)))


def kv_pool_blocks(model, hw, sc, max_seqs: int, block_size: int, mean_len: float | None = None) -> int:
    """KV-cache blocks of ``block_size`` tokens in the engine's KV budget (perfmodel.capacity.memory: the
    engine's memory policy after the weights, a full prefill chunk of activations, ``max_seqs`` rows of
    logits and the reserve).

    A block holds a token of every layer that keeps keys. Where layers keep less than every token (sliding or
    chunked windows) or a fixed state instead (Gated DeltaNet), a block is priced at what a sequence of the
    workload's mean length ``mean_len`` holds per token (the engines' hybrid KV managers pool the layer types
    separately; one pool at the mean is the estimate).

    With attention data parallelism every attention group holds its own sequences' cache in its own GPUs'
    budget: the instance's pool is the groups' together (one shared pool for the scheduler: an estimate of
    the engines' pool per group)."""
    from .. import capacity

    mem = capacity.memory(model, sc.with_(isl=sc.prefill_chunk), max_seqs, hw)
    per_token = capacity.kv_bytes_per_token(model, sc)
    if mean_len:
        per_token = float(capacity.kv_bytes_per_sequence(model, sc, float(mean_len))) / float(mean_len)
    per_block = per_token * block_size
    return max(int(math.floor(float(mem.kv_budget) * sc.attention_dp / per_block)), 0)
