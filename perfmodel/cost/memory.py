"""Memory-bound kernels (norms, activations, rotary, residual adds, copies): alpha + bytes / beta.

``beta`` is a per-kind fraction of HBM bandwidth. It is below the copy fraction wherever the kernel, as
implemented, moves more than the minimal bytes (an eager ``silu(g) * u`` is two kernels and five passes
for a minimum of three) or cannot keep enough loads in flight. ``alpha`` is the fixed cost of one launch
of such a kernel: the time to ramp up and drain, which is what small transfers see.
"""
from __future__ import annotations


def memory_time(kind: str, nbytes, bw, prof):
    eta = prof.mem_eta.get(kind, prof.mem_eta["copy"])
    alpha = prof.mem_alpha_s.get(kind, prof.mem_alpha_s["copy"])
    t_m = nbytes / (bw * eta)
    return t_m + alpha, t_m
