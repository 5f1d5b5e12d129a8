"""Whole Llama-style decoder layers in plain PyTorch: for validating the model, never for fitting.

One GPU's shard at tensor-parallel degree tp (heads/tp, kv_heads/tp (at least 1), intermediate/tp),
with no all-reduce. x -> rms_norm -> x @ W_qkv (one fused GEMM) -> split -> rotary on q, k ->
attention -> @ W_o -> + residual -> rms_norm -> x @ W_gate_up (one fused GEMM) -> silu(gate)*up ->
@ W_down -> + residual.

Prefill: causal SDPA over the new tokens, eager. Decode: one new token a sequence, its k/v written
into a preallocated cache (batch, kv_heads, context+1, head_dim) at position ``context``, SDPA of
the one query over the cache; captured in a CUDA graph and timed by replay (eager on CPU).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import sdpa as sdpa_lib
from .kernels import DTYPES, Context, apply_rotary, rms_norm, rotary_tables, timing_fields
from .sdpa import sdpa
from .shapes import Case, kv_cache_bytes
from .timing import capture_graph


def shard(p: dict[str, Any]) -> tuple[int, int, int, int, int]:
    tp = p["tp"]
    nh = max(1, p["heads"] // tp)
    nkv = max(1, p["kv_heads"] // tp)
    inter = p["intermediate"] // tp
    return p["hidden"], nh, nkv, p["head_dim"], inter


def layer_counts(p: dict[str, Any]) -> tuple[float, float]:
    h, nh, nkv, d, inter = shard(p)
    b, s, ctx_len = p["batch"], p["seq"], p["context"]
    tokens = b * s
    weights = h * (nh + 2 * nkv) * d + nh * d * h + h * 2 * inter + inter * h
    flops = 2.0 * tokens * weights
    if p["phase"] == "prefill":
        flops += 4.0 * b * nh * s * s * d * (s + 1) / (2.0 * s)
        kv = 0
    else:
        flops += 4.0 * b * nh * (ctx_len + 1) * d
        kv = kv_cache_bytes(b, nkv, ctx_len + 1, d) + kv_cache_bytes(b, nkv, 1, d)
    e = 2
    byts = (weights + 2 * h) * e + 2 * tokens * h * e + kv
    return flops, float(byts)


class DecoderLayer:
    def __init__(self, p: dict[str, Any], ctx: Context):
        self.p = p
        self.ctx = ctx
        dev = ctx.device
        self.dt = dt = DTYPES[p["dtype"]]
        h, nh, nkv, d, inter = shard(p)
        self.h, self.nh, self.nkv, self.d, self.inter = h, nh, nkv, d, inter
        self.gqa = nh != nkv

        def w(*shape):
            return (0.02 * torch.randn(*shape, device=dev)).to(dt)

        self.w_qkv = w(h, (nh + 2 * nkv) * d)
        self.w_o = w(nh * d, h)
        self.w_gu = w(h, 2 * inter)
        self.w_down = w(inter, h)
        self.n1 = (1.0 + 0.1 * torch.randn(h, device=dev)).to(dt)
        self.n2 = (1.0 + 0.1 * torch.randn(h, device=dev)).to(dt)

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, s, _ = x.shape
        nh, nkv, d = self.nh, self.nkv, self.d
        y = rms_norm(x, self.n1)
        qkv = y @ self.w_qkv
        q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=-1)
        # rotary over (tokens, heads, head_dim) views with cos/sin (tokens, head_dim)
        q = apply_rotary(q.reshape(b * s, nh, d), cos, sin).view(b, s, nh, d).transpose(1, 2)
        k = apply_rotary(k.reshape(b * s, nkv, d), cos, sin).view(b, s, nkv, d).transpose(1, 2)
        v = v.reshape(b, s, nkv, d).transpose(1, 2)
        return q, k, v

    def _mlp(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        x = x + a.transpose(1, 2).reshape(b, s, self.nh * self.d) @ self.w_o
        y = rms_norm(x, self.n2)
        gu = y @ self.w_gu
        g, u = gu.split([self.inter, self.inter], dim=-1)
        return x + (F.silu(g) * u) @ self.w_down

    def prefill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        a = sdpa(q, k, v, causal=True, gqa=self.gqa)
        return self._mlp(x, a)

    def decode(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, pos: int) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        k_cache[:, :, pos:pos + 1] = k
        v_cache[:, :, pos:pos + 1] = v
        a = sdpa(q, k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1], causal=False, gqa=self.gqa)
        return self._mlp(x, a)


def eager_step(p: dict[str, Any], ctx: Context, layer: DecoderLayer | None = None):
    """A callable running one step of the layer of ``p`` eagerly (prefill or decode) on fresh random inputs;
    ``layer``: a layer already built (a subclass, such as the collective suite's tensor-parallel one)."""
    layer = layer or DecoderLayer(p, ctx)
    dt, b = layer.dt, p["batch"]
    if p["phase"] == "prefill":
        s = p["seq"]
        x = torch.randn(b, s, layer.h, device=ctx.device).to(dt)
        cos, sin = rotary_tables(s, layer.d, ctx.device, dt)
        cos, sin = cos.repeat(b, 1), sin.repeat(b, 1)
        return lambda: layer.prefill(x, cos, sin)
    if p["phase"] == "decode":
        c = p["context"]
        x = torch.randn(b, 1, layer.h, device=ctx.device).to(dt)
        cos, sin = rotary_tables(1, layer.d, ctx.device, dt, offset=c)
        cos, sin = cos.repeat(b, 1), sin.repeat(b, 1)
        k_cache = torch.randn(b, layer.nkv, c + 1, layer.d, device=ctx.device, dtype=dt)
        v_cache = torch.randn(b, layer.nkv, c + 1, layer.d, device=ctx.device, dtype=dt)
        return lambda: layer.decode(x, cos, sin, k_cache, v_cache, c)
    raise ValueError(f"unknown phase {p['phase']!r}")


def layer_callable(p: dict[str, Any], ctx: Context, eager=None):
    """(callable, description) of one step as the suite times it: prefill eager; decode replayed from a
    CUDA graph when ``p["graph"]`` (eager otherwise). ``eager``: the step already built, if any."""
    fn = eager or eager_step(p, ctx)
    if p["phase"] == "decode" and p.get("graph"):
        if not ctx.is_cuda:
            raise RuntimeError("graph capture needs CUDA")
        graph, _ = capture_graph(fn)
        return graph.replay, "plain PyTorch decoder layer, cuda-graph replay"
    return fn, "plain PyTorch decoder layer, eager"


def run_layer(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    eager = eager_step(p, ctx)
    out = eager()
    finite = bool(torch.isfinite(out).all().item())
    del out
    name, kernels = sdpa_lib.dispatched(eager, ctx.device)
    fn, impl = layer_callable(p, ctx, eager)
    t = ctx.timer.time(fn)
    attention = [k for k in kernels if sdpa_lib.classify_kernels([k]) != "math"]
    return {**timing_fields(t), "check": "skipped" if finite else "FAIL non-finite output",
            "impl": f"{impl}, sdpa dispatched to {name}", "dispatched": name, "kernels": attention[:4]}
