"""The Triton kernels the tuner ranks configurations of: a matmul and a flash-attention forward.

Both are the standard formulations (Triton's tutorials 03 and 06, and ``triton.ops.matmul``'s split-K),
with every tuning knob a ``tl.constexpr`` or a launch option (``num_warps``, ``num_stages``):

- ``matmul``: C[M, N] = A[M, K] @ B[K, N], B given as a torch ``nn.Linear`` weight W[N, K] (B = W^T, K
  contiguous in both operands, as in an LLM layer). Output tiles BLOCK_M x BLOCK_N, launched in groups of
  GROUP_M tile rows (the L2 swizzle); K walked in BLOCK_K steps, ``num_stages`` deep. With SPLIT_K > 1
  each of SPLIT_K programs per tile takes every SPLIT_K-th K block and writes an fp32 partial sum to a
  workspace; a second kernel adds the partials and casts (deterministic; no atomics, no zero fill).
  M is not specialised (``do_not_specialize``), so one compiled kernel serves every M of a class of N, K.
- ``attention``: softmax(Q K^T / sqrt(d)) V for Q (B, Hq, Sq, D), K and V (B, Hkv, Skv, D), GQA by
  head index, causal (queries aligned to the end of the keys) or not. BLOCK_M query rows a program,
  BLOCK_N keys a step, online softmax in fp32.

Triton and torch are imported inside functions: the tuner's model and CLI never need them.
"""
from __future__ import annotations

import functools
import math


@functools.lru_cache(maxsize=None)
def jit_kernels():
    """Define the kernels on first use (Triton imported only here)."""
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["M", "stride_cs"])
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cs, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr):
        pid = tl.program_id(0)
        pid_k = tl.program_id(1)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m

        # rows and columns past the edge wrap around (read valid memory, never stored): no M/N load masks
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_M), BLOCK_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_N), BLOCK_N)
        offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K * SPLIT_K):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                k_left = K - k0
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * SPLIT_K * stride_ak
            b_ptrs += BLOCK_K * SPLIT_K * stride_bk
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + pid_k * stride_cs + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def splitk_reduce_kernel(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < MN
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for s in range(SPLIT_K):
            acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
        tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, SEQ_Q, SEQ_KV,
                         stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                         HEADS_Q: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
        start_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // HEADS_Q
        h = bh % HEADS_Q
        hk = h // GROUP
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q_base = q_ptr + b * stride_qb + h * stride_qh
        k_base = k_ptr + b * stride_kb + hk * stride_kh
        v_base = v_ptr + b * stride_vb + hk * stride_vh
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < SEQ_Q, other=0.0)
        m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32) + 1.0
        acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504  # exp2
        shift = SEQ_KV - SEQ_Q  # queries are the last SEQ_Q positions of the keys
        if CAUSAL:
            hi = tl.minimum(SEQ_KV, (start_m + 1) * BLOCK_M + shift)
        else:
            hi = SEQ_KV
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < SEQ_KV, other=0.0)
            qk = tl.dot(q, kt) * qk_scale
            valid = cols[None, :] < SEQ_KV
            if CAUSAL:
                valid = valid & (offs_m[:, None] + shift >= cols[None, :])
            qk = tl.where(valid, qk, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < SEQ_KV, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new
        acc = acc / l_i[:, None]
        o_base = o_ptr + b * stride_ob + h * stride_oh
        tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
                 mask=offs_m[:, None] < SEQ_Q)

    return matmul_kernel, splitk_reduce_kernel, attention_kernel


REDUCE_BLOCK = 1024  # elements per program of the split-K reduction


def matmul_launcher(cfg, a, w, out, workspace=None):
    """A callable that runs C = a @ w.T with ``cfg`` (a GemmConfig) into ``out``; split-K needs ``workspace``
    (fp32, at least SPLIT_K * M * N elements). Returns (run, compiled kernels getter)."""
    matmul_kernel, reduce_kernel, _ = jit_kernels()
    m, k = a.shape
    n = w.shape[0]
    s = cfg.split_k
    even_k = k % (cfg.block_k * s) == 0
    grid = (math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n), s)
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, SPLIT_K=s,
                  EVEN_K=even_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if s == 1:
        def run():
            return matmul_kernel[grid](a, w, out, m, n, k, a.stride(0), a.stride(1), w.stride(1), w.stride(0), 0,
                                       out.stride(0), out.stride(1), **consts)
        return run
    if workspace is None or workspace.numel() < s * m * n:
        raise ValueError("split-K needs a workspace of SPLIT_K * M * N fp32 elements")
    rgrid = (math.ceil(m * n / REDUCE_BLOCK),)

    def run():
        matmul_kernel[grid](a, w, workspace, m, n, k, a.stride(0), a.stride(1), w.stride(1), w.stride(0), m * n,
                            n, 1, **consts)
        return reduce_kernel[rgrid](workspace, out, m * n, SPLIT_K=s, BLOCK=REDUCE_BLOCK, num_warps=4)
    return run


def compile_matmul(cfg, n: int, k: int, dtype):
    """Compile (into Triton's cache) the matmul kernel of ``cfg`` for operands of ``dtype`` whose N and K
    are ``n`` and ``k``, without launching it (M is not specialised). Returns the compiled kernel."""
    matmul_kernel, _, _ = jit_kernels()
    import torch

    s = cfg.split_k
    out_dtype = dtype if s == 1 else torch.float32
    return matmul_kernel.warmup(dtype, dtype, out_dtype, 64, n, k, k, 1, 1, k, 64 * n if s > 1 else 0, n, 1,
                                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                                SPLIT_K=s, EVEN_K=k % (cfg.block_k * s) == 0, num_warps=cfg.num_warps,
                                num_stages=cfg.num_stages, grid=(1,))


def compile_attention(cfg, batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                      causal: bool, dtype):
    """Compile (into Triton's cache) the attention kernel of ``cfg`` for contiguous q, k, v, o of these
    sizes, without launching it. Returns the compiled kernel."""
    _, _, attention_kernel = jit_kernels()
    sq = (heads_q * seq_q * head_dim, seq_q * head_dim, head_dim)
    skv = (heads_kv * seq_kv * head_dim, seq_kv * head_dim, head_dim)
    return attention_kernel.warmup(dtype, dtype, dtype, dtype, 1.0 / math.sqrt(head_dim), seq_q, seq_kv, *sq, *skv,
                                   *skv, *sq, HEADS_Q=heads_q, GROUP=heads_q // heads_kv, HEAD_DIM=head_dim,
                                   BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=bool(causal),
                                   num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=(1,))


def attention_launcher(cfg, q, k, v, out, causal: bool):
    """A callable running the flash forward of ``cfg`` (an AttentionConfig) on q, k, v into ``out``."""
    _, _, attention_kernel = jit_kernels()
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    grid = (math.ceil(sq / cfg.block_m), b * hq)
    scale = 1.0 / math.sqrt(d)

    def run():
        return attention_kernel[grid](q, k, v, out, scale, sq, skv, q.stride(0), q.stride(1), q.stride(2),
                                      k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
                                      out.stride(0), out.stride(1), out.stride(2), HEADS_Q=hq, GROUP=hq // hkv,
                                      HEAD_DIM=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=bool(causal),
                                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return run


def kernel_resources(compiled) -> dict:
    """Registers per thread, spilled bytes and shared memory of a compiled kernel, as Triton reports them."""
    out = {}
    for key, attr in (("regs", "n_regs"), ("spills", "n_spills")):
        try:
            v = getattr(compiled, attr)
            if v is not None and v >= 0:
                out[key] = int(v)
        except Exception:  # handles not initialised (no device) or an older Triton
            pass
    try:
        out["smem_bytes"] = int(compiled.metadata.shared)
    except Exception:
        pass
    return out
