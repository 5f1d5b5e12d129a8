"""Capacity planning: the fewest GPUs and the lowest $/h that serve a request rate within SLOs, per part and
engine, aggregated or disaggregated (xPyD at any scale), with prefill and decode on the same part or on two.

Instance rates. Requests dealt evenly over identical instances make a fleet of n serve n times one instance's
rate, so everything is sized from what ONE instance sustains with at least ``attainment`` of its requests
within the SLOs: an aggregated instance of layout (tp, pp) and running-sequence cap b against TTFT, TPOT and
E2E; a prefill instance against TTFT; a decode instance of cap b against TPOT, its TPOT counting the KV-cache
transfer from the prefill side (over the scale-up link when both sides fit one domain of one part, else over
the scale-out network, at the slower of the two parts' figures when the parts differ). A plan of rate R then
needs n = ceil(R / r) aggregated instances, or x = ceil(R / r_prefill) prefill and y = ceil(R / r_decode)
decode instances.

Screen, then simulate. A closed form estimates each instance's rate from the calibrated step times: the
steady state of continuous batching with chunked prefill, where every step carries b decoding sequences and
the prompt tokens that keep b constant, p = b * isl / osl (within the token budget), so that one step of
T(b, p) finishes b / osl requests: r(b) = b / (osl * T(b, p)), its TPOT T(b, p) (with speculative decoding a
verify step emits E tokens a sequence on average: p, r and the decode instance's rate E times as large, TPOT
T / E). The largest b whose TPOT meets
the objective (and no b at all when one prompt alone misses TTFT) gives the estimate; a prefill instance's is
its prompts per second at a full token budget (and no more than its link sends caches), a decode instance's
b / (osl * T(b)) with T(b) plus the KV transfer's share of the output within the TPOT objective. The estimate
puts every candidate's GPUs and $/h in order. Candidates are then taken best estimate first and priced by
the request-level simulator (:func:`perfmodel.serve.plan.max_rate`, bisection on the rate with the same
requests, repeated until the run lasts ``WINDOW`` times the latency budget, TTFT plus the output at the TPOT
objective, or the E2E objective: a short burst meets any objective that is longer than the burst; a rate counts
when the attainment target is met over all requests and over the last quarter of them, so that a queue
growing without end fails); a group (one part or pair of parts, one engine, aggregated
or disaggregated) stops when the next estimate is worse than the best simulated plan by more than
``SLACK`` or after ``finalists`` simulated candidates. Each group's best plan is then simulated end to end
at the target rate (the whole fleet: every instance, the KV transfers) and, when it misses the attainment
target there, grown by one instance on the side that binds (up to ``MAX_GROW`` times).

Cost: GPUs times each part's $/GPU-hour when every part has a price (user input, never a default), else GPUs;
ties broken by energy per output token. The binding constraint of a plan is the objective that fails first
when its instances are loaded past their rate (per side when disaggregated), with the KV-cache memory cap
named when the running-sequence cap sits at it.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .engine import simulate_instance
from .metrics import request_metrics
from .plan import batch_caps, layout_fits, layout_runs, max_rate
from ..resolve import resolve_scenario
from .simulate import MAX_INSTANCES, ServeOptions, build_instance, disagg_pass, kv_transfer_s, max_seqs_for, simulate

SLACK = 0.25  # an estimate this much worse than the best simulated plan of its group is not simulated
MAX_GROW = 3
WINDOW = 4.0  # an instance rate search runs at least this many latency budgets long (module doc)
MAX_TRIAL_REQUESTS = 20_000  # end-to-end simulations that may each add one instance to a plan that missed its target
E2E_REQUESTS_PER_INSTANCE = 100  # requests the end-to-end check gives each instance (at least --requests)
MAX_E2E_REQUESTS = 20_000


@dataclass(frozen=True)
class Part:
    key: str  # the spec's key (hardware/<key>.yaml) or the --arch text
    hw: object
    price: float | None  # US dollars per GPU-hour: user input (--gpu-hour-usd), None when not given


@dataclass
class CapacitySpace:
    rate: float  # requests/s the plan must serve
    attainment: float = 0.9
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1,)
    batches: tuple = (16, 32, 64, 128, 256, "max")
    engines: tuple[str, ...] | None = None  # None: the scenario's
    disagg: bool = True
    mixed: bool = True  # prefill on one part, decode on another
    max_gpus: int = 4096
    finalists: int = 3  # simulated candidates per group at most


@dataclass
class _Layout:
    """One instance layout of one part and engine, with the screen's figures."""
    part: int
    engine: str
    sc: object  # validated scenario (tp, pp, engine preset filled)
    prof: object
    mem_cap: int  # running sequences the KV cache holds for the mean request
    steps: object  # StepModel of a mixed instance at the largest cap (screen and aggregated simulations)
    caps: list[int]
    decode_s: dict  # cap -> decode step time per emitted token (TPOT) at that batch, mean context
    mixed_s: dict  # cap -> (step time per emitted token, requests finished a second) of the steady mixed step
    prefill_req_s: float  # prefill time per prompt, prompts batched to the token budget
    prefill_alone_s: float  # one prompt alone (the floor of TTFT)

    @property
    def gpus(self) -> int:
        return self.sc.gpus


@dataclass(order=True)
class _Cand:
    estimate: float  # cost the closed form gives (continuous: GPUs or $/h at the estimated instance rates)
    order: int
    kind: str = field(compare=False)  # aggregated | disaggregated
    group: tuple = field(compare=False)
    lay: object = field(compare=False)  # _Layout (aggregated; disaggregated: prefill side)
    dec: object = field(compare=False, default=None)  # decode _Layout
    cap: int = field(compare=False, default=0)


def _mean_len(base) -> tuple[float, float]:
    return float(base.isl.mean()), float(base.osl.mean())


def slo_met(first, finish, arrival, osl, opts: ServeOptions, *, begin=None) -> dict:
    """Per objective, which requests meet it: {'ttft': bool array, ...} (objectives not set are left out).
    ``begin``: where a request's TPOT is counted from (default its first token)."""
    out = {}
    multi = osl > 1
    if opts.slo_ttft_s is not None:
        out["ttft"] = (first - arrival) <= opts.slo_ttft_s
    if opts.slo_tpot_s is not None:
        start = first if begin is None else begin
        tpot = np.where(multi, (finish - start) / np.maximum(osl - 1, 1), 0.0)
        out["tpot"] = ~multi | (tpot <= opts.slo_tpot_s)
    if opts.slo_e2e_s is not None:
        out["e2e"] = (finish - arrival) <= opts.slo_e2e_s
    return out


def _share(met: dict) -> float:
    """Share of requests that meet every objective: the lesser of all requests' and the last quarter's (a queue
    that grows without end fails the late requests first)."""
    ok = None
    for v in met.values():
        ok = v if ok is None else ok & v
    if ok is None or not ok.size:
        return 1.0
    return min(float(ok.mean()), float(ok[-max(1, ok.size // 4):].mean()))


def _weakest(met: dict) -> str:
    """The objective the fewest requests meet (the one that binds when the load grows)."""
    return min(met, key=lambda k: float(met[k].mean())) if met else "-"


NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}


class Planner:
    def __init__(self, parts, model, sc, profile_for, base, space: CapacitySpace, opts: ServeOptions, workload):
        """``profile_for(hw, engine)``: the calibration profile; ``base``: the requests at 1 request/s;
        ``workload(n, rate)``: n requests at ``rate`` for the end-to-end check (a trace's own requests when
        the plan is for a trace)."""
        from ..energy.model import power_params

        if opts.slo_ttft_s is None and opts.slo_tpot_s is None and opts.slo_e2e_s is None:
            raise InputError("capacity planning needs at least one SLO", field="--slo-ttft-ms")
        if not (space.rate > 0 and math.isfinite(space.rate)):
            raise InputError(f"expected a positive request rate, got {space.rate}", field="--rate")
        if not 0.0 < space.attainment <= 1.0:
            raise InputError(f"expected a share in (0, 1], got {space.attainment}", field="--attainment")
        self.parts, self.model, self.sc, self.base, self.space, self.opts = parts, model, sc, base, space, opts
        self.workload = workload
        self.profile_for = profile_for
        self.power = {}
        self.power_params = power_params
        self.isl, self.osl = _mean_len(base)
        self.rates: dict = {}  # memo: instance rate searches
        self.sims = 0
        self.notes: list[str] = []
        self.stats = {"layouts": 0, "candidates": 0, "simulated": 0, "pruned_by_estimate": 0, "left_by_limit": 0}

    # --- layouts and the screen ----------------------------------------------------------------------

    def layouts(self) -> dict:
        out: dict = {}
        engines = self.space.engines or (self.sc.engine,)
        from ..engines import CHOICES

        for engine in engines:  # a name no engine has is bad input, not a part the engine does not run on
            if engine not in CHOICES:
                raise InputError(f"unknown engine {engine[:40]!r}; expected one of {', '.join(CHOICES)}",
                                 field="--engines")
        for pi, part in enumerate(self.parts):
            for engine in engines:
                found = []
                try:
                    probe = resolve_scenario(self.sc.with_(engine=engine), part.hw, self.model)
                except InputError as e:  # the engine does not run on this part's vendor
                    self.notes.append(f"{engine} on {part.hw.name}: {e.detail}")
                    continue
                prof = self.profile_for(part.hw, probe.engine)
                for tp in self.space.tps:
                    for pp in self.space.pps:
                        if tp * pp > part.hw.scaleup_domain:  # one instance inside one scale-up domain
                            continue
                        ep = self.sc.ep if tp % self.sc.ep == 0 else 1
                        trial = resolve_scenario(self.sc.with_(tp=tp, pp=pp, ep=ep, engine=engine), part.hw, self.model).validated()
                        if layout_runs(self.model, trial, self.base) and layout_fits(self.model, trial, part.hw,
                                                                                     self.base):
                            found.append(self._screen(pi, trial, prof))
                out[(pi, probe.engine)] = found
                self.stats["layouts"] += len(found)
        return out

    def _power(self, pi: int, prof) -> dict:
        key = (pi, id(prof))
        if key not in self.power:
            self.power[key] = self.power_params(prof, self.parts[pi].hw)
        return self.power[key]

    def _screen(self, pi: int, sc, prof) -> _Layout:
        hw = self.parts[pi].hw
        caps = batch_caps(self.model, sc, hw, self.base, self.space)
        mem_cap = max_seqs_for(self.model, sc.with_(batch="max"), hw, self.base)
        inst = build_instance(hw, self.model, sc.with_(batch=caps[-1]), prof, self.base, "mixed", self.opts,
                              self._power(pi, prof), max_seqs=caps[-1])
        steps = inst.steps
        ctx = self.isl + self.osl / 2
        # speculative decoding: a step is a verify step of 1 + K tokens a sequence that emits tokens_per_step of
        # them on average, so TPOT is the step over that and a step finishes that many times the requests
        tps, q = float(sc.tokens_per_step), sc.verify_tokens
        decode = {b: steps.step(b, ctx, ())[0] / tps for b in caps}
        budget = inst.cfg.token_budget  # a rank's (attention data parallelism: each rank its own)
        ranks = inst.cfg.ranks
        isl = max(int(round(self.isl)), 1)
        mixed = {}
        for b in caps:  # the steady state (module doc): b decodes and the prompt tokens that keep b running
            p = max(min(b * tps * self.isl / max(self.osl, 1.0), ranks * budget - b * q), 1.0)
            whole, rest = divmod(int(round(p)), isl)
            pieces = [(isl, 0)] * whole + ([(rest, 0)] if rest else [])
            t = steps.step(b, ctx, pieces)[0]
            mixed[b] = (t / tps, min(b * tps / self.osl, p / self.isl) / t)
        piece = min(isl, budget)
        per_step = inst.cfg.prompts_per_step(isl)
        chunks = math.ceil(isl / budget)
        t_batch, _ = steps.step(0, 0.0, [(piece, 0)] * per_step)
        t_one, _ = steps.step(0, 0.0, [(piece, 0)])
        return _Layout(pi, sc.engine, sc, prof, mem_cap, steps, caps, decode, mixed, t_batch * chunks / per_step,
                       t_one * chunks + inst.cfg.request_s)

    def _prefill_ok(self, lay: _Layout) -> bool:
        o = self.opts
        return o.slo_ttft_s is None or lay.prefill_alone_s <= o.slo_ttft_s

    def _agg_estimate(self, lay: _Layout, cap: int) -> float:
        """The closed form's requests/s of one aggregated instance of cap ``cap`` (module doc)."""
        o = self.opts
        if not self._prefill_ok(lay):
            return 0.0
        best = 0.0
        for b in lay.caps:
            if b > cap:
                break
            t, rate = lay.mixed_s[b]
            if o.slo_tpot_s is not None and t > o.slo_tpot_s:
                continue
            if o.slo_e2e_s is not None and lay.prefill_alone_s + (self.osl - 1) * t > o.slo_e2e_s:
                continue
            best = max(best, rate)
        return best

    def _xfer(self, lp: _Layout, ld: _Layout, tokens) -> np.ndarray:
        """KV-cache transfer time per request from a prefill instance of ``lp`` to a decode instance of ``ld``."""
        hp, hd = self.parts[lp.part].hw, self.parts[ld.part].hw
        link = self.opts.kv_link
        if lp.part != ld.part:
            link = "scaleout"  # two parts: two hosts, over the network
        elif link == "auto":
            link = "scaleup" if lp.gpus + ld.gpus <= hp.scaleup_domain else "scaleout"
        t = kv_transfer_s(self.model, hp, lp.prof, lp.sc, ld.sc, tokens, link, 1)
        if lp.part != ld.part:
            t = np.maximum(t, kv_transfer_s(self.model, hd, ld.prof, lp.sc, ld.sc, tokens, link, 1))
        return t

    def _decode_estimate(self, lp: _Layout, ld: _Layout, cap: int) -> float:
        o = self.opts
        xfer = float(self._xfer(lp, ld, np.array([round(self.isl)]))[0])
        best = 0.0
        for b in ld.caps:
            if b > cap:
                break
            d = ld.decode_s[b]
            if o.slo_tpot_s is not None and self.osl > 1 and d + xfer / (self.osl - 1) > o.slo_tpot_s:
                continue
            best = max(best, b / (self.osl * d))
        return best

    def _prefill_estimate(self, lp: _Layout, ld: _Layout) -> float:
        if not self._prefill_ok(lp):
            return 0.0
        xfer = float(self._xfer(lp, ld, np.array([round(self.isl)]))[0])
        return min(1.0 / lp.prefill_req_s, 1.0 / max(xfer, 1e-12))  # one instance's link sends caches one by one

    def _cost(self, gpus_by_part: dict) -> float:
        if all(p.price is not None for p in self.parts):
            return sum(n * self.parts[pi].price for pi, n in gpus_by_part.items())
        return float(sum(gpus_by_part.values()))

    def priced(self) -> bool:
        return all(p.price is not None for p in self.parts)

    # --- candidates --------------------------------------------------------------------------------

    def candidates(self, layouts: dict) -> list[_Cand]:
        out = []
        R = self.space.rate
        n = 0
        both = self.opts.slo_ttft_s is not None and self.opts.slo_tpot_s is not None
        for (pi, engine), lays in layouts.items():
            for lay in lays:
                for cap in lay.caps:
                    r = self._agg_estimate(lay, cap)
                    if r > 0:
                        out.append(_Cand(self._cost({pi: R / r * lay.gpus}), n, "aggregated",
                                         ("aggregated", pi, pi, engine), lay, cap=cap))
                        n += 1
        if not (self.space.disagg and both):
            return out
        for (pp_, engine), prefs in layouts.items():
            for (pd, engine_d), decs in layouts.items():
                if engine_d != engine or (pp_ != pd and not self.space.mixed):
                    continue
                if self.parts[pp_].hw.vendor != self.parts[pd].hw.vendor:
                    continue  # the KV cache between vendors' engines is no engine's feature
                for lp in prefs:
                    if lp.sc.pp != 1:
                        continue
                    for ld in decs:
                        if ld.sc.pp != 1:
                            continue
                        rp = self._prefill_estimate(lp, ld)
                        if rp <= 0:
                            continue
                        for cap in ld.caps:
                            rd = self._decode_estimate(lp, ld, cap)
                            if rd <= 0:
                                continue
                            g = {pp_: R / rp * lp.gpus}
                            g[pd] = g.get(pd, 0.0) + R / rd * ld.gpus
                            out.append(_Cand(self._cost(g), n, "disaggregated",
                                             ("disaggregated", pp_, pd, engine), lp, ld, cap))
                            n += 1
        return out

    # --- instance rates by simulation ----------------------------------------------------------------

    def _budget_s(self) -> float:
        """The latency one request may take under the objectives (TTFT plus the output at the TPOT objective,
        or the E2E objective), the unit of a trial's length."""
        o = self.opts
        parts = [(o.slo_ttft_s or 0.0) + (max(self.osl - 1, 0) * o.slo_tpot_s if o.slo_tpot_s else 0.0)]
        if o.slo_e2e_s is not None:
            parts.append(o.slo_e2e_s)
        return max(max(parts), 1e-3)

    def at_rate(self, base, rate: float):
        """``base`` (1 request/s) at ``rate``, repeated until the run lasts WINDOW latency budgets."""
        n = len(base)
        want = min(max(n, math.ceil(rate * WINDOW * self._budget_s())), MAX_TRIAL_REQUESTS)
        if want > n:
            k = math.ceil(want / n)
            period = float(base.arrival[-1] - base.arrival[0]) + 1.0  # mean gap at 1 request/s
            idx = np.tile(np.arange(n), k)[:want]
            arr = (base.arrival[idx] + np.repeat(np.arange(k), n)[:want] * period)
            base = base.subset(idx).with_arrival(arr)
        return base.with_arrival(base.arrival / rate)

    def _search(self, attain, estimate: float) -> tuple[float, float]:
        self.stats["simulated"] += 1
        return max_rate(attain, max(1.3 * estimate, 1e-6), self.space.attainment)

    def agg_rate(self, lay: _Layout, cap: int) -> tuple[float, str]:
        """(requests/s one aggregated instance sustains, the objective that fails first past it)."""
        key = ("agg", id(lay), cap)
        if key in self.rates:
            return self.rates[key]
        hw = self.parts[lay.part].hw
        inst = build_instance(hw, self.model, lay.sc.with_(batch=cap), lay.prof, self.base, "mixed", self.opts,
                              self._power(lay.part, lay.prof), max_seqs=cap, steps=lay.steps)
        base = self.base

        def run(rate):
            reqs = self.at_rate(base, rate)
            r = simulate_instance(inst.steps, inst.cfg, reqs)
            return slo_met(r.first_token, r.finish, reqs.arrival, reqs.osl, self.opts)

        rate, _ = self._search(lambda r: _share(run(r)), self._agg_estimate(lay, cap))
        binding = _weakest(run(max(rate, 1e-6) * 1.15))
        self.rates[key] = (rate, NAMES.get(binding, binding))
        return self.rates[key]

    def prefill_rate(self, lp: _Layout, ld: _Layout) -> float:
        xfer = self._xfer(lp, ld, self.base.isl)
        key = ("pre", id(lp), round(float(xfer.mean()), 9))
        if key in self.rates:
            return self.rates[key]
        hw = self.parts[lp.part].hw
        inst = build_instance(hw, self.model, lp.sc, lp.prof, self.base, "prefill", self.opts,
                              self._power(lp.part, lp.prof))
        base = self.base
        ttft_only = ServeOptions(slo_ttft_s=self.opts.slo_ttft_s)

        def attain(rate):
            reqs = self.at_rate(base, rate)
            r = simulate_instance(inst.steps, inst.cfg, reqs)
            # the instance's link sends caches one after another: past its capacity the queue grows without end
            link_busy = rate * float(xfer.mean())
            return 0.0 if link_busy >= 1.0 else _share(slo_met(r.first_token, r.first_token, reqs.arrival,
                                                                 reqs.osl, ttft_only))

        rate, _ = self._search(attain, self._prefill_estimate(lp, ld))
        self.rates[key] = rate
        return rate

    def decode_rate(self, lp: _Layout, ld: _Layout, cap: int) -> float:
        xfer = self._xfer(lp, ld, self.base.isl)
        key = ("dec", id(ld), cap, round(float(xfer.mean()), 9))
        if key in self.rates:
            return self.rates[key]
        hw = self.parts[ld.part].hw
        inst = build_instance(hw, self.model, ld.sc.with_(batch=cap), ld.prof, self.base, "decode", self.opts,
                              self._power(ld.part, ld.prof), max_seqs=cap)
        multi = self.base.osl > 1
        sub = self.base.subset(np.nonzero(multi)[0])
        tpot_only = ServeOptions(slo_tpot_s=self.opts.slo_tpot_s)

        def attain(rate):
            reqs = self.at_rate(sub, rate)
            r = simulate_instance(inst.steps, inst.cfg, reqs)
            begin = reqs.arrival - self._xfer(lp, ld, reqs.isl)  # the first token came out before the cache moved
            return _share(slo_met(r.first_token, r.finish, reqs.arrival, reqs.osl, tpot_only, begin=begin))

        rate, _ = self._search(attain, self._decode_estimate(lp, ld, cap)) if sub.arrival.size else (0.0, 0.0)
        self.rates[key] = rate
        return rate

    def price(self, c: _Cand) -> dict | None:
        """A candidate's plan from simulated instance rates: counts, GPUs, cost; None when it serves nothing."""
        R = self.space.rate
        if c.kind == "aggregated":
            r, binding = self.agg_rate(c.lay, c.cap)
            if r <= 0:
                return None
            n = math.ceil(R / r * (1 - 1e-9))
            gpus = {c.lay.part: n * c.lay.gpus}
            memo = " (running-sequence cap at the KV-cache limit)" if c.cap >= c.lay.mem_cap else ""
            return {"kind": c.kind, "cand": c, "n": n, "gpus": gpus, "cost": self._cost(gpus), "rate": r,
                    "binding": binding + memo, "cap": c.cap}
        rp = self.prefill_rate(c.lay, c.dec)
        rd = self.decode_rate(c.lay, c.dec, c.cap) if rp > 0 else 0.0
        if rp <= 0 or rd <= 0:
            return None
        x = math.ceil(R / rp * (1 - 1e-9))
        y = math.ceil(R / rd * (1 - 1e-9))
        gpus = {c.lay.part: x * c.lay.gpus}
        gpus[c.dec.part] = gpus.get(c.dec.part, 0) + y * c.dec.gpus
        util_p, util_d = R / (x * rp), R / (y * rd)
        side = ("prefill TTFT" if util_p >= util_d else "decode TPOT")
        xfer = float(self._xfer(c.lay, c.dec, self.base.isl).mean())
        if util_p >= util_d and rp >= 0.95 / max(xfer, 1e-12):
            side = "KV-cache link of the prefill instances"
        memo = " (decode cap at the KV-cache limit)" if c.cap >= c.dec.mem_cap and side.startswith("decode") else ""
        return {"kind": c.kind, "cand": c, "x": x, "y": y, "gpus": gpus, "cost": self._cost(gpus), "rate_p": rp,
                "rate_d": rd, "binding": side + memo, "cap": c.cap}

    # --- the search ---------------------------------------------------------------------------------

    def run(self) -> dict:
        t0 = time.perf_counter()
        layouts = self.layouts()
        cands = self.candidates(layouts)
        self.stats["candidates"] = len(cands)
        t_screen = time.perf_counter() - t0
        groups: dict = {}
        for c in cands:
            groups.setdefault(c.group, []).append(c)
        best: dict = {}
        for g, cs in groups.items():
            heapq.heapify(cs)
            tried = 0
            while cs:
                c = cs[0]
                top = best.get(g)
                if top is not None and c.estimate > top["cost"] * (1.0 + SLACK):
                    self.stats["pruned_by_estimate"] += len(cs)
                    break
                if tried >= self.space.finalists:
                    self.stats["left_by_limit"] += len(cs)
                    break
                heapq.heappop(cs)
                tried += 1
                p = self.price(c)
                if p is None or sum(p["gpus"].values()) > self.space.max_gpus:
                    continue
                if top is None or (p["cost"], p["cap"]) < (top["cost"], top["cap"]):
                    best[g] = p
        t_price = time.perf_counter() - t0 - t_screen
        plans = [self.check(p) for p in best.values()]
        plans = [p for p in plans if p is not None]
        t_check = time.perf_counter() - t0 - t_screen - t_price
        if not plans:
            raise InputError(self._nothing(layouts, cands), field="--rate")
        plans.sort(key=lambda p: (p["usd_per_hour"] if self.priced() else p["gpus"],
                                  p["gpus"], p["joules_per_token"] if p["joules_per_token"] is not None else 1e30))
        for i, p in enumerate(plans, 1):
            p["rank"] = i
        self.stats.update(screen_s=t_screen, instance_search_s=t_price, end_to_end_s=t_check,
                          total_s=time.perf_counter() - t0)
        return {"candidates": plans, "stats": dict(self.stats), "notes": self.notes}

    def _nothing(self, layouts, cands) -> str:
        if not any(layouts.values()):
            return (f"{self.model.name} fits no layout of the TP/PP degrees tried on "
                    f"{', '.join(p.hw.name for p in self.parts)}")
        if not cands:
            return ("no layout meets the SLOs even at a trickle (a prompt alone takes longer than the TTFT "
                    "objective, or a decode step longer than the TPOT objective)")
        return (f"no plan of at most {self.space.max_gpus} GPUs serves {self.space.rate:g} requests/s within the "
                "SLOs (--max-gpus raises the limit)")

    # --- end-to-end check ------------------------------------------------------------------------------

    def check(self, p: dict) -> dict | None:
        """Simulate the plan end to end at the target rate; grow the binding side while it misses the target."""
        for _ in range(MAX_GROW + 1):
            total = p["n"] if p["kind"] == "aggregated" else p["x"] + p["y"]
            if total > MAX_INSTANCES or sum(p["gpus"].values()) > self.space.max_gpus:
                return None
            n_req = min(max(len(self.base), E2E_REQUESTS_PER_INSTANCE * total,
                            math.ceil(self.space.rate * WINDOW * self._budget_s())), MAX_E2E_REQUESTS)
            reqs = self.workload(n_req, self.space.rate)
            out = self._simulate(p, reqs)
            att = out["slo_attainment"]
            if att is None or att >= self.space.attainment - 1e-9:
                return self._row(p, out, reqs, grown=_ > 0)
            c = p["cand"]
            if p["kind"] == "aggregated":
                p["n"] += 1
                p["gpus"] = {c.lay.part: p["n"] * c.lay.gpus}
            else:
                met = out["met"]
                if met.get("ttft", 1.0) <= met.get("tpot", 1.0):
                    p["x"] += 1
                else:
                    p["y"] += 1
                g = {c.lay.part: p["x"] * c.lay.gpus}
                g[c.dec.part] = g.get(c.dec.part, 0) + p["y"] * c.dec.gpus
                p["gpus"] = g
            p["cost"] = self._cost(p["gpus"])
        self.notes.append(f"{self._describe(p)}: still below the attainment target after {MAX_GROW} added "
                          "instances; left out")
        return None

    def _simulate(self, p: dict, reqs) -> dict:
        c = p["cand"]
        part = self.parts[c.lay.part]
        if p["kind"] == "aggregated":
            opts = ServeOptions(**{**self.opts.__dict__, "replicas": p["n"], "gpu_hour_usd": part.price})
            out = simulate(part.hw, self.model, c.lay.sc.with_(batch=p["cap"]), c.lay.prof, reqs, opts)
            self.sims += 1
            out["met"] = {}
            out["energy_j"] = out["energy"]["total_j"]
            return out
        return self._simulate_disagg(p, reqs)

    def _simulate_disagg(self, p: dict, reqs) -> dict:
        """x prefill instances of one part, y decode instances of the same or another, the KV cache between
        them (as perfmodel.serve.simulate's disaggregated run, with each side on its own part and power)."""
        c = p["cand"]
        lp, ld, x, y = c.lay, c.dec, p["x"], p["y"]
        hp, hd = self.parts[lp.part].hw, self.parts[ld.part].hw
        ip = build_instance(hp, self.model, lp.sc, lp.prof, reqs, "prefill", self.opts, self._power(lp.part, lp.prof))
        idn = build_instance(hd, self.model, ld.sc.with_(batch=p["cap"]), ld.prof, reqs, "decode", self.opts,
                             self._power(ld.part, ld.prof), max_seqs=p["cap"])
        xfer = self._xfer(lp, ld, reqs.isl)
        run = disagg_pass(ip, idn, reqs, x, y, xfer)
        first, finish, spans, extra = run.first, run.finish, run.spans, run.extra
        runs = [(lp if inst is ip else ld, inst, r) for inst, r in run.runs]
        self.sims += 1
        out = request_metrics(reqs.arrival, first, finish, reqs.isl, reqs.osl, spans, extra,
                              slo_ttft_s=self.opts.slo_ttft_s, slo_tpot_s=self.opts.slo_tpot_s,
                              slo_e2e_s=self.opts.slo_e2e_s)
        met = slo_met(first, finish, reqs.arrival, reqs.osl, self.opts)
        out["met"] = {k: float(v.mean()) for k, v in met.items()}
        window = out["duration_s"]
        total = 0.0
        for lay, inst, r in runs:  # static power while a step runs, idle between, the steps' dynamic energy
            pw = self._power(lay.part, lay.prof)
            g = lay.gpus
            total += g * pw["static_w"] * r.busy_s + lay.sc.tp * lay.sc.pp * r.dynamic_j
            total += g * pw["idle_w"] * max(window - r.busy_s, 0.0)
        out["energy_j"] = total
        out["kv_transfer"] = {"mean_ms": float(xfer.mean() * 1e3), "p99_ms": float(np.percentile(xfer, 99) * 1e3),
                              "bytes_per_request": float(self._kv_bytes(lp, ld) * reqs.isl.mean()),
                              "link": "scale-out network" if lp.part != ld.part or self.opts.kv_link == "scaleout"
                              or (self.opts.kv_link == "auto" and lp.gpus + ld.gpus > hp.scaleup_domain)
                              else "scale-up (NVLink)"}
        return out

    def _kv_bytes(self, lp, ld) -> float:
        from .. import capacity

        return max(capacity.kv_bytes_per_token(self.model, lp.sc), capacity.kv_bytes_per_token(self.model, ld.sc))

    def _describe(self, p: dict) -> str:
        c = p["cand"]
        name = lambda lay: self.parts[lay.part].key  # noqa: E731
        if p["kind"] == "aggregated":
            return f"{p['n']} x {name(c.lay)} (tp {c.lay.sc.tp}, pp {c.lay.sc.pp}), batch {p['cap']}"
        return (f"{p['x']}P {name(c.lay)} (tp {c.lay.sc.tp}) + {p['y']}D {name(c.dec)} (tp {c.dec.sc.tp}), "
                f"decode batch {p['cap']}")

    def _row(self, p: dict, out: dict, reqs, grown: bool) -> dict:
        from ..serialize import hardware_info

        c = p["cand"]
        R = self.space.rate
        tokens = float(reqs.osl.sum())
        gpus = sum(p["gpus"].values())
        usd_h = self._cost(p["gpus"]) if self.priced() else None
        row = {"layout": p["kind"], "describe": self._describe(p), "engine": c.lay.sc.engine,
               "tp": c.lay.sc.tp, "pp": c.lay.sc.pp, "batch": p["cap"], "gpus": gpus,
               "gpus_by_part": {self.parts[k].key: v for k, v in sorted(p["gpus"].items())},
               "usd_per_hour": usd_h,
               "usd_per_million_tokens": usd_h / 3600.0 / (R * self.osl) * 1e6 if usd_h is not None else None,
               "joules_per_token": out["energy_j"] / tokens if tokens else None,
               "binding": p["binding"], "rate_req_s": R, "attainment": out["slo_attainment"],
               "ttft_p90_ms": out["ttft_ms"]["p90"], "tpot_p90_ms": out["tpot_ms"]["p90"],
               "e2e_p90_ms": out["e2e_ms"]["p90"],
               "throughput_tok_s": out["throughput_tok_s"], "goodput_req_s": out["goodput_req_s"],
               "goodput_tok_s_per_gpu": (out["goodput_req_s"] or 0.0) * self.osl / gpus,
               "grown_after_simulation": grown, "simulated_requests": len(reqs)}
        if p["kind"] == "aggregated":
            row["instances"] = p["n"]
            row["arch"] = hardware_info(self.parts[c.lay.part].hw)
            row["instance_rate_req_s"] = p["rate"]
        else:
            row.update(prefill_instances=p["x"], decode_instances=p["y"], decode_tp=c.dec.sc.tp,
                       mixed_parts=c.lay.part != c.dec.part,
                       prefill_arch=hardware_info(self.parts[c.lay.part].hw),
                       decode_arch=hardware_info(self.parts[c.dec.part].hw),
                       prefill_instance_rate_req_s=p["rate_p"], decode_instance_rate_req_s=p["rate_d"],
                       kv_transfer=out["kv_transfer"])
            row["kv_transfer"]["gb_s_at_rate"] = R * row["kv_transfer"]["bytes_per_request"] / 1e9
            row["arch"] = row["prefill_arch"]
        return row


def capacity_plan(parts, model, sc, profile_for, base, space: CapacitySpace, opts: ServeOptions, workload) -> dict:
    """Plans ranked by cost (module doc): {'candidates': rows, 'stats': ..., 'notes': [...]}."""
    return Planner(parts, model, sc, profile_for, base, space, opts, workload).run()
