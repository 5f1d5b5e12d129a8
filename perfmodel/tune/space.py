"""The configuration spaces of the two Triton kernels in :mod:`.kernels`, and the shape-aware pruning
that makes them worth measuring.

A GEMM configuration is (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, SPLIT_K); an attention
configuration is (BLOCK_M, BLOCK_N, num_warps, num_stages). The full grids are what an autotuner would
sweep. :func:`gemm_space` keeps, for one shape, the configurations that are not redundant for it:

- a tile taller than the problem (BLOCK_M > M) computes padding only; the smallest tile that covers M is
  kept, and 64 always (the height Hopper's warpgroup MMA needs, faster than a 16- or 32-row tile even
  when part of it is padding);
- GROUP_M only reorders tile rows: with a single row of tiles every GROUP_M is the same kernel;
- SPLIT_K cuts K into SPLIT_K slices; a slice shorter than one K block per split, or more programs than
  four per SM, is never useful.

Resource limits (shared memory, registers) are the model's business (:mod:`.resources`), not pruning's.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import product

BLOCK_M = (16, 32, 64, 128, 256)
BLOCK_N = (32, 64, 128, 256)
BLOCK_K = (32, 64, 128)
GROUP_M = (1, 8)
NUM_WARPS = (4, 8)
NUM_STAGES = (2, 3, 4, 5)
SPLIT_K = (1, 2, 4, 8, 16)

ATTN_BLOCK_M = (16, 32, 64, 128)
ATTN_BLOCK_N = (32, 64, 128)
ATTN_NUM_WARPS = (4, 8)
ATTN_NUM_STAGES = (2, 3, 4, 5)


@dataclass(frozen=True, order=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    split_k: int = 1

    @property
    def key(self) -> str:
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}g{self.group_m}"
                f"w{self.num_warps}s{self.num_stages}sk{self.split_k}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, order=True)
class AttentionConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    @property
    def key(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"

    def as_dict(self) -> dict:
        return asdict(self)


def parse_gemm_key(key: str) -> GemmConfig:
    """The inverse of :attr:`GemmConfig.key` (``m128n256k64g8w8s3sk1``)."""
    import re

    m = re.fullmatch(r"m(\d+)n(\d+)k(\d+)g(\d+)w(\d+)s(\d+)sk(\d+)", key)
    if not m:
        raise ValueError(f"not a GEMM configuration key: {key!r}")
    return GemmConfig(*map(int, m.groups()))


def parse_attention_key(key: str) -> AttentionConfig:
    import re

    m = re.fullmatch(r"m(\d+)n(\d+)w(\d+)s(\d+)", key)
    if not m:
        raise ValueError(f"not an attention configuration key: {key!r}")
    return AttentionConfig(*map(int, m.groups()))


def full_gemm_grid() -> list[GemmConfig]:
    return [GemmConfig(*c) for c in product(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_WARPS, NUM_STAGES, SPLIT_K)]


def full_attention_grid() -> list[AttentionConfig]:
    return [AttentionConfig(*c) for c in product(ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_NUM_WARPS, ATTN_NUM_STAGES)]


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# The validation grid the device run measures exhaustively (the full grid is ~30k rows over the 34 shapes,
# half an hour of a GPU): stages 3/4, BLOCK_N 64..256, BLOCK_K 64/128, GROUP_M 8, SPLIT_K up to 8.
REDUCED = {"block_n": (64, 128, 256), "block_k": (64, 128), "group_m": (8,), "num_stages": (3, 4),
           "split_k": (1, 2, 4, 8)}


def in_grid(cfg, grid: str) -> bool:
    if grid == "full":
        return True
    return all(getattr(cfg, f) in vals for f, vals in REDUCED.items() if not (f == "group_m" and cfg.group_m == 1))


def gemm_space(m: int, n: int, k: int, sm_count: int, grid: str = "full") -> list[GemmConfig]:
    """The configurations worth considering for one shape (module docstring), in a stable order;
    ``grid="reduced"``: only those of the validation grid (REDUCED)."""
    tallest = max(16, _pow2_at_least(m))
    widest = max(32, _pow2_at_least(n))
    deepest = max(32, _pow2_at_least(k))
    out = []
    for bm, bn, bk, g, w, s, sk in product(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_WARPS, NUM_STAGES, SPLIT_K):
        if bm > tallest and bm != 64:
            continue
        if bm > 64 and bm > tallest:
            continue
        if bn > widest or bk > deepest:
            continue
        grid_m = _ceil_div(m, bm)
        if grid_m == 1 and g != GROUP_M[0]:
            continue
        if sk > 1:
            if _ceil_div(k, sk) < bk:
                continue
            if grid_m * _ceil_div(n, bn) * sk > 4 * sm_count:
                continue
        c = GemmConfig(bm, bn, bk, g, w, s, sk)
        if grid != "full" and not in_grid(c, grid):
            continue
        out.append(c)
    return out


def attention_space(seq_q: int) -> list[AttentionConfig]:
    """Attention configurations for a query length: a query block taller than the queries is padding."""
    tallest = max(16, _pow2_at_least(seq_q))
    return [c for c in full_attention_grid() if c.block_m <= tallest or c.block_m == 64]
