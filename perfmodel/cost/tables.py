"""Tables as measured: a part's own kernel tables anchor the fitted cost model where they cover a shape.

An imported calibration folder (``calibration/<part>-<engine>``, :mod:`perfmodel.imports.aiconfigurator`) holds
the engine's measured module times, whole (``tables.npz``, :mod:`.table_store`) and as the subsample the profile
was fitted to (``measurements.jsonl.gz``, ``profile.json``); a folder without the whole tables is interpolated
from its measurements.
The fit compresses thousands of rows into a few dozen parameters and misses its own held-out rows by 5-20%
(``validation.md``); where the part's own table covers a shape, the table is the better evidence. This module
prices a covered shape from the table and keeps the fitted structure for everything the table cannot know.

**Classes.** Rows are grouped per class: the family and what selects another kernel or changes the work per
element, never a shape:

- ``gemm``: the format (:func:`~perfmodel.cost.gemm.gemm_format`: dtype and block scaling) and the kernel;
  shape dims ``m, n, k``;
- ``attention``: the kernel backend, phase (decode: one query a sequence; prefill), dtype, KV-cache dtype,
  head dims, and causal (prefill) or packed (decode); shape dims ``batch, seq_q, seq_kv / seq_q, heads_q,
  heads_q / heads_kv`` (prefill) or ``batch, seq_kv, heads_q, heads_q / heads_kv`` (decode);
- ``moe``: the format (weight-only experts their own: ``bf16_wfp4``), kernel and routing distribution; shape dims ``tokens, hidden, width (inter / tp), local
  experts (experts / ep), top_k, ep``: the configuration is interpolated too (below).

**Interpolation, in log space, detrended by the fit.** Each measured row gives a residual ``r = log(t_measured /
t_fit)``, ``t_fit`` the folder's own fitted profile pricing the row's module alone on the library spec of the
part (the fit's :func:`~perfmodel.fit.latency.predict_cases`, the projection's own code path). A shape's
residual is interpolated over the class's rows in log2 of the shape dims: multilinear on the grid of the class's
own measured values where every corner of the shape's grid cell was measured (exact at a measured shape,
linear in log between measured ones), else a local plane: weighted least squares through the
:data:`NEIGHBOURS_PER_DIM` x d + 1 nearest measured shapes (weights 1/distance^2, :data:`RIDGE`), clipped to their
range. The table's time is ``t_fit * exp(r)``: interpolating log time itself reproduces the held-out rows of the
shipped (subsampled) tables worse in most classes (the *log time* column of ``validation.md``), because the fit
already carries the shape's gross dependence (tiles, waves, rooflines) and the residual is smoother.

**Monotone in the batch.** Along a class's first dim (GEMM ``m``, attention ``batch``, MoE ``tokens``) the table's
time is made non-decreasing: at the measured values of that dim (at the shape's other dims) the table's time, each
dip below the running maximum of the smaller values by less than :data:`NOISE_DIP` raised to it (:func:`monotone`),
interpolated linearly in log between the two values around the shape. More rows, sequences or tokens never take
less time; a dip that small is the table's noise or a heuristic's step, and a projection whose step time fell as
its batch grew would be an artifact (``tests/test_hostile_model.py``). A deeper fall is a kernel the engine
switches to, and is kept.

**Reach.** A shape is covered when, in every dim, it lies within :data:`REACH` of the class's measured range.
Inside the range it is interpolated; outside it is clamped to the range and anchored there, the anchor fading
to the fitted model alone across the reach (the ratio raised to ``1 - u``, ``u`` the distance past the range as a
share of the reach, the largest over the dims): continuous at the range's edge and at the reach, so a sweep
never jumps where the table stops; beyond the reach the fitted model alone prices it. Below the smallest measured
value of the first dim there is no limit (:func:`reach_share`).

**Anchoring.** A covered op is priced ``t = t_fit_in_step(shape) * t_table(c) / t_fit_alone(c)``, ``c`` the
shape clamped into the range (the ratio faded outside it, above): the table replaces the fitted model's alone
time and the fitted model supplies what the table cannot know (the power-limited clock inside a step,
:mod:`perfmodel.power_clock`; the spec's figures). ``t_fit_alone`` is the folder's own profile on the library spec
of the part, which is the composed profile's family for a projection on the part itself (:mod:`perfmodel.evidence`
copies the family's fields unchanged). The compute and memory parts scale by the same ratio, so the
binding-resource label stands. A module the table times whole (an engine's linear layer with its input
quantization, its attention with the KV-cache write, its fused MoE) anchors the op the projection prices for it by
the module's ratio (the graph prices the quantize and cache-write kernels as ops of their own; a MoE module's every
op takes its ratio).

**Judged per class.** A class's table stands for its shapes only where it reproduces the class's own held-out
rows (the fit's share and seed, picked by shape: :meth:`.table_store.ClassRows.held_out`) at least as well as the
fitted model does at the median (:func:`judge`, :data:`MIN_JUDGED_ROWS`): of two kinds of evidence from the same
rows, the one measured to be better. The verdict is kept on disk (:mod:`perfmodel.disk_cache`, keyed by the rows,
the profile, the spec and the code: :func:`verdict_key`), so a fresh process does not judge a class again; with it
the table's measured range, and under the same key the table's lines along the first dim as they are interpolated
(:meth:`ClassTable._lines`), so a fresh process that finds the lines it needs prices none of the class's rows and
never builds the local plane (whose scipy.spatial took 0.15-0.3 s of a cold ``perfmodel project``). Values are
kept bit for bit; a projection is the same with the cache warm, cold or off.

**When a table applies.** The op's family must name the folder (``Profile.gemm_table``, ``attn_table``,
``gemm_grouped_table``: set by :func:`perfmodel.profile.load_profile` for an imported engine table, travelling with
the family through :func:`perfmodel.evidence.compose`, cleared by :func:`perfmodel.transfer.carry`), the spec
being projected must be the folder's part (``hw.key``), and the engine projected must be the folder's
(:func:`projected_engine`: where another engine's fit stands in for a missing one, its table does not).
**A what-if spec** (:func:`perfmodel.spec.spec_with`: the part's key, other figures) **takes the ratio form**:
``t_fit(hw') * t_table / t_fit(hw_table)``, the table's residual on the fit of the changed figures, never the
parent's table time as is; a spec of another key is another part and gets no table. A what-if profile keeps its
effect the same way (the residual multiplies its fit). The workbook's formulas (``xp`` non-numeric) get no table
here: :func:`perfmodel.cost.table_ratio` gives :mod:`perfmodel.outputs.workbook` the constant it multiplies the
formula by (fixed at export: the workbook agrees with the projection at the exported shapes and stays live).

**MoE kernels.** The table must time the kernel the engine runs: the import keeps one kernel per format, the
engine's main one (:data:`perfmodel.imports.aiconfigurator.PREFERRED_MOE_KERNELS`); TensorRT-LLM's NVFP4 MoE on
Blackwell runs its TRTLLM-gen (min-latency) kernel, so a TensorRT-LLM fp4 table holding only CUTLASS rows (B300,
GB300) is not used (:data:`ENGINE_MOE_KERNELS`).

Loading is lazy (a folder's rows when a projection first needs them, a class's residuals when first queried),
once per process and file state; the fitted times it needs come through a ``price`` function the caller passes
(:func:`perfmodel.cost.table_ratio`: this module sits below the cost model's entry point). numpy and scipy only.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import disk_cache
from ..memo import typed_key
from ..paths import RELEASES_DIR
from ..profile import TABLE_FIELDS
from ..routing import skew_prefix
from ..spec import lineage_rank
from .gemm import gemm_format
from .table_store import FILE as DENSE_FILE
from .table_store import ClassRows, KernelRows

# A shape may lie this factor beyond its class's measured range in each dim and still be anchored on the table
# (clamped to the range). The tables' grids step by up to a factor of 2 (batch and sequence lengths are powers of
# two, the GEMM grid's n and k steps reach 2x, MoE tokens 2x): one grid step past the edge is no further from
# the nearest measured shape than two neighbours inside the grid are from each other.
REACH = 2.0
# The local plane's neighbours: 3 per dim and one, enough to fit its d + 1 coefficients with every neighbour
# direction sampled more than once (the held-out rows of the shipped tables: 3 d + 1 gives GEMM 3.4% median,
# 2 d with inverse-distance weights 3.8%, 4 d + 2 3.3%; perfmodel.fit.tables reports the chosen one).
NEIGHBOURS_PER_DIM = 3
# Ridge term of the local plane (in units of the largest weight, which is 1): keeps the plane defined where the
# neighbours are collinear in some dim (a class whose rows all share one value of it), where it then has no slope.
RIDGE = 1e-3
# Largest multilinear grid a class keeps (cells of the product of its dims' distinct values, 8 MB of float64): the
# shipped GEMM and attention classes reach 4.5e4; their MoE classes (six dims of scattered configurations) 1e6 to
# 8e6, with under 1e-4 of the cells measured: they use the local plane alone.
MAX_GRID_CELLS = 1_000_000
# Along a class's first dim, a table time that dips below the running maximum of the smaller values by less than
# this share is raised to it; a deeper fall is a kernel switch and is kept. 10%: the P90 to which the tables are to
# reproduce their own held-out rows (issue 24's goal, perfmodel.fit.tables.GOAL): a smaller dip is not resolved
# from the table's own spread (measured: 5% leaves dips of 5-10% in Llama decode sweeps on b200-trtllm and
# h200-sxm-trtllm; 10% costs the held-out rows at most 0.8 points of median against no envelope)
NOISE_DIP = 0.10
# A class's table stands for its shapes only where it reproduces the class's own held-out rows (the fit's share and
# seed) at least as well as the fitted model does, at the median: the better evidence of the two, measured. Judged
# on at least this many held-out rows (a median of fewer says little); a class with fewer keeps its table.
MIN_JUDGED_ROWS = 5
# A folder's files are looked at again for changes (a refit, a new import) at most this often, in seconds: a
# projection prices dozens of ops, each of which would otherwise stat them
RECHECK_S = 1.0
# Shapes priced at once: bounds the memory of long arrays (a dense table's held-out rows, each of whose lines
# interpolates the measured values of the first dim at the local plane's neighbours), ~100 MB
CHUNK_POINTS = 16384
# Scalar queries remembered per class (a projection prices the same shapes every time it is evaluated), and lines
# along the first dim (a serving simulation's step tables ask ~4e4 attention lines of one class; ~30 MB)
QUERY_CACHE = 4096
LINE_CACHE = 65536
# The MoE kernel an engine runs per format where its table might hold another (module doc); a format not listed
# runs the one kernel the import kept. TensorRT-LLM's NVFP4 MoE on Blackwell runs its TRTLLM-gen backend, the
# tables' "min_latency" kernel source (about 3x faster than CUTLASS at decode sizes; the import keeps it where a
# table holds it: perfmodel.imports.aiconfigurator.PREFERRED_MOE_KERNELS).
MIN_LATENCY_MOE_KERNEL = "moe_torch_flow_min_latency"
ENGINE_MOE_KERNELS: dict[tuple[str, str], str] = {("trtllm", "fp4"): MIN_LATENCY_MOE_KERNEL}
FAMILIES = ("gemm", "attention", "moe")
# Op kinds a table may anchor: GEMMs, attention, the memory-bound ops of a fused MoE module (its permutes and
# activation take the module's ratio), and collectives (their own rows: perfmodel.cost.comm_tables)
TABLE_KINDS = ("gemm", "attention", "moe_permute", "swiglu", "all_reduce", "all_gather", "reduce_scatter", "all_to_all")
# the Profile field naming each family's table
TABLE_FIELD = TABLE_FIELDS
# the on-disk cache's namespaces of the classes' verdicts (build_class) and of their tables' lines along the first
# dim (ClassTable._lines), the newest LINES_KEPT of them kept: a projection asks a dozen, plan about 400; each is
# about 1 KB of the file every process that prices a table reads (1,000 of them in 1.2 ms)
VERDICTS = "table-verdicts"
LINES = "table-lines"
LINES_KEPT = 1024


# --- the interpolant ---------------------------------------------------------------------------------------

@dataclass
class Interpolant:
    """Values at measured points ``x`` (log2 of the shape dims, one row a point), interpolated at other points:
    multilinear on the grid of the measured values where a point's cell is fully measured, else the local plane
    (module doc). Points outside the measured range must be clamped first (:meth:`clamp`)."""

    x: np.ndarray  # (n, d)
    values: np.ndarray  # (n,)
    lo: np.ndarray = field(init=False)
    hi: np.ndarray = field(init=False)

    def __post_init__(self):
        self.x = np.asarray(self.x, dtype=float).reshape(len(self.values), -1)
        self.values = np.asarray(self.values, dtype=float)
        self.lo, self.hi = self.x.min(axis=0), self.x.max(axis=0)
        self._grid = _Grid.of(self.x, self.values)
        self._tree = None

    @property
    def dims(self) -> int:
        return self.x.shape[1]

    def clamp(self, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(points clamped into the measured range, whether each was within :data:`REACH` of it in every dim)."""
        c = np.clip(xq, self.lo, self.hi)
        return c, np.all(np.abs(xq - c) <= math.log2(REACH) + 1e-12, axis=1)

    def at(self, xq: np.ndarray) -> np.ndarray:
        """Interpolated values at points ``xq`` (q, d), already inside the measured range."""
        xq = np.asarray(xq, dtype=float).reshape(-1, self.dims)
        out = np.full(len(xq), np.nan)
        if self._grid is not None:
            out = self._grid.at(xq)
        todo = np.isnan(out)
        if todo.any():
            out[todo] = self._local_plane(xq[todo])
        return out

    def _local_plane(self, xq: np.ndarray) -> np.ndarray:
        from scipy.spatial import cKDTree

        if self._tree is None:
            self._tree = cKDTree(self.x)
        k = min(len(self.values), NEIGHBOURS_PER_DIM * self.dims + 1)
        if k == 1:
            return np.full(len(xq), self.values[0])
        # one neighbour more than the plane uses: its distance is the radius at which weights reach zero, so the
        # value is continuous as a query's neighbours change (a hard k-nearest cut made decode attention fall 11%
        # where the context grew 5%)
        kk = min(len(self.values), k + 1)
        dist, idx = self._tree.query(xq, k=kk)
        dist, idx = dist.reshape(len(xq), kk), idx.reshape(len(xq), kk)
        radius = dist[:, -1:] if kk > k else np.maximum(dist[:, -1:], 1e-12) * 1.5
        dist, idx = dist[:, :k], idx[:, :k]
        y = self.values[idx]
        # weighted ridge least squares of a plane y = a + b . (x - xq): its value at xq is a
        offsets = self.x[idx] - xq[:, None, :]
        design = np.concatenate([np.ones((len(xq), k, 1)), offsets], axis=2)
        # inverse-distance (exact at a measured point, continuous near it) times a biweight that vanishes at the radius
        w = (1.0 - np.minimum(dist / np.maximum(radius, 1e-12), 1.0) ** 2) ** 2 / np.maximum(dist, 1e-12) ** 2
        w = w / np.maximum(w.max(axis=1, keepdims=True), 1e-300)
        weighted = design.transpose(0, 2, 1) * w[:, None, :]
        normal = weighted @ design + RIDGE * np.eye(self.dims + 1)[None]
        rhs = weighted @ y[:, :, None]
        a = np.linalg.solve(normal, rhs)[:, 0, 0]
        a = np.where(dist[:, 0] <= 1e-12, y[:, 0], a)  # a measured point: its own value, exactly
        return np.clip(a, y.min(axis=1), y.max(axis=1))


@dataclass
class _Grid:
    """The product grid of a class's distinct measured values per dim, NaN where a node was not measured."""

    axes: list[np.ndarray]
    nodes: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, values: np.ndarray) -> "_Grid | None":
        axes = [np.unique(x[:, j]) for j in range(x.shape[1])]
        if math.prod(len(a) for a in axes) > MAX_GRID_CELLS:
            return None
        nodes = np.full(tuple(len(a) for a in axes), np.nan)
        index = tuple(np.searchsorted(a, x[:, j]) for j, a in enumerate(axes))
        sums, counts = np.zeros(nodes.shape), np.zeros(nodes.shape)
        np.add.at(sums, index, values)
        np.add.at(counts, index, 1.0)
        seen = counts > 0
        nodes[seen] = sums[seen] / counts[seen]  # a shape measured twice: the mean
        return cls(axes, nodes)

    def at(self, xq: np.ndarray) -> np.ndarray:
        """Multilinear values; NaN where a corner with weight in the point's cell was not measured."""
        lower, frac = [], []
        for j, a in enumerate(self.axes):
            if len(a) == 1:
                lower.append(np.zeros(len(xq), dtype=int))
                frac.append(np.zeros(len(xq)))
                continue
            i = np.clip(np.searchsorted(a, xq[:, j], side="right") - 1, 0, len(a) - 2)
            lower.append(i)
            frac.append(np.clip((xq[:, j] - a[i]) / (a[i + 1] - a[i]), 0.0, 1.0))
        total = np.zeros(len(xq))
        for corner in range(2 ** len(self.axes)):
            weight = np.ones(len(xq))
            index = []
            for j in range(len(self.axes)):
                up = (corner >> j) & 1
                if up and len(self.axes[j]) == 1:
                    weight = weight * 0.0
                    index.append(lower[j])
                    continue
                weight = weight * (frac[j] if up else 1.0 - frac[j])
                index.append(lower[j] + up)
            node = self.nodes[tuple(index)]
            used = weight > 0
            total = total + np.where(used, np.where(np.isnan(node), np.nan, node * weight), 0.0)
        return total


# --- classes: what a row or an op is, in the table's terms ----------------------------------------------------

def _log2(v) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(v, dtype=float), 1e-30))


def _fmt(dtype: str, scaling, weights=None) -> str:
    return gemm_format(dtype, scaling, weights)


def attention_key(backend, dtype, kv_dtype, head_dim, head_dim_v, decode: bool, causal, packed, window=0) -> tuple:
    """The class key of an attention module (module doc); a sliding window of keys is a class of its own."""
    flag = ("packed", bool(packed)) if decode else ("causal", bool(causal))
    key = ("attention", backend, "decode" if decode else "prefill", dtype, kv_dtype or dtype, int(head_dim),
           int(head_dim_v or head_dim), flag)
    return key + (("window", int(window)),) if window else key


def _attention_dims(p: dict, decode: bool) -> list:
    group = np.asarray(p["heads_q"], dtype=float) / np.asarray(p["heads_kv"], dtype=float)
    if decode:
        return [p["batch"], p["seq_kv"], p["heads_q"], group]
    ratio = np.asarray(p["seq_kv"], dtype=float) / np.asarray(p["seq_q"], dtype=float)
    return [p["batch"], p["seq_q"], ratio, p["heads_q"], group]


def _moe_dims(tokens, hidden, width, top_k, experts, ep) -> list:
    return [tokens, hidden, width, np.asarray(experts, dtype=float) / np.asarray(ep, dtype=float), top_k, ep]


def shape_of(key: tuple, dims: np.ndarray) -> dict:
    """The module's shape params at shape dims ``dims`` (n, d), the inverse of the dims above (counts rounded to
    whole heads, keys and experts)."""
    col = [dims[:, j] for j in range(dims.shape[1])]
    if key[0] == "gemm":
        return {"m": col[0], "n": col[1], "k": col[2]}
    if key[0] == "attention":
        heads_kv = np.maximum(np.round(col[-2] / col[-1]), 1.0)
        if key[2] == "decode":
            return {"batch": col[0], "seq_q": np.ones(len(dims)), "seq_kv": col[1], "heads_q": col[2],
                    "heads_kv": heads_kv}
        return {"batch": col[0], "seq_q": col[1], "seq_kv": np.round(col[2] * col[1]), "heads_q": col[3],
                "heads_kv": heads_kv}
    return {"tokens": col[0], "hidden": col[1], "width": col[2], "experts": np.round(col[3] * col[5]),
            "top_k": col[4], "ep": col[5]}


def row_backend(r: dict) -> str | None:
    """The attention kernel an attention row measured (:func:`perfmodel.fit.latency.row_backend`'s rule: the
    forced one, else the one plain dispatch ran), or None where unknown."""
    from ..attention_kernels import KERNELS

    backend = r["params"].get("backend", "default")
    if backend == "default":
        backend = r.get("dispatched")
    return backend if backend in KERNELS else None


def _usable(r) -> bool:
    """A measured row the fit uses (:func:`perfmodel.fit.latency.load_cases`'s filter): an id, kind and params,
    a positive finite time, no error, no failed check."""
    t = r.get("time_s") if isinstance(r, dict) else None
    return (isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("kind"), str)
            and isinstance(r.get("params"), dict) and isinstance(t, (int, float)) and not isinstance(t, bool)
            and math.isfinite(t) and t > 0 and not r.get("error") and not str(r.get("check", "ok")).startswith("FAIL"))


def row_class(r: dict) -> tuple[tuple, str, list] | None:
    """(class key, kernel, shape dims) of an imported table row, or None for a row no class holds (the rows the
    fit would not use either)."""
    if not _usable(r):
        return None
    p = r["params"]
    kernel = str(r.get("kernel") or p.get("kernel") or "")
    try:
        if r["kind"] == "moe":
            if p["experts"] % p["ep"] or p["inter"] < p["tp"]:
                return None
            key = ("moe", _fmt(p["dtype"], p.get("scaling"), p.get("weights")), p.get("distribution", "balanced"))
            return key, kernel, _moe_dims(p["tokens"], p["hidden"], math.ceil(p["inter"] / p["tp"]), p["top_k"],
                                          p["experts"], p["ep"])
        if r["kind"] != "instream":
            return None
        op = p.get("op")
        if op == "gemm" and p.get("groups", 1) == 1:
            return ("gemm", _fmt(p["dtype"], p.get("scaling"))), kernel, [p["m"], p["n"], p["k"]]
        if op == "attention":
            backend = row_backend(r)
            if backend is None:
                return None
            decode = p["seq_q"] <= 1
            key = attention_key(backend, p.get("dtype", "bf16"), p.get("kv_dtype"), p["head_dim"],
                                p.get("head_dim_v"), decode, p.get("causal"), p.get("packed"), p.get("window", 0))
            return key, kernel, _attention_dims(p, decode)
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    return None


def op_class(op, backend: str | None = None) -> tuple[str, tuple, list, object] | None:
    """(family, class key, shape dims, mask of the elements the class can hold) of a projection's op, or None
    for an op no table class holds. ``backend``: the attention kernel the op runs (attention ops only)."""
    p = op.params
    if "moe_tokens" in p:  # an op of a fused MoE module (perfmodel.graph._moe_ffn): the module's class
        key = ("moe", p["moe_format"], p.get("moe_routing", "balanced"))
        return "moe", key, _moe_dims(p["moe_tokens"], p["moe_hidden"], p["moe_width"], p["moe_top_k"],
                                     p["moe_experts"], p["moe_ep"]), True
    if op.kind == "gemm":
        if p.get("grouped") or np.any(np.asarray(p.get("groups", 1)) != 1):
            return None
        return "gemm", ("gemm", _fmt(p["dtype"], p.get("scaling"))), [p["m"], p["n"], p["k"]], True
    if op.kind == "attention" and backend is not None:
        seq_q = np.asarray(p["seq_q"], dtype=float)
        decode = bool(np.all(seq_q <= 1.0)) or op.phase == "decode"
        key = attention_key(backend, p["dtype"], p.get("kv_dtype"), p["head_dim"], p.get("head_dim_v"), decode,
                            p["causal"], p.get("packed"), p.get("window", 0))
        # a decode op of several new tokens a sequence (speculative decoding's verification) is no table's shape
        return "attention", key, _attention_dims(p, decode), (seq_q <= 1.0) if decode else True
    return None


# --- the fitted model of a module -----------------------------------------------------------------------------

# Params every row of a class shares (its format, flags and what the timed module also did)
_TEMPLATE = ("dtype", "scaling", "weights", "quant_input", "kv_dtype", "causal", "packed", "includes", "head_dim",
             "head_dim_v", "window")


def template_of(row: dict) -> dict:
    """What a class's rows share, from one of them (``head_dim_v`` defaults to ``head_dim``)."""
    p = row["params"]
    out = {k: p[k] for k in _TEMPLATE if p.get(k) is not None}
    if "head_dim" in out:
        out.setdefault("head_dim_v", out["head_dim"])
    return out


def module_ops(key: tuple, template: dict, shape: dict) -> list:
    """The ops whose alone times, summed (each times its count), are the fitted model of a class's module at
    ``shape`` (arrays), vectorised: exactly what the fit prices its rows as
    (:func:`perfmodel.fit.latency.predict_cases`): an engine's linear layer with its input quantization, its
    attention module with the KV-cache write, its fused MoE module (:func:`perfmodel.graph.moe_expert_ops`)."""
    from .. import ops as O

    dtype = template.get("dtype", "bf16")
    if key[0] == "gemm":
        op = O.gemm("gemm", shape["m"], shape["n"], shape["k"], dtype)
        extra = {k: template[k] for k in ("scaling", "quant_input") if template.get(k)}
        return [O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra})]
    if key[0] == "attention":
        backend = key[1]
        op = O.attention("attention", shape["batch"], shape["heads_q"], shape["heads_kv"], shape["seq_q"],
                         shape["seq_kv"], template["head_dim"], causal=bool(template.get("causal")), dtype=dtype,
                         head_dim_v=template["head_dim_v"], kv_dtype=template.get("kv_dtype") or None,
                         window=template.get("window", 0))
        extra = {k: template[k] for k in ("packed", "includes") if template.get(k)}
        out = [O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra, "kernel": backend})]
        if template.get("includes") == "kv_write":
            q = op.params
            out.append(O.kv_write("kv_write", q["batch"] * q["seq_q"], q["heads_q"], q["heads_kv"], q["head_dim"],
                                  act_dtype=q["dtype"] if q["dtype"] != "fp8" else "bf16", kv_dtype=q["kv_dtype"],
                                  rope_q=backend == "trtllm", head_dim_v=q["head_dim_v"]))
        return out
    from ..graph import moe_expert_ops

    ops = moe_expert_ops(shape["tokens"], shape["hidden"], shape["width"], shape["top_k"], shape["experts"],
                         shape["ep"], dtype, "bf16", "standalone", weight_dtype=template.get("weights"))
    if template.get("scaling"):
        ops = [O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "scaling": template["scaling"]},
                    op.count, op.scope) if op.kind == "gemm" else op for op in ops]
    return ops


def module_time(key: tuple, template: dict, shape: dict, prof, hw, price) -> np.ndarray:
    """The fitted model's time of a class's module at ``shape`` (:func:`module_ops`), one value a shape.
    ``price(op, hw, prof)``: an op's alone time (:func:`perfmodel.cost.time_op`'s, passed in: this module sits
    below the cost model's entry point)."""
    n = len(next(iter(shape.values())))
    total = np.zeros(n)
    for op in module_ops(key, template, shape):
        total = total + np.broadcast_to(np.asarray(price(op, hw, prof), dtype=float), (n,)) * op.count
    return total


def fitted_times(cls: ClassRows, prof, hw, price) -> np.ndarray:
    """The fitted model's time of each of a class's rows (its module at the row's shape, :func:`module_time`):
    what the fit's :func:`~perfmodel.fit.latency.predict_cases` gives the same rows; ``price`` as there."""
    return module_time(cls.key, cls.template, shape_of(cls.key, cls.dims), prof, hw, price)


# --- a folder's tables ------------------------------------------------------------------------------------------

def monotone(t: np.ndarray, dip: float | None = None) -> np.ndarray:
    """Each row of ``t`` (q, n) made non-decreasing along its columns where it dips by less than ``dip`` (default
    :data:`NOISE_DIP`) below its running maximum: those dips are raised to it; a deeper fall is a kernel the engine
    switches to and is kept (the running maximum restarts there)."""
    dip = NOISE_DIP if dip is None else dip
    out = t.copy()
    run = out[:, 0].copy()
    for j in range(1, out.shape[1]):
        col = out[:, j]
        small = (col < run) & (col >= run * (1.0 - dip))
        out[:, j] = np.where(small, run, col)
        run = np.where(small, run, col)
    return out


def envelope(t: np.ndarray) -> np.ndarray:
    """Each row of ``t`` (q, n) lowered to the least of its later columns: a smaller batch can run the kernel a
    larger one is measured with, padded, so it takes no longer (a kernel switch that makes 16 rows faster than 8,
    kept by :func:`monotone`, makes 8 rows as fast; B200 TensorRT-LLM's attention output GEMM at TP 2 fell 11%
    from 13 to 14 rows and with it the TPOT of Llama-70B)."""
    return np.minimum.accumulate(t[:, ::-1], axis=1)[:, ::-1]


def reach_share(raw: np.ndarray, clamped: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """How far shapes ``raw`` (n, d) lie outside the measured range, as a share of :data:`REACH` (the largest
    over the dims; 0 inside, 1 at the reach). Below the smallest measured value of the first dim (fewer rows,
    sequences or tokens than any measured) there is no limit: the module only gets smaller, and the fit's shape
    anchored on the smallest measured one keeps the time non-decreasing."""
    share = np.abs(_log2(raw) - _log2(clamped)) / math.log2(REACH)
    share[:, 0] = np.where(raw[:, 0] < lo[0], 0.0, share[:, 0])
    return share.max(axis=1)


def residual_interpolant(dims: np.ndarray, measured: np.ndarray, fitted: np.ndarray) -> Interpolant:
    """log(measured / fitted) over log2 of the shape dims, at the rows the fit prices (finite and positive)."""
    good = np.isfinite(fitted) & (fitted > 0)
    return Interpolant(_log2(dims[good]), np.log(measured[good] / fitted[good]))


@dataclass
class ClassTable:
    """One class of one folder: its rows' residuals against the folder's fit, interpolated, and the fit of its
    module (to make the table's time non-decreasing along the class's first dim: :meth:`ratio`).

    The residuals are built when a line along the first dim is first needed (:attr:`interpolant`): a table whose
    lines a process finds on disk (``stored``: their key, :meth:`_lines`) never prices its rows, nor imports
    scipy.spatial for the local plane."""

    key: tuple
    kernel: str
    residuals: Callable[[], Interpolant]  # -> the interpolant of log(measured / fitted) over log2 of the dims
    raw_lo: np.ndarray  # the measured range per dim (shape dims, not logs)
    raw_hi: np.ndarray
    ladder: np.ndarray  # the measured values of the first dim (GEMM m, attention batch, MoE tokens), ascending
    fit: object  # shape dims (n, d) -> the fitted model's time of the module there
    stored: str | None = None  # the on-disk key of the table's lines (:func:`build_class`); None: not kept
    cache: dict = field(default_factory=dict)  # scalar shape -> ratio
    lines: dict = field(default_factory=dict)  # other dims -> log table times along the first dim
    fits: dict = field(default_factory=dict)  # other dims -> (first-dim values, fitted module times there)
    _interpolant: Interpolant | None = field(default=None, repr=False)

    @classmethod
    def of(cls, key: tuple, kernel: str, dims: np.ndarray, measured: np.ndarray, fitted: np.ndarray, fit,
           stored: str | None = None):
        good = np.isfinite(fitted) & (fitted > 0)
        if not good.any():
            return None
        d = dims[good]
        interpolant = residual_interpolant(dims, measured, fitted)
        return cls(key, kernel, lambda: interpolant, d.min(axis=0), d.max(axis=0), np.unique(d[:, 0]), fit, stored)

    @property
    def interpolant(self) -> Interpolant:
        if self._interpolant is None:
            self._interpolant = self.residuals()
        return self._interpolant

    def ratio(self, dims: list) -> np.ndarray:
        """t_table / t_fit_alone at the shapes ``dims`` (clamped into the range), NaN beyond the reach."""
        scalar = all(np.ndim(d) == 0 for d in dims)
        if scalar:
            key = tuple(float(d) for d in dims)
            hit = self.cache.get(key)
            if hit is not None:
                return np.asarray(hit)
        raw = np.stack(np.broadcast_arrays(*[np.asarray(d, dtype=float) for d in dims]), axis=-1)
        shape = raw.shape[:-1]
        raw = raw.reshape(-1, len(dims))
        clamped = np.clip(raw, self.raw_lo, self.raw_hi)
        u = reach_share(raw, clamped, self.raw_lo)
        covered = u < 1.0
        out = np.full(len(raw), np.nan)
        if covered.any():
            inside = clamped[covered]
            step = CHUNK_POINTS  # bounded memory for long arrays (a dense table's held-out rows)
            r = np.concatenate([self._ratio_inside(inside[i:i + step]) for i in range(0, len(inside), step)])
            out[covered] = r ** (1.0 - u[covered])
        if scalar:
            if len(self.cache) >= QUERY_CACHE:
                self.cache.clear()
            self.cache[key] = float(out[0])
        return out.reshape(shape)

    def _ratio_inside(self, c: np.ndarray) -> np.ndarray:
        """The ratio at shapes inside the measured range: the table's time along the first dim (module doc:
        monotone in the batch, :meth:`_lines`) at the shape's first dim, over the fitted module's time there."""
        x, n = _log2(self.ladder), len(self.ladder)
        xq = _log2(c[:, 0])
        i = np.clip(np.searchsorted(x, xq, side="right") - 1, 0, max(n - 2, 0))
        if np.all(c[:, 1:] == c[:1, 1:]):  # one line (a GEMM over many m at one n and k): no sort
            others, inverse = c[:1, 1:], np.zeros(len(c), dtype=int)
        else:
            others, inverse = np.unique(c[:, 1:], axis=0, return_inverse=True)
        logs = self._lines(others, n)[inverse.reshape(-1)]
        if n == 1:
            log_t = logs[:, 0]
        else:
            w = np.clip((xq - x[i]) / (x[i + 1] - x[i]), 0.0, 1.0)
            rows = np.arange(len(c))
            log_t = (1.0 - w) * logs[rows, i] + w * logs[rows, i + 1]
        return np.exp(log_t) / self._fit_at(c, others, inverse.reshape(-1))

    def _fit_at(self, c: np.ndarray, others: np.ndarray, inverse: np.ndarray) -> np.ndarray:
        """The fitted module's time at shapes ``c``, remembered per line of the other dims and value of the
        first dim: a serving simulation's step tables price the same shapes for every scenario of a model."""
        out = np.full(len(c), np.nan)
        order = np.argsort(inverse, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)
        for idx in groups:
            known = self.fits.get(tuple(others[inverse[idx[0]]]))
            if known is not None:
                xs, fs = known
                i = np.clip(np.searchsorted(xs, c[idx, 0]), 0, len(xs) - 1)
                hit = xs[i] == c[idx, 0]
                out[idx[hit]] = fs[i[hit]]
        todo = np.isnan(out)
        if todo.any():
            out[todo] = self.fit(c[todo])
            if len(self.fits) + len(groups) > LINE_CACHE:
                self.fits.clear()
            for idx in groups:
                idx = idx[todo[idx]]
                if len(idx):
                    key = tuple(others[inverse[idx[0]]])
                    xs, fs = self.fits.get(key, (np.zeros(0), np.zeros(0)))
                    xs, keep = np.unique(np.concatenate([xs, c[idx, 0]]), return_index=True)
                    self.fits[key] = (xs, np.concatenate([fs, out[idx]])[keep])
        return out

    def _lines(self, others: np.ndarray, upto: int) -> np.ndarray:
        """log of the table's time at the first ``upto`` measured values of the first dim, for each row of the
        other dims (u, d - 1): the interpolated table time there, made non-decreasing along the first dim
        (:func:`monotone`, then :func:`envelope` over the whole ladder). Remembered per row of the other dims (a
        projection asks the same ones again)."""
        keys = [tuple(row) for row in others]
        if len(self.lines) + len(keys) > LINE_CACHE:
            self.lines.clear()
        todo = [k for k in dict.fromkeys(keys) if len(self.lines.get(k, ())) < upto]
        todo = [k for k in todo if not self._line_from_disk(k, upto)]
        if todo:
            ladder = self.ladder[:upto]
            at = np.repeat(np.array(todo, dtype=float).reshape(len(todo), 1, -1), upto, axis=1)
            at = np.concatenate([np.broadcast_to(ladder[None, :, None], (len(todo), upto, 1)), at], axis=2)
            at = at.reshape(len(todo) * upto, -1)
            table = self.fit(at) * np.exp(self.interpolant.at(_log2(at)))
            for k, line in zip(todo, np.log(envelope(monotone(table.reshape(len(todo), upto))))):
                self.lines[k] = line
                if self.stored is not None:
                    disk_cache.put_later(LINES, self._line_key(k, upto), disk_cache.pack(line), keep=LINES_KEPT)
        return np.array([self.lines[k][:upto] for k in keys]).reshape(len(keys), upto)

    def _line_key(self, others: tuple, upto: int) -> str:
        return disk_cache.digest(self.stored, str(upto), np.array(others, dtype=float).tobytes())

    def _line_from_disk(self, others: tuple, upto: int) -> bool:
        """Whether the line at ``others`` was on disk (an earlier process computed it): then remembered."""
        if self.stored is None:
            return False
        line = disk_cache.unpack(disk_cache.get(LINES, self._line_key(others, upto)))
        if line is None or len(line) != upto:
            return False
        self.lines[others] = line
        return True


@dataclass
class FolderTables:
    """An imported calibration folder's measured rows, grouped per class; each class built when first asked."""

    path: Path
    part: str  # the spec key the folder was measured on
    engine: str
    rows: dict[tuple, KernelRows]  # class key -> kernel -> its rows (each decoded when first asked for)
    _built: dict = field(default_factory=dict)

    def kernel_for(self, family: str, key: tuple, variant: str = "") -> str | None:
        """The kernel of ``key`` the engine runs, or None when the table does not hold it (module doc); ``variant``:
        the class of the format's kernel the engine runs for the op (vLLM's monolithic or modular TensorRT-LLM MoE,
        :func:`perfmodel.engines.moe_module_for`), taken where exactly one of the class's kernels names it."""
        kernels = self.rows.get(key) or KernelRows({}, [])
        named = [k for k in kernels if variant and k.endswith(variant)]
        if len(named) == 1:
            return named[0]
        return engine_kernel(self.engine, key, list(kernels), kernels.main)

    def table(self, key: tuple, kernel: str, price) -> "ClassTable | CarriedKernel | None":
        """The class's table of ``kernel``, or, where ``kernel`` is None (the table lacks the kernel the engine
        runs), that kernel carried from a sibling part (:meth:`carried`)."""
        if kernel is None:
            return self.carried(key, price)
        if (key, kernel) not in self._built:
            prof, hw = folder_fit(self)
            split = prof.validation or {}
            self._built[(key, kernel)] = build_class(self.rows[key][kernel], prof, hw, price,
                                                     holdout=split.get("holdout_share", 0.25),
                                                     seed=split.get("seed", 0))
        return self._built[(key, kernel)]

    def carried(self, key: tuple, price) -> "CarriedKernel | None":
        """The kernel the engine runs for ``key``, which this table lacks, from the one kernel it holds times the
        two kernels' ratio on the sibling part that times both (:func:`kernel_sibling`); None where there is none."""
        if ("carried", key) not in self._built:
            self._built[("carried", key)] = None
            found = kernel_sibling(self, key)
            if found is not None:
                sibling, wanted, have = found
                parts = (self.table(key, have, price), sibling.table(key, wanted, price),
                         sibling.table(key, have, price))
                if None not in parts:
                    self._built[("carried", key)] = CarriedKernel(*parts, sibling.path.name)
        return self._built[("carried", key)]


@dataclass
class CarriedKernel:
    """A kernel a part's table lacks, priced from the kernel it holds: ``own``'s ratio times the two kernels' ratio
    where a sibling part times both (``wanted`` over ``have``, each against the sibling's one fit, so the fit
    cancels): TensorRT-LLM's min-latency NVFP4 MoE on B300 and GB300, whose tables hold CUTLASS's alone."""

    own: ClassTable
    wanted: ClassTable
    have: ClassTable
    sibling: str  # the sibling folder's name

    def ratio(self, dims: list) -> np.ndarray:
        own, wanted, have = self.own.ratio(dims), self.wanted.ratio(dims), self.have.ratio(dims)
        kernels = wanted / have
        return np.where(np.isfinite(own), own, 1.0) * np.where(np.isfinite(kernels), kernels, 1.0)


def kernel_sibling(folder: FolderTables, key: tuple) -> tuple[FolderTables, str, str] | None:
    """(the sibling folder, the kernel the engine runs, the kernel ``folder`` holds) for a class whose table holds
    one kernel that is not the engine's: of the folders beside it (same engine, another part, whole tables) that
    time both, the one whose part is nearest in balance, its dense tensor rate in the class's format over its HBM
    bandwidth (the two kernels differ in how they use each), ties by name; None where none does."""
    from ..spec import load_spec
    from .table_store import read_header

    held = folder.rows.get(key) or KernelRows({}, [])
    kernels = held.main or list(held)
    wanted = ENGINE_MOE_KERNELS.get((folder.engine, key[1])) if key[0] == "moe" else None
    if wanted is None or len(kernels) != 1 or kernels[0] == wanted:
        return None
    have = kernels[0]

    def balance(spec) -> float:
        return spec.tensor_rate(key[1]) / spec.hbm_bandwidth

    target = balance(load_spec(folder.part))
    best = None
    for path in sorted(folder.path.parent.iterdir()):
        dense = path / DENSE_FILE
        if path == folder.path or not dense.is_file():
            continue
        try:
            header = read_header(dense)
        except ValueError:
            continue
        held = {c["kernel"] for c in header.get("classes", []) if c["key"] == key}
        if not {wanted, have} <= held or header.get("provenance", {}).get("engine") != folder.engine:
            continue
        other = load_folder(path)
        if other is None or other.part == folder.part:
            continue
        score = abs(math.log(balance(load_spec(other.part)) / target))
        if best is None or score < best[0]:
            best = (score, other)
    return None if best is None else (best[1], wanted, have)


def engine_kernel(engine: str, key: tuple, kernels: list[str], main: list[str] | None = None) -> str | None:
    """Of the kernels a table times for class ``key``, the one ``engine`` runs: :data:`ENGINE_MOE_KERNELS`'s,
    else the one the import took for the engine's main path (``main``, :attr:`.table_store.ClassRows.main`), else
    the only one; None where the table does not hold it, or several and nothing says which."""
    if key[0] == "moe":
        wanted = ENGINE_MOE_KERNELS.get((engine, key[1]))
        if wanted is not None:
            return wanted if wanted in kernels else None
    if len(kernels) == 1:
        return kernels[0]
    main = [k for k in (main or ()) if k in kernels]
    return main[0] if len(main) == 1 else None


def build_class(cls: ClassRows, prof, hw, price, *, holdout: float = 0.25, seed: int = 0) -> ClassTable | None:
    """A class's table from its rows: residuals against ``prof`` (the folder's fit, tables off) on ``hw`` (the
    library spec of its part); ``price`` as in :func:`module_time`. None where the table does not reproduce the
    class's held-out rows (``holdout``, ``seed``: the share and seed of the fit's split) better than the fit
    (:data:`MIN_JUDGED_ROWS`)."""
    if not len(cls):
        return None
    key = verdict_key(cls, prof, hw, price, holdout, seed)
    fit = module_fit(cls.key, cls.template, prof, hw, price)
    known = _verdict(disk_cache.get(VERDICTS, key)) if key is not None else None
    if known is False:
        return None
    if known is not None:  # judged by an earlier process: its rows are priced only when a line is not on disk
        lo, hi, ladder = known
        return ClassTable(cls.key, cls.kernel,
                          lambda: residual_interpolant(cls.dims, cls.times, fitted_times(cls, prof, hw, price)),
                          lo, hi, ladder, fit, key)
    fitted = fitted_times(cls, prof, hw, price)
    used = judge(cls.key, cls.kernel, cls.held_out(holdout, seed), cls.dims, cls.times, fitted, fit)["used"]
    table = ClassTable.of(cls.key, cls.kernel, cls.dims, cls.times, fitted, fit, key) if used else None
    if key is not None:  # kept for the next process
        disk_cache.put(VERDICTS, key, False if table is None else
                       {"lo": disk_cache.pack(table.raw_lo), "hi": disk_cache.pack(table.raw_hi),
                        "ladder": disk_cache.pack(table.ladder)})
    return table


def _verdict(entry) -> bool | tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A verdict as :func:`build_class` keeps it: False (no table), the table's measured range (low and high
    per dim, the first dim's measured values), or None where ``entry`` is no such value (a miss)."""
    if entry is False:
        return False
    if not isinstance(entry, dict):
        return None
    lo, hi, ladder = (disk_cache.unpack(entry.get(k)) for k in ("lo", "hi", "ladder"))
    if lo is None or hi is None or ladder is None or len(lo) != len(hi) or not len(lo) or not len(ladder):
        return None
    return lo, hi, ladder


def verdict_key(cls: ClassRows, prof, hw, price, holdout: float, seed: int) -> str | None:
    """The on-disk cache key of a class's verdict (:func:`build_class`): a digest of everything :func:`judge`
    reads (the class's rows, the whole profile and spec, the pricing function, the split) and, through
    :func:`perfmodel.disk_cache.code_stamp`, the code; None where the profile or spec holds a value no key
    captures exactly, or ``price`` is not a function of the package (whose source the code stamp covers): then
    the verdict is judged each time."""
    name = f"{getattr(price, '__module__', '')}.{getattr(price, '__qualname__', '<')}"
    values = [typed_key(v) for v in (prof, hw, cls.template, (holdout, seed))]
    if not name.startswith("perfmodel.") or "<" in name or any(v is None for v in values):
        return None
    dims, times = np.ascontiguousarray(cls.dims, dtype=float), np.ascontiguousarray(cls.times, dtype=float)
    return disk_cache.digest(disk_cache.code_stamp(), repr(cls.key), cls.kernel, *map(repr, values), name,
                             repr(dims.shape), dims.tobytes(), times.tobytes())


def judge(key: tuple, kernel: str, held: np.ndarray, dims, measured, fitted, fit) -> dict:
    """The class's held-out rows (``held``: :meth:`ClassRows.held_out`) priced from its other rows as a projection
    prices a shape: their times, the fitted model's, whether each was covered, and whether the table stands for the
    class (:data:`MIN_JUDGED_ROWS`)."""
    train = ~held & np.isfinite(fitted) & (fitted > 0)
    out = {"measured": measured[held], "fitted": fitted[held], "table": fitted[held].copy(),
           "covered": np.zeros(int(held.sum()), dtype=bool), "used": True}
    table = ClassTable.of(key, kernel, dims[train], measured[train], fitted[train], fit) if train.any() else None
    if table is None or not held.any():
        return out
    ratio = table.ratio(list(dims[held].T))
    out["covered"] = np.isfinite(ratio)
    out["table"] = fitted[held] * np.where(out["covered"], ratio, 1.0)
    if held.sum() >= MIN_JUDGED_ROWS:
        err = lambda t: float(np.median(np.abs(t / out["measured"] - 1.0)))  # noqa: E731
        out["used"] = err(out["table"]) <= err(out["fitted"])
    return out


def module_fit(key: tuple, template: dict, prof, hw, price):
    """The fitted model of a class's module as a function of shape dims (n, d) (:func:`module_time`)."""
    def fit(at: np.ndarray) -> np.ndarray:
        return module_time(key, template, shape_of(key, at), prof, hw, price)

    return fit


_FITS: dict = {}


def folder_fit(folder: FolderTables):
    """(the folder's own profile with its tables off, the library spec of its part)."""
    hit = _FITS.get(folder.path)
    if hit is None:
        from ..profile import load_profile
        from ..spec import load_spec

        prof = without_tables(load_profile(folder.path))
        hit = _FITS[folder.path] = (prof, load_spec(folder.part))
    return hit


def without_tables(prof):
    """The profile with no family anchored on a table: the fitted model alone."""
    if not any(getattr(prof, f, "") for f in TABLE_FIELD.values()):
        return prof
    return prof.with_(**{f: "" for f in TABLE_FIELD.values()})


_FOLDERS: dict = {}


def _stamp(path: Path) -> tuple:
    from ..measure.store import MEASUREMENTS

    out = []
    for name in (MEASUREMENTS, MEASUREMENTS + ".gz", DENSE_FILE, "profile.json"):
        try:
            out.append((name, (path / name).stat().st_mtime_ns))
        except OSError:
            continue
    return tuple(out)


def measurement_file(path: Path) -> Path | None:
    from ..measure.store import MEASUREMENTS

    for name in (MEASUREMENTS, MEASUREMENTS + ".gz"):
        if (path / name).is_file():
            return path / name
    return None


def load_folder(path) -> FolderTables | None:
    """The folder's tables (cached per folder and file state, the files looked at again after
    :data:`RECHECK_S`), or None where it holds no imported rows."""
    key = str(path)  # by its text: a projection asks dozens of times, and making a Path each time costs more
    hit = _FOLDERS.get(key)
    now = time.monotonic()
    if hit is not None and now - hit[2] < RECHECK_S:
        return hit[1]
    path = Path(path)
    stamp = _stamp(path)
    if hit is not None and hit[0] == stamp:
        _FOLDERS[key] = (stamp, hit[1], now)
        return hit[1]
    _FITS.pop(path, None)
    folder = _read_folder(path)
    _FOLDERS[key] = (stamp, folder, now)
    return folder


def folders_state(prof) -> tuple:
    """The table folders ``prof`` names, each with its files' modification times: what a result computed through
    them was computed from (a cache of such results keys it)."""
    return tuple((f, path, _stamp(Path(path))) for f in TABLE_FIELD.values() if (path := getattr(prof, f, "")))


def clear_cache() -> None:
    """Forget every folder read (a test that rewrites a folder within :data:`RECHECK_S`)."""
    _FOLDERS.clear()
    _FITS.clear()


def _read_folder(path: Path) -> FolderTables | None:
    from ..paths import COLLECTIVES_FILE
    from ..profile import load_profile
    from .table_store import decode_lazily

    if not (path / "profile.json").is_file():
        return None
    if (path / DENSE_FILE).is_file():  # the whole tables: a class decoded when a projection first asks for it
        rows = decode_lazily(path / DENSE_FILE)[0]
    else:
        classes = folder_classes(path)
        if classes is None and not (path / COLLECTIVES_FILE).is_file():
            return None
        rows = by_key(classes or [])  # collectives alone (an installed package's release folder): no classes
    prof = load_profile(path)
    parent = path.parent.parent
    if path.parent.name == RELEASES_DIR and (parent / "profile.json").is_file():
        # another release's tables beside an engine folder (perfmodel.releases): the classes it timed are its
        # own; the classes it did not time keep the engine folder's (the release's profile is that folder's with
        # the release's families refitted, so either's residuals are taken against the model a projection uses)
        base = load_folder(parent)
        if base is not None:
            rows = {**base.rows, **rows}
    return FolderTables(path, prof.spec_key, prof.engine, rows)


def folder_classes(path: Path) -> list[ClassRows] | None:
    """A folder's measured classes: its whole tables (``tables.npz``, :mod:`perfmodel.cost.table_store`) where the
    import wrote them, else the rows of its measurements; None where it has neither."""
    from ..errors import InputError
    from ..measure.store import read_rows
    from .table_store import decode

    dense = Path(path) / DENSE_FILE
    if dense.is_file():
        try:
            return decode(dense)[0]
        except ValueError as e:
            raise InputError(str(e), file=str(dense)) from None
    file = measurement_file(Path(path))
    return None if file is None else classes_of(read_rows(file))


def classes_of(rows) -> list[ClassRows]:
    """Measured rows as classes (:func:`row_class`, one a key and kernel); rows no class holds, and an id repeated
    under one kernel, left out."""
    grouped: dict[tuple, list[tuple[dict, list]]] = {}
    seen = set()
    for r in rows:
        cls = row_class(r) if isinstance(r, dict) else None
        if cls is None or (cls[1], r["id"]) in seen:
            continue
        seen.add((cls[1], r["id"]))
        key, kernel, dims = cls
        grouped.setdefault((key, kernel), []).append((r, dims))
    return [ClassRows(key, kernel, template_of(members[0][0]),
                      np.array([[float(d) for d in dims] for _, dims in members]),
                      np.array([float(r["time_s"]) for r, _ in members]))
            for (key, kernel), members in grouped.items()]


def by_key(classes: list[ClassRows]) -> dict[tuple, KernelRows]:
    """Classes per key and kernel."""
    out: dict[tuple, list[ClassRows]] = {}
    for c in classes:
        out.setdefault(c.key, []).append(c)
    return {key: KernelRows.of(held) for key, held in out.items()}


# --- pricing ----------------------------------------------------------------------------------------------------

def family_table(prof, family: str, hw) -> FolderTables | None:
    """The folder whose table stands for ``family`` in ``prof`` on ``hw``, or None (module doc: when a table
    applies)."""
    path = getattr(prof, TABLE_FIELD[family], "")
    if not path:
        return None
    folder = load_folder(path)
    if folder is None or lineage_rank(folder.part, hw) is None:  # another part (a what-if of the part: its own)
        return None
    return folder if projected_engine(prof, family) == folder.engine else None


def projected_engine(prof, family: str) -> str:
    """The engine whose kernels ``prof`` prices ``family`` for: the engine a composed profile was made for
    (:func:`perfmodel.evidence.compose`'s ``engine_requested``), else the engine of the profile the family came
    from. A table times one engine's kernels: it stands for that engine's projections only (a training projection
    runs PyTorch's GEMMs, not TensorRT-LLM's linear modules, even where TensorRT-LLM's table is the part's only
    GEMM evidence and its fit is carried over)."""
    requested = prof.provenance.get("engine_requested")
    if isinstance(requested, str) and requested:
        return requested
    source = (prof.provenance.get("families") or {}).get(family, {})
    return source.get("engine", prof.engine) if isinstance(source, dict) else prof.engine


def anchor_ratio(op, hw, prof, *, price, backend: str | None = None):
    """t_table / t_fit_alone for ``op`` (numbers or arrays of its shapes) on ``hw``: 1 where no table covers it,
    None where no table applies to its family at all (module doc). ``price(op, hw, prof)``: an op's alone time,
    to build a class's residuals the first time it is asked for; ``backend``: the attention kernel the op runs.
    :func:`perfmodel.cost.table_ratio` passes both."""
    if not any(getattr(prof, f, "") for f in TABLE_FIELD.values()):
        return None
    cls = op_class(op, backend)
    if cls is None:
        return None
    family, key, dims, mask = cls
    folder = family_table(prof, family, hw)
    if folder is None:
        return None
    if family == "moe" and key not in folder.rows:  # a table without the router's skew: its balanced rows
        key = (*key[:2], "balanced")
    table = folder.table(key, folder.kernel_for(family, key, op.params.get("moe_kernel", "")), price)
    if table is None:
        return None
    r = table.ratio(dims)
    r = np.where(np.isfinite(r) & np.asarray(mask, dtype=bool), r, 1.0)
    return r.item() if r.ndim == 0 else r


def skew_ratio(op, prof):
    """A fused MoE module's time under its router's skew over balanced routing, from the medians of an engine's
    tables (``Profile.gemm_grouped_skew``, perfmodel.fit.skew), for an op of a module no table of the part prices;
    interpolated in log tokens between the powers of two, clamped at the ends. None for balanced routing, an op of
    no MoE module or a profile without the figures."""
    p = op.params
    routing = p.get("moe_routing")
    skew = getattr(prof, "gemm_grouped_skew", None)
    if not skew or routing in (None, "balanced") or "moe_tokens" not in p:
        return None
    prefix = skew_prefix(routing, p["moe_ep"] > 1)
    knots = sorted((math.log2(float(k[len(prefix):])), v) for k, v in skew.items() if k.startswith(prefix))
    if not knots:
        return None
    x = np.log2(np.maximum(np.asarray(p["moe_tokens"], dtype=float), 1.0))
    r = np.interp(x, [k for k, _ in knots], [v for _, v in knots])
    return r.item() if r.ndim == 0 else r


def assumption(hw, prof) -> str | None:
    """One line for a projection's assumptions: which families the part's own measured tables anchor."""
    used: dict[str, list[str]] = {}
    for family in FAMILIES:
        folder = family_table(prof, family, hw)
        if folder is not None:
            used.setdefault(folder.path.name, []).append(family)
    if not used:
        return None
    where = "; ".join(f"{', '.join(fams)} from {name}" for name, fams in used.items())
    carried = {}
    moe = family_table(prof, "moe", hw)
    for key in (moe.rows if moe is not None else ()):
        found = kernel_sibling(moe, key) if key[0] == "moe" and moe.kernel_for("moe", key) is None else None
        if found is not None:
            carried[key[1]] = (f"{key[1]} MoE's {found[1]} kernel (the engine's; the table holds {found[2]}) by "
                               f"the two kernels' ratio on {found[0].path.name}")
    return (f"measured tables: {where} where they cover the shape (within {REACH:g}x of the measured range, "
            "clamped there; the fitted model elsewhere and for the in-step clock)"
            + "".join(f"; {line}" for line in carried.values()))
