"""Collectives: an alpha-beta model over the scale-up domain and the scale-out network.

``nbytes`` is the buffer in NCCL's convention (:func:`perfmodel.ops.collective`). Each collective moves its
*bus bytes* over every rank's link: all-reduce ``2 (p-1)/p`` of the buffer, all-gather, reduce-scatter and
all-to-all ``(p-1)/p``, p2p the message (nccl-tests' bus bandwidth definitions). Time:

    t = alpha(kind, p) + bus_bytes / (eta(kind, p) * link bandwidth per direction)

**Measured** (``Profile.comm_alpha_s`` / ``comm_eta``, keyed ``"all_reduce:8"``, written by ``perfmodel fit``
from the suite's collective rows inside one scale-up domain): alpha and eta of that collective at that world
size. A world size between two measured ones takes both linearly interpolated in p; beyond the largest
measured one, a ring's alpha grows by the spec's per-hop latency for every extra ring step and eta stays the
largest one's; below the smallest, a ring's alpha scales with the ring steps ``p - 1``. The direct
collectives (:data:`DIRECT_KINDS`: all-to-all, and the engines' one-shot/two-shot all-reduce kernels) send to
every peer at once through the switch, not around a ring: their alpha stays the nearest measured group's
(alphas fitted from NVIDIA's tables: B200 NCCL all-to-all 10.8 / 11.5 / 12.2 us at 2 / 4 / 8 GPUs, GB300
TensorRT-LLM all-reduce 4.3 / 5.0 / 4.5 / 5.2 us at 2 / 4 / 8 / 16). p2p takes ``p2p:2`` (the pair exchange). Fitted values carry to
other parts as they are (perfmodel.transfer: link latencies carry as-is, bandwidth fractions apply to the
target's own link bandwidth).

**Documented defaults** (no measurement for that collective): a ring: the profile's fixed cost of a
collective (``comm_base_s``: launch and synchronisation, software) plus, for each of its ``f (p-1)`` steps
(``f`` = 2 for all-reduce, 1 otherwise), the spec's per-hop latency of the fabric
(``interconnect.scale_up.latency``), and bus bandwidth ``scaleup_eta`` of the link's.

A group larger than the scale-up domain runs hierarchically: the part inside each domain over NVLink (the
domain's measured or default model), the part across domains over the scale-out network with 1/domain of
the bytes per rank, each of its steps at the spec's scale-out hop latency. An all-to-all reduces nothing on
the way: its remote share crosses the scale-out network whole (:func:`_all_to_all_across`).

How much of a collective hides under compute is decided by :mod:`.overlap`, applied by the projection.
Every formula here is plain arithmetic on the inputs (no branch on a value), so the workbook's Excel
expressions pass through it.
"""
from __future__ import annotations

import math

from ..profile import Profile
from ..routing import remote_node_copies
from .backend import NP

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
# collectives that reach every peer at once through the switch (no ring): latency about flat in the group size
DIRECT_KINDS = ("all_to_all", "engine_all_reduce")
_STEPS = {"all_reduce": 2.0, "engine_all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "p2p": 1.0}


def bus_factor(kind: str, p) -> float:
    """Bus bytes per buffer byte (nccl-tests)."""
    if kind == "p2p":
        return 1.0
    return _STEPS[kind] * (p - 1.0) / p


def ring_steps(kind: str, p) -> float:
    return 1.0 if kind == "p2p" else _STEPS[kind] * (p - 1.0)


def comm_key(kind: str, p: int) -> str:
    return f"{kind}:{int(p)}"


def measured_worlds(kind: str, prof: Profile) -> list[int]:
    """World sizes at which ``kind`` has fitted alpha and eta."""
    out = []
    for key in prof.comm_alpha_s:
        name, _, w = key.partition(":")
        if name == kind and key in prof.comm_eta and w.isdigit():
            out.append(int(w))
    return sorted(out)


def fitted_params(kind: str, p: int, hw, prof: Profile):
    """(alpha seconds, eta) of ``kind`` over ``p`` ranks from the measured world sizes (module doc), or None."""
    worlds = measured_worlds(kind, prof)
    if not worlds:
        return None
    if kind == "p2p":
        p = 2
    a = prof.comm_alpha_s
    e = prof.comm_eta
    if p in worlds:
        return a[comm_key(kind, p)], e[comm_key(kind, p)]
    below = [w for w in worlds if w < p]
    above = [w for w in worlds if w > p]
    if below and above:
        lo, hi = below[-1], above[0]
        f = (p - lo) / (hi - lo)
        ka, kb = comm_key(kind, lo), comm_key(kind, hi)
        return a[ka] + (a[kb] - a[ka]) * f, e[ka] + (e[kb] - e[ka]) * f
    w = below[-1] if below else above[0]
    k = comm_key(kind, w)
    if kind in DIRECT_KINDS:  # no ring: the nearest measured group's latency
        return a[k], e[k]
    if below:  # beyond the largest measured group: one step latency more per extra ring step
        return a[k] + (ring_steps(kind, p) - ring_steps(kind, w)) * hw.scaleup_latency, e[k]
    return a[k] * ring_steps(kind, p) / ring_steps(kind, w), e[k]  # below the smallest: scales with the steps


def _within_domain(kind: str, nbytes, p: int, hw, prof: Profile, xp=NP):
    fit = fitted_params(kind, p, hw, prof)
    if fit is not None:
        alpha, eta = fit
        t = alpha + bus_factor(kind, p) * nbytes / (eta * hw.scaleup_bandwidth)
    else:
        t = (prof.comm_base_s + ring_steps(kind, p) * hw.scaleup_latency
             + bus_factor(kind, p) * nbytes / (prof.scaleup_eta * hw.scaleup_bandwidth))
    if kind == "all_reduce":
        # a serving engine's own all-reduce kernels where measured: the engine picks the faster per size
        own = fitted_params("engine_all_reduce", p, hw, prof)
        if own is not None:
            t = xp.minimum(t, own[0] + bus_factor(kind, p) * nbytes / (own[1] * hw.scaleup_bandwidth))
    return t


# the all-to-all kernels whose fits count only the copies that leave the rank: TensorRT-LLM's MNNVL all-to-all
# (a rank's own copies never cross NVLink; on the GB200's table the fit on those misses less than one on every copy
# in 9 of its 10 groups of a call at one expert-parallel size: docs/collectives.md, docs/tools/a2a_engines.py)
REMOTE_ONLY = ("mnnvl.",)


def linked_bytes(kernel: str, nbytes, ranks):
    """The bytes of an all-to-all call of ``nbytes`` over ``ranks`` that its kernel's fit prices
    (:data:`REMOTE_ONLY`)."""
    return nbytes * (ranks - 1) / ranks if kernel.startswith(REMOTE_ONLY) else nbytes


def fitted_kernel(kernel: str, fits: dict) -> str | None:
    """The key of ``fits`` that prices an engine's all-to-all ``kernel`` (``ll.dispatch@fp8``: a call and its
    payload's format): the format's own fit (an engine whose tables time several formats,
    :func:`perfmodel.fit.deepep.fit_keys`), else the call's one fit (tables of one format: the bytes carry the
    format), else its bf16 fit; None where none was fitted."""
    call = kernel.partition("@")[0]
    return next((k for k in (kernel, call, call + "@bf16") if k in fits), None)


def deepep_time(kernel: str, nbytes, experts: int, hw, prof: Profile, ranks: int = 8):
    """One call of an engine's all-to-all ``kernel`` inside one NVLink domain (DeepEP's ``ll.dispatch``,
    ``ll.combine``: low-latency; ``normal.dispatch``, ``normal.combine``: normal; TensorRT-LLM's
    ``mnnvl.dispatch``, ``mnnvl.combine``; each with its payload's format after an ``@``) moving ``nbytes`` from
    this rank to ``ranks`` in a model of ``experts`` experts, from the profile's fit to an engine's measured tables
    (:mod:`perfmodel.fit.deepep`, :func:`fitted_kernel`), or None where no profile fitted it."""
    key = fitted_kernel(kernel, prof.deepep_eta)
    if key is None:
        return None
    return (prof.deepep_alpha_s[key] + prof.deepep_expert_s.get(key, 0.0) * experts
            + linked_bytes(key, nbytes, ranks) / (prof.deepep_eta[key] * hw.scaleup_bandwidth))


def deepep_scaleout_fit(kernel: str, nodes: float, prof: Profile) -> tuple[float, float] | None:
    """(alpha s, eta) of DeepEP's ``kernel`` across ``nodes`` nodes: a measured node count's own, linear in the
    node count between two measured ones, the nearest measured one's outside them; None where none was fitted."""
    kernel = kernel.partition("@")[0]  # (measured across nodes in one format: the bytes carry the format)
    measured = sorted(int(k.rpartition(":")[2]) for k in prof.deepep_scaleout_eta if k.startswith(kernel + ":"))
    if not measured:
        return None
    a, e = prof.deepep_scaleout_alpha_s, prof.deepep_scaleout_eta
    below = [n for n in measured if n <= nodes]
    above = [n for n in measured if n >= nodes]
    lo = below[-1] if below else above[0]
    hi = above[0] if above else below[-1]
    ka, kb = f"{kernel}:{lo}", f"{kernel}:{hi}"
    f = 0.0 if hi == lo else (nodes - lo) / (hi - lo)
    return a[ka] + (a[kb] - a[ka]) * f, e[ka] + (e[kb] - e[ka]) * f


def per_node_bytes(per_node: dict | None, group, hw):
    """What each rank of an all-to-all over ``group`` ranks sends over its NIC when its kernel sends a token
    once per remote node (:func:`perfmodel.ops.per_node_copies`): tokens x remote nodes a token reaches x bytes a
    copy; None inside one scale-up domain or for a kernel that sends per rank."""
    if not per_node or group <= hw.scaleup_domain:
        return None
    nodes = math.ceil(group / hw.scaleup_domain)
    experts, top_k, groups, chosen = per_node["routing"]
    return remote_node_copies(per_node["tokens"], experts, top_k, nodes, groups, chosen) * per_node["copy_bytes"]


def collective_time(kind: str, nbytes, group, world, hw, prof: Profile, *, sol: bool = False, xp=NP,
                    kernel: str = "", experts: int = 0, scaleout_bytes=None, scaleout_kernel: str | None = None):
    """Time of one collective; ``group`` ranks take part, ``world`` GPUs make up the model replica; ``kernel``
    an engine's own kernel for it (:func:`deepep_time` inside one NVLink domain, :func:`deepep_scaleout_fit`
    across domains, where a profile fitted it); ``scaleout_bytes`` what an all-to-all's kernel sends over each
    rank's NIC across domains (:func:`perfmodel.ops.collective`; by default the remote ranks' share);
    ``scaleout_kernel`` the kernel whose fit prices that sending, where not ``kernel`` itself."""
    domain = hw.scaleup_domain
    if kind == "all_to_all" and group > domain and scaleout_bytes is None:
        scaleout_bytes = nbytes * (group - domain) / group
    if sol:  # link bandwidth only
        if kind == "p2p":
            return nbytes / (hw.scaleout_bandwidth if world > domain else hw.scaleup_bandwidth)
        if group <= 1:
            return 0.0 * nbytes
        if group <= domain:
            return bus_factor(kind, group) * nbytes / hw.scaleup_bandwidth
        if kind == "all_to_all":
            return xp.maximum(nbytes * (domain - 1) / group / hw.scaleup_bandwidth,
                              scaleout_bytes / hw.scaleout_bandwidth)
        return (bus_factor(kind, domain) * nbytes / hw.scaleup_bandwidth
                + bus_factor(kind, group / domain) * nbytes / domain / hw.scaleout_bandwidth)
    if kind == "p2p":
        if world > domain:  # a pipeline stage boundary may cross domains
            return prof.comm_base_s + hw.scaleout_latency + nbytes / (prof.scaleout_eta * hw.scaleout_bandwidth)
        return _within_domain("p2p", nbytes, 2, hw, prof)
    if group <= 1:
        return 0.0 * nbytes
    if group <= domain:
        own = deepep_time(kernel, nbytes, experts, hw, prof, group) if kernel else None
        return own if own is not None else _within_domain(kind, nbytes, int(group), hw, prof, xp)
    if kind == "all_to_all":
        across = kernel if scaleout_kernel is None else scaleout_kernel
        fit = deepep_scaleout_fit(across, group / domain, prof) if across else None
        if fit is not None:  # DeepEP's kernels, measured across nodes: the NIC binds
            return fit[0] + scaleout_bytes / (fit[1] * hw.scaleout_bandwidth)
        return _all_to_all_across(nbytes, scaleout_bytes, int(group), hw, prof, xp)
    outer = group / domain
    t_inner = _within_domain(kind, nbytes, int(domain), hw, prof, xp)
    t_outer = (ring_steps(kind, outer) * hw.scaleout_latency
               + bus_factor(kind, outer) * (nbytes / domain) / (prof.scaleout_eta * hw.scaleout_bandwidth))
    return t_inner + t_outer


def _all_to_all_across(nbytes, scaleout_bytes, group: int, hw, prof: Profile, xp=NP):
    """An all-to-all over more ranks than one scale-up domain holds. Nothing reduces on the way (unlike a
    hierarchical all-reduce, whose outer step carries 1/domain of the bytes): each rank's buffer goes 1/group to
    every peer, the domain's share over NVLink and ``scaleout_bytes`` over the rank's own scale-out NIC, both at
    once (NCCL's and DeepEP's all-to-all send to every peer together). NCCL's all-to-all sends the remote peers'
    share, (group - domain) / group of the buffer: a DeepSeek-V3 expert-parallel group of 64 on 8-GPU HGX boxes
    7/8 of its dispatch over 50 GB/s NICs; DeepEP a token once per remote node (:func:`collective_time`)."""
    domain = hw.scaleup_domain
    t_inner = _within_domain("all_to_all", nbytes * domain / group, domain, hw, prof, xp)
    t_outer = (prof.comm_base_s + hw.scaleout_latency
               + scaleout_bytes / (prof.scaleout_eta * hw.scaleout_bandwidth))
    return xp.maximum(t_inner, t_outer)
