"""What Triton's compiler makes of each configuration, with no GPU: shared memory, registers, spills and
the MMA instruction family, read from the compiled kernel (``metadata.shared``) and from ``ptxas -v``.

    python -m perfmodel.tune.compile_probe --out perfmodel/tune/data/compile_sm90.jsonl [--arch 90]

Needs Triton (its bundled ptxas); compiles for the target named, on the CPU. The table is what the
resource model (:mod:`.resources`) is checked against in the tests: it is compiler output, not a timing.
Appends one JSON row a configuration (resumable).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

from .space import ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_NUM_WARPS, BLOCK_K, BLOCK_M, BLOCK_N, NUM_WARPS, AttentionConfig, GemmConfig

_DIV16 = [["tt.divisibility", 16]]


def _gemm_source(cfg: GemmConfig):
    from triton.compiler import ASTSource

    from .kernels import jit_kernels

    mm = jit_kernels()[0]
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32" if cfg.split_k > 1 else "*bf16", "M": "i32",
           "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "constexpr",
           "stride_bn": "i32", "stride_cs": "i32", "stride_cm": "i32", "stride_cn": "constexpr"}
    consts = {"stride_ak": 1, "stride_bk": 1, "stride_cn": 1, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
              "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m, "SPLIT_K": cfg.split_k, "EVEN_K": True}
    for name in consts:
        sig[name] = "constexpr"
    # pointers and N, K, strides divisible by 16, as the JIT specialises them for LLM shapes (M is not)
    attrs = {(i,): _DIV16 for i in (0, 1, 2, 4, 5, 6, 9, 10, 11)}
    return ASTSource(mm, sig, consts, attrs)


def _attention_source(cfg: AttentionConfig, head_dim: int = 128, causal: bool = True):
    from triton.compiler import ASTSource

    from .kernels import jit_kernels

    att = jit_kernels()[2]
    names = ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "sm_scale", "SEQ_Q", "SEQ_KV", "stride_qb", "stride_qh", "stride_qm",
             "stride_kb", "stride_kh", "stride_kn", "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh",
             "stride_om"]
    sig = {n: ("*bf16" if n.endswith("_ptr") else "fp32" if n == "sm_scale" else "i32") for n in names}
    consts = {"HEADS_Q": 32, "GROUP": 4, "HEAD_DIM": head_dim, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
              "CAUSAL": causal}
    for name in consts:
        sig[name] = "constexpr"
    attrs = {(i,): _DIV16 for i in (0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)}
    return ASTSource(att, sig, consts, attrs)


def _ptxas_usage(ptx: str, arch: int) -> dict:
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        suffix = "a" if arch >= 90 else ""
        out = subprocess.run([str(ptxas), f"-arch=sm_{arch}{suffix}", "-v", str(src), "-o", str(Path(d) / "k.o")],
                             capture_output=True, text=True, timeout=300).stderr
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores", out)
    return {"regs": int(regs.group(1)) if regs else None, "spill_bytes": int(spill.group(1)) if spill else None}


def probe(kind: str, cfg, arch: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    src = _gemm_source(cfg) if kind == "gemm" else _attention_source(cfg)
    t0 = time.perf_counter()
    row = {"kind": kind, "config": cfg.key, "arch": arch, "triton": triton.__version__}
    try:
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
        ptx = k.asm["ptx"]
        row.update(smem_bytes=int(k.metadata.shared), compile_s=round(time.perf_counter() - t0, 3),
                   mma="wgmma" if "wgmma" in ptx else "mma.sync" if "mma.sync" in ptx else "none")
        row.update(_ptxas_usage(ptx, arch))
    except Exception as e:  # a configuration the compiler refuses is a row too
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return row


def probe_configs(stages: tuple[int, ...]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for bm, bn, bk, w, s in product(BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, stages):
        out.append(("gemm", GemmConfig(bm, bn, bk, 8, w, s, 1)))
    for bm, bn, w, s in product(ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_NUM_WARPS, stages):
        out.append(("attention", AttentionConfig(bm, bn, w, s)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.tune.compile_probe", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", type=int, default=90, help="compute capability as an integer (90: Hopper)")
    ap.add_argument("--stages", default="3", help="comma-separated num_stages values (default 3)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-probe-"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                r = json.loads(line)
                done.add((r["kind"], r["config"], r["arch"]))
            except (json.JSONDecodeError, KeyError):
                continue
    stages = tuple(int(s) for s in args.stages.split(","))
    todo = [(k, c) for k, c in probe_configs(stages) if (k, c.key, args.arch) not in done]
    print(f"{len(todo)} configurations to compile for sm_{args.arch}", file=sys.stderr)
    for i, (kind, cfg) in enumerate(todo):
        row = probe(kind, cfg, args.arch)
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{len(todo)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
