"""MoE expert products in training: the grouped GEMM's forward, data gradient and weight gradient, measured.

A training step's routed experts run three grouped products a projection: the forward ``X_e W_e`` over each
expert's rows, the data gradient ``dY_e W_e^T`` (the same shape class) and the weight gradient ``X_e^T dY_e``,
whose reduction runs over the expert's rows: at EP 8 and a few hundred rows an expert that is a short-K product
writing a whole expert's weights. This measures the three on the attached GPU with PyTorch's grouped kernels
(CUTLASS on Hopper: what TransformerEngine's and Megatron's grouped GEMMs stand for, not the same code), rows
balanced over the local experts, at the expert shapes of gpt-oss-120b (hidden 2,880, width 2,880), DeepSeek-V3
(7,168 and 2,048) and Qwen3-30B-A3B (2,048 and 768), the gate-up (2 x width) and down products, 4 to 128 local
experts, 128 to 4,096 rows an expert, in two formats:

- ``bf16``: ``torch._grouped_mm``;
- ``fp8``: ``torch._scaled_grouped_mm``, e4m3 operands with fp32 row-wise scales (one per row of the left
  operand, one per column of each expert's right operand), bf16 out, each pass with and without fast
  accumulation (``fast_accum``; TransformerEngine 2.8's fp8 recipes but block scaling accumulate the forward
  fast and both gradients in split, higher-precision accumulation: ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD =
  _2X_ACC_WGRAD = True`` in ``transformer_engine/pytorch/module/base.py``, read by its ``GroupedLinear``; a fit takes
  each pass at that accumulation, :data:`perfmodel.train.graph.FP8_FAST_ACCUMULATION`). The operands are
  quantized before timing: the kernel alone, as the training graph prices quantization apart.

Rows go through :mod:`.store` as they are measured. ``perfmodel fit`` takes them into the profile's training
factors (:func:`perfmodel.fit.training.fit_grouped`); ``docs/tools/grouped_gemm_check.py`` prices the same
products as the training graph does.

    python -m perfmodel.measure.grouped_gemm --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases

# (model, hidden, expert width)
EXPERTS = (("gpt-oss-120b", 2880, 2880), ("deepseek-v3", 7168, 2048), ("qwen3-30b-a3b", 2048, 768))
LOCAL_EXPERTS = (4, 16, 32, 128)
ROWS_PER_EXPERT = (128, 512, 1024, 4096)
PASSES = ("fwd", "dgrad", "wgrad")
FORMATS = ("bf16", "fp8")
MAX_BYTES = 24e9  # inputs, outputs and weights of one case


def products(hidden: int, width: int) -> list[tuple[str, int, int]]:
    """(name, K, N) of the two products of a SwiGLU expert's forward: gate-up (hidden -> 2 x width) and down."""
    return [("gate_up", hidden, 2 * width), ("down", width, hidden)]


def grouped_cases(quick: bool = False, formats: tuple[str, ...] = FORMATS) -> list[Case]:
    """Every (format, model, product, experts, rows, pass); fp8 once with and once without fast accumulation.
    The bf16 cases keep the ids they were first measured under (no accumulation field)."""
    cases = Cases()
    experts = EXPERTS[:1] if quick else EXPERTS
    locals_ = (4,) if quick else LOCAL_EXPERTS
    rows = (128,) if quick else ROWS_PER_EXPERT
    variants = {"bf16": ({},), "fp8": ({"scaling": "row", "fast_accum": True}, {"scaling": "row", "fast_accum": False})}
    for fmt in formats:
        for model, hidden, width in experts:
            for name, k, n in products(hidden, width):
                for e in locals_:
                    for r in rows:
                        m = e * r
                        if 2 * (m * k + m * n + e * k * n) > MAX_BYTES:
                            continue
                        for extra in variants[fmt]:
                            for p in PASSES:
                                cases.add("grouped_gemm", {"model": model, "product": name, "pass": p, "experts": e,
                                                           "rows": r, "k": k, "n": n, "dtype": fmt, **extra},
                                          f"grouped-{model}")
    return cases.items


def flops(p: dict[str, Any]) -> float:
    return 2.0 * p["experts"] * p["rows"] * p["k"] * p["n"]


def run_case(case: Case, ctx) -> dict[str, Any]:
    """One pass of one grouped product: forward ``[M, K] x [E, K, N]``, data gradient ``[M, N] x [E, N, K]``,
    weight gradient ``[K, M] x [M, N] -> [E, K, N]`` (offsets over M)."""
    if case.params.get("dtype", "bf16") == "fp8":
        return run_fp8_case(case, ctx)
    import torch

    p = case.params
    e, r, k, n = p["experts"], p["rows"], p["k"], p["n"]
    m = e * r
    dt = torch.bfloat16
    offs = torch.arange(r, m + 1, r, device=ctx.device, dtype=torch.int32)
    if p["pass"] == "fwd":
        a, b = ctx.randn(m, k, dtype=dt), ctx.randn(e, n, k, dtype=dt).transpose(-2, -1)
    elif p["pass"] == "dgrad":
        a, b = ctx.randn(m, n, dtype=dt), ctx.randn(e, n, k, dtype=dt)  # dY [M, N] x W_e^T [N, K]
    else:
        a, b = ctx.randn(m, k, dtype=dt).t(), ctx.randn(m, n, dtype=dt)  # X^T [K, M] x dY [M, N], grouped over M

    def fn():
        return torch._grouped_mm(a, b, offs=offs)

    layout = "as autograd holds them"
    try:
        out = fn()
    except RuntimeError:  # a layout the kernel refuses: the other major order of the weights (a copy, untimed)
        b = b.transpose(-2, -1).contiguous().transpose(-2, -1)
        a = a.contiguous()
        layout = "weights made column-major"
        out = fn()
    return _timed(fn, out, p, ctx, impl="torch._grouped_mm bf16", layout=layout)


def _timed(fn, out, p: dict[str, Any], ctx, *, impl: str, layout: str) -> dict[str, Any]:
    """The row of one product whose first run gave ``out``: its timing, FLOPs, rate and how it ran."""
    from .timing import timing_fields

    shape = list(out.shape)
    del out
    t = ctx.timer.time(fn)
    tflops = flops(p) / t.median_s / 1e12 if t.median_s else None
    return {**timing_fields(t), "flops": flops(p), "out_shape": shape, "tflops": tflops, "impl": impl,
            "layout": layout}


def fp8_operands(p: dict[str, Any], device: str = "cuda", randn=None):
    """The fp8 operands of one pass in the layouts ``torch._scaled_grouped_mm`` takes on Hopper (the left operand
    row-major, the right one column-major in its last two dimensions) and their row-wise fp32 scales: (a, b,
    scale_a, scale_b, offs). Forward ``X [M, K] x W_e^T [E, K, N]``; data gradient ``dY [M, N] x W_e [E, N, K]``
    (the weights quantized in the other major order, as TransformerEngine keeps a transposed fp8 copy); weight
    gradient ``X^T [K, M] x dY [M, N]``, grouped over M, one scale per row of each group's ``X^T`` and column of
    its ``dY`` (K x E and N x E of them). ``randn(*shape)``: bf16 values (the context's, so a run is
    reproducible); ``device="meta"`` checks the layouts without a GPU."""
    import torch

    e, r, k, n = p["experts"], p["rows"], p["k"], p["n"]
    m = e * r
    f8 = torch.float8_e4m3fn
    randn = randn or (lambda *shape: torch.randn(*shape, dtype=torch.bfloat16, device=device))

    def q(x):
        return x.to(f8) if x.device.type != "meta" else torch.empty_like(x, dtype=f8)

    def scale(*shape):
        return torch.ones(*shape, dtype=torch.float32, device=device)

    offs = torch.arange(r, m + 1, r, device=device, dtype=torch.int32)
    if p["pass"] == "fwd":
        a, b = q(randn(m, k)), q(randn(e, n, k)).transpose(-2, -1)
        sa, sb = scale(m), scale(e, n)
    elif p["pass"] == "dgrad":
        a, b = q(randn(m, n)), q(randn(e, k, n)).transpose(-2, -1)
        sa, sb = scale(m), scale(e, k)
    else:
        a, b = q(randn(k, m)), q(randn(n, m)).t()
        sa, sb = scale(k * e), scale(n * e)
    return a, b, sa, sb, offs


def run_fp8_case(case: Case, ctx) -> dict[str, Any]:
    """One pass of one grouped product in fp8 (:func:`fp8_operands`), bf16 out."""
    import torch

    p = case.params
    if not ctx.fp8_ok or not hasattr(torch, "_scaled_grouped_mm"):
        raise RuntimeError("fp8 grouped products need a CUDA device of capability >= 9.0 and torch._scaled_grouped_mm")
    a, b, sa, sb, offs = fp8_operands(p, ctx.device, lambda *shape: ctx.randn(*shape, dtype=torch.bfloat16))
    fast = bool(p["fast_accum"])

    def fn():
        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=fast)

    return _timed(fn, fn(), p, ctx, layout="left row-major, right column-major",
                  impl=f"torch._scaled_grouped_mm e4m3 row-wise scales, {'fast' if fast else 'split'} accumulation")


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = (f"{row['time_s'] * 1e6:9.1f} us {row['tflops']:6.1f} TFLOP/s" if row.get("time_s")
           else f"error {row.get('error')}")
    fmt = p.get("dtype", "bf16") + ("" if "fast_accum" not in p else " fast" if p["fast_accum"] else " split")
    return f"{fmt:10s} {p['model']} {p['product']:7s} {p['pass']:5s} E{p['experts']:<3d} rows {p['rows']:<5d}: {msg}"


def main(argv: list[str] | None = None) -> int:
    import torch

    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.grouped_gemm", __doc__, argv)
    if not hasattr(torch, "_grouped_mm"):
        print(f"perfmodel: error: torch {torch.__version__} has no _grouped_mm (2.8 or later)", file=sys.stderr)
        return 2
    return measure_standalone(grouped_cases, args, suite="grouped-gemm", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
