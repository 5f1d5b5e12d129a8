"""The torch workloads, one function a family.

Each ``run_<kind>(case, ctx)`` builds the inputs once (``torch.randn``, never zeros), checks the
result where the family has a reference, times it with ``ctx.timer`` and returns the row fields it
knows: time_s, p10_s, p90_s, reps, check, impl, flops, bytes. ``counts(kind, params)`` gives the
minimal flop and byte counts (each input read once, each output written once) without torch work,
so error rows carry them too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from . import sdpa as sdpa_lib
from .shapes import Case, attention_bytes, attention_flops, kv_cache_bytes
from .timing import Timer, Timing, capture_graph, set_tf32, timing_fields

DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "tf32": torch.float32,
}
if hasattr(torch, "float8_e4m3fn"):
    DTYPES["fp8"] = torch.float8_e4m3fn

ELEM = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp8": 1}
GEMM_TOL = {"bf16": 2e-2, "fp16": 2e-2, "tf32": 5e-3, "fp32": 1e-4, "fp8": 1e-1}
ATTN_TOL = 2e-2
CHECK_ROWS = 256
CHECK_COLS = 4096
ATTN_CHECK_SEQ = 2048


@dataclass
class Context:
    device: str
    suite: str
    timer: Timer
    fp8_ok: bool = False
    notes: list[str] = field(default_factory=list)
    attention_cache: Any = None  # (shape key, inputs) of the last attention shape, shared across backends
    energy_meter: Any = None  # perfmodel.measure.power.EnergyMeter, made on first use

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def copies(self, nbytes: int) -> int:
        """How many input copies to rotate among: a few on CPU when cheap (caches), one on CUDA."""
        if self.is_cuda:
            return 1
        return 3 if nbytes * 3 <= 48 * (1 << 20) else 1

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, device=self.device)


def fp8_supported(device: str) -> bool:
    if "fp8" not in DTYPES or not hasattr(torch, "_scaled_mm"):
        return False
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return False
    try:
        return tuple(torch.cuda.get_device_capability()) >= (8, 9)
    except Exception:
        return False


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.to(ref.dtype)
    den = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(out - ref).item()
    if not math.isfinite(num) or not math.isfinite(den):
        return float("inf")
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def check_string(err: float, tol: float) -> str:
    return "ok" if err <= tol else f"FAIL rel_err={err:.3g}"


def ref_dtype(ctx: Context) -> torch.dtype:
    return torch.float32 if ctx.is_cuda else torch.float64


# ---------------------------------------------------------------------------------------------
# counts
# ---------------------------------------------------------------------------------------------

def counts(kind: str, p: dict[str, Any]) -> tuple[float | None, float | None]:
    """(flops, bytes): minimal counts, each input read once, each output written once."""
    e = ELEM.get(p.get("dtype", "bf16"), 2)
    if kind == "copy":
        return 0.0, 2.0 * p["bytes"]
    if kind == "reduce":
        n = p["bytes"] // 2
        return float(n), float(p["bytes"] + 4)
    if kind == "gemm":
        m, n, k, dt = p["m"], p["n"], p["k"], p["dtype"]
        out_e = 2 if dt in ("fp8", "bf16", "fp16") else 4
        return 2.0 * m * n * k, float((m * k + k * n) * ELEM[dt] + m * n * out_e)
    if kind == "attention":
        return attention_flops(p), float(attention_bytes(p, e))
    if kind == "rmsnorm":
        t, h = p["tokens"], p["hidden"]
        return 4.0 * t * h, float((2 * t * h + h) * e)
    if kind == "swiglu":
        t, w = p["tokens"], p["width"]
        return 5.0 * t * w, float(3 * t * w * e)  # silu ~4 flops + the product
    if kind == "rotary":
        t, h, d = p["tokens"], p["heads"], p["head_dim"]
        return 3.0 * t * h * d, float((2 * t * h * d + 2 * t * d) * e)
    if kind == "residual":
        t, h = p["tokens"], p["hidden"]
        return float(t * h), float(3 * t * h * e)
    if kind == "launch":
        return 1.0, 8.0
    if kind == "instream":  # counts of one of the copies
        inner = {k: v for k, v in p.items() if k not in ("op", "copies")}
        return counts(p["op"], inner)
    if kind == "layer":
        from .layers import layer_counts

        return layer_counts(p)
    if kind in ("train_kernel", "train_step"):
        from .training import training_counts

        return training_counts(Case(kind, p, ""))
    if kind == "power":  # counts of one iteration of the workload
        inner = {k: v for k, v in p.items() if k not in ("workload", "held_out")}
        return (0.0, 0.0) if p["workload"] == "idle" else counts(p["workload"], inner)
    return None, None


# ---------------------------------------------------------------------------------------------
# copy / reduce
# ---------------------------------------------------------------------------------------------

def run_copy(case: Case, ctx: Context) -> dict[str, Any]:
    nbytes = case.params["bytes"]
    n = nbytes // 4
    pairs = [(ctx.randn(n), torch.empty(n, device=ctx.device)) for _ in range(ctx.copies(2 * nbytes))]
    fns = [(lambda s=s, d=d: d.copy_(s)) for s, d in pairs]
    fns[0]()
    check = "ok" if torch.equal(pairs[0][0], pairs[0][1]) else "FAIL copy mismatch"
    t = ctx.timer.time(fns)
    return {**timing_fields(t), "check": check, "impl": "Tensor.copy_ (fp32 buffer, device to device)"}


def run_reduce(case: Case, ctx: Context) -> dict[str, Any]:
    nbytes = case.params["bytes"]
    n = nbytes // 2
    xs = [ctx.randn(n, dtype=torch.bfloat16) for _ in range(ctx.copies(nbytes))]
    fns = [(lambda x=x: x.sum(dtype=torch.float32)) for x in xs]
    t = ctx.timer.time(fns)
    return {**timing_fields(t), "check": "skipped", "impl": "torch.sum(bf16 -> fp32 accumulate)"}


# ---------------------------------------------------------------------------------------------
# gemm
# ---------------------------------------------------------------------------------------------

def fp8_scales(m: int, n: int, scaling: str, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales for ``torch._scaled_mm``: one per tensor, or one per row of A and column of B (the
    rowwise recipe vLLM and TensorRT-LLM use for fp8 weights with per-token activations)."""
    if scaling == "tensor":
        return (torch.tensor(0.5, dtype=torch.float32, device=device),
                torch.tensor(2.0, dtype=torch.float32, device=device))
    if scaling == "rowwise":
        return (torch.full((m, 1), 0.5, dtype=torch.float32, device=device),
                torch.full((1, n), 2.0, dtype=torch.float32, device=device))
    raise ValueError(f"unknown fp8 scaling {scaling!r}")


def run_gemm(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    m, n, k, dt = p["m"], p["n"], p["k"], p["dtype"]
    rdt = ref_dtype(ctx)
    rows, cols = min(m, CHECK_ROWS), min(n, CHECK_COLS)
    if dt == "fp8":
        if not ctx.fp8_ok:
            raise RuntimeError("fp8 needs a CUDA device of capability >= 8.9 and torch._scaled_mm")
        f8 = DTYPES["fp8"]
        a = ctx.randn(m, k, dtype=torch.bfloat16).to(f8)
        b = ctx.randn(n, k, dtype=torch.bfloat16).to(f8).t()  # k x n, column-major
        scaling = p.get("scaling", "tensor")
        scale_a, scale_b = fp8_scales(m, n, scaling, ctx.device)
        # split (higher-precision) accumulation is _scaled_mm's default; a case may ask for fast accumulation
        fast = bool(p.get("fast_accum", False))

        def fn():
            return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast)

        impl = f"torch._scaled_mm(e4m3 x e4m3 -> bf16, {scaling} scales{', fast accumulation' if fast else ''})"
        out = fn()
        if isinstance(out, tuple):  # torch < 2.5 returned (out, amax)
            def fn():  # noqa: F811
                return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast)[0]
            out = out[0]
        set_tf32(False)
        ref = (a[:rows].to(rdt) * 0.5) @ (b[:, :cols].to(rdt) * 2.0)  # every scale is 0.5 (a) and 2.0 (b)
    else:
        tdt = DTYPES[dt]
        set_tf32(dt == "tf32")
        a = ctx.randn(m, k, dtype=tdt)
        b = ctx.randn(k, n, dtype=tdt)

        def fn():
            return torch.matmul(a, b)

        impl = {"tf32": "torch.matmul(fp32, allow_tf32=True)",
                "fp32": "torch.matmul(fp32, allow_tf32=False)"}.get(dt, f"torch.matmul({dt})")
        out = fn()
        set_tf32(False)  # the reference is true fp32 (fp64 on CPU)
        ref = a[:rows].to(rdt) @ b[:, :cols].to(rdt)
    err = rel_err(out[:rows, :cols], ref)
    check = check_string(err, GEMM_TOL[dt])
    del out, ref
    set_tf32(dt == "tf32")
    t = ctx.timer.time(fn)
    set_tf32(False)
    return {**timing_fields(t), "check": check, "impl": impl, "rel_err": err}


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------

def _attention_inputs(p: dict[str, Any], ctx: Context):
    """q, k, v for one attention shape and the fp32 math reference of the slice the check compares.

    Cached on ``ctx`` so the cases of one shape under each backend share inputs and reference.
    For causal prefill the first S' queries see only the first S' keys: a slice is exact.
    """
    key = tuple(sorted((k, v) for k, v in p.items() if k != "backend"))
    if ctx.attention_cache is not None and ctx.attention_cache[0] == key:
        return ctx.attention_cache[1]
    ctx.attention_cache = None
    b, hq, hkv, sq, skv, d, causal = (p[x] for x in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv",
                                                    "head_dim", "causal"))
    dv = p.get("head_dim_v") or d
    dt = DTYPES[p["dtype"]]
    q = ctx.randn(b, hq, sq, d, dtype=dt)
    k = ctx.randn(b, hkv, skv, d, dtype=dt)
    v = ctx.randn(b, hkv, skv, dv, dtype=dt)
    group = hq // hkv
    s_q = min(sq, ATTN_CHECK_SEQ) if (causal and sq == skv) else sq
    s_kv = s_q if (causal and sq == skv) else skv
    with sdpa_lib.backend_context("math"):
        ref = sdpa_lib.sdpa(q[:1, :group, :s_q].float(), k[:1, :1, :s_kv].float(), v[:1, :1, :s_kv].float(),
                            causal=causal, gqa=group > 1)
    entry = (q, k, v, ref, group, s_q)
    ctx.attention_cache = (key, entry)
    return entry


def run_attention(case: Case, ctx: Context) -> dict[str, Any]:
    """One attention shape under one SDPA backend ("default": plain dispatch, whose kernels are recorded)."""
    p = case.params
    backend = p.get("backend", sdpa_lib.DEFAULT)
    q, k, v, ref, group, s_q = _attention_inputs(p, ctx)
    gqa = p["heads_q"] != p["heads_kv"]

    def fn():
        return sdpa_lib.sdpa(q, k, v, causal=p["causal"], gqa=gqa)

    extra: dict[str, Any] = {}
    with sdpa_lib.backend_context(backend):
        out = fn()  # a backend that refuses these inputs raises here: the row carries the error
        err = rel_err(out[:1, :group, :s_q], ref)
        del out
        if backend == sdpa_lib.DEFAULT:
            extra["dispatched"], extra["kernels"] = sdpa_lib.dispatched(fn, ctx.device)
        t = ctx.timer.time(fn)
    impl = f"F.scaled_dot_product_attention[{backend}]" + (" enable_gqa" if gqa else "")
    return {**timing_fields(t), "check": check_string(err, ATTN_TOL), "rel_err": err, "impl": impl, **extra}


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps=eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def run_rmsnorm(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    t_, h = p["tokens"], p["hidden"]
    dt = DTYPES[p["dtype"]]
    w = (1.0 + 0.1 * ctx.randn(h)).to(dt)
    xs = [ctx.randn(t_, h, dtype=dt) for _ in range(ctx.copies(2 * t_ * h * 2))]
    fns = [(lambda x=x: rms_norm(x, w)) for x in xs]
    out = fns[0]()
    xf = xs[0].double() if not ctx.is_cuda else xs[0].float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.to(xf.dtype)
    check = check_string(rel_err(out, ref), 2e-2)
    del out, ref, xf
    t = ctx.timer.time(fns)
    impl = "F.rms_norm" if hasattr(F, "rms_norm") else "rsqrt(mean(x^2)) (manual)"
    return {**timing_fields(t), "check": check, "impl": impl}


def run_swiglu(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    t_, w = p["tokens"], p["width"]
    dt = DTYPES[p["dtype"]]
    ins = [(ctx.randn(t_, w, dtype=dt), ctx.randn(t_, w, dtype=dt))
           for _ in range(ctx.copies(3 * t_ * w * 2))]
    fns = [(lambda g=g, u=u: F.silu(g) * u) for g, u in ins]
    t = ctx.timer.time(fns)
    return {**timing_fields(t), "check": "skipped", "impl": "F.silu(gate) * up (separate tensors)"}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (tokens, heads, head_dim); cos/sin (tokens, head_dim), broadcast over heads."""
    return x * cos.unsqueeze(-2) + rotate_half(x) * sin.unsqueeze(-2)


def rotary_tables(tokens: int, head_dim: int, device: str, dtype: torch.dtype, offset: int = 0,
                  base: float = 500000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    pos = torch.arange(offset, offset + tokens, device=device, dtype=torch.float32)
    ang = torch.outer(pos, inv)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def run_rotary(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    t_, h, d = p["tokens"], p["heads"], p["head_dim"]
    dt = DTYPES[p["dtype"]]
    cos, sin = rotary_tables(t_, d, ctx.device, dt)
    xs = [ctx.randn(t_, h, d, dtype=dt) for _ in range(ctx.copies(2 * t_ * h * d * 2))]
    fns = [(lambda x=x: apply_rotary(x, cos, sin)) for x in xs]
    t = ctx.timer.time(fns)
    return {**timing_fields(t), "check": "skipped",
            "impl": "x*cos + rotate_half(x)*sin (plain PyTorch)"}


def run_residual(case: Case, ctx: Context) -> dict[str, Any]:
    p = case.params
    t_, h = p["tokens"], p["hidden"]
    dt = DTYPES[p["dtype"]]
    ins = [(ctx.randn(t_, h, dtype=dt), ctx.randn(t_, h, dtype=dt))
           for _ in range(ctx.copies(3 * t_ * h * 2))]
    fns = [(lambda x=x, y=y: x + y) for x, y in ins]
    t = ctx.timer.time(fns)
    return {**timing_fields(t), "check": "skipped", "impl": "x + y"}


# ---------------------------------------------------------------------------------------------
# launch overhead
# ---------------------------------------------------------------------------------------------

LAUNCH_INNER = 1000


def run_launch(case: Case, ctx: Context) -> dict[str, Any]:
    mode = case.params["mode"]
    x = ctx.randn(1)

    def fn():
        x.add_(1.0)

    repeats = 7
    if mode in ("queued", "driver", "round_trip"):
        if not ctx.is_cuda:
            raise RuntimeError(f"{mode} mode needs CUDA")
        from . import launch  # lazy: the ctypes driver path is only for these cases

        if mode == "queued":
            row = launch.queued(fn, repeats=repeats)
        elif mode == "driver":
            row = launch.driver(repeats=repeats)
        else:
            row = launch.round_trip(int(case.params["vocab"]), case.params["sampling"], repeats=repeats)
        return {**row, "check": "skipped"}
    if mode == "eager":
        t = ctx.timer.time_batched(fn, LAUNCH_INNER, repeats=repeats)
        impl = f"x.add_(1) on 1 element, {LAUNCH_INNER} back to back, eager"
    elif mode == "graph":
        if not ctx.is_cuda:
            raise RuntimeError("graph mode needs CUDA")
        def many() -> None:
            for _ in range(LAUNCH_INNER):
                fn()

        g, _ = capture_graph(many, warmup=1)
        t1 = ctx.timer.time_batched(g.replay, 1, repeats=repeats)
        t = Timing(t1.median_s / LAUNCH_INNER, t1.p10_s / LAUNCH_INNER, t1.p90_s / LAUNCH_INNER,
                   t1.reps, [s_ / LAUNCH_INNER for s_ in t1.samples])
        impl = f"x.add_(1) on 1 element, {LAUNCH_INNER} captured in one CUDA graph, replayed"
        del g
    else:
        raise ValueError(f"unknown launch mode {mode!r}")
    return {**timing_fields(t), "check": "skipped", "impl": impl}


# ---------------------------------------------------------------------------------------------
# in-stream: copies of one op back to back inside a CUDA graph
# ---------------------------------------------------------------------------------------------

def _build(op: str, p: dict[str, Any], ctx: Context) -> Callable[[], object]:
    """One instance of ``op`` on fresh random inputs, as the standalone families run it."""
    dt = DTYPES.get(p.get("dtype", "bf16"), torch.bfloat16)
    if op == "gemm":
        m, n, k = p["m"], p["n"], p["k"]
        if p["dtype"] == "fp8":
            if not ctx.fp8_ok:
                raise RuntimeError("fp8 needs a CUDA device of capability >= 8.9 and torch._scaled_mm")
            f8 = DTYPES["fp8"]
            a = ctx.randn(m, k, dtype=torch.bfloat16).to(f8)
            b = ctx.randn(n, k, dtype=torch.bfloat16).to(f8).t()
            sa, sb = fp8_scales(m, n, p.get("scaling", "tensor"), ctx.device)
            return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        a = ctx.randn(m, k, dtype=dt)
        b = ctx.randn(k, n, dtype=dt)
        return lambda: torch.matmul(a, b)
    if op == "attention":
        q = ctx.randn(p["batch"], p["heads_q"], p["seq_q"], p["head_dim"], dtype=dt)
        kk = ctx.randn(p["batch"], p["heads_kv"], p["seq_kv"], p["head_dim"], dtype=dt)
        v = ctx.randn(p["batch"], p["heads_kv"], p["seq_kv"], p["head_dim"], dtype=dt)
        gqa = p["heads_q"] != p["heads_kv"]
        return lambda: sdpa_lib.sdpa(q, kk, v, causal=p["causal"], gqa=gqa)
    if op == "rmsnorm":
        x = ctx.randn(p["tokens"], p["hidden"], dtype=dt)
        w = (1.0 + 0.1 * ctx.randn(p["hidden"])).to(dt)
        return lambda: rms_norm(x, w)
    if op == "swiglu":
        g = ctx.randn(p["tokens"], p["width"], dtype=dt)
        u = ctx.randn(p["tokens"], p["width"], dtype=dt)
        return lambda: F.silu(g) * u
    if op == "rotary":
        cos, sin = rotary_tables(p["tokens"], p["head_dim"], ctx.device, dt)
        x = ctx.randn(p["tokens"], p["heads"], p["head_dim"], dtype=dt)
        return lambda: apply_rotary(x, cos, sin)
    if op == "residual":
        x = ctx.randn(p["tokens"], p["hidden"], dtype=dt)
        y = ctx.randn(p["tokens"], p["hidden"], dtype=dt)
        return lambda: x + y
    if op == "copy":
        n = p["bytes"] // 4
        src, dst = ctx.randn(n), torch.empty(n, device=ctx.device)
        return lambda: dst.copy_(src)
    raise ValueError(f"no in-stream builder for {op!r}")


def run_instream(case: Case, ctx: Context) -> dict[str, Any]:
    p = dict(case.params)
    op, copies = p.pop("op"), int(p.pop("copies"))
    fns = [_build(op, p, ctx) for _ in range(copies)]

    def seq() -> None:
        for f in fns:
            f()

    backend = p.get("backend", sdpa_lib.DEFAULT)
    extra: dict[str, Any] = {}
    with sdpa_lib.backend_context(backend):
        if op == "attention" and backend == sdpa_lib.DEFAULT:
            extra["dispatched"], extra["kernels"] = sdpa_lib.dispatched(fns[0], ctx.device)
        if ctx.is_cuda:
            graph, _ = capture_graph(seq, warmup=2)
            t = ctx.timer.time(graph.replay)
            del graph
            mode = "CUDA graph replay"
        else:
            t = ctx.timer.time(seq)
            mode = "eager, back to back"
    per = Timing(t.median_s / copies, t.p10_s / copies, t.p90_s / copies, t.reps, [x / copies for x in t.samples])
    return {**timing_fields(per), "check": "skipped",
            "impl": f"{copies} x {op} back to back ({mode}), time per op", **extra}


def run_layer(case: Case, ctx: Context) -> dict[str, Any]:
    from .layers import run_layer as _run

    return _run(case, ctx)


def run_training(case: Case, ctx: Context) -> dict[str, Any]:
    from .training import run_training_case

    return run_training_case(case, ctx)


# ---------------------------------------------------------------------------------------------
# power: energy of sustained loops (perfmodel.measure.power)
# ---------------------------------------------------------------------------------------------

def run_power(case: Case, ctx: Context) -> dict[str, Any]:
    from . import power

    p = dict(case.params)
    workload = p.pop("workload")
    p.pop("held_out", None)
    if ctx.energy_meter is None:
        ctx.energy_meter = power.EnergyMeter(ctx.device)
    meter = ctx.energy_meter
    seconds = power.SUSTAIN_S if ctx.suite == "full" else 0.1
    if workload == "idle":
        return _loop_row(power.idle(meter, ctx.device, seconds), "time.sleep (device idle)")
    if workload == "layer":
        from .layers import layer_callable

        fn, impl = layer_callable(p, ctx)
    else:
        fn, impl = _build(workload, p, ctx), f"{workload} back to back, no L2 flush"
    return _loop_row(power.sustained(fn, meter, ctx.device, seconds), impl)


def _loop_row(res: dict[str, Any], impl: str) -> dict[str, Any]:
    """A sustained loop gives one mean time per iteration: it is the median, p10 and p90 alike."""
    return {**res, "p10_s": res["time_s"], "p90_s": res["time_s"], "reps": res["iterations"], "check": "skipped",
            "impl": impl}


KERNELS: dict[str, Callable[[Case, Context], dict[str, Any]]] = {
    "copy": run_copy,
    "reduce": run_reduce,
    "gemm": run_gemm,
    "attention": run_attention,
    "rmsnorm": run_rmsnorm,
    "swiglu": run_swiglu,
    "rotary": run_rotary,
    "residual": run_residual,
    "launch": run_launch,
    "instream": run_instream,
    "layer": run_layer,
    "power": run_power,
    "train_kernel": run_training,
    "train_step": run_training,
}

__all__ = ["KERNELS", "Context", "counts", "fp8_supported", "kv_cache_bytes"]
