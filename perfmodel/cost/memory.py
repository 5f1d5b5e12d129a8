"""Memory-bound kernels (norms, activations, rotary, residual adds, copies): alpha + bytes / beta.

``beta`` is a per-kind fraction of HBM bandwidth. It is below the copy fraction wherever the kernel, as
implemented, moves more than the minimal bytes (an eager ``silu(g) * u`` is two kernels and five passes
for a minimum of three) or cannot keep enough loads in flight. ``alpha`` is the fixed cost of one launch
of such a kernel: the time to ramp up and drain, which is what small transfers see.

Row-wise kernels (RMSNorm, LayerNorm) give each row to one CTA, which walks it serially: a row costs
``row_s`` per element, and ``rows_per_sm`` rows run at once on each SM, so a short wide batch is bound by
row latency rather than bandwidth (an RMSNorm of one 16384-wide row takes longer than one of 2048).
"""
from __future__ import annotations

from .backend import NP


def memory_time(kind: str, nbytes, bw, prof, *, rows=None, row_len=None, sms=None, xp=NP):
    """(time, bandwidth part) of one memory-bound kernel, as it runs inside a stream of kernels."""
    eta = prof.mem_eta.get(kind, prof.mem_eta["copy"])
    alpha = prof.mem_alpha_s.get(kind, prof.mem_alpha_s["copy"])
    t_m = nbytes / (bw * eta)
    row = prof.row_s.get(kind)
    if row is not None and rows is not None:
        waves = xp.maximum(1.0, rows / (sms * prof.rows_per_sm))
        return xp.maximum(t_m, waves * row * row_len) + alpha, t_m
    return t_m + alpha, t_m


def standalone(kind: str, t, prof, nbytes, l2_bytes, bw, xp=NP):
    """An op timed on its own, as a microbenchmark times it: its launch latency is exposed; the L2 flush
    before it (a buffer written, as the field's harnesses do) leaves up to one L2 of dirty lines whose
    write-back shares HBM bandwidth with the op's first reads (``flush_writeback`` of that traffic); and
    an op that is several eager PyTorch calls cannot finish before the host has issued them."""
    writeback = prof.flush_writeback * xp.minimum(nbytes, l2_bytes) / bw
    return xp.maximum(t + prof.standalone_overhead_s + writeback, prof.host_floor_s.get(kind, 0.0))
