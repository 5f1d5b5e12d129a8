"""Step accounting: how the timed operators of one step add up to the step's time. The one owner of it.

(Not ``perfmodel/step.py``: ``perfmodel.step`` is the package's public one-step function, which a submodule of
that name would shadow once imported.)

The cost model (:mod:`perfmodel.cost`) times each operator alone. A step is more than the sum of those:

- **count runs**: an op runs ``count`` times a step (once per layer of its kind);
- **collective overlap** (``Scenario.overlap``, :mod:`perfmodel.cost.overlap`): a collective adds what
  stays exposed after the compute it overlaps, plus the slowdown it causes that compute;
- **eager launches** (``launch == "eager"``): every kernel launched one by one adds ``Profile.launch_queued_s``
  of device time (the stream's front end fetching it, measured with the host far ahead), and the host issues
  every kernel, so an op takes at least its host cost (:func:`host_cost`: one dispatch, or the measured floor
  of a multi-call PyTorch op): the larger of the two paths, op by op; collectives are exempt from the host
  floor unless :attr:`Rules.host_floor_collectives` says otherwise;
- **CUDA-graph launch gaps** (``launch == "graph"``): every kernel of a replayed graph adds
  ``Profile.launch_graph_s``;
- **two streams** (:func:`stream_regions`): a MoE layer's shared experts on a second stream beside its router and
  routed experts (the engine's ``shared_stream``) add only what the shorter path does not hide;
- **speed of light** (``mode == "sol"``): neither floor nor gaps.

:func:`account` applies these rules to a step's timed ops (anything with ``.op`` and ``.time``) and returns
a :class:`StepAccount`: per op an :class:`OpShare` (its time alone, the time one run adds, its launch gaps,
a collective's exposed run) and the step's time. The step's time is :func:`step_time` of the step's
:data:`PARTS` summed over its ops, so the rule that joins them lives here alone: a step whose host path
and device path overlap (step time ``max(device, host)``) is a change of :data:`PARTS`,
:meth:`OpShare.parts` and :func:`step_time`, and every user follows — the projection, the serving-step model,
the calibration's layer predictions, the report's breakdown and the workbook's formulas (which write one
column per part and take the step's total from :func:`step_time` over their sums).

Everything is written against a math backend (:mod:`perfmodel.cost.backend`): numbers, numpy arrays
(sweeps) or Excel expressions (the workbook's live formulas).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .cost import mem_kind
from .cost.backend import NP
from .cost.overlap import exposed_runs, resolve_method
from .ops import COMM_KINDS, STREAM, STREAM_ON

# The parts a step's time is made of, each summed over the step's ops (all their runs): "busy", the time the
# ops keep the stream busy (collectives after overlap, an eager op at least its host cost); "gaps", the
# launch gaps between the kernels of a replayed graph.
PARTS = {"busy": "operators: time after collective overlap, at least the host dispatch when eager (x count)",
         "gaps": "launch gaps between kernels: of a CUDA graph replay, or of a stream launched one by one (x count)"}


def step_time(sums: dict, serial=0.0, scheduler=0.0, overlapped: bool = False, xp=NP, frontend=0.0):
    """The step's time from its parts summed over its ops (or over any selection of them), plus ``serial``:
    host work the step runs outside its ops (:attr:`StepAccount.serial_s`, zero but for an eager framework's
    own per-step work); then the serving engine's own host work for the step, ``scheduler``
    (:attr:`StepAccount.scheduler_s`), and its front end's, ``frontend``: :func:`with_scheduler`."""
    t = sums["busy"] + sums["gaps"]
    t = t + serial if not isinstance(serial, (int, float)) or serial else t
    return with_scheduler(t, scheduler, overlapped, xp, frontend)


def _longer(a, b, xp):
    return max(a, b) if xp.numeric and isinstance(a, (int, float)) and isinstance(b, (int, float)) else \
        xp.maximum(a, b)


def with_scheduler(device_s, scheduler=0.0, overlapped: bool = False, xp=NP, frontend=0.0):
    """A step of ``device_s`` with the engine's host work ``scheduler`` (scheduling, bookkeeping and output
    handling of the step's sequences, :meth:`perfmodel.engines.Engine.scheduler_host_s`): run between steps
    (synchronous scheduling) it adds to the step; scheduled while the device runs the previous step
    (``overlapped``) the step takes the longer of the two. Then the front end's work for the step's streamed
    tokens, ``frontend`` (:meth:`perfmodel.engines.Engine.frontend_host_s`): processes of their own, pipelined
    behind the scheduler, so the step takes the longer of what it took and theirs."""
    t = device_s
    if not isinstance(scheduler, (int, float)) or scheduler:
        t = _longer(device_s, scheduler, xp) if overlapped else device_s + scheduler
    if not isinstance(frontend, (int, float)) or frontend:
        t = _longer(t, frontend, xp)
    return t


def engine_scheduling(sc):
    """(the scenario's engine preset, whether it schedules asynchronously: the scenario's choice, else the
    preset's), or None where the engine has no measured host work a step."""
    from .engines import ENGINES

    eng = ENGINES.get(sc.engine)
    if eng is None or not (eng.scheduler_host or eng.frontend_host):
        return None
    return eng, eng.async_scheduling if sc.async_scheduling is None else bool(sc.async_scheduling)


def scheduled_step(device_s, sc, seqs, xp=NP, streamed=None):
    """A step of ``device_s`` under ``sc`` with its engine's host work for ``seqs`` sequences joined
    (:func:`scheduler_rules`, :func:`with_scheduler`)."""
    r = scheduler_rules(sc, seqs, xp, streamed)
    return with_scheduler(device_s, r["scheduler_s"], r["scheduler_overlap"], xp, r["frontend_s"]) if r else device_s


def api_servers(sc, eng) -> int:
    """The API server processes streaming ``sc``'s tokens: the scenario's, else the engine's default for its
    layout (a resolved scenario holds its release's: perfmodel.engines.release_defaults)."""
    return eng.api_servers_for(sc.attention_dp) if sc.api_servers is None else sc.api_servers


def streamed_tokens(sc) -> float:
    """The tokens a running stream has sent, on average, in a steady decode: the requests of a continuous batch are
    spread evenly over their outputs, half of ``sc.osl`` each (the front end's work grows with it,
    perfmodel.engines.Engine.frontend_length)."""
    return sc.osl / 2


def scheduler_rules(sc, seqs, xp=NP, streamed=None) -> dict:
    """The :class:`Rules` fields of the serving engine's host work for a step of ``seqs`` sequences under ``sc``
    (none under speed of light, or for an engine without a measured cost); ``seqs`` a number, or a cell of the
    workbook with ``xp`` its backend; ``streamed``: the tokens a stream has sent on average (None:
    :func:`streamed_tokens`)."""
    found = engine_scheduling(sc)
    if found is None or sc.mode == "sol":
        return {}
    eng, overlapped = found
    # each attention-data-parallel rank runs a scheduler of its own over its share of the sequences: the busiest's
    share = xp.ceil(seqs / sc.attention_dp) if sc.attention_dp > 1 else seqs
    # the front end streams every sequence of the instance, shared by its API servers
    servers = api_servers(sc, eng)
    # both measured on a development VM's CPU: a host of another speed takes them faster or slower
    speed = 1.0 if sc.host_speed is None else float(sc.host_speed)
    sched = eng.scheduler_host_s(share, overlapped, xp)
    front = eng.frontend_host_s(seqs, servers, xp, streamed=streamed_tokens(sc) if streamed is None else streamed)
    if speed != 1.0:
        sched, front = sched / speed, front / speed
    return {"scheduler_s": sched, "scheduler_overlap": overlapped, "frontend_s": front}


def host_cost(op, prof, xp=NP):
    """Host time to issue an op eagerly: one dispatch, or the measured floor of a multi-call PyTorch op."""
    floor = prof.host_floor_s.get(mem_kind(op))
    if floor is None:
        return prof.launch_eager_s
    return max(prof.launch_eager_s, floor) if xp.numeric else xp.maximum(prof.launch_eager_s, floor)


@dataclass(frozen=True)
class Rules:
    """How a step's ops add up: fixed by the scenario and the step's phase (:meth:`of`)."""

    launch: str = "graph"  # graph (launch gaps) | eager (host dispatch floor)
    sol: bool = False  # speed of light: no host floor, no launch gaps
    overlap: str = "none"  # the collective overlap method (perfmodel.cost.overlap.METHODS)
    fraction: Any = 0.0  # with overlap "fixed": the share of every collective hidden (a number or a cell)
    # eager collectives wait for their own host dispatch too (plain PyTorch's measured TP layer; the projection
    # leaves them to the overlap model)
    host_floor_collectives: bool = False
    # an eager framework whose host cost is measured per kernel (transformers' generate(), perfmodel.host_costs):
    # an op's host floor is its kernels at host_kernel_s each (None: host_cost()), and host_step_s of host work
    # outside the ops joins every step, the device waiting for it (a synchronisation each step)
    host_kernel_s: Any = None
    host_step_s: Any = 0.0
    # the same framework's per-step host work when its step is replayed from a CUDA graph (transformers'
    # compiled decode: generate()'s own launches and the graph's input copies, eager around the replay)
    host_graph_step_s: Any = 0.0
    # the serving engine's own host work for the step's sequences (scheduler_rules) and whether it overlaps the
    # device's step (asynchronous scheduling)
    scheduler_s: Any = 0.0
    scheduler_overlap: bool = False
    # the engine's front end's work for the step's streamed tokens (scheduler_rules): the step takes at least it
    frontend_s: Any = 0.0

    @classmethod
    def of(cls, sc, phase: str = "prefill", **kw) -> "Rules":
        """The rules of a step of ``phase`` ("prefill" or "decode") under scenario ``sc``; keywords override a
        field (``launch="graph"``)."""
        method, fraction = resolve_method(sc.overlap)
        return cls(**{"launch": sc.launch_for(phase), "sol": sc.mode == "sol", "overlap": method,
                      "fraction": fraction, **kw})

    @property
    def eager(self) -> bool:
        """The host floor applies."""
        return self.launch == "eager" and not self.sol

    @property
    def serial_s(self):
        """Host work a step of these rules runs outside its ops (:attr:`StepAccount.serial_s`)."""
        if self.sol:
            return 0.0
        return self.host_step_s if self.launch == "eager" else self.host_graph_step_s


@dataclass(frozen=True)
class OpShare:
    """One op's place in its step, per run: ``time`` alone (the cost model's), ``run`` what one run adds to the
    step (a collective: ``comm``, its exposed time after overlap plus the slowdown it causes beside it; when
    eager, at least :func:`host_cost`), ``gap`` the launch gaps one run adds."""

    op: Any
    time: Any
    run: Any
    gap: Any = 0.0
    comm: Any = None  # a collective's run after overlap; None for other ops
    # an op on a side stream: the share of its device time the step sees beside the main stream's path
    # (:func:`stream_regions`); None for other ops
    exposed: Any = None

    @property
    def count(self) -> float:
        return float(self.op.count)

    @property
    def collective(self) -> bool:
        return self.comm is not None

    def parts(self) -> dict:
        """The op's :data:`PARTS`, all its runs."""
        return {"busy": self.run * self.count, "gaps": self.gap * self.count}

    @property
    def share(self):
        """The op's part of the step's time, all its runs (the step's time is their sum, up to rounding)."""
        return (self.run + self.gap) * self.count

    @property
    def device_s(self):
        """All runs' time on the device: alone, or for a collective its run after overlap."""
        return self._device() * self.count

    @property
    def host_s(self):
        """All runs' time the host's dispatch adds beyond the device's (eager; zero otherwise)."""
        return (self.run - self._device()) * self.count

    def _device(self):
        if self.collective:
            return self.comm
        return self.time if self.exposed is None else self.time * self.exposed

    @property
    def gaps_s(self):
        return self.gap * self.count

    def with_run(self, run) -> "OpShare":
        return replace(self, run=run)


def _fold(values):
    """Sum in order from 0.0 (numbers, arrays or formulas alike)."""
    total = 0.0
    for v in values:
        total = total + v
    return total


@dataclass(frozen=True)
class StepAccount:
    """A step's ops under :class:`Rules`, and what they add up to."""

    ops: list  # OpShare, in the step's order
    serial_s: Any = 0.0  # host work the step adds outside its ops (Rules.host_step_s, eager only)
    scheduler_s: Any = 0.0  # the serving engine's host work for the step (Rules.scheduler_s)
    scheduler_overlap: bool = False  # ... overlapping the device's step (asynchronous scheduling)
    frontend_s: Any = 0.0  # the engine's front end's work for the step (Rules.frontend_s)

    def sums(self, keep=None) -> dict:
        """Each of :data:`PARTS` summed over the ops (``keep``: a flag per op, default all)."""
        kept = [s.parts() for s, k in zip(self.ops, _flags(keep, self.ops)) if k]
        return {p: _fold(x[p] for x in kept) for p in PARTS}

    @property
    def time_s(self):
        """The step's time."""
        return step_time(self.sums(), self.serial_s, self.scheduler_s, self.scheduler_overlap,
                         frontend=self.frontend_s)

    @property
    def gaps_s(self):
        """Of which launch gaps."""
        return self.sums()["gaps"]

    def total(self, keep=None):
        """The summed shares of the ops (``keep``: a flag per op, default all): a part of a step (one class of
        its ops, one decoder layer), composed with other parts by addition."""
        return _fold(s.share for s, k in zip(self.ops, _flags(keep, self.ops)) if k)

    @property
    def comm_runs(self) -> list:
        """Per op, a collective's run after overlap (None for other ops)."""
        return [s.comm for s in self.ops]


def _flags(keep, ops) -> list:
    flags = [True] * len(ops) if keep is None else list(keep)
    if len(flags) != len(ops):
        raise ValueError(f"{len(flags)} flags for {len(ops)} ops")
    return flags


def _launches(op):
    """An op's kernel launches: a number, or an array over a sweep's shapes or a workbook formula (transformers'
    split-K products)."""
    return float(op.kernels) if isinstance(op.kernels, (int, float)) else op.kernels


def account(times, rules: Rules, prof, *, hw=None, world: int = 1, xp=NP) -> StepAccount:
    """The step's ops (``.op``, ``.time``: perfmodel.cost.OpTime, or cells of the workbook) under ``rules``.
    ``hw`` and ``world`` let a decomposed or fused collective pay its own latency per chunk."""
    gap = 0.0 if rules.sol else prof.launch_graph_s if rules.launch == "graph" else prof.launch_queued_s

    def host(op):
        if rules.host_kernel_s is not None:
            return _launches(op) * rules.host_kernel_s
        return host_cost(op, prof, xp)

    comm = exposed_runs(times, rules.overlap, prof, fraction=rules.fraction, hw=hw, world=world, xp=xp)
    out = []
    for t, c in zip(times, comm):
        run = t.time
        gaps = gap * _launches(t.op)
        # eager: the op takes the larger of its device path (run + gaps) and the host's issuing it
        if t.op.kind in COMM_KINDS:
            run = c
            if rules.eager and rules.host_floor_collectives:
                run = xp.maximum(run, host(t.op) - gaps)
        elif rules.eager:
            run = xp.maximum(run, host(t.op) - gaps)  # the host cannot issue it faster
        out.append(OpShare(t.op, t.time, run, gaps, c))
    out = stream_regions(out, hw, host if rules.eager else None, xp)
    return StepAccount(out, rules.serial_s, 0.0 if rules.sol else rules.scheduler_s, rules.scheduler_overlap,
                       0.0 if rules.sol else rules.frontend_s)


# The share of the shorter path a second stream hides behind the longer one. Measured: a decode layer's shared
# expert beside its router and routed experts at the shapes of DeepSeek-V3, Qwen3.5-397B, GLM-5 and Llama 4
# Maverick (TP 4 and 8, batch 1 to 256), both paths in one CUDA graph on one stream and on two, on a lent H100
# (calibration/h200/streams-h100 and its repeat, perfmodel.measure.streams): (serial - two streams) / shared path,
# median 0.65 over 60 rows (0.04 to 1.03; the two runs agree within 0.07 a layout). Not all of the shorter path
# (1.0, the longer path alone, as aiconfigurator-core composes it): likely because the routed path's large kernels
# hold the SMs for part of the time (not measured apart).
STREAM_HIDDEN = 0.65


def stream_regions(shares: list, hw=None, host=None, xp=NP) -> list:
    """The shares with each two-stream region joined (an MoE layer's shared experts on a side stream beside its
    router and routed experts, :func:`perfmodel.ops.on_stream`): the region takes the longer of its two paths
    (each op's time and launch gaps) and :data:`STREAM_HIDDEN` less than all of the shorter one, and no less than
    the HBM traffic of both at the part's datasheet bandwidth (two streams share one memory); what the side path
    adds beyond the main one is spread over the side ops in proportion to their time (``exposed``). Where the
    side stream is off (``STREAM_ON`` 0) the ops run one after the other. ``host``: eager launch, the host's
    cost to issue an op (the host issues both streams' kernels one by one: a side op still takes at least
    that)."""
    regions: dict[tuple, dict[str, list[int]]] = {}
    for i, s in enumerate(shares):
        stream = s.op.params.get(STREAM)
        if stream is not None:
            regions.setdefault((s.op.count, s.op.scope), {"main": [], "side": []})[stream].append(i)
    out = list(shares)
    for region in regions.values():
        side_ops, main_ops = region["side"], region["main"]
        if not side_ops:
            continue
        main = _fold(shares[i].run + shares[i].gap for i in main_ops)
        side = _fold(shares[i].time + shares[i].gap for i in side_ops)
        together = main + side - STREAM_HIDDEN * xp.minimum(main, side)
        if hw is not None:
            together = xp.maximum(together, _fold(shares[i].op.bytes for i in main_ops + side_ops) / hw.hbm_bandwidth)
        on = shares[side_ops[0]].op.params[STREAM_ON]
        exposed = on * (together - main) / side + (1.0 - on)
        for i in side_ops:
            s = shares[i]
            run = s.time * exposed
            if host is not None:
                run = xp.maximum(run, host(s.op) - s.gap * exposed)
            out[i] = replace(s, run=run, gap=s.gap * exposed, exposed=exposed)
    return out

