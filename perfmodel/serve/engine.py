"""Discrete-event simulation of one serving instance (a tp x pp replica) under continuous batching.

The scheduler follows vLLM's (V1) as documented in its source and docs:

- every step has a token budget (``--prefill-chunk``, vLLM's ``max_num_batched_tokens``) and at most
  ``max_seqs`` running sequences (``--batch``, vLLM's ``max_num_seqs``);
- running requests go first: every decoding sequence gets its one token, then requests part-way through
  their prompt continue (chunked prefill), then waiting requests are admitted first come, first served,
  while the budget, a free sequence slot and KV-cache blocks for the chunk they would run last;
- the KV cache is paged: blocks of ``block_size`` tokens (vLLM's default 16) out of a pool sized from
  HBM by :mod:`perfmodel.capacity`; a request holds ceil(tokens / block_size) blocks; new admissions
  keep a watermark of 1% of the pool free (vLLM's block manager default);
- when a decoding sequence needs a block and none is free, the most recently admitted running request is
  preempted (recompute: its blocks are freed, it rejoins the head of the queue and later recomputes its
  prompt and the tokens it had generated as one longer prompt);
- prefix caching (optional): a request whose shared prefix is resident reuses its full blocks (at least
  one token is always computed); a prefix becomes resident when a request carrying it finishes its
  prefill, stays while referenced, and is evicted least recently used when blocks run short;
- the step that completes a request's prompt produces its first token; each later step one more.

With attention data parallelism (``ranks``) every rank has a token budget of its own: a step takes up to ``ranks``
budgets, each prompt piece within one rank's (:mod:`perfmodel.serve.dp_ranks`).

With ``prefill_first`` (SGLang's default schedule, ``--schedule prefill_first``) a step that can take waiting or
part-done prompts carries only them, with the whole budget, and the decoding sequences wait through it (their next
inter-token gap carries the wait); a step that admits none decodes as above.

Roles: ``mixed`` (aggregated serving), ``prefill`` (a disaggregated prefill instance: requests leave when
their first token is out) and ``decode`` (a disaggregated decode instance: requests arrive with their
prompt's KV cache and first token, and only decode).

Closed loop (``reqs.concurrency`` C, :func:`perfmodel.serve.workload.closed_loop_requests`): the first C
requests arrive at time 0 and every completion sends the next request at that instant, so exactly C are in
the system until the client runs out of requests; the arrival times used are returned in
``InstanceResult.arrival``.

Runs of steps that only decode, with nothing to admit, are advanced in one go until the next completion,
arrival or block shortage (the step time is linear in the context over such a run), which is what makes
10,000 requests take well under a second.

**Speculative decoding** (``cfg.spec`` = K draft tokens, :class:`AcceptedRuns`): every decode step is a verify
step of 1 + K tokens a decoding sequence (they count 1 + K against the token budget, as vLLM V1 schedules a
running request's spec tokens) and emits 1 to K + 1 tokens a sequence, the request's next accepted run, drawn
ahead of the run from the acceptance distribution (so a request's output length is reached in fewer steps, and
its TPOT varies with its draws). A sequence holds KV blocks for the tokens it has plus the K it verifies; the
decode counter counts steps, and each sequence's tokens at a counter are read off its runs (exact integers, as
without speculation). Prefill chunks mix with verify steps in one step (vLLM V1 and TensorRT-LLM's in-flight
batching do); ``prefill_first`` runs them apart, as SGLang runs prefill and EAGLE/MTP decode batches. The step that
completes a prompt emits one token, as without speculation.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .dp_ranks import RankBudgets

BLOCK_SIZE = 16  # vLLM's default --block-size
SPEC_STREAM = 25  # the accepted runs' random stream beside the workload's (seeded by the same --seed)
WATERMARK = 0.01  # vLLM's block manager default watermark (share of blocks new admissions leave free)


@dataclass
class EngineConfig:
    max_seqs: int
    token_budget: int
    kv_blocks: int
    block_size: int = BLOCK_SIZE
    prefix_caching: bool = False
    role: str = "mixed"  # mixed | prefill | decode
    spec: int = 0  # speculative decoding: K draft tokens a verify step carries a sequence (module doc)
    verify: int = 0  # with spec, a token tree: the nodes a verify step carries a sequence (0: a chain, 1 + K)
    accepted_run: tuple = ()  # with spec: P(a verify step emits 1), ..., P(K + 1) (Scenario.accepted_run)
    seed: int = 0  # with spec: the seed of the runs an instance draws itself (simulate_instance)
    # prompts run in steps of their own, ahead of the decoding sequences, which wait (SGLang's default schedule)
    # rather than riding in the decode steps (vLLM V1, TensorRT-LLM): perfmodel.engines.Engine.schedule
    prefill_first: bool = False
    # attention data parallelism: the ranks that each schedule their own requests within ``token_budget`` tokens a
    # step (perfmodel.serve.dp_ranks); 1: one scheduler
    ranks: int = 1

    def prompts_per_step(self, isl: int) -> int:
        """Prompts of ``isl`` tokens one step can prefill whole, or one piece of each rank where a prompt exceeds a
        rank's budget: every rank's budget, at most the sequence cap."""
        return max(1, min(self.ranks * max(self.token_budget // isl, 1), self.max_seqs))

    @property
    def spec_tokens(self) -> int:
        """Cache slots a decoding sequence's verify step writes beyond the verified token: a chain's K draft tokens
        or a tree's other nodes (its accepted runs still emit 1 to K + 1)."""
        return max(int(self.verify) - 1, int(self.spec)) if self.spec else 0

    # host time between a request's arrival and its being schedulable (an eager framework's own setup,
    # perfmodel.host_costs.request_overhead_s): the scheduler sees it that much later, latencies count from
    # the arrival
    request_s: float = 0.0


@dataclass
class AcceptedRuns:
    """Every request's accepted runs (tokens a verify step emits: 1 to K + 1), drawn ahead. ``cum`` is the running
    sum of all runs, requests one after another; request i's draws sit at ``cum[off[i]:off[i] + n[i] + 1]``, so its
    verify steps j0 .. j0 + j - 1 emit ``cum[off[i] + j0 + j] - cum[off[i] + j0]`` tokens. ``n[i]`` (its output
    length plus one) bounds the verify steps any request can run (each emits at least one token)."""

    cum: np.ndarray  # int64, non-decreasing (increasing within a request's draws)
    off: np.ndarray  # int64 per request
    n: np.ndarray  # int64 per request

    @classmethod
    def draw(cls, osl: np.ndarray, accepted_run, rng: np.random.Generator) -> "AcceptedRuns":
        """Runs for requests of output lengths ``osl`` from P(run = 1), ..., P(run = K + 1) (``accepted_run``)."""
        n = np.asarray(osl, dtype=np.int64) + 1
        p = np.asarray(accepted_run, dtype=float)
        runs = rng.choice(p.size, size=int(n.sum()), p=p / p.sum()) + 1
        off = np.concatenate([[0], np.cumsum(n + 1)[:-1]]).astype(np.int64)  # each request's own zero in cum
        cum = np.zeros(int(n.sum() + n.size), dtype=np.int64)
        mask = np.ones(cum.size, dtype=bool)
        mask[off] = False
        cum[mask] = runs
        return cls(np.cumsum(cum), off, n)

    def take(self, idx) -> "AcceptedRuns":
        """The runs of the requests ``idx`` (the draws shared, not copied)."""
        idx = np.asarray(idx, dtype=int)
        return AcceptedRuns(self.cum, self.off[idx], self.n[idx])


@dataclass
class InstanceResult:
    first_token: np.ndarray  # time of each request's first token (prefill role: when its prompt is done)
    finish: np.ndarray  # time of its last token
    preemptions: np.ndarray
    itl_spans: list  # (first step time, last step time, steps, sequences) of decode steps
    itl_extra: list  # inter-token gaps across a preemption
    busy_s: float = 0.0
    idle_s: float = 0.0
    dynamic_j: float = 0.0  # one TP rank's ops, summed over steps (the caller scales to the replica)
    in_system_s: float = 0.0  # integral over time of the number of requests in the system
    prefill_s: float = 0.0  # busy time attributed to prefill (each step split by its tokens)
    prefill_dynamic_j: float = 0.0
    steps: int = 0
    cached_tokens: int = 0
    end: float = 0.0
    stats: dict = field(default_factory=dict)
    arrival: np.ndarray | None = None  # the arrival times used (closed loop: set as requests were sent)
    peak_in_system: int = 0  # most requests arrived and not finished at once
    # speculation: per sequence, the verify steps it ran, as (first draw's index in AcceptedRuns.cum, steps)
    verified: list = field(default_factory=list)


def check_fits(reqs, cfg: EngineConfig) -> None:
    """Every request must fit the KV pool on its own, or it could never run."""
    longest = int((reqs.isl + reqs.osl).max()) + cfg.spec_tokens
    need = -(-longest // cfg.block_size)
    if need > cfg.kv_blocks:
        raise InputError(f"a request of {longest} tokens needs {need} KV blocks of {cfg.block_size} tokens but "
                         f"the cache holds {cfg.kv_blocks} ({cfg.kv_blocks * cfg.block_size} tokens); shorten "
                         "the requests or raise --tp", field="--isl-dist")


def simulate_instance(steps, cfg: EngineConfig, reqs, runs: AcceptedRuns | None = None) -> InstanceResult:  # noqa: C901
    """Run the requests ``reqs`` through one instance: at their arrival times, or in a closed loop when
    ``reqs.concurrency`` is set (module doc). ``runs``: the requests' accepted runs, with ``cfg.spec`` (None: drawn
    here from ``cfg.seed``)."""
    n_req = len(reqs)
    conc = getattr(reqs, "concurrency", None)
    if conc is not None:
        if cfg.role != "mixed":
            raise InputError("closed-loop concurrency runs against an aggregated instance only", field="--concurrency")
        sent = min(int(conc), n_req)  # requests the client has sent so far
        arrival = [cfg.request_s] * sent + [math.inf] * (n_req - sent)
    else:
        sent = n_req
        arrival = (reqs.arrival + cfg.request_s).tolist()  # when each request can first be scheduled
    isl = reqs.isl.tolist()
    osl = reqs.osl.tolist()
    pgroup = reqs.prefix_group.tolist()
    plen = reqs.prefix_len.tolist()
    role = cfg.role
    bs = cfg.block_size
    pool = cfg.kv_blocks
    watermark = int(WATERMARK * pool)
    m = max(int(cfg.max_seqs), 1)
    # the cache slots a verify step writes beyond the verified token (a prefill instance's requests leave at their
    # first token): the draft chain's K, or a token tree's other nodes
    spec = cfg.spec_tokens if role != "prefill" else 0
    q = 1 + spec  # tokens a decoding sequence carries a step
    if spec and runs is None:  # a caller that draws none (a plan's rate search): the instance's own, seeded
        runs = AcceptedRuns.draw(reqs.osl, cfg.accepted_run, np.random.default_rng([cfg.seed, SPEC_STREAM]))
    ranks = max(int(cfg.ranks), 1)
    budget_max = max(int(cfg.token_budget), -(-m // ranks) * q if role == "decode" else 1)  # a rank's
    prefill_first = cfg.prefill_first and role == "mixed"
    stall_s, stalled = 0.0, 0  # time the decoding sequences have waited through prompt steps, and how many waited

    # per request
    gen = [1 if role == "decode" else 0] * n_req  # tokens generated (decoding ones: as of their last sync)
    first = [-1.0] * n_req  # first token (decode role: the first token this instance produces)
    finish = [-1.0] * n_req
    last_tok = [0.0] * n_req
    npre = [0] * n_req
    epoch = [0] * n_req
    # slots
    kv0 = [0] * m
    base = [0] * m
    is_dec = [0] * m
    s_off = [0] * m  # a decoding slot's kv0 - base + block_size - 1 (dec_blocks)
    order_v = np.full(m, -1, dtype=np.int64)
    s_req = [-1] * m
    s_gen0 = [0] * m
    s_prompt = [0] * m
    s_done = [0] * m
    s_palloc = [0] * m
    s_shared = [0] * m
    free_slots = list(range(m - 1, -1, -1))
    if spec:  # per slot, as arrays: a decoding sequence's tokens at a counter are read off its runs
        cum = runs.cum
        r_at = (runs.off + 0).tolist()  # each request's next draw (its index in cum)
        r_end = (runs.off + runs.n).tolist()
        v_dec = np.zeros(m, dtype=bool)
        v_kv0 = np.zeros(m, dtype=np.int64)
        v_base = np.zeros(m, dtype=np.int64)
        v_p0 = np.zeros(m, dtype=np.int64)  # the slot's first draw
        v_end = np.zeros(m, dtype=np.int64)  # its request's last draw
        v_cap = np.zeros(m, dtype=np.int64)  # tokens it may still emit
        v_shared = np.zeros(m, dtype=np.int64)
    prefilling: list[int] = []  # slots part-way through their prompt, in admission order
    heap: list = []  # (decode counter at completion, epoch, request, slot)
    waiting: deque = deque()
    groups: dict[int, list] = {}  # shared prefix -> [blocks, references, last use]

    # the instance's state (plain variables, read and written by the helpers below: the loop asks for them several
    # times a step): the decode counter (steps every decoding sequence has run), the sequences decoding, the sum of
    # their kv0 - base, the KV blocks held by decoding sequences, by prompts, by resident prefixes, reserved for this
    # step's decode tokens; requests admitted, prompt tokens read from the prefix cache, the decoding set's version
    counter = decoding = ctx_sum = a_dec = p_alloc = resident = reserved = admitted = cached_total = ver = 0
    res = InstanceResult(np.zeros(0), np.zeros(0), np.zeros(0), [], [])
    next_arr = 0
    now = arrival[0] if n_req else 0.0
    done_count = 0
    peak = 0
    steps_run = 0
    guard = 200 * n_req + 100000

    # The KV blocks the decoding sequences hold at decode counter ``at``: over them, ceil((kv0 + at - base) / bs)
    # less the shared prefix blocks. With o = kv0 - base + bs - 1 = q bs + r (0 <= r < bs) and at = A bs + a, a
    # sequence holds q + A + [r >= bs - a] - shared: kept as the sum of q, the sum of shared and a count per r,
    # updated as sequences start and stop decoding (asked several times a step; exact integers)
    dec_q = dec_shared = 0
    dec_rem = [0] * bs

    def dec_blocks(at: int) -> int:
        if spec:
            return spec_blocks(at)
        big, a = divmod(at, bs)
        return dec_q + decoding * big + (sum(dec_rem[bs - a:]) if a else 0) - dec_shared

    # Between steps a_dec is dec_blocks(counter) (start_decode and release move it by a sequence's own blocks, and it
    # is set so after each step). One more token opens a block for exactly the sequences with r = -(counter + 1) mod
    # bs: without speculation that count is dec_blocks(counter + 1) - dec_blocks(counter), read in one lookup
    def next_blocks() -> int:
        """The blocks the decoding sequences need for one more token each."""
        return dec_blocks(counter + 1) - a_dec if spec else dec_rem[-(counter + 1) % bs]

    def emitted(sl, at: int):
        """Tokens the decoding slots ``sl`` have emitted by decode counter ``at`` (speculation)."""
        j = np.minimum(v_p0[sl] + (at - v_base[sl]), v_end[sl])
        return np.minimum(cum[j] - cum[v_p0[sl]], v_cap[sl])

    # the decoding slots' fields gathered once per change of the decoding set (asked several times a step):
    # version, (p0 - base, end, cum[p0], cap, kv0 + K, shared), counter and the tokens emitted at it
    memo = [-1, None, -1, None]

    def spec_view(at: int):
        """(kv0 + K, shared blocks, tokens emitted by counter ``at``) of the decoding slots (speculation)."""
        if memo[0] != ver:
            sl = np.flatnonzero(v_dec)
            memo[0], memo[2] = ver, -1
            memo[1] = (v_p0[sl] - v_base[sl], v_end[sl], cum[v_p0[sl]], v_cap[sl], v_kv0[sl] + spec, v_shared[sl])
        f = memo[1]
        if memo[2] != at:
            memo[2], memo[3] = at, np.minimum(cum[np.minimum(f[0] + at, f[1])] - f[2], f[3])
        return f[4], f[5], memo[3]

    def spec_blocks(at: int) -> int:
        kv, shared, em = spec_view(at)
        if not kv.size:
            return 0
        return int((-(-(kv + em) // bs)).sum() - shared.sum())

    def spec_ctx(at: int) -> float:
        """The decoding sequences' mean cached tokens at counter ``at`` (speculation)."""
        kv, _, em = spec_view(at)
        return float((kv + em).mean()) - spec if kv.size else 0.0

    def track(slot: int, sign: int) -> None:
        nonlocal dec_q, dec_shared
        q, r = divmod(s_off[slot], bs)
        dec_q += sign * q
        dec_shared += sign * s_shared[slot]
        dec_rem[r] += sign

    def evictable() -> int:
        return sum(g[0] for g in groups.values() if g[1] == 0) if groups else 0

    def free_blocks() -> int:
        return pool - a_dec - p_alloc - resident - reserved

    def evict(need: int) -> None:
        nonlocal resident
        for key in sorted((k for k, g in groups.items() if g[1] == 0), key=lambda k: groups[k][2]):
            if free_blocks() >= need:
                return
            resident -= groups.pop(key)[0]

    def release(slot: int) -> None:
        nonlocal ver, a_dec, decoding, ctx_sum, p_alloc
        r = s_req[slot]
        if is_dec[slot]:
            if spec:
                sl = np.array([slot])
                held = int(-(-(v_kv0[slot] + emitted(sl, counter)[0] + spec) // bs)) - s_shared[slot]
                v_dec[slot] = False
                ver += 1
                res.verified.append((int(v_p0[slot]), counter - base[slot]))
                r_at[r] = int(v_p0[slot]) + counter - base[slot]
            else:
                held = -(-(kv0[slot] + counter - base[slot]) // bs) - s_shared[slot]
            a_dec -= held
            decoding -= 1
            ctx_sum -= kv0[slot] - base[slot]
            track(slot, -1)
            is_dec[slot] = 0
        else:
            p_alloc -= s_palloc[slot]
            prefilling.remove(slot)
        if s_shared[slot]:
            g = groups.get(pgroup[r])
            if g is not None:
                g[1] -= 1
        s_req[slot] = -1
        s_palloc[slot] = 0
        s_shared[slot] = 0
        order_v[slot] = -1
        free_slots.append(slot)

    def preempt_latest() -> None:
        slot = int(np.argmax(order_v))
        r = s_req[slot]
        if is_dec[slot]:
            gen[r] = s_gen0[slot] + (int(emitted(np.array([slot]), counter)[0]) if spec else counter - base[slot])
            epoch[r] += 1
            last_tok[r] = now
        npre[r] += 1
        release(slot)
        waiting.appendleft(r)

    def start_decode(slot: int, r: int, kv: int, g: int) -> None:
        nonlocal decoding, ctx_sum, a_dec, ver
        d = counter
        is_dec[slot] = 1
        kv0[slot] = kv
        base[slot] = d
        s_off[slot] = kv - d + bs - 1
        track(slot, 1)
        s_gen0[slot] = g
        decoding += 1
        ctx_sum += kv - d
        a_dec += -(-(kv + spec) // bs) - s_shared[slot]
        steps_left = osl[r] - g
        if spec:  # the verify steps its next draws need to emit the rest
            p0 = r_at[r]
            steps_left = max(int(np.searchsorted(cum, cum[p0] + steps_left)) - p0, 1) if steps_left > 0 else 1
            v_dec[slot] = True
            ver += 1
            v_kv0[slot], v_base[slot], v_p0[slot], v_end[slot] = kv, d, p0, r_end[r]
            v_cap[slot], v_shared[slot] = max(osl[r] - g, 0), s_shared[slot]
        heapq.heappush(heap, (d + steps_left, epoch[r], r, slot))

    def take_slot(r: int) -> int:
        nonlocal admitted
        slot = free_slots.pop()
        s_req[slot] = r
        order_v[slot] = admitted
        admitted += 1
        return slot

    def admit(r: int, budget: int, wm: int):
        """Admit request r if the blocks for what it would run now are free: (slot, piece, cached), or None.
        piece 0: it joins the decoding sequences directly (decode role, KV cache transferred in)."""
        nonlocal reserved, p_alloc, cached_total
        if role == "decode" and npre[r] == 0:
            need = -(-(isl[r] + q) // bs)
            if free_blocks() - wm < need:
                evict(need + wm)
                if free_blocks() - wm < need:
                    return None
            slot = take_slot(r)
            start_decode(slot, r, isl[r], gen[r])
            reserved += need - (-(-(isl[r] + spec) // bs))  # its first step writes one more token
            return slot, 0, 0
        prompt = isl[r] + gen[r]
        cb = 0
        g = groups.get(pgroup[r]) if cfg.prefix_caching and pgroup[r] >= 0 else None
        if g is not None:
            cb = min(g[0], (prompt - 1) // bs)
            g[1] += 1  # hold it while checking, so that it is not evicted
        cached = cb * bs
        piece = min(prompt - cached, budget)
        need = -(-(cached + piece) // bs) - cb
        if free_blocks() - wm < need:
            evict(need + wm)
            if free_blocks() - wm < need:
                if g is not None:
                    g[1] -= 1
                return None
        if g is not None and not cb:
            g[1] -= 1
        slot = take_slot(r)
        s_prompt[slot] = prompt
        s_done[slot] = cached
        s_palloc[slot] = need
        s_shared[slot] = cb
        p_alloc += need
        if cb:
            g[2] = now
            cached_total += cached
        prefilling.append(slot)
        return slot, piece, cached

    def make_resident(slot: int, r: int) -> None:
        nonlocal resident, p_alloc
        if not cfg.prefix_caching or pgroup[r] < 0 or s_shared[slot] or pgroup[r] in groups:
            return
        gb = min(plen[r] // bs, s_palloc[slot])
        if gb <= 0:
            return
        groups[pgroup[r]] = [gb, 1, now]
        resident += gb
        s_palloc[slot] -= gb
        p_alloc -= gb
        s_shared[slot] = gb

    while done_count < n_req:
        guard -= 1
        if guard < 0:
            raise RuntimeError("serving simulation made no progress (a bug): stopped")
        while next_arr < n_req and arrival[next_arr] <= now:
            waiting.append(next_arr)
            next_arr += 1
        if next_arr - done_count > peak:
            peak = next_arr - done_count
        if not waiting and decoding == 0 and not prefilling:
            if next_arr >= n_req:
                break
            if arrival[next_arr] == math.inf:
                raise RuntimeError("closed-loop simulation has nothing in flight and nothing sent (a bug)")
            res.idle_s += arrival[next_arr] - now
            now = arrival[next_arr]
            continue

        # 1. every decoding sequence needs room for one more token
        need = next_blocks() if decoding else 0
        while decoding and need > free_blocks():
            evict(need)
            if need <= free_blocks():
                break
            preempt_latest()
            need = next_blocks() if decoding else 0
        reserved = max(need, 0)
        # SGLang's schedule: while prompts wait or are part-way through, a step carries only them (the whole budget)
        # and the decoding sequences stall (a step that admits none decodes as usual)
        prefill_only = prefill_first and decoding and (prefilling or waiting)
        budgets = RankBudgets(ranks, budget_max, 0 if prefill_only else decoding, q)

        # 2. prompts part-way through first, then admissions, first come first served
        pieces = []  # (slot, new tokens, tokens already cached)
        entrants = []  # decode role: requests joining the decoding sequences this step
        for slot in list(prefilling):
            budget = budgets.room()
            if budget <= 0:
                break
            piece = min(s_prompt[slot] - s_done[slot], budget)
            want = -(-(s_done[slot] + piece) // bs) - s_shared[slot] - s_palloc[slot]
            if want > free_blocks():
                evict(want)
                if want > free_blocks():
                    piece = (s_palloc[slot] + s_shared[slot] + free_blocks()) * bs - s_done[slot]
                    piece = min(piece, s_prompt[slot] - s_done[slot], budget)
                    want = -(-(s_done[slot] + piece) // bs) - s_shared[slot] - s_palloc[slot]
            if piece <= 0:
                continue
            s_palloc[slot] += max(want, 0)
            p_alloc += max(want, 0)
            pieces.append((slot, piece, s_done[slot]))
            budgets.take(piece)
        wm = watermark if (decoding or prefilling) else 0
        while waiting and free_slots and budgets.room() > 0:
            got = admit(waiting[0], budgets.room(), wm)
            if got is None:
                break
            r = waiting.popleft()
            slot, piece, cached = got
            if piece:
                pieces.append((slot, piece, cached))
            else:
                entrants.append(r)
            budgets.take(piece or q)
        reserved = 0

        n_dec = 0 if prefill_only and pieces else decoding
        if not pieces and n_dec == 0:
            if prefilling:
                preempt_latest()  # every block is held by stalled prompts: free the latest, retry
                continue
            if next_arr < n_req and arrival[next_arr] < math.inf:
                res.idle_s += max(arrival[next_arr] - now, 0.0)
                now = max(now, arrival[next_arr])
                continue
            raise RuntimeError("serving simulation stalled with requests waiting (a bug)")

        # 3. how many steps to run as one: pure decode, nothing to admit, until the next event
        k = 1
        ctx0 = (spec_ctx(counter) if spec else ctx_sum / n_dec + counter) if n_dec else 0.0
        if not pieces and not prefilling and not entrants:
            while heap and heap[0][1] != epoch[heap[0][2]]:
                heapq.heappop(heap)
            k = max(heap[0][0] - counter, 1) if heap else 1
            spare = free_blocks()
            room = spare + evictable()
            if n_dec * (k * q // bs + 2) > spare:  # at most q tokens a sequence a step
                lo, hi = 1, k
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if dec_blocks(counter + mid) - a_dec <= room:
                        lo = mid
                    else:
                        hi = mid - 1
                k = lo
                grow = dec_blocks(counter + k) - a_dec
                if grow > spare:
                    evict(grow)
            if spec:
                t_first, t_last, e_first, e_last = steps.decode_span(n_dec, ctx0, k, spec_ctx(counter + k - 1))
            else:
                t_first, t_last, e_first, e_last = steps.decode_span(n_dec, ctx0, k)
            dur = k * (t_first + t_last) / 2.0
            if k > 1 and not waiting and free_slots and next_arr < n_req and now + dur > arrival[next_arr]:
                gap = arrival[next_arr] - now
                slope = (t_last - t_first) / (k - 1)
                # the step during which the next request arrives: least j with j t0 + slope j (j-1) / 2 >= gap
                if slope > 1e-15:
                    a, b = slope / 2.0, t_first - slope / 2.0
                    j = math.ceil((-b + math.sqrt(b * b + 4.0 * a * gap)) / (2.0 * a))
                else:
                    j = math.ceil(gap / t_first) if t_first > 0 else 1
                j = min(k, max(j, 1))
                if j < k:  # linear in the step index: cut the run at step j
                    t_last = t_first + slope * (j - 1)
                    e_last = e_first + (e_last - e_first) * (j - 1) / (k - 1)
                    k = j
                    dur = k * (t_first + t_last) / 2.0
            dyn = k * (e_first + e_last) / 2.0
        else:
            dur, dyn = steps.step(n_dec, ctx0, [(p, x) for _, p, x in pieces])
            t_first = t_last = dur
            ptok = sum(p for _, p, _ in pieces)
            share = ptok / (ptok + n_dec * q)  # the step's energy split between prefill and decode by tokens
            res.prefill_s += dur * share
            res.prefill_dynamic_j += dyn * share

        # 4. advance the clock; requests arriving meanwhile are in the system from their arrival
        end = now + dur
        res.in_system_s += (next_arr - done_count) * dur
        while next_arr < n_req and arrival[next_arr] <= end:
            res.in_system_s += end - arrival[next_arr]
            waiting.append(next_arr)
            next_arr += 1
        if next_arr - done_count > peak:
            peak = next_arr - done_count
        res.busy_s += dur
        res.dynamic_j += dyn
        steps_run += k
        now = end
        if n_dec != decoding:  # a prompt step the decoding sequences waited through: their next gap is longer
            stall_s += dur
            stalled = max(stalled, decoding)
        if n_dec:
            live = n_dec - len(entrants)
            if live and stall_s:
                waited = min(stalled, live)
                res.itl_spans.append((t_first + stall_s, t_first + stall_s, 1, waited))
                if live > waited:
                    res.itl_spans.append((t_first, t_first, 1, live - waited))
                if k > 1:
                    slope = (t_last - t_first) / (k - 1)
                    res.itl_spans.append((t_first + slope, t_last, k - 1, live))
                stall_s, stalled = 0.0, 0
            elif live:
                res.itl_spans.append((t_first, t_last, k, live))
            if k == 1 and not spec:
                a_dec += next_blocks()
                counter += 1
            else:
                counter += k
                a_dec = dec_blocks(counter)
            if spec:  # the blocks the runs grew into stay within the pool (checked by the tests)
                res.stats["min_free_blocks"] = min(res.stats.get("min_free_blocks", pool), free_blocks())
        for r in entrants:  # decode role: the first token this instance produces
            first[r] = now
            last_tok[r] = now

        # 5. prompts completed this step produce their first (or, after a preemption, next) token
        for slot, piece, _ in pieces:
            s_done[slot] += piece
            if s_done[slot] < s_prompt[slot]:
                continue
            r = s_req[slot]
            g = gen[r] + 1
            gen[r] = g
            if first[r] < 0:
                first[r] = now
            else:
                res.itl_extra.append(now - last_tok[r])
            last_tok[r] = now
            make_resident(slot, r)
            if role == "prefill" or g >= osl[r]:
                finish[r] = now
                release(slot)
                done_count += 1
                if sent < n_req:  # closed loop: the client sends the next request now
                    arrival[sent] = now + cfg.request_s
                    sent += 1
                continue
            prefilling.remove(slot)
            p_alloc -= s_palloc[slot]
            s_palloc[slot] = 0
            start_decode(slot, r, s_prompt[slot], g)

        # 6. sequences that produced their last token
        while heap and heap[0][0] <= counter:
            _, ep, r, slot = heapq.heappop(heap)
            if ep != epoch[r] or s_req[slot] != r:
                continue
            gen[r] = osl[r]
            finish[r] = now
            last_tok[r] = now
            release(slot)
            done_count += 1
            if sent < n_req:
                arrival[sent] = now + cfg.request_s
                sent += 1

    res.first_token = np.asarray(first)
    res.arrival = np.asarray(arrival, dtype=float) - cfg.request_s  # the client's arrival times
    res.in_system_s += cfg.request_s * n_req  # each request's setup before the scheduler saw it
    res.peak_in_system = peak
    res.finish = np.asarray(finish)
    res.preemptions = np.asarray(npre)
    res.steps = steps_run
    res.cached_tokens = cached_total
    res.end = now
    return res
