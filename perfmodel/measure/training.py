"""Training microbenchmarks: backward kernels, the optimizer, the loss, and whole few-layer training steps.

Two kinds of case (``Case`` from :mod:`.shapes`, rows like every other family's):

- ``train_kernel`` (fitted by :mod:`perfmodel.fit.training`), ``params["op"]`` one of
  ``gemm_fwd`` / ``gemm_dgrad`` / ``gemm_wgrad`` (the three GEMMs of ``F.linear``'s forward and backward,
  in autograd's layouts: ``x @ w.T``, ``dy @ w``, ``dy.T @ x``; ``m, n, k`` are the forward's
  ``x[m,k] @ w[k,n]``), ``sdpa_bwd`` (fused attention backward under one SDPA backend forced, or the
  default dispatch; the backend that ran is recorded from the autograd node; the forward is timed too),
  ``rmsnorm_bwd`` and ``swiglu_bwd`` (autograd of ``F.rms_norm`` and ``silu(g) * u``), ``adamw``
  (``torch.optim.AdamW(fused=True)`` stepping N fp32 parameters with fp32 gradients), ``cross_entropy``
  (``F.cross_entropy`` forward and backward over bf16 logits);
- ``train_step``: a few Llama-style decoder layers (the suite's :class:`.layers.DecoderLayer` with
  trainable weights), a final norm, an LM head and cross-entropy, forward and backward, gradients freed
  between repetitions. For validation only, never fitted.

Inputs are random (``torch.randn``), backward results are checked against fp32 references where one is
cheap (dQ of a causal prefix for attention, the norm and SwiGLU gradients on a slice), and every time comes
from ``ctx.timer`` (CUDA events after warm-up, L2 flushed before each repetition, median of the reps).

``training_cases(suite, device)`` is pure Python (no torch). The suite runs them as its ``train`` family:
``perfmodel calibrate --device cuda --suite full --only train [--resume] --out DIR``.
"""
from __future__ import annotations

import math
from typing import Any

from .shapes import Case, Cases

KINDS = ("train_kernel", "train_step")
SDPA_BACKENDS = ("default", "flash", "cudnn", "efficient")

# (name: hidden, qkv width, output-projection input, intermediate, vocab shard) of the linear layers measured:
# Llama-3.1 8B at TP 1, 70B and 405B at TP 8 (one GPU's shard)
LINEAR_MODELS = {
    "llama8b-tp1": (4096, 6144, 4096, 14336, 128256),
    "llama70b-tp8": (8192, 1280, 1024, 3584, 16032),
    "llama405b-tp8": (16384, 2304, 2048, 6656, 16032),
}
# attention (name: heads_q, heads_kv, head_dim) per GPU
ATTN_MODELS = {"llama8b-tp1": (32, 8, 128), "llama70b-tp8": (8, 1, 128), "llama405b-tp8": (16, 1, 128)}
# whole-step models: hidden, heads, kv_heads, head_dim, intermediate, vocab
STEP_MODELS = {
    "llama-3.1-8b": (4096, 32, 8, 128, 14336, 128256),
    "llama-3.1-70b-tp8": (8192, 8, 1, 128, 3584, 16032),
    "llama-3.1-70b": (8192, 64, 8, 128, 28672, 128256),
    "tiny": (256, 4, 2, 64, 512, 1024),
}


def _linear_shapes(suite: str) -> list[tuple[str, int, int, int]]:
    """(group, m, n, k) forward shapes of the measured linear layers."""
    if suite == "quick":
        return [("tiny-qkv", 256, 384, 256), ("tiny-down", 256, 256, 512)]
    out = []
    for name, (h, qkv, o_in, inter, vocab) in LINEAR_MODELS.items():
        for tokens in (4096, 16384):
            out += [(f"{name}-qkv", tokens, qkv, h), (f"{name}-o", tokens, h, o_in),
                    (f"{name}-gate_up", tokens, 2 * inter, h), (f"{name}-down", tokens, h, inter)]
        out.append((f"{name}-lmhead", 8192, vocab, h))
    return out


def training_cases(suite: str, device: str) -> list[Case]:
    """The training cases of ``suite`` (quick: tiny, for CPU tests; full: the H200 plan) in run order."""
    if suite not in ("quick", "full"):
        raise ValueError(f"suite must be 'quick' or 'full', not {suite!r}")
    cuda = device.startswith("cuda")
    cs = Cases()
    for g, m, n, k in _linear_shapes(suite):
        for op in ("gemm_fwd", "gemm_dgrad", "gemm_wgrad"):
            cs.add("train_kernel", {"op": op, "m": m, "n": n, "k": k, "dtype": "bf16"}, g)
    backends = SDPA_BACKENDS if cuda else ("default",)
    if suite == "quick":
        attn = [("tiny", 1, 4, 2, 256, 64)]
    else:
        attn = []
        for name, (hq, hkv, d) in ATTN_MODELS.items():
            for seq in (2048, 4096, 8192):
                attn.append((name, max(1, 8192 // seq), hq, hkv, seq, d))
    for g, b, hq, hkv, s, d in attn:
        for be in backends:
            cs.add("train_kernel", {"op": "sdpa_bwd", "backend": be, "batch": b, "heads_q": hq, "heads_kv": hkv,
                                    "seq": s, "head_dim": d, "causal": True, "dtype": "bf16"}, f"{g}-attn")
    norms = [(512, 256), (1024, 512)] if suite == "quick" else [(4096, 4096), (16384, 4096), (8192, 8192),
                                                                (8192, 16384)]
    for t, h in norms:
        cs.add("train_kernel", {"op": "rmsnorm_bwd", "tokens": t, "hidden": h, "dtype": "bf16"}, "norm")
    acts = [(512, 512), (1024, 256)] if suite == "quick" else [(4096, 14336), (16384, 14336), (8192, 3584),
                                                               (8192, 6656)]
    for t, w in acts:
        cs.add("train_kernel", {"op": "swiglu_bwd", "tokens": t, "width": w, "dtype": "bf16"}, "swiglu")
    sizes = [1 << 18, 1 << 20] if suite == "quick" else [1 << 26, 1 << 28, 1 << 30]
    for n in sizes:
        cs.add("train_kernel", {"op": "adamw", "params": n, "tensor_elems": min(n, 1 << 24), "dtype": "fp32"},
               "optimizer")
    ces = [(256, 1024), (512, 4096)] if suite == "quick" else [(4096, 128256), (8192, 16032), (8192, 51200),
                                                               (16384, 32000)]
    for t, v in ces:
        cs.add("train_kernel", {"op": "cross_entropy", "tokens": t, "vocab": v, "dtype": "bf16"}, "loss")
    steps = [("tiny", 2, 1, 64)] if suite == "quick" else [
        ("llama-3.1-8b", 4, 1, 4096), ("llama-3.1-8b", 2, 1, 8192), ("llama-3.1-8b", 4, 2, 2048),
        ("llama-3.1-70b-tp8", 8, 2, 4096), ("llama-3.1-70b", 2, 1, 4096)]
    for model, layers, batch, seq in steps:
        h, nh, nkv, d, inter, vocab = STEP_MODELS[model]
        cs.add("train_step", {"model": model, "hidden": h, "heads": nh, "kv_heads": nkv, "head_dim": d,
                              "intermediate": inter, "layers": layers, "vocab": vocab, "batch": batch, "seq": seq,
                              "dtype": "bf16"}, model)
    return cs.items


# ---------------------------------------------------------------------------------------------------------
# counts (no torch)
# ---------------------------------------------------------------------------------------------------------


def training_counts(case: Case) -> tuple[float, float]:
    """(flops, bytes): minimal counts, each input read once, each output written once."""
    p = case.params
    if case.kind == "train_step":
        from .layers import layer_counts

        f, _ = layer_counts({**p, "tp": 1, "phase": "prefill", "context": 0})
        t = p["batch"] * p["seq"]
        head = 2.0 * t * p["hidden"] * p["vocab"]
        w = (p["hidden"] * (p["heads"] + 2 * p["kv_heads"]) * p["head_dim"] + p["heads"] * p["head_dim"]
             * p["hidden"] + 3 * p["hidden"] * p["intermediate"]) * p["layers"] + p["hidden"] * p["vocab"]
        return 3.0 * (f * p["layers"] + head), float(2 * w * 3)
    op = p["op"]
    if op.startswith("gemm"):
        m, n, k = p["m"], p["n"], p["k"]
        out = {"gemm_fwd": m * n, "gemm_dgrad": m * k, "gemm_wgrad": n * k}[op]
        ins = {"gemm_fwd": m * k + n * k, "gemm_dgrad": m * n + n * k, "gemm_wgrad": m * n + m * k}[op]
        return 2.0 * m * n * k, 2.0 * (ins + out)
    if op == "sdpa_bwd":
        b, hq, hkv, s, d = p["batch"], p["heads_q"], p["heads_kv"], p["seq"], p["head_dim"]
        pairs = s * (s + 1) / 2.0 if p["causal"] else s * s
        fwd = 4.0 * b * hq * pairs * d
        fwd_bytes = 2.0 * (2 * b * hq * s * d + 2 * b * hkv * s * d)
        return 2.5 * fwd, 2.0 * fwd_bytes
    if op == "rmsnorm_bwd":
        t, h = p["tokens"], p["hidden"]
        return 6.0 * t * h, 2.0 * (3 * t * h + h) + 4.0 * h
    if op == "swiglu_bwd":
        t, w = p["tokens"], p["width"]
        return 8.0 * t * w, 2.0 * 5 * t * w
    if op == "adamw":
        n = p["params"]
        return 12.0 * n, 28.0 * n
    if op == "cross_entropy":
        t, v = p["tokens"], p["vocab"]
        return 8.0 * t * v, 4.0 * t * v
    raise ValueError(f"unknown training op {op!r}")


def estimate_case_s(case: Case) -> float:
    """Rough H200 seconds for one case (planning only): inputs, check, warm-up and the timed reps."""
    from .shapes import H200, MB, OVERHEAD_S, TARGET_S, WARMUP_S

    f, b = training_counts(case)
    p = case.params
    if case.kind == "train_step":
        call = f / (0.6 * H200["bf16"]) + 60 * p["layers"] * H200["launch"]
        return 1.5 + max(WARMUP_S, 3 * call) + 10 * call
    op = p["op"]
    rate = {"sdpa_bwd": 0.5 * H200["attn"]}.get(op, H200["bf16"])
    call = max(f / rate, b / H200["bw"]) + 4 * H200["launch"]
    if op == "sdpa_bwd":
        call *= 1.4  # the forward is timed too
    reps = max(10, min(200, round(TARGET_S / call)))
    flush = 256 * MB / H200["bw"]
    setup = 0.3 if op == "adamw" else 0.0
    return OVERHEAD_S + setup + max(WARMUP_S, 2 * call) + 3 * (call + flush) + reps * (call + flush)


# ---------------------------------------------------------------------------------------------------------
# the torch workloads
# ---------------------------------------------------------------------------------------------------------


def run_training_case(case: Case, ctx) -> dict[str, Any]:
    """Measure one training case on ``ctx.device``; returns the row fields (time_s, p10_s, p90_s, reps,
    check, impl, flops, bytes, and op-specific extras)."""
    flops, nbytes = training_counts(case)
    if case.kind == "train_step":
        out = _run_step(case, ctx)
    elif case.kind == "train_kernel":
        op = case.params["op"]
        fn = {"gemm_fwd": _run_gemm, "gemm_dgrad": _run_gemm, "gemm_wgrad": _run_gemm, "sdpa_bwd": _run_sdpa_bwd,
              "rmsnorm_bwd": _run_rmsnorm_bwd, "swiglu_bwd": _run_swiglu_bwd, "adamw": _run_adamw,
              "cross_entropy": _run_cross_entropy}.get(op)
        if fn is None:
            raise ValueError(f"unknown training op {op!r}")
        out = fn(case, ctx)
    else:
        raise ValueError(f"not a training case kind: {case.kind!r}")
    out.setdefault("flops", flops)
    out.setdefault("bytes", nbytes)
    return out


def _run_gemm(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .kernels import DTYPES, check_string, ref_dtype, rel_err, timing_fields

    p = case.params
    m, n, k = p["m"], p["n"], p["k"]
    dt = DTYPES[p["dtype"]]
    op = p["op"]
    x = ctx.randn(m, k, dtype=dt)
    w = ctx.randn(n, k, dtype=dt)  # nn.Linear's weight: (out, in)
    dy = ctx.randn(m, n, dtype=dt)
    if op == "gemm_fwd":
        def fn():
            return torch.nn.functional.linear(x, w)
        impl, a, b = "F.linear(x, w): x @ w.T", x, w.t()
    elif op == "gemm_dgrad":
        def fn():
            return torch.matmul(dy, w)
        impl, a, b = "dy @ w (Linear's input gradient)", dy, w
    else:
        def fn():
            return torch.matmul(dy.t(), x)
        impl, a, b = "dy.T @ x (Linear's weight gradient)", dy.t(), x
    out = fn()
    rdt = ref_dtype(ctx)
    rows, cols = min(a.shape[0], 256), min(b.shape[1], 4096)
    ref = a[:rows].to(rdt) @ b[:, :cols].to(rdt)
    err = rel_err(out[:rows, :cols], ref)
    del out, ref
    t = ctx.timer.time(fn)
    return {**timing_fields(t), "check": check_string(err, 2e-2), "rel_err": err, "impl": impl}


_GRAD_FN_BACKEND = {"flash": "flash", "cudnn": "cudnn", "efficient": "efficient", "math": "math"}


def _backend_of(out) -> str:
    """Which SDPA backend produced ``out``, from its autograd node's name."""
    name = type(out.grad_fn).__name__.lower() if out.grad_fn is not None else ""
    for key, be in _GRAD_FN_BACKEND.items():
        if key in name:
            return be
    return f"math ({name or 'no grad_fn'})"


def _run_sdpa_bwd(case: Case, ctx) -> dict[str, Any]:
    import torch

    from . import sdpa as sdpa_lib
    from .kernels import DTYPES, check_string, rel_err, timing_fields

    p = case.params
    b, hq, hkv, s, d = p["batch"], p["heads_q"], p["heads_kv"], p["seq"], p["head_dim"]
    dt = DTYPES[p["dtype"]]
    gqa = hq != hkv
    group = hq // hkv
    q = ctx.randn(b, hq, s, d, dtype=dt).requires_grad_(True)
    k = ctx.randn(b, hkv, s, d, dtype=dt).requires_grad_(True)
    v = ctx.randn(b, hkv, s, d, dtype=dt).requires_grad_(True)
    do = ctx.randn(b, hq, s, d, dtype=dt)
    with sdpa_lib.backend_context(p["backend"]):
        out = sdpa_lib.sdpa(q, k, v, causal=p["causal"], gqa=gqa)  # a backend that refuses raises: an error row
        ran = _backend_of(out)

        def bwd():
            return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

        dq = bwd()[0]
        t = ctx.timer.time(bwd)

        def fwd():
            with torch.no_grad():
                return sdpa_lib.sdpa(q, k, v, causal=p["causal"], gqa=gqa)

        tf = ctx.timer.time(fwd, max_reps=50)
    # dQ of the first s' queries depends only on the first s' keys (causal): exact on a prefix
    sp = min(s, 512)
    with sdpa_lib.backend_context("math"):
        qr = q[:1, :group, :sp].detach().float().requires_grad_(True)
        o_ref = sdpa_lib.sdpa(qr, k[:1, :1, :sp].detach().float(), v[:1, :1, :sp].detach().float(),
                              causal=p["causal"], gqa=group > 1)
        (dq_ref,) = torch.autograd.grad(o_ref, (qr,), do[:1, :group, :sp].float())
    err = rel_err(dq[:1, :group, :sp], dq_ref)
    return {**timing_fields(t), "check": check_string(err, 3e-2), "rel_err": err, "backend_ran": ran,
            "fwd_s": tf.median_s, "impl": f"autograd.grad(F.scaled_dot_product_attention[{p['backend']}: ran {ran}])"
                                          + (" enable_gqa" if gqa else "")}


def _run_rmsnorm_bwd(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .kernels import DTYPES, check_string, rel_err, rms_norm, timing_fields

    p = case.params
    t_, h = p["tokens"], p["hidden"]
    dt = DTYPES[p["dtype"]]
    x = ctx.randn(t_, h, dtype=dt).requires_grad_(True)
    w = (1.0 + 0.1 * ctx.randn(h)).to(dt).requires_grad_(True)
    dy = ctx.randn(t_, h, dtype=dt)
    y = rms_norm(x, w)

    def bwd():
        return torch.autograd.grad(y, (x, w), dy, retain_graph=True)

    dx = bwd()[0]
    rows = min(t_, 64)
    xr = x[:rows].detach().double().requires_grad_(True)
    wr = w.detach().double()
    yr = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-5) * wr
    (dxr,) = torch.autograd.grad(yr, (xr,), dy[:rows].double())
    err = rel_err(dx[:rows], dxr)
    del dx
    t = ctx.timer.time(bwd)
    return {**timing_fields(t), "check": check_string(err, 3e-2), "rel_err": err,
            "impl": "autograd.grad(F.rms_norm) for x and weight"}


def _run_swiglu_bwd(case: Case, ctx) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from .kernels import DTYPES, check_string, rel_err, timing_fields

    p = case.params
    t_, w = p["tokens"], p["width"]
    dt = DTYPES[p["dtype"]]
    g = ctx.randn(t_, w, dtype=dt).requires_grad_(True)
    u = ctx.randn(t_, w, dtype=dt).requires_grad_(True)
    dy = ctx.randn(t_, w, dtype=dt)
    y = F.silu(g) * u

    def bwd():
        return torch.autograd.grad(y, (g, u), dy, retain_graph=True)

    dg = bwd()[0]
    rows = min(t_, 64)
    gr = g[:rows].detach().double().requires_grad_(True)
    (dgr,) = torch.autograd.grad(F.silu(gr) * u[:rows].double(), (gr,), dy[:rows].double())
    err = rel_err(dg[:rows], dgr)
    del dg
    t = ctx.timer.time(bwd)
    return {**timing_fields(t), "check": check_string(err, 3e-2), "rel_err": err,
            "impl": "autograd.grad(F.silu(g) * u) for g and u"}


def _run_adamw(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .kernels import timing_fields

    p = case.params
    n, per = p["params"], p["tensor_elems"]
    sizes = [per] * (n // per) + ([n % per] if n % per else [])
    params = [torch.nn.Parameter(ctx.randn(sz)) for sz in sizes]
    for prm in params:
        prm.grad = 1e-3 * ctx.randn(prm.numel())
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        impl = "torch.optim.AdamW(fused=True)"
    except (RuntimeError, TypeError, ValueError) as exc:  # no fused kernel for this device/dtype
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
        impl = f"torch.optim.AdamW(foreach=True) (fused refused: {str(exc).splitlines()[0][:80]})"
    before = params[0].detach()[:1024].clone()
    opt.step()
    changed = bool((params[0].detach()[:1024] != before).any().item())
    finite = all(bool(torch.isfinite(prm.detach()[:1024]).all().item()) for prm in params[:2])
    t = ctx.timer.time(opt.step)
    return {**timing_fields(t), "check": "ok" if (changed and finite) else "FAIL parameters not updated",
            "impl": f"{impl}, {len(params)} fp32 tensors"}


def _run_cross_entropy(case: Case, ctx) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from .kernels import DTYPES, timing_fields

    p = case.params
    t_, v = p["tokens"], p["vocab"]
    dt = DTYPES[p["dtype"]]
    logits = ctx.randn(t_, v, dtype=dt).requires_grad_(True)
    target = torch.randint(0, v, (t_,), device=ctx.device)

    def step():
        loss = F.cross_entropy(logits, target)
        (g,) = torch.autograd.grad(loss, (logits,))
        return loss, g

    loss, g = step()
    ok = math.isfinite(float(loss.detach())) and abs(float(g.float().sum())) < 1e-2 * max(1.0, t_ ** 0.5)
    del g
    t = ctx.timer.time(step)
    return {**timing_fields(t), "check": "ok" if ok else "FAIL loss or gradient", "impl":
            "F.cross_entropy(bf16 logits) forward + autograd.grad"}


def _run_step(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .kernels import DTYPES, rms_norm, rotary_tables, timing_fields
    from .layers import DecoderLayer

    p = case.params
    dt = DTYPES[p["dtype"]]
    lp = {"hidden": p["hidden"], "heads": p["heads"], "kv_heads": p["kv_heads"], "head_dim": p["head_dim"],
          "intermediate": p["intermediate"], "tp": 1, "dtype": p["dtype"]}
    layers = [DecoderLayer(lp, ctx) for _ in range(p["layers"])]
    weights = []
    for layer in layers:
        for name in ("w_qkv", "w_o", "w_gu", "w_down", "n1", "n2"):
            weights.append(getattr(layer, name).requires_grad_(True))
    norm = (1.0 + 0.1 * ctx.randn(p["hidden"])).to(dt).requires_grad_(True)
    head = (0.02 * ctx.randn(p["hidden"], p["vocab"])).to(dt).requires_grad_(True)
    weights += [norm, head]
    b, s = p["batch"], p["seq"]
    x = ctx.randn(b, s, p["hidden"], dtype=dt).requires_grad_(True)
    target = torch.randint(0, p["vocab"], (b * s,), device=ctx.device)
    cos, sin = rotary_tables(s, p["head_dim"], ctx.device, dt)
    cos, sin = cos.repeat(b, 1), sin.repeat(b, 1)

    def forward():
        h = x
        for layer in layers:
            h = layer.prefill(h, cos, sin)
        logits = rms_norm(h, norm) @ head
        return torch.nn.functional.cross_entropy(logits.view(b * s, -1), target)

    def step():
        for w in weights:
            w.grad = None
        x.grad = None
        loss = forward()
        loss.backward()
        return loss

    loss = step()
    ok = math.isfinite(float(loss.detach())) and all(
        w.grad is not None and bool(torch.isfinite(w.grad).all().item()) for w in weights[:6])
    t = ctx.timer.time(step)
    name = _attention_backend_in_step(layers[0], x, cos, sin)
    for w in weights:
        w.grad = None
    return {**timing_fields(t), "check": "ok" if ok else "FAIL non-finite loss or gradients",
            "impl": f"{p['layers']} plain PyTorch decoder layers + final norm + LM head + cross-entropy, "
                    f"forward and backward (plain SDPA dispatch: {name}), eager", "backend_ran": name}


def _attention_backend_in_step(layer, x, cos, sin) -> str:
    """The SDPA backend plain dispatch picks for the step's attention, from its autograd node."""
    from .sdpa import sdpa

    q, k, v = layer._qkv(x, cos, sin)
    return _backend_of(sdpa(q, k, v, causal=True, gqa=layer.gqa))


# ---------------------------------------------------------------------------------------------------------
# running the cases on their own
# ---------------------------------------------------------------------------------------------------------
