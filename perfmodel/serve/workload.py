"""Requests for the serving simulation: arrival times, prompt and output lengths, shared prefixes.

Arrivals: ``poisson`` (exponential gaps at ``rate`` requests/s, as vLLM's benchmark_serving sends them with
``--request-rate R``), ``constant`` (gaps of exactly 1/rate), a trace file (:mod:`.trace`), or a **closed loop**
at concurrency C (:func:`closed_loop_requests`): the client keeps exactly C requests in flight and sends the next
one the moment one finishes, as vLLM's ``benchmark_serving --max-concurrency C`` with an infinite request rate
and aiperf / genai-perf ``--concurrency C`` do. Closed-loop arrival times are not known in advance: the engine
simulation sets each one to the finish time of the request it replaces; how the first C start (all at once, or
in the desynchronized steady state) is :func:`closed_loop_requests`' ``start``.

Length distributions (``--isl-dist``, ``--osl-dist``), each drawn independently per request, rounded to
whole tokens and at least 1:

- ``N`` or ``fixed:N``: always N;
- ``uniform:A:B``: integers A..B inclusive, equally likely;
- ``normal:MU:SIGMA``: a normal, rounded, clipped below at 1;
- ``lognormal:MEDIAN:SIGMA``: exp(N(ln MEDIAN, SIGMA)), SIGMA the standard deviation of the log;
- ``exponential:MEAN``: an exponential of that mean (geometric after rounding).

Shared prefixes (``--prefix-len L --prefix-groups G``): each request picks one of G groups uniformly; its
first min(L, prompt - 1) tokens are that group's (a system prompt, a few-shot header); prefix caching can
reuse their KV cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..scenario import CLOSED_LOOP_STARTS

DIST_HELP = ("N | fixed:N | uniform:A:B | normal:MU:SIGMA | lognormal:MEDIAN:SIGMA | exponential:MEAN "
             "(tokens; docs/serving.md)")

# the longest prompt or output a draw may give: 10M tokens, beyond the longest context any model ships (a draw
# past it is a distribution whose tail runs off to overflow, not a workload)
MAX_TOKENS = 10 ** 7
# the latest a request may arrive: 1e9 s (about 32 years); past it a float second no longer resolves the
# microseconds of an engine step, and latencies round to 0
MAX_ARRIVAL_S = 1e9
# Requests one simulation may hold: the simulation keeps about 2 KB of state per request (measured: 220 MB at
# 100,000, 80 MB at 20,000) and simulates about 10,000 a second, so 10^6 is about 2 GB and a few minutes;
# `--requests 1e9` was killed for memory after 104 s. A plan simulates every layout it tries on its requests.
MAX_REQUESTS = 10 ** 6
MAX_PLAN_REQUESTS = 10 ** 5
BYTES_PER_REQUEST = 2_000


def check_request_count(n: int, field: str = "--requests", cap: int = MAX_REQUESTS, what: str = "") -> int:
    """``n`` requests, or one line stating the cap and why (memory per request)."""
    if n > cap:
        raise InputError(f"{what or f'{n:,} requests'}: at most {cap:,} requests a run (the simulation keeps "
                         f"about {BYTES_PER_REQUEST // 1000} KB per request: {n:,} would need about "
                         f"{_size(n * BYTES_PER_REQUEST)} of memory); simulate fewer, the percentiles settle "
                         "within a few thousand", field=field)
    return n


def _size(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if b < 1000:
            return f"{b:.0f} {unit}"
        b /= 1000
    return f"{b:.0f} EB"


@dataclass
class Requests:
    arrival: np.ndarray  # seconds, non-decreasing
    isl: np.ndarray  # prompt tokens
    osl: np.ndarray  # output tokens
    prefix_group: np.ndarray  # -1: no shared prefix
    prefix_len: np.ndarray  # tokens of the shared prefix
    # closed loop: this many requests in flight, each finished one replaced at once (``arrival`` is then only a
    # placeholder); None: open loop, the arrival times as given
    concurrency: int | None = None

    def __len__(self) -> int:
        return int(self.arrival.size)

    def subset(self, idx) -> "Requests":
        idx = np.asarray(idx, dtype=int)
        return Requests(self.arrival[idx], self.isl[idx], self.osl[idx], self.prefix_group[idx], self.prefix_len[idx],
                        self.concurrency)

    def with_arrival(self, arrival) -> "Requests":
        """The same requests at fixed arrival times (open loop)."""
        return Requests(np.asarray(arrival, dtype=float), self.isl, self.osl, self.prefix_group, self.prefix_len)


@dataclass(frozen=True)
class LengthDist:
    kind: str
    a: float
    b: float = 0.0
    text: str = ""

    def sample(self, rng: np.random.Generator, n: int, field: str | None = None) -> np.ndarray:
        """``n`` whole-token lengths, each at least 1; a draw that is not finite or exceeds :data:`MAX_TOKENS`
        stops with one line naming ``field``."""
        with np.errstate(over="ignore", invalid="ignore"):
            x = self._draw(rng, n)
        x = np.asarray(x, dtype=float)
        if x.size and not (np.all(np.isfinite(x)) and float(x.max()) <= MAX_TOKENS):
            worst = float(np.nan_to_num(x, nan=np.inf).max())
            raise InputError(f"{self.text or self.kind} draws {worst:.3g} tokens, more than the cap of "
                             f"{MAX_TOKENS:,} (10^7); narrow the distribution", field=field)
        return np.maximum(np.rint(x), 1).astype(np.int64)

    def _draw(self, rng: np.random.Generator, n: int):
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":
            x = np.exp(rng.normal(np.log(self.a), self.b, size=n))
        else:  # exponential
            x = rng.exponential(self.a, size=n)
        return x

    @property
    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2.0
        if self.kind == "lognormal":
            return self.a * math.exp(self.b ** 2 / 2.0)
        return self.a

    def upper(self) -> int:
        """A length that almost every draw stays below (the simulation sizes its tables to the real maximum)."""
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(self.b)
        if self.kind == "normal":
            return int(self.a + 5 * self.b)
        if self.kind == "lognormal":
            return int(self.a * np.exp(5 * self.b))
        return int(self.a * 12)


def parse_dist(text: str, *, field: str) -> LengthDist:
    """A length distribution from its text (module doc)."""
    t = str(text).strip()
    parts = t.split(":")
    kind = parts[0].lower() if not parts[0].strip().lstrip("+").isdigit() else "fixed"
    if kind == "fixed" and parts[0].lower() != "fixed":
        parts = ["fixed"] + parts
    want = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exponential": 1}
    if kind not in want:
        raise InputError(f"unknown distribution {parts[0]!r}; expected {DIST_HELP}", field=field)
    if len(parts) != want[kind] + 1:
        raise InputError(f"{kind} takes {want[kind]} number(s), got {t!r}; expected {DIST_HELP}", field=field)
    try:
        nums = [float(x) for x in parts[1:]]
    except ValueError:
        raise InputError(f"expected numbers in {t!r}; {DIST_HELP}", field=field) from None
    if not all(np.isfinite(nums)):
        raise InputError(f"expected finite numbers, got {t!r}", field=field)
    a = nums[0]
    b = nums[1] if len(nums) > 1 else 0.0
    if kind in ("fixed", "uniform") and any(x != int(x) or x < 1 for x in nums):
        raise InputError(f"expected positive whole token counts, got {t!r}", field=field)
    if kind == "uniform" and b < a:
        raise InputError(f"uniform:A:B needs A <= B, got {t!r}", field=field)
    if kind in ("normal", "lognormal", "exponential") and a <= 0:
        raise InputError(f"expected a positive {'median' if kind == 'lognormal' else 'mean'}, got {t!r}", field=field)
    if kind in ("normal", "lognormal") and b < 0:
        raise InputError(f"expected a non-negative sigma, got {t!r}", field=field)
    d = LengthDist(kind, a, b, t)
    try:
        mean = d.mean
    except OverflowError:
        mean = math.inf
    if not (math.isfinite(mean) and mean <= MAX_TOKENS):
        raise InputError(f"{t!r} has a mean of {mean:.3g} tokens, more than the cap of {MAX_TOKENS:,} (10^7)",
                         field=field)
    return d


def synthetic_requests(n: int, rate: float, isl: LengthDist, osl: LengthDist, *, arrival: str = "poisson",
                       seed: int = 0, prefix_len: int = 0, prefix_groups: int = 0) -> Requests:
    """``n`` requests arriving at ``rate`` per second (module doc)."""
    if n < 1:
        raise InputError(f"expected a positive number of requests, got {n}", field="--requests")
    if not (rate > 0 and np.isfinite(rate)):
        raise InputError(f"expected a positive finite request rate (requests/s), got {rate}", field="--rate")
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif arrival == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        raise InputError(f"expected poisson, constant or trace FILE, got {arrival!r}", field="--arrival")
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.cumsum(gaps) - gaps[0]  # the first request at t = 0
    if not (np.all(np.isfinite(t)) and float(t[-1]) <= MAX_ARRIVAL_S):
        raise InputError(f"{n} requests at {rate:g} req/s arrive over {float(np.nan_to_num(t[-1], nan=np.inf)):.3g} s, "
                         f"more than {MAX_ARRIVAL_S:.0e} s (about 32 years), past which latencies round to 0; "
                         f"expected at least {n / MAX_ARRIVAL_S:.3g} req/s", field="--rate")
    i = isl.sample(rng, n, "--isl-dist")
    o = osl.sample(rng, n, "--osl-dist")
    group, plen = _prefixes(rng, i, prefix_len, prefix_groups)
    return Requests(t, i, o, group, plen)


def _prefixes(rng, isl: np.ndarray, prefix_len: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    n = isl.size
    if prefix_len < 0 or groups < 0:
        raise InputError("expected non-negative --prefix-len and --prefix-groups", field="--prefix-len")
    if prefix_len == 0 or groups == 0:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    g = rng.integers(0, groups, size=n).astype(np.int64)
    return g, np.minimum(prefix_len, np.maximum(isl - 1, 0)).astype(np.int64)


# --- closed loop -----------------------------------------------------------------------------------------

MEASURED_MIN = 200  # requests measured at least, so that a mean over them is stable (a few hundred per point)


def closed_loop_default_requests(concurrency: int) -> int:
    """Requests a closed-loop run needs for the steady-state window of :func:`closed_loop_window`: the warm-up
    (2 C), at least max(200, 2 C) measured, and the drain (C)."""
    c = int(concurrency)
    return 2 * c + max(MEASURED_MIN, 2 * c) + c


def closed_loop_window(n: int, concurrency: int) -> tuple[int, int]:
    """Requests [start, stop) (in the order the client sends them) measured in a closed-loop run of ``n``.

    Warm-up: the first 2 C. The first C arrive together (a burst of prefills no steady state has) and the next C
    replace them in the pattern that burst left, so both go. Drain: the last C, sent while fewer than C are left
    to run beside them (the client has nothing more to send), so their decode runs in a smaller batch. A run too
    short for both keeps what it can: the drain goes first, then the warm-up shrinks to C, then to nothing."""
    c = max(int(concurrency), 1)
    stop = n - c if n - c >= 1 else n
    for start in (2 * c, c, 0):
        if stop - start >= 1:
            return start, stop
    return 0, n


def closed_loop_requests(n: int, concurrency: int, isl: LengthDist, osl: LengthDist, *, seed: int = 0,
                         prefix_len: int = 0, prefix_groups: int = 0, start: str = "burst") -> Requests:
    """``n`` requests sent by a client that keeps ``concurrency`` of them in flight (module doc); ``start``: how the
    first ``concurrency`` begin (:data:`CLOSED_LOOP_STARTS`). "burst": all at once, identical, so requests of fixed
    lengths stay in lock-step waves (the C finish together, their replacements arrive together). "spread": the
    first wave's outputs are cut to ceil(k / C x their length) for the k-th of them (at least 1 token), so their
    replacements arrive evenly over one request's life: the desynchronized steady state a long run drifts to when
    timing noise pulls requests apart. The cut requests are the warm-up, never measured (:func:`closed_loop_window`)."""
    if n < 1:
        raise InputError(f"expected a positive number of requests, got {n}", field="--requests")
    if isinstance(concurrency, bool) or not isinstance(concurrency, (int, np.integer)) or concurrency < 1:
        raise InputError(f"expected a positive integer concurrency, got {concurrency!r}", field="--concurrency")
    if start not in CLOSED_LOOP_STARTS:
        raise InputError(f"expected a closed-loop start of {' or '.join(CLOSED_LOOP_STARTS)}, got {start!r}",
                         field="--closed-loop-start")
    rng = np.random.default_rng(seed)
    i = isl.sample(rng, n, "--isl-dist")
    o = osl.sample(rng, n, "--osl-dist")
    if start == "spread":
        c = min(int(concurrency), n)
        k = np.arange(1, c + 1, dtype=np.int64)
        o[:c] = np.maximum(1, -(-o[:c] * k // c))  # ceil(k / C x length), in integers
    group, plen = _prefixes(rng, i, prefix_len, prefix_groups)
    return Requests(np.zeros(n), i, o, group, plen, int(concurrency))
