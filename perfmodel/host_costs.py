"""Host-side costs of eager frameworks: what the CPU spends issuing a kernel, a step and a request.

An eager PyTorch program (Hugging Face ``generate()``) issues every kernel from Python: module dispatch, the
operator's dispatcher and the launch. At decode's small batches the GPU finishes each kernel before the host has
issued the next, so a step takes as long as the host needs, not the device. These figures differ per host
(CPU model, clocks, Python): they are measured on the machine the calibration ran on and kept beside its other
measurements (``calibration/<part>/hf/``, written by :mod:`perfmodel.measure.hf_generate`), fitted into that
folder's profile by ``perfmodel fit`` (``Profile.host``, :mod:`perfmodel.fit.host`), chosen like every other
family of a projection's profile (:func:`perfmodel.evidence.compose`) and carried to other parts unchanged (the
host is not the GPU). This module reads no calibration folder of its own accord: the model takes the host costs
its profile holds (``--calibration none``: :data:`DEFAULT`); :func:`measured_host_costs` parses a folder it is
given (by the fit, or by :mod:`perfmodel.resolve` for ``$PERFMODEL_HOST_COSTS``).

- ``kernel_s``: host time per kernel inside a model's forward, from the measured host-bound decode forward
  (batch 1, no sync: wall time = host time) over the kernels the profiler counted in that step; the median over
  the measured models.
- ``step_s``: per decode step outside the forward: ``generate()``'s own kernels (logits to fp32, processors,
  argmax, stopping criteria: ``GENERATE_STEP_KERNELS`` of them, counted on the H200) at ``kernel_s`` each, and its
  two synchronisations a step (the stopping check's ``bool(unfinished.max() == 0)``, measured).
- ``request_s``: per request, ``generate()``'s setup (input preparation, cache allocation, generation config):
  measured as ``generate(max_new_tokens=1)`` less the same prefill run by hand, where the folder has it, else
  :data:`REQUEST_SETUP_LAUNCHES` of the host's bare launches.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError
from .io import csv_dict_rows, read_input_text
from .profile import HOST_FIELDS

GENERATE_STEP_KERNELS = 14  # kernels generate() launches a decode step outside the forward (kernels.csv, H200)
SYNCS_PER_STEP = 2  # generate()'s stopping check and the next step's input copy wait for the device
# the compiled (CUDA-graph) decode step: host launches around the replay (generate()'s own kernels, the graph's
# input copies, the replay itself) and its one synchronisation; the median over the six compiled points of
# calibration/h200/hf/compile/summary.json (31 to 35 launch calls a step)
COMPILED_STEP_LAUNCHES = 33
COMPILED_SYNCS_PER_STEP = 1


@dataclass(frozen=True)
class HostCosts:
    kernel_s: float
    step_s: float  # an eager decode step's host work outside its kernels
    request_s: float
    source: str
    graph_step_s: float = 0.0  # a compiled (CUDA-graph) decode step's host work around the replay


# Documented defaults where nothing was measured: a bare eager launch costs about 9 us on the lent host
# (host.csv, add_inplace) and a kernel inside a module's forward about twice that (estimate); the stopping
# check's synchronisation 26 us (host.csv, bool_max_eq0); a request's setup (estimate: REQUEST_SETUP_LAUNCHES
# launches of about 9 us, rounded up).
KERNEL_S = 20e-6
SYNC_S = 26e-6
REQUEST_S = 3e-3
# generate()'s own work per call (generate(max_new_tokens=1) less the same prefill by hand: 1.8-3.2 ms) in units
# of the bare eager launch measured beside it, which carries it to a host that measured only its launches: the
# median over three models x two calls of 31 rounds (calibration/h200/hf/request/host.csv, 214-352)
REQUEST_SETUP_LAUNCHES = 313.0


def _step_s(kernel_s: float, sync_s: float) -> float:
    return GENERATE_STEP_KERNELS * kernel_s + SYNCS_PER_STEP * sync_s


def _graph_step_s(kernel_s: float, sync_s: float) -> float:
    return COMPILED_STEP_LAUNCHES * kernel_s + COMPILED_SYNCS_PER_STEP * sync_s


DEFAULT = HostCosts(kernel_s=KERNEL_S, step_s=_step_s(KERNEL_S, SYNC_S), request_s=REQUEST_S,
                    source="estimate: 20 us a kernel, generate()'s 14 kernels and 2 syncs a step, 3 ms a request",
                    graph_step_s=_graph_step_s(KERNEL_S, SYNC_S))


def _rows(path: Path) -> list[dict]:
    return csv_dict_rows(read_input_text(path, what="a host-cost measurement (CSV)"), file=str(path))


MAX_HOST_US = 1e6  # a host cost per kernel, sync or request call is under a second (the measured: 2-3,500 us)
MAX_KERNELS = 1e7  # kernels counted in one decode step


def _number(r: dict, field: str, path: Path, line: int, top: float) -> float:
    """A measured figure of a host-cost CSV row: finite, positive and under ``top``, else one line naming the
    file, the row and the column (text, 1e308 or a zero had given a traceback, a 300-digit TTFT or no host
    cost at all)."""
    raw = r.get(field)
    try:
        v = float(raw)
    except (TypeError, ValueError):
        v = float("nan")
    if not (math.isfinite(v) and 0.0 < v <= top):
        from .safeyaml import printable

        raise InputError(f"row {line}: expected a number in (0, {top:g}], got {printable(str(raw), 40)!r}",
                         file=str(path), field=field)
    return v


def measured_host_costs(folder: str | Path) -> HostCosts:
    """The host costs of a ``perfmodel.measure.hf_generate`` output folder (``host.csv``, ``kernels.csv``)."""
    folder = Path(folder)
    host, kernels = folder / "host.csv", folder / "kernels.csv"
    if not host.is_file() or not kernels.is_file():
        raise InputError("not a host-cost measurement (expected host.csv and kernels.csv)", file=str(folder))
    per_step: dict[tuple[str, str, str], float] = {}
    for line, r in enumerate(_rows(kernels), start=2):
        if r.get("phase") == "decode_step" and r.get("cache") == "dynamic":
            key = (r.get("model"), r.get("batch"), r.get("ctx"))
            per_step[key] = per_step.get(key, 0.0) + _number(r, "count", kernels, line, MAX_KERNELS)
    rates, sync, setups, bare = [], [], [], []
    for line, r in enumerate(_rows(host), start=2):
        us = lambda: _number(r, "wall_us", host, line, MAX_HOST_US) * 1e-6  # noqa: E731
        if r.get("family") == "request" and r.get("name") == "generate_setup" and r.get("wall_us"):
            setups.append(us())
        if r.get("family") == "launch" and r.get("name") == "add_inplace" and r.get("wall_us"):
            bare.append(us())
        if r.get("family") == "decode_step" and r.get("name") == "decode_forward_nosync" and r.get("batch") == "1":
            n = per_step.get((r.get("model"), r.get("batch"), r.get("ctx")))
            if n and n > GENERATE_STEP_KERNELS:
                rates.append(us() / (n - GENERATE_STEP_KERNELS))
        if r.get("family") == "sync" and r.get("name") == "bool_max_eq0":
            sync.append(us())
    if not rates:
        raise InputError("no host-bound decode step measured (decode_forward_nosync at batch 1)", file=str(host))
    kernel_s = statistics.median(rates)
    sync_s = statistics.median(sync) if sync else SYNC_S
    if setups:
        request_s, how = statistics.median(setups), "request setup measured"
    elif bare:
        request_s = REQUEST_SETUP_LAUNCHES * statistics.median(bare)
        how = f"request setup {REQUEST_SETUP_LAUNCHES:g} bare launches (measured on another host)"
    else:
        request_s, how = REQUEST_S, "request setup an estimate"
    return HostCosts(kernel_s, _step_s(kernel_s, sync_s), request_s,
                     f"measured: {folder.as_posix()} ({len(rates)} models' host-bound decode forward, "
                     f"{kernel_s * 1e6:.1f} us a kernel); {how}",
                     graph_step_s=_graph_step_s(kernel_s, sync_s))


def as_fields(h: HostCosts) -> dict:
    """``h`` as the profile's ``host`` field (:attr:`perfmodel.profile.Profile.host`)."""
    return {**{k: float(getattr(h, k)) for k in HOST_FIELDS}, "source": h.source}


HOST_COSTS_ENV = "PERFMODEL_HOST_COSTS"  # a measurement folder (host.csv, kernels.csv) to use on every part


@functools.lru_cache(maxsize=16)
def folder_host_costs(folder: str) -> HostCosts:
    """:func:`measured_host_costs` of ``folder``, read once per process (``$PERFMODEL_HOST_COSTS``)."""
    return measured_host_costs(folder)


def profile_host_costs(prof) -> HostCosts:
    """The host costs a profile holds (``Profile.host``: fitted from a measurement folder, chosen and carried by
    :func:`perfmodel.evidence.compose`), else the documented defaults (:data:`DEFAULT`)."""
    h = getattr(prof, "host", None)
    if not h:
        return DEFAULT
    return HostCosts(kernel_s=h["kernel_s"], step_s=h["step_s"], request_s=h["request_s"],
                     source=h.get("source", ""), graph_step_s=h["graph_step_s"])


def scenario_host_costs(sc, prof) -> HostCosts | None:
    """The host costs a scenario's steps pay per kernel, per step and per request: those of an eager framework
    whose host was measured per kernel (``kernels`` "hf": transformers' generate()), from the profile; None for
    the others, whose eager floor is :func:`perfmodel.step_accounting.host_cost`'s."""
    if getattr(sc, "kernels", None) != "hf":
        return None
    return profile_host_costs(prof)


TOKEN_RETURN_S = 30e-6  # estimate where the profile has none: the lent H200's greedy round trip is 25-43 us


def token_return_s(vocab: int, prof=None) -> float:
    """A request's first token from its logits to the host: the sampler's kernels at one sequence, the copy and
    the wait for it (greedy; ``Profile.token_return_s``, measured per vocabulary by the launch family; linear in
    the vocabulary between the measured ones, the nearest outside them; :data:`TOKEN_RETURN_S` without)."""
    pts = sorted((float(v), float(t)) for v, t in (getattr(prof, "token_return_s", None) or {}).items())
    if not pts:
        return TOKEN_RETURN_S
    return float(np.interp(float(vocab), [v for v, _ in pts], [t for _, t in pts]))


def request_overhead_s(sc, hw, model, prof) -> float:
    """Host time a request's first token costs beyond its prefill step: an eager framework's own setup of the
    call (transformers' generate(): :attr:`HostCosts.request_s`), or for the serving engines the first token's
    return from the device (:func:`token_return_s`; their other per-request work, tokenisation and scheduling,
    runs beside the batch and is not modelled)."""
    h = scenario_host_costs(sc, prof)
    if h is not None:
        return h.request_s
    if sc.mode == "sol":
        return 0.0
    return token_return_s(model.vocab, prof)


def host_rules(sc, prof) -> dict:
    """Keyword overrides of :class:`perfmodel.step_accounting.Rules` for ``sc`` priced with ``prof`` (empty unless
    :func:`scenario_host_costs` has figures)."""
    h = scenario_host_costs(sc, prof)
    return {} if h is None else {"host_kernel_s": h.kernel_s, "host_step_s": h.step_s,
                                 "host_graph_step_s": h.graph_step_s}
