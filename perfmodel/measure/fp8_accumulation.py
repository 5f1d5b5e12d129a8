"""fp8 matrix products with fast against split accumulation, measured side by side.

Hopper's fp8 tensor cores accumulate in limited precision; a kernel either adds its partial sums into fp32
registers every few K steps ("split" or two-level accumulation, ``torch._scaled_mm``'s default and the one the
suite's ``gemm`` family measures) or leaves them in the tensor core's accumulator ("fast accumulation",
``use_fast_accum=True``): TransformerEngine 2.8's per-tensor fp8 recipes run the forward product fast and both
gradients split (``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``, module/base.py). This times
the suite's fp8 shapes (per-tensor scales: the model shapes and squares of :func:`.shapes.gemm_cases`, and a few
decode-sized M) both ways, so what fast accumulation buys is a measured ratio, not a guess.

Rows go through :mod:`.store` as they are measured. Evidence for ``perfmodel fit``; the ``gemm`` family's rows
stay the dense model's.

    python -m perfmodel.measure.fp8_accumulation --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases, gemm_cases

DECODE_M = (16, 64, 256)  # small M beside the suite's (streaming-bound products)
DECODE_NK = ((8192, 8192), (28672, 8192), (8192, 28672))


def accumulation_cases(quick: bool = False) -> list[Case]:
    """Every per-tensor fp8 case of the full ``gemm`` family, and the decode-sized ones, with ``fast_accum``
    True and False (each in the suite's group)."""
    if quick:
        base = [("quick", 64, 256, 256), ("quick", 256, 256, 512)]
    else:
        base = [(c.group, c.params["m"], c.params["n"], c.params["k"]) for c in gemm_cases("full", "cuda")
                if c.params["dtype"] == "fp8" and c.params.get("scaling", "tensor") == "tensor"]
        base += [("decode", m, n, k) for m in DECODE_M for n, k in DECODE_NK]
    cases = Cases()
    for group, m, n, k in base:
        for fast in (True, False):
            cases.add("gemm", {"m": m, "n": n, "k": k, "dtype": "fp8", "fast_accum": fast}, group)
    return cases.items


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = f"{row['time_s'] * 1e6:9.1f} us" if row.get("time_s") else f"error {row.get('error')}"
    return f"fp8 {'fast ' if p['fast_accum'] else 'split'} {p['m']:>6d} x {p['n']:>6d} x {p['k']:>6d}: {msg}"


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.fp8_accumulation", __doc__, argv)
    return measure_standalone(accumulation_cases, args, suite="fp8-accumulation", describe=_describe)


if __name__ == "__main__":
    sys.exit(main())
