"""Measured kernel tables from NVIDIA's aiconfigurator-core, as this project's calibration rows.

``aiconfigurator-core`` (PyPI, Apache-2.0, NVIDIA) ships per-operator latency tables measured on H100, H200,
B200, B300, GB200, GB300, A100, L40S and other parts, per serving engine and engine version, under
``aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/<table>.parquet``. This module turns
the tables this project can model into rows of ``measurements.jsonl`` (:mod:`perfmodel.measure.store`) that
``perfmodel fit`` fits a profile to, one folder per part and engine (``calibration/b200-trtllm``).

What each imported row is (the tables time modules of the engine, replayed from CUDA graphs, so every row is
an in-stream time: no launch latency exposed, no L2 flush before it; on the H200 the TensorRT-LLM table reads 0.99
of this project's own CUDA-graph measurement of the same bf16 GEMMs at the median, :mod:`.crosscheck`):

- ``gemm_perf`` -> ``instream`` rows of op ``gemm``: the engine's linear layer, ``m x n x k`` in bf16, fp8
  with a per-tensor scale, fp8 with 1x128 / 128x128 block scales (``scaling: block``) or NVFP4 (``fp4``).
  Quantized formats quantize their bf16 input inside the module (``quant_input``), which the fit times as a
  prologue of the product.
- ``context_attention_perf`` / ``generation_attention_perf`` -> ``instream`` rows of op ``attention``: the
  engine's attention module for ``batch`` sequences of ``isl`` new tokens (prefill, causal) or one new token
  over ``step + 1`` cached ones (decode), its backend named by the kernel source (TensorRT-LLM's own kernels,
  FlashInfer, FlashAttention). The module also writes the new K and V into the cache (``includes:
  kv_write``). Sliding-window rows (``window``) are classes of their own in the whole tables, kept out of the
  fitted subsample.
- ``nccl_perf`` -> ``collective`` rows (NCCL all_reduce, all_gather, reduce_scatter, all_to_all at 2-8+
  GPUs); ``custom_allreduce_perf`` -> ``collective`` rows of the engine's own all-reduce (backend = engine).
  ``message_size`` is in elements of the table's dtype.
- ``moe_perf`` -> ``moe`` rows (the fused MoE module per format and routing distribution), kept for the fit
  of the MoE family and as its validation. Weight-only expert formats (``w4a16_mxfp4``, ``w4a8_mxfp4_mxfp8``,
  ``int4_wo``) keep the activations' format as ``dtype`` and the experts' as ``weights``: a class of their own.

Tables are large (up to 200k rows); a deterministic, stratified subsample keeps every format, shape band
and routing class (``rows_per_table``) for the fit, and the tables whole, every kernel's rows, go into
``tables.npz`` as compact arrays (:mod:`perfmodel.cost.table_store`) for :mod:`perfmodel.cost.tables` to
interpolate. Provenance (package version, table path, engine version, rows kept
of rows read, what was skipped and why) goes into ``environment.json``. Nothing here imports torch or pandas;
reading parquet needs pyarrow (``pip install '.[import]'``).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..cost.table_store import FILE as TABLES_FILE
from ..cost.table_store import write as write_tables
from ..cost.tables import MIN_LATENCY_MOE_KERNEL, classes_of
from ..errors import InputError

PACKAGE = "aiconfigurator-core"

# aiconfigurator system name -> this project's hardware spec key
SYSTEMS: dict[str, str] = {
    "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
    "gb300": "gb300", "a100_sxm": "a100-sxm-80gb", "l40s": "l40s", "rtx_pro_6000_server": "rtx-pro-6000",
}
ENGINES = ("trtllm", "vllm", "sglang")
FAMILIES = ("gemm", "attention", "comm", "moe", "deltanet", "deepep")

# table dtype names -> (this project's dtype, scaling)
GEMM_FORMATS: dict[str, tuple[str, str]] = {
    "bfloat16": ("bf16", "none"), "float16": ("fp16", "none"), "fp8": ("fp8", "tensor"),
    "fp8_block": ("fp8", "block"), "nvfp4": ("fp4", "nvfp4"),
}
ATTN_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8"}
# attention kernel_source -> this project's attention kernel key (perfmodel.attention_kernels)
ATTN_BACKENDS = {
    ("trtllm", "torch_flow"): "trtllm", ("trtllm", "torch_flow_flashinfer"): "flashinfer",
    ("vllm", "vllm_flash_attn_fa3"): "fa3", ("vllm", "vllm_flashinfer_trtllmprefill"): "flashinfer",
    ("vllm", "vllm_flashinfer_trtllmdecode"): "flashinfer",
    ("sglang", "fa3"): "fa3", ("sglang", "trtllm_mha"): "trtllm", ("sglang", "flashinfer"): "flashinfer",
    ("sglang", "triton"): "triton",
    # older tables name no kernel
    ("vllm", "torch_flow"): "flashinfer", ("sglang", "torch_flow"): "flashinfer",
}
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}
COMM_ELEMENT_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "int8": 1, "fp8": 1, "float": 4, "float32": 4}
MOE_FORMATS = {"bfloat16": ("bf16", "none"), "fp8": ("fp8", "tensor"), "fp8_block": ("fp8", "block"),
               "nvfp4": ("fp4", "nvfp4"),
               # weight-only experts: the activations' format, the weights' in MOE_WEIGHTS (gpt-oss's MXFP4 under
               # bf16 on Hopper or MXFP8 on Blackwell, Kimi K2's INT4 under bf16)
               "w4a16_mxfp4": ("bf16", "none"), "w4a8_mxfp4_mxfp8": ("fp8", "none"), "int4_wo": ("bf16", "none")}
MOE_WEIGHTS = {"w4a16_mxfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp4", "int4_wo": "int4"}
DEFAULT_ROWS_PER_TABLE = 3000
# Where a table times one MoE format with two kernel families, the one the engine runs: for NVFP4 on Blackwell
# TensorRT-LLM's recipes select its TRTLLM-gen MoE backend (the table's "min_latency" kernel source; about 3x
# faster than CUTLASS at decode sizes), elsewhere CUTLASS, and DeepGEMM for block-scaled fp8. The other
# family's rows are counted as skipped in the fitted subsample; the whole tables (tables.npz) keep every kernel
# (the projection picks the engine's: perfmodel.cost.tables.ENGINE_MOE_KERNELS).
PREFERRED_MOE_KERNELS = (MIN_LATENCY_MOE_KERNEL,)
# TensorRT-LLM's XQA decode kernel packs up to this many query heads of one KV head onto the tensor cores;
# beyond it (64-128 heads over one KV head) the engine falls back to a CUDA-core kernel this model does not have
MAX_GROUP = 32
MS = 1e-3


def _need_pyarrow():
    try:
        import pyarrow.parquet as pq  # noqa: F401
    except ImportError:
        raise InputError("reading aiconfigurator tables needs pyarrow: pip install '.[import]'",
                         field="import") from None
    return pq


# --- where the package's data is ------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """The ``systems`` folder of an aiconfigurator-core installation (or a copy of one)."""

    systems: Path
    version: str  # the package version, or "unknown" for a bare folder

    @property
    def data(self) -> Path:
        return self.systems / "data"


def find_source(path: str | Path | None = None) -> Source:
    """``path``: a ``systems`` folder, its ``data`` folder, or the package folder; None: the installed package
    (found without importing it: its compiled extension is never loaded)."""
    if path is None:
        import importlib.util

        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or not spec.submodule_search_locations:
            raise InputError("aiconfigurator-core is not installed: pip install '.[import]', or pass --data "
                             "with the path of its systems folder", field="--data")
        root = Path(list(spec.submodule_search_locations)[0])
        return Source(root / "systems", _installed_version())
    p = Path(path)
    for cand in (p, p / "systems", p.parent):
        if (cand / "data").is_dir() and cand.name == "systems":
            return Source(cand, _version_near(cand))
    if (p / "data").is_dir():
        return Source(p, _version_near(p))
    raise InputError("not an aiconfigurator systems folder (expected a data/ folder inside)", file=str(path),
                     field="--data")


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def _version_near(systems: Path) -> str:
    """The package version of a copied tree: a VERSION file beside ``systems`` (the fixture has one), else the
    installed package's if this is it, else unknown."""
    for cand in (systems / "VERSION", systems.parent / "VERSION"):
        if cand.is_file():
            return cand.read_text(encoding="utf-8").strip()[:40] or "unknown"
    return "unknown"


def _read_yaml(path: Path) -> dict:
    from ..safeyaml import load, read_limited

    doc = load(read_limited(path, what="aiconfigurator YAML file"), file=str(path))
    return doc if isinstance(doc, dict) else {}


def current_version(src: Source, system: str, engine: str) -> str | None:
    """The engine version aiconfigurator queries by default on ``system`` (``query_versions.yaml``: the
    per-system override, else the default's ``current``)."""
    qv = src.systems / "query_versions.yaml"
    if not qv.is_file():
        return None
    doc = _read_yaml(qv)
    over = (doc.get("overrides") or {}).get(system) or {}
    slot = over.get(engine) or (doc.get("defaults") or {}).get(engine) or {}
    cur = slot.get("current") if isinstance(slot, dict) else None
    return str(cur) if cur else None


def _version_key(v: str) -> tuple:
    """Order engine versions: 1.3.0rc20 < 1.3.0rc23 < 1.3.0; 0.5.14 < 0.5.16; non-numeric parts last."""
    parts = re.findall(r"\d+|[a-z]+", v.lower())
    key = []
    for p in parts:
        if p.isdigit():
            key.append((1, int(p), ""))
        else:
            key.append((0 if p in ("rc", "dev", "a", "b") else 2, 0, p))
    key.append((1, 0, ""))  # a release sorts after its rc
    return tuple(key)


def find_table(src: Source, system: str, family: str, engine: str, table: str,
               version: str | None) -> tuple[Path, str] | None:
    """(parquet path, version it came from) for ``table``: the requested version's own file, or the one its
    ``reuse.yaml`` names, else the newest older version that has the table (aiconfigurator's backward fill);
    None if no version has it."""
    base = src.data / system / family / engine
    if not base.is_dir():
        return None
    versions = sorted((d.name for d in base.iterdir() if d.is_dir()), key=_version_key)
    if version is not None:
        versions = [v for v in versions if _version_key(v) <= _version_key(version)]
    for v in reversed(versions):
        f = base / v / f"{table}.parquet"
        if f.is_file():
            return f, v
        reuse = base / v / "reuse.yaml"
        if reuse.is_file():
            for entry in _read_yaml(reuse).get("reuse") or []:
                if isinstance(entry, dict) and entry.get("table") == table and entry.get("from_version"):
                    g = base / str(entry["from_version"]) / f"{table}.parquet"
                    if g.is_file():
                        return g, str(entry["from_version"])
    return None


def _nccl_table(src: Source, system: str) -> tuple[Path, str] | None:
    """NCCL's table: the version the system file names (misc.nccl_version), else the newest."""
    base = src.data / system / "comm" / "nccl"
    if not base.is_dir():
        return None
    sysfile = src.systems / f"{system}.yaml"
    want = None
    if sysfile.is_file():
        want = str(((_read_yaml(sysfile).get("misc") or {}).get("nccl_version")) or "") or None
    versions = sorted((d.name for d in base.iterdir() if (d / "nccl_perf.parquet").is_file()), key=_version_key)
    if not versions:
        return None
    v = want if want in versions else versions[-1]
    return base / v / "nccl_perf.parquet", v


def _gpus_per_node(src: Source, system: str) -> int:
    """GPUs a node of ``system`` holds as aiconfigurator's tables count nodes (its system file's
    ``node.num_gpus_per_node``: 8 on HGX parts, 4 on a GB200 or GB300 tray), 8 where it says nothing."""
    sysfile = src.systems / f"{system}.yaml"
    node = (_read_yaml(sysfile).get("node") or {}) if sysfile.is_file() else {}
    n = node.get("num_gpus_per_node") if isinstance(node, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 8


ACROSS_NODE_TABLES = ("wideep_deepep_normal_perf", "wideep_deepep_ll_perf")  # DeepEP's normal and low-latency kernels


def _deepep_across_nodes(src: Source, system: str, engine: str, wanted: str | None, tables: dict) -> list[dict]:
    """DeepEP's kernels across nodes where the table the import took times one node only: for each of its tables
    (:data:`ACROSS_NODE_TABLES`) the rows of two or more nodes from the newest version at or before ``wanted`` that
    has them (SGLang 0.5.12's tables time one node, 0.5.6.post2's two to eight nodes on Hopper), recorded in
    ``tables`` under their own entry."""
    out = []
    base = src.data / system / "comm" / engine
    if not base.is_dir():
        return out
    gpus = _gpus_per_node(src, system)
    for table in ACROSS_NODE_TABLES:
        normal = table == "wideep_deepep_normal_perf"
        columns = DEEPEP_NORMAL_COLUMNS if normal else DEEPEP_LL_COLUMNS
        taken = tables.get(table, {})
        versions = sorted((d.name for d in base.iterdir() if (d / f"{table}.parquet").is_file()), key=_version_key)
        if wanted is not None:
            versions = [v for v in versions if _version_key(v) <= _version_key(wanted)]
        for v in reversed(versions):
            path = base / v / f"{table}.parquet"
            cols, dropped = checked_columns(read_columns(path, columns), path, table)
            if not any(n > 1 for n in cols["node_num"]):
                continue
            if taken.get("engine_version") == v:  # the table taken already holds them
                break
            conv = convert_deepep_normal(cols, gpus) if normal else convert_deepep_ll(cols, gpus)
            rows = [r for r in conv.rows if r["params"]["nodes"] > 1]
            for r in rows:
                r["source"] = f"{table}@{v}"
            skipped = dict(conv.skipped)
            if dropped:
                skipped["a cell null, not a number, out of range"] = dropped
            one_node = 2 * sum(1 for n in cols["node_num"] if n == 1)
            if one_node:
                skipped["one node (from the version the import took)"] = one_node
            tables[f"{table} (across nodes)"] = {
                "file": str(path.relative_to(src.systems)), "engine_version": v, "rows_read": conv.read + dropped,
                "rows_converted": len(rows), "rows_kept": len(rows), "skipped": skipped}
            out += rows
            break
    return out


def available(src: Source) -> list[dict]:
    """Per system and engine: the current version and which tables exist (``perfmodel import aiconfigurator
    --list``)."""
    out = []
    for sysdir in sorted(p for p in src.data.iterdir() if p.is_dir()):
        system = sysdir.name
        for engine in ENGINES:
            cur = current_version(src, system, engine)
            tables = {}
            for family, table in (("gemm", "gemm_perf"), ("attention", "context_attention_perf"),
                                  ("attention", "generation_attention_perf"), ("moe", "moe_perf"),
                                  ("comm", "custom_allreduce_perf")):
                hit = find_table(src, system, family, engine, table, cur)
                if hit:
                    tables[table] = hit[1]
            if tables:
                out.append({"system": system, "engine": engine, "version": cur, "spec": SYSTEMS.get(system),
                            "tables": tables, "nccl": (_nccl_table(src, system) or (None, None))[1]})
    return out


# --- reading and subsampling ------------------------------------------------------------------------

def read_columns(path: Path, columns: Iterable[str]) -> dict[str, list]:
    """The named columns of a parquet table as Python lists (missing columns are absent from the result)."""
    pq = _need_pyarrow()
    try:
        schema = pq.read_schema(path)
        cols = [c for c in columns if c in schema.names]
        table = pq.read_table(path, columns=cols)
    except (OSError, ValueError) as e:
        raise InputError(f"not a readable parquet table ({e})", file=str(path)) from None
    return {c: table.column(c).to_pylist() for c in cols}


# What each table's converter indexes (the rest it reads with a default), the text columns, and the numeric
# columns that may be 0 (a prefill's prefix, no window). A table cell is checked before any converter sees it: a
# missing required column is refused in one line naming the file and column; a row with a null, text, NaN,
# negative, zero (where a size must be positive) or implausibly large number is dropped and counted
# (they had given tracebacks, a ZeroDivisionError at num_gpus 0, or GEMMs with k = 10^18 imported).
REQUIRED_COLUMNS = {
    "gemm_perf": ("m", "n", "k"), "scale_matrix_perf": ("m", "k"),
    "context_attention_perf": ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "isl"),
    "generation_attention_perf": ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "step"),
    "context_mla_perf": ("batch_size", "num_heads", "isl"), "generation_mla_perf": ("batch_size", "num_heads", "step"),
    "custom_allreduce_perf": ("num_gpus", "message_size"), "nccl_perf": ("num_gpus", "message_size"),
    "moe_perf": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"),
    "gdn_perf": ("batch_size", "seq_len", "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim"),
    "wideep_deepep_ll_perf": ("node_num", "hidden_size", "num_token", "num_topk", "num_experts"),
    "wideep_deepep_normal_perf": ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_sms",
                                  "combine_sms"),
    "moe_a2a_perf": ("comm_backend", "phase", "comm_dtype", "ep_size", "node_num", "hidden_size", "topk",
                     "num_experts", "num_tokens", "latency"),
    "trtllm_alltoall_perf": ("op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size", "topk",
                             "num_experts", "moe_ep_size", "latency"),
}
TEXT_COLUMNS = frozenset({"kernel_source", "gemm_dtype", "attn_dtype", "kv_cache_dtype", "mla_dtype", "op_name",
                          "nccl_dtype", "allreduce_dtype", "implementation", "backend", "moe_dtype", "distribution",
                          "quant_dtype", "phase", "comm_backend", "comm_dtype"})
MAY_BE_ZERO = frozenset({"step", "window_size", "isl", "dispatch_notify_us", "combine_notify_us", "sms"})
MAX_CELL = 2**40  # a size, a count or a latency in ms: past it no table row is a measurement
MAX_TEXT = 200


def checked_columns(cols: dict[str, list], path: Path, table: str) -> tuple[dict[str, list], int]:
    """``cols`` with every row whose cells are not plausible dropped, and how many were."""
    from ..safeyaml import printable

    for name in REQUIRED_COLUMNS.get(table, ()):
        if name not in cols:
            raise InputError(f"the {table} table has no {name} column", file=str(path), field=name)
    n = len(next(iter(cols.values()))) if cols else 0
    bad = [False] * n
    required = set(REQUIRED_COLUMNS.get(table, ()))
    for name, values in cols.items():
        if name in TEXT_COLUMNS:
            # escapes and control characters never reach a terminal or a row; long text is cut
            cols[name] = [None if v is None else printable(str(v), MAX_TEXT) for v in values]
            continue
        low = 0.0 if name in MAY_BE_ZERO else 1e-30
        for i, v in enumerate(values):
            if v is None:
                bad[i] = bad[i] or name in required
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not low <= v <= MAX_CELL:
                bad[i] = True
    if not any(bad):
        return cols, 0
    keep = [i for i in range(n) if not bad[i]]
    return {name: [values[i] for i in keep] for name, values in cols.items()}, n - len(keep)


def _rows(cols: dict[str, list]) -> Iterator[dict]:
    names = list(cols)
    for values in zip(*(cols[n] for n in names)):
        yield dict(zip(names, values))


def _hash01(text: str, seed: int) -> float:
    # salted apart from the fit's hold-out hash (perfmodel.fit.latency.is_held_out): picking rows by the same
    # hash would keep mostly the rows the fit then holds out
    h = hashlib.sha256(f"aiconfigurator-subsample:{seed}:{text}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def subsample(rows: list[dict], stratum: Callable[[dict], tuple], limit: int, seed: int) -> list[dict]:
    """At most ``limit`` rows, spread evenly over strata: rounds that take one more row from every stratum
    that still has one (so small strata are kept whole), each stratum's rows in the order of a hash of their
    id, the strata of the last, partial round in the order of a hash of their key. The same input gives the
    same subsample."""
    if len(rows) <= limit:
        return rows
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(stratum(r), []).append(r)
    order = sorted(groups, key=lambda k: _hash01(repr(k), seed))
    for g in groups.values():
        g.sort(key=lambda r: _hash01(r["id"], seed))
    kept: list[dict] = []
    depth = 0
    while len(kept) < limit:
        for key in order:
            if depth < len(groups[key]):
                kept.append(groups[key][depth])
                if len(kept) == limit:
                    break
        depth += 1
    return kept


def _band(x: float) -> int:
    return int(math.floor(math.log2(max(float(x), 1.0))))


# --- table converters -------------------------------------------------------------------------------

@dataclass
class Converted:
    rows: list[dict] = field(default_factory=list)
    read: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count


def _row_id(kind: str, params: dict) -> str:
    from ..measure.store import make_id

    return make_id(kind, params)


def _latency_s(value) -> float | None:
    try:
        t = float(value) * MS
    except (TypeError, ValueError):
        return None
    return t if math.isfinite(t) and t > 0 else None


def convert_gemm(cols: dict[str, list]) -> Converted:
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        fmt = GEMM_FORMATS.get(str(r.get("gemm_dtype")))
        t = _latency_s(r.get("latency"))
        if fmt is None:
            out.skip(f"gemm format {r.get('gemm_dtype')} not modelled")
            continue
        if t is None:
            out.skip("no positive latency")
            continue
        dtype, scaling = fmt
        params = {"op": "gemm", "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]), "dtype": dtype}
        if scaling != "none":
            params["scaling"] = scaling
            params["quant_input"] = True
        row = {"id": _row_id("instream", params), "kind": "instream", "params": params, "time_s": t,
               "kernel": str(r.get("kernel_source", ""))}
        out.rows.append(row)
    return out


def convert_attention(cols: dict[str, list], engine: str, phase: str) -> Converted:
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        t = _latency_s(r.get("latency"))
        backend = ATTN_BACKENDS.get((engine, str(r.get("kernel_source"))))
        dtype = ATTN_DTYPES.get(str(r.get("attn_dtype")))
        kv = ATTN_DTYPES.get(str(r.get("kv_cache_dtype")))
        if t is None:
            out.skip("no positive latency")
            continue
        if backend is None:
            out.skip(f"kernel source {r.get('kernel_source')} not mapped to an attention kernel")
            continue
        if int(r.get("beam_width") or 1) != 1:
            out.skip("beam search")
            continue
        if dtype is None or kv is None:
            out.skip(f"attention format {r.get('attn_dtype')}/{r.get('kv_cache_dtype')} not modelled")
            continue
        b, hq, hkv, d = int(r["batch_size"]), int(r["num_heads"]), int(r["num_key_value_heads"]), int(r["head_dim"])
        if hkv < 1 or hq % hkv:
            out.skip("query heads not a multiple of KV heads")
            continue
        if hq // hkv > MAX_GROUP:
            out.skip(f"more than {MAX_GROUP} query heads per KV head (a CUDA-core fallback kernel, not modelled)")
            continue
        if phase == "prefill" and int(r["isl"]) < 2:
            out.skip("a one-token context phase (not a prefill)")
            continue
        if phase == "prefill":
            isl, prefix = int(r["isl"]), int(r.get("step") or 0)
            seq_q, seq_kv, causal = isl, isl + prefix, True
        else:
            seq_q, seq_kv, causal = 1, int(r["step"]) + int(r.get("isl") or 1), False
        params = {"op": "attention", "backend": backend, "batch": b, "heads_q": hq, "heads_kv": hkv,
                  "seq_q": seq_q, "seq_kv": seq_kv, "head_dim": d, "causal": causal, "dtype": dtype,
                  "kv_dtype": kv, "packed": phase == "decode", "includes": "kv_write"}
        window = int(r.get("window_size") or 0)
        if window > 0:  # sliding-window attention (gpt-oss, Gemma): a class of its own, in the whole tables only
            params["window"] = window
        out.rows.append({"id": _row_id("instream", params), "kind": "instream", "params": params, "time_s": t,
                         "kernel": str(r.get("kernel_source", ""))})
    return out


def convert_mla(cols: dict[str, list], phase: str) -> Converted:
    """``context_mla_perf`` / ``generation_mla_perf``: DeepSeek's multi-head latent attention kernel, as this model's
    MLA attention op (perfmodel.graph._mla_attention): prefill over the expanded per-head K and V (192-wide
    queries and keys, 128-wide values), decode absorbed over the cached 576-wide latent (512-wide values), with
    ``num_heads`` the heads on one GPU."""
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        t = _latency_s(r.get("latency"))
        kv = ATTN_DTYPES.get(str(r.get("kv_cache_dtype")))
        dtype = ATTN_DTYPES.get(str(r.get("mla_dtype")))
        if t is None or kv is None or dtype is None:
            out.skip("format not modelled" if t is not None else "no positive latency")
            continue
        b, h = int(r["batch_size"]), int(r["num_heads"])
        if phase == "prefill":
            isl = int(r["isl"])
            if isl < 2:
                out.skip("a one-token context phase (not a prefill)")
                continue
            params = {"op": "attention", "backend": "mla", "batch": b, "heads_q": h, "heads_kv": h, "seq_q": isl,
                      "seq_kv": isl + int(r.get("step") or 0), "head_dim": 192, "head_dim_v": 128, "causal": True,
                      "dtype": dtype, "kv_dtype": kv}
        else:
            params = {"op": "attention", "backend": "mla", "batch": b, "heads_q": h, "heads_kv": 1, "seq_q": 1,
                      "seq_kv": int(r["step"]) + int(r.get("isl") or 1), "head_dim": 576, "head_dim_v": 512,
                      "causal": False, "dtype": dtype, "kv_dtype": kv, "packed": True}
        out.rows.append({"id": _row_id("instream", params), "kind": "instream", "params": params, "time_s": t,
                         "kernel": str(r.get("kernel_source", ""))})
    return out


MLA_COLUMNS = ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency")


def convert_nccl(cols: dict[str, list]) -> Converted:
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        op = NCCL_OPS.get(str(r.get("op_name")))
        eb = COMM_ELEMENT_BYTES.get(str(r.get("nccl_dtype")))
        t = _latency_s(r.get("latency"))
        if op is None or eb is None or t is None:
            out.skip("collective or dtype not modelled" if t is not None else "no positive latency")
            continue
        world, nbytes = int(r["num_gpus"]), int(r["message_size"]) * eb
        if op == "all_gather":  # nccl-tests' size is the gathered output; this project counts each rank's input
            nbytes //= world
        params = {"op": op, "world_size": world, "bytes": nbytes, "backend": "nccl", "dtype": str(r.get("nccl_dtype"))}
        out.rows.append({"id": _row_id("collective", params), "kind": "collective", "params": params, "time_s": t})
    return out


def convert_custom_allreduce(cols: dict[str, list], engine: str) -> Converted:
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        eb = COMM_ELEMENT_BYTES.get(str(r.get("allreduce_dtype")))
        t = _latency_s(r.get("latency"))
        if eb is None or t is None:
            out.skip("dtype not modelled" if t is not None else "no positive latency")
            continue
        impl = str(r.get("implementation") or r.get("backend") or r.get("kernel_source") or engine)
        params = {"op": "all_reduce", "world_size": int(r["num_gpus"]), "bytes": int(r["message_size"]) * eb,
                  "backend": engine, "impl": impl, "dtype": str(r.get("allreduce_dtype"))}
        out.rows.append({"id": _row_id("collective", params), "kind": "collective", "params": params, "time_s": t})
    return out


def convert_moe(cols: dict[str, list]) -> Converted:
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        fmt = MOE_FORMATS.get(str(r.get("moe_dtype")))
        t = _latency_s(r.get("latency"))
        source = str(r.get("kernel_source", ""))
        if fmt is None or t is None:
            out.skip(f"MoE format {r.get('moe_dtype')} not modelled" if t is not None else "no positive latency")
            continue
        if "nongated" in source:
            out.skip("non-gated experts (relu2 MLPs; the model's experts are gated)")
            continue

        dtype, scaling = fmt
        params = {"op": "moe", "tokens": int(r["num_tokens"]), "hidden": int(r["hidden_size"]),
                  "inter": int(r["inter_size"]), "top_k": int(r["topk"]), "experts": int(r["num_experts"]),
                  "tp": int(r["moe_tp_size"]), "ep": int(r["moe_ep_size"]), "dtype": dtype,
                  "distribution": str(r.get("distribution", "balanced")), "kernel": str(r.get("kernel_source", ""))}
        if scaling != "none":
            params["scaling"] = scaling
        weights = MOE_WEIGHTS.get(str(r.get("moe_dtype")))
        if weights:
            params["weights"] = weights
        out.rows.append({"id": _row_id("moe", params), "kind": "moe", "params": params, "time_s": t})
    return out


def convert_quantize(cols: dict[str, list]) -> Converted:
    """``scale_matrix_perf``: quantizing an m x k bf16 activation with a given scale (the static per-tensor path
    of an fp8 linear layer)."""
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        t = _latency_s(r.get("latency"))
        dtype = {"fp8": "fp8", "nvfp4": "fp4"}.get(str(r.get("quant_dtype")))
        if t is None or dtype is None:
            out.skip("format not modelled" if t is not None else "no positive latency")
            continue
        params = {"op": "quantize", "tokens": int(r["m"]), "hidden": int(r["k"]), "dtype": dtype}
        out.rows.append({"id": _row_id("instream", params), "kind": "instream", "params": params, "time_s": t})
    return out


def convert_gdn(cols: dict[str, list]) -> Converted:
    """``gdn_perf``: Gated DeltaNet's recurrence as the engine runs it, the chunked form over a prefill's
    sequences (phase context: ``batch`` sequences of ``tokens`` each) and the one-token recurrent step of a
    decode (phase generation), per TP rank's key and value heads. The causal convolution beside it is priced by
    the memory model and not imported. Rows of models of the same heads are the same shape (the first kept)."""
    out = Converted()
    for r in _rows(cols):
        out.read += 1
        t = _latency_s(r.get("latency"))
        source = str(r.get("kernel_source", ""))
        if t is None:
            out.skip("no positive latency")
            continue
        if "conv1d" in source:
            out.skip("the causal convolution (priced by the memory model)")
            continue
        op = "chunk" if source.startswith("chunk") else "recurrent" if "recurrent" in source else None
        if op is None:
            out.skip(f"kernel source {source} not mapped")
            continue
        params = {"op": op, "phase": "prefill" if str(r.get("phase")) == "context" else "decode",
                  "batch": int(r["batch_size"]), "tokens": int(r["seq_len"]), "key_heads": int(r["num_k_heads"]),
                  "value_heads": int(r["num_v_heads"]), "dk": int(r["head_k_dim"]), "dv": int(r["head_v_dim"]),
                  "launch": "graph", "kernel": source}
        out.rows.append({"id": _row_id("deltanet", params), "kind": "deltanet", "params": params, "time_s": t})
    return out


GDN_COLUMNS = ("kernel_source", "phase", "batch_size", "seq_len", "num_k_heads", "head_k_dim", "num_v_heads",
               "head_v_dim", "latency")
DEEPEP_LL_COLUMNS = ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_avg_t_us",
                     "combine_avg_t_us")
DEEPEP_NORMAL_COLUMNS = ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_sms",
                         "dispatch_transmit_us", "dispatch_notify_us", "combine_sms", "combine_transmit_us",
                         "combine_notify_us")
# The SMs DeepEP's normal kernels run on as the engines leave them: DeepEP's Buffer.num_sms (20), which
# aiconfigurator-core's own estimate queries its tables at (sdk/config.py ``sms: int = 20``)
DEEPEP_ENGINE_SMS = 20
QUANT_COLUMNS = ("m", "k", "quant_dtype", "latency")
GEMM_COLUMNS = ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")
ATTN_COLUMNS = ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                "beam_width", "attn_dtype", "kv_cache_dtype", "step", "latency")
NCCL_COLUMNS = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
CUSTOM_AR_COLUMNS = ("allreduce_dtype", "num_gpus", "message_size", "latency", "implementation", "backend",
                     "kernel_source")
MOE_COLUMNS = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
               "moe_tp_size", "moe_ep_size", "distribution", "latency")


def convert_deepep_ll(cols: dict[str, list], gpus_per_node: int = 8) -> Converted:
    """DeepEP's low-latency kernels (SGLang's wide-EP tables): one row per direction, with the bytes each rank
    sends (every routed token-expert pair a message: :func:`perfmodel.graph.deepep_ll_dispatch_bytes` out, bf16
    back) beside the shape; across nodes also the ranks and the bytes that cross the rank's NIC (every message to
    a rank of another node, straight over RDMA: the remote ranks' share under uniform routing). The tables give
    microseconds."""
    from ..graph import deepep_ll_dispatch_bytes

    out = Converted()
    for r in _rows(cols):
        hidden, tokens, top_k = int(r["hidden_size"]), int(r["num_token"]), int(r["num_topk"])
        nodes = int(r["node_num"])
        pairs = tokens * top_k
        for direction, column, per_pair in (("ll.dispatch", "dispatch_avg_t_us", deepep_ll_dispatch_bytes(hidden)),
                                            ("ll.combine", "combine_avg_t_us", 2.0 * hidden)):
            out.read += 1  # a time per direction: two measurements a table row
            t = _latency_s(r.get(column))
            if t is None:
                out.skip("no positive latency")
                continue
            params = {"op": "deepep", "direction": direction, "nodes": nodes, "hidden": hidden,
                      "tokens": tokens, "top_k": top_k, "experts": int(r["num_experts"]), "bytes": pairs * per_pair}
            if nodes > 1:  # (one node's rows as they were)
                ranks = nodes * gpus_per_node
                params.update(ranks=ranks, scaleout_bytes=pairs * per_pair * (ranks - gpus_per_node) / ranks)
            out.rows.append({"id": _row_id("deepep", params), "kind": "deepep", "params": params, "time_s": t / 1e3})
    return out


def convert_deepep_normal(cols: dict[str, list], gpus_per_node: int) -> Converted:
    """DeepEP's normal kernels (SGLang's wide-EP tables; the prefill path): one row per direction at the engines'
    SM count, a call timed as its notify (the exchange of counts) plus its transmit. Beside the shape, what each
    rank sends, the dispatch in fp8 with a fp32 scale per 128 values, the combine in bf16
    (:func:`perfmodel.graph.deepep_normal_copy_bytes`; the tables' combine takes about twice the dispatch's time
    across nodes): ``bytes``, a token once to every rank holding any of its experts
    (:func:`perfmodel.routing.ranks_per_token` over ``nodes x gpus_per_node`` ranks), and ``scaleout_bytes``,
    once to every other node holding any (:func:`perfmodel.routing.remote_node_copies`, uniform routing: the
    collector's routing is not published). Microseconds in the tables."""
    from ..graph import deepep_normal_copy_bytes
    from ..routing import ranks_per_token, remote_node_copies

    out = Converted()
    for r in _rows(cols):
        out.read += 2  # a time per direction: two measurements a table row
        if int(r["dispatch_sms"]) != DEEPEP_ENGINE_SMS or int(r["combine_sms"]) != DEEPEP_ENGINE_SMS:
            out.skip(f"SM count other than the engines' {DEEPEP_ENGINE_SMS}", 2)
            continue
        nodes, hidden, tokens = int(r["node_num"]), int(r["hidden_size"]), int(r["num_token"])
        top_k, experts = int(r["num_topk"]), int(r["num_experts"])
        ranks = nodes * gpus_per_node
        if experts % ranks:
            out.skip("experts not spread evenly over the ranks", 2)
            continue
        rank_copies = tokens * ranks_per_token(experts, top_k, ranks)
        node_copies = remote_node_copies(tokens, experts, top_k, nodes)
        for direction, prefix, value_bytes in (("normal.dispatch", "dispatch", 1.0),
                                               ("normal.combine", "combine", 2.0)):
            transmit, notify = _latency_s(r.get(f"{prefix}_transmit_us")), r.get(f"{prefix}_notify_us")
            if transmit is None or not isinstance(notify, (int, float)) or not 0 <= notify < 1e7:
                out.skip("no positive latency")
                continue
            copy = deepep_normal_copy_bytes(hidden, value_bytes)
            params = {"op": "deepep", "direction": direction, "nodes": nodes, "ranks": ranks, "hidden": hidden,
                      "tokens": tokens, "top_k": top_k, "experts": experts, "sms": DEEPEP_ENGINE_SMS,
                      "bytes": rank_copies * copy, "scaleout_bytes": node_copies * copy}
            out.rows.append({"id": _row_id("deepep", params), "kind": "deepep", "params": params,
                             "time_s": (transmit + notify / 1e3) / 1e3})
    return out


# moe_a2a_perf: the MoE all-to-all calls vLLM and TensorRT-LLM time with their own DeepEP builds (one node)
A2A_COLUMNS = ("comm_backend", "phase", "comm_dtype", "ep_size", "node_num", "hidden_size", "topk", "num_experts",
               "num_tokens", "sms", "latency")
# the table's backends and the DeepEP kernels they run: low-latency (decode, CUDA graphs) or normal (prefill)
A2A_KERNELS = {"deepep_ll": "ll", "deepep_ht": "normal", "trtllm_deepep_ll": "ll", "trtllm_deepep_ht": "normal"}
# the payload formats the table names; "default" is vLLM's: its DeepEP prepare sends the activations as they are
# (bf16) unless the model's quantization asks for fp8 blocks (estimate: the collector does not record it)
A2A_FORMATS = {"bfloat16": "bf16", "default": "bf16", "fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4"}


def _a2a_call(r: dict, ranks_column: str, out: Converted) -> tuple | None:
    """(hidden, tokens a rank, top-k, experts, ranks, latency in the table's unit / 1e3) of an all-to-all table row,
    or None (counted in ``out``'s skips) where its experts do not spread over its ranks or it has no latency."""
    hidden, tokens, top_k = int(r["hidden_size"]), int(r["num_tokens"]), int(r["topk"])
    experts, ranks = int(r["num_experts"]), int(r[ranks_column])
    if ranks < 2 or experts % ranks:
        out.skip("experts not spread evenly over two or more ranks")
        return None
    t = _latency_s(r.get("latency"))
    if t is None:
        out.skip("no positive latency")
        return None
    return hidden, tokens, top_k, experts, ranks, t


def convert_moe_a2a(cols: dict[str, list]) -> Converted:
    """vLLM's and TensorRT-LLM's DeepEP calls (``moe_a2a_perf``): one row per call as SGLang's tables give them
    (:func:`convert_deepep_ll`, :func:`convert_deepep_normal`), with the payload's format and the ranks (the
    table's expert-parallel size: 4 on a GB200 or GB300 tray, 8 elsewhere). Each rank sends, low-latency, every
    routed pair of its tokens as a message (the values, their scales and a 16-byte header out; the values and
    scales back); normal, a token once to every rank holding any of its experts
    (:func:`perfmodel.routing.ranks_per_token`). The table's latency is in microseconds."""
    from ..graph import deepep_ll_dispatch_bytes, payload_bytes
    from ..routing import ranks_per_token

    out = Converted()
    for r in _rows(cols):
        out.read += 1
        kernel = A2A_KERNELS.get(str(r["comm_backend"]))
        fmt = A2A_FORMATS.get(str(r["comm_dtype"]))
        direction = str(r["phase"])
        if kernel is None:
            out.skip(f"backend {r['comm_backend']} (not a DeepEP kernel the presets run)")
            continue
        if fmt is None or direction not in ("dispatch", "combine"):
            out.skip("a payload format or phase this import does not know")
            continue
        if kernel == "normal" and direction == "combine" and fmt == "nvfp4":
            # TensorRT-LLM's high-throughput combine under NVFP4 experts: bf16 on the wire, its bf16 rows time it
            out.skip("a combine under NVFP4 experts (bf16 on the wire: the bf16 rows time it)")
            continue
        if int(r["node_num"]) != 1:
            out.skip("more than one node")
            continue
        call = _a2a_call(r, "ep_size", out)
        if call is None:
            continue
        hidden, tokens, top_k, experts, ranks, t = call
        t /= 1e3  # microseconds in this table
        if kernel == "ll":
            per_copy = deepep_ll_dispatch_bytes(hidden, fmt) if direction == "dispatch" else payload_bytes(hidden, fmt)
            copies = tokens * top_k
        else:
            per_copy, copies = payload_bytes(hidden, fmt), tokens * ranks_per_token(experts, top_k, ranks)
        params = {"op": "deepep", "direction": f"{kernel}.{direction}", "nodes": 1, "ranks": ranks, "hidden": hidden,
                  "tokens": tokens, "top_k": top_k, "experts": experts, "format": fmt, "bytes": copies * per_copy}
        if kernel == "normal" and int(r.get("sms") or 0):
            params["sms"] = int(r["sms"])
        out.rows.append({"id": _row_id("deepep", params), "kind": "deepep", "params": params, "time_s": t})
    return out


# trtllm_alltoall_perf: TensorRT-LLM's all-to-all over a multi-node NVLink domain (GB200), tokens per rank
MNNVL_COLUMNS = ("op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size", "topk", "num_experts",
                 "moe_ep_size", "latency")
MNNVL_KERNEL = "NVLinkOneSided"  # the CUTLASS MoE's (the preset's MoE backend); NVLinkTwoSided is the WIDEEP one's


def convert_trtllm_alltoall(cols: dict[str, list]) -> Converted:
    """TensorRT-LLM's MNNVL all-to-all (``trtllm_alltoall_perf``, the GB200's): one row per call of its
    NVLink one-sided kernel, as :func:`convert_moe_a2a` gives DeepEP's normal ones: each rank sends a token once to
    every rank holding any of its experts (:func:`perfmodel.routing.ranks_per_token`), out in the table's format,
    back in bf16 (its combine times alike under every format: about 3.5 times its NVFP4 dispatch at EP 8 and
    over, the bytes' ratio). Milliseconds in the table."""
    from ..graph import payload_bytes
    from ..routing import ranks_per_token

    out = Converted()
    for r in _rows(cols):
        out.read += 1
        op, fmt = str(r["op_name"]), A2A_FORMATS.get(str(r["moe_dtype"]))
        if str(r["kernel_source"]) != MNNVL_KERNEL:
            out.skip(f"{r['kernel_source']} (the WIDEEP MoE backend's; the preset's CUTLASS MoE runs {MNNVL_KERNEL})")
            continue
        if op not in ("alltoall_dispatch", "alltoall_combine") or fmt is None:
            out.skip("a call or payload format this import does not know")
            continue
        call = _a2a_call(r, "moe_ep_size", out)
        if call is None:
            continue
        hidden, tokens, top_k, experts, ranks, t = call
        direction = op.removeprefix("alltoall_")
        wire = fmt if direction == "dispatch" else "bf16"
        params = {"op": "deepep", "direction": f"mnnvl.{direction}", "nodes": 1, "ranks": ranks, "hidden": hidden,
                  "tokens": tokens, "top_k": top_k, "experts": experts, "format": wire,
                  "bytes": tokens * ranks_per_token(experts, top_k, ranks) * payload_bytes(hidden, wire)}
        out.rows.append({"id": _row_id("deepep", params), "kind": "deepep", "params": params, "time_s": t})
    return out


def _kernel_of(r: dict) -> str:
    return str(r.get("kernel") or r["params"].get("kernel") or "")


def _format_of(r: dict) -> tuple:
    p = r["params"]
    phase = "decode" if p.get("packed") else "prefill" if p.get("op") == "attention" else ""
    return (r["kind"], p.get("op"), p.get("dtype"), p.get("scaling"), phase) + ((p["weights"],) if p.get("weights") else ())


def main_kernels(conv: Converted) -> Converted:
    """Where a table times one format (and phase) with several kernel families, keep the one the engine runs:
    a preferred one (PREFERRED_MOE_KERNELS) if present, else the family the table measures most (the engine's
    main path; the others are its alternatives), and count the rest as skipped."""
    by_fmt: dict[tuple, dict[str, int]] = {}
    for r in conv.rows:
        k = _kernel_of(r)
        if k:
            by_fmt.setdefault(_format_of(r), {}).setdefault(k, 0)
            by_fmt[_format_of(r)][k] += 1
    choice = {}
    for fmt, counts in by_fmt.items():
        preferred = [k for k in counts if k in PREFERRED_MOE_KERNELS]
        choice[fmt] = preferred[0] if preferred else max(sorted(counts), key=lambda k: counts[k])
    kept = []
    for r in conv.rows:
        k = _kernel_of(r)
        if k and choice.get(_format_of(r), k) != k:
            conv.skip(f"{k}: another kernel family for this format than the engine's main one")
            continue
        kept.append(r)
    conv.rows = kept
    return conv


def _gemm_stratum(r):
    p = r["params"]
    return (p["dtype"], p.get("scaling"), r.get("kernel"), _band(p["m"]), _band(p["n"] * p["k"]) // 3)


def _attn_stratum(r):
    p = r["params"]
    group = p["heads_q"] // p["heads_kv"]
    return (p["dtype"], p["kv_dtype"], p["head_dim"], p["backend"], min(group, 8), _band(p["batch"]) // 2,
            _band(p["seq_kv"]) // 2)


def _moe_stratum(r):
    p = r["params"]
    key = (p["dtype"], p.get("scaling"), p["kernel"], p["distribution"], _band(p["tokens"]) // 2, p["ep"] > 1)
    return key + ((p["weights"],) if p.get("weights") else ())  # the keys of full-weight strata as they were


# --- the import ---------------------------------------------------------------------------------------

@dataclass
class TablePlan:
    family: str  # the cost-model family the rows calibrate (what --families selects)
    table: str
    columns: tuple[str, ...]
    convert: Callable[[dict[str, list]], Converted]
    stratum: Callable[[dict], tuple] | None
    folder: str = ""  # the package's folder for the table, when not the family's name

    @property
    def where(self) -> str:
        return self.folder or self.family


def plans(engine: str, gpus_per_node: int = 8) -> list[TablePlan]:
    return [
        TablePlan("gemm", "gemm_perf", GEMM_COLUMNS, convert_gemm, _gemm_stratum),
        TablePlan("gemm", "scale_matrix_perf", QUANT_COLUMNS, convert_quantize, None, folder="quantize"),
        TablePlan("attention", "context_attention_perf", ATTN_COLUMNS,
                  lambda c: convert_attention(c, engine, "prefill"), _attn_stratum),
        TablePlan("attention", "generation_attention_perf", ATTN_COLUMNS,
                  lambda c: convert_attention(c, engine, "decode"), _attn_stratum),
        TablePlan("attention", "context_mla_perf", MLA_COLUMNS, lambda c: convert_mla(c, "prefill"), _attn_stratum,
                  folder="mla"),
        TablePlan("attention", "generation_mla_perf", MLA_COLUMNS, lambda c: convert_mla(c, "decode"), _attn_stratum,
                  folder="mla"),
        TablePlan("comm", "custom_allreduce_perf", CUSTOM_AR_COLUMNS, lambda c: convert_custom_allreduce(c, engine),
                  None),
        TablePlan("moe", "moe_perf", MOE_COLUMNS, convert_moe, _moe_stratum),
        TablePlan("deltanet", "gdn_perf", GDN_COLUMNS, convert_gdn, None, folder="linear_attention"),
        TablePlan("deepep", "wideep_deepep_ll_perf", DEEPEP_LL_COLUMNS, lambda c: convert_deepep_ll(c, gpus_per_node),
                  None, folder="comm"),
        TablePlan("deepep", "wideep_deepep_normal_perf", DEEPEP_NORMAL_COLUMNS,
                  lambda c: convert_deepep_normal(c, gpus_per_node), None, folder="comm"),
        TablePlan("deepep", "moe_a2a_perf", A2A_COLUMNS, convert_moe_a2a, None, folder="comm"),
        TablePlan("deepep", "trtllm_alltoall_perf", MNNVL_COLUMNS, convert_trtllm_alltoall, None, folder="comm"),
    ]


def _consistent_quantize(rows: list[dict], tables: dict) -> list[dict]:
    """Drop a quantization table that cannot be the kernel the engine's linear modules run: one whose fastest
    row is slower than the fastest quantized linear module (which quantizes its input and multiplies), as
    SGLang 0.5.14's 5 us quantization against its 3.3 us fp8 linear module on the H200."""
    quant = [r for r in rows if r["params"].get("op") == "quantize"]
    modules = [r["time_s"] for r in rows if r["params"].get("op") == "gemm" and r["params"].get("quant_input")]
    if not quant or not modules or min(r["time_s"] for r in quant) <= min(modules):
        return rows
    t = tables.get("scale_matrix_perf")
    if t is not None:
        t["skipped"]["all rows: the table's fastest quantization is slower than the engine's fastest quantized "
                     "linear module, so not the kernel that module runs"] = len(quant)
        t["rows_kept"] = 0
    return [r for r in rows if r["params"].get("op") != "quantize"]


def device_name(system: str) -> str:
    from ..spec import load_spec

    key = SYSTEMS.get(system)
    return load_spec(key).name if key else system


def import_system(src: Source, system: str, engine: str, out: Path, *, version: str | None = None,
                  rows_per_table: int = DEFAULT_ROWS_PER_TABLE, seed: int = 0,
                  families: Iterable[str] = FAMILIES) -> dict:
    """Write ``out/measurements.jsonl`` and ``out/environment.json`` for one part and engine; returns the
    provenance written (per table: file, engine version, rows read, kept, skipped by reason)."""
    from ..cost.comm_tables import write_collectives
    from ..measure.store import MEASUREMENTS, write_json_atomic
    from ..io import write_bytes_atomic

    if system not in SYSTEMS:
        raise InputError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)} (list them with "
                         "--list)", field="--system")
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}", field="--engine")
    if not (src.data / system).is_dir():
        raise InputError(f"no data for {system} in this aiconfigurator installation", file=str(src.data),
                         field="--system")
    if not isinstance(rows_per_table, int) or rows_per_table < 10:
        raise InputError(f"expected at least 10 rows per table, got {rows_per_table}", field="--rows-per-table")
    families = set(families)
    wanted = version or current_version(src, system, engine)
    tables: dict[str, dict] = {}
    rows: list[dict] = []
    whole: list[dict] = []  # every converted row of every kernel: the tables as measured (tables.npz)
    tables_only: list[dict] = []  # the engine's main kernels' rows kept out of the fitted subsample
    for plan in plans(engine, _gpus_per_node(src, system)):
        if plan.family not in families:
            continue
        hit = find_table(src, system, plan.where, engine, plan.table, wanted)
        if hit is None:
            continue
        path, used = hit
        cols, dropped = checked_columns(read_columns(path, plan.columns), path, plan.table)
        conv = plan.convert(cols)
        if dropped:
            conv.read += dropped
            conv.skipped["a cell null, not a number, out of range"] = dropped
        for r in conv.rows:
            r["source"] = f"{plan.table}@{used}"
        whole += conv.rows
        conv = main_kernels(conv)
        # sliding-window rows price projections through the whole tables only: the fitted subsample keeps the
        # rows it kept before they were imported (the fit's window model is the full one's, clipped)
        windowed = [r for r in conv.rows if r["params"].get("window")]
        fit_rows = [r for r in conv.rows if not r["params"].get("window")]
        tables_only += windowed
        kept = subsample(fit_rows, plan.stratum, rows_per_table, seed) if plan.stratum else fit_rows
        rows += kept
        tables[plan.table] = {"file": str(path.relative_to(src.systems)), "engine_version": used, "rows_read": conv.read,
                              "rows_converted": len(conv.rows), "rows_kept": len(kept), "skipped": conv.skipped}
        if windowed:
            tables[plan.table]["rows_tables_only"] = {"sliding-window attention": len(windowed)}
    rows = _consistent_quantize(rows, tables)
    if "deepep" in families:
        across = _deepep_across_nodes(src, system, engine, wanted, tables)
        rows += across
        whole += across
    if "comm" in families:
        hit = _nccl_table(src, system)
        if hit is not None:
            path, used = hit
            cols, dropped = checked_columns(read_columns(path, NCCL_COLUMNS), path, "nccl_perf")
            conv = convert_nccl(cols)
            if dropped:
                conv.read += dropped
                conv.skipped["a cell null, not a number, out of range"] = dropped
            for r in conv.rows:
                r["source"] = f"nccl_perf@{used}"
            rows += conv.rows
            tables["nccl_perf"] = {"file": str(path.relative_to(src.systems)), "engine_version": f"nccl {used}",
                                   "rows_read": conv.read, "rows_converted": len(conv.rows),
                                   "rows_kept": len(conv.rows), "skipped": conv.skipped}
    if not rows:
        raise InputError(f"no importable tables for {system} / {engine}" + (f" at version {wanted}" if wanted else ""),
                         field="--system")
    seen, unique = set(), []
    for r in rows:  # the same shape under two kernel sources: keep the first (tables list the engine's own first)
        if r["id"] not in seen:
            seen.add(r["id"])
            unique.append(r)
    out.mkdir(parents=True, exist_ok=True)
    spec_key = SYSTEMS[system]
    provenance = {
        "source": PACKAGE, "package_version": src.version, "system": system, "engine": engine,
        "engine_version": wanted, "tables": tables, "rows": len(unique), "seed": seed,
        "rows_per_table": rows_per_table,
        "method": "aiconfigurator's collectors time each module replayed from CUDA graphs; latencies are in ms "
                  "in the tables and seconds here; every row is an in-stream (graph) time",
        "license": "Apache-2.0, Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES (see NOTICE)",
        "command": f"perfmodel import aiconfigurator --system {system} --engine {engine}"
                   + (f" --version {version}" if version else "") + f" --rows-per-table {rows_per_table}"
                   + (f" --seed {seed}" if seed else "")
                   + (f" --families {','.join(f for f in FAMILIES if f in families)}" if set(FAMILIES) - families else "")
                   + f" --out {out}",
    }
    env = {"device_name": device_name(system), "spec_key": spec_key, "engine": engine, "imported": True}
    text = "".join(json.dumps(r, sort_keys=False, separators=(",", ":")) + "\n" for r in unique)
    # compressed (about 10x), with no timestamp in the header: the same import gives the same bytes
    write_bytes_atomic(out / (MEASUREMENTS + ".gz"), gzip.compress(text.encode("utf-8"), mtime=0))
    write_collectives(out, unique)  # the collectives alone: an installed package carries them, not the rows
    classes = classes_of(whole)
    # the kernels the subsample kept (main_kernels), and those of the rows only the whole tables hold
    main = {(c.key, c.kernel) for c in classes_of(unique + tables_only)}
    for c in classes:
        c.main = (c.key, c.kernel) in main
    if classes:
        provenance["whole_tables"] = {"file": TABLES_FILE, "classes": len(classes),
                                      "rows": sum(len(c) for c in classes)}
        write_tables(out, classes, {k: provenance[k] for k in ("source", "package_version", "system", "engine",
                                                                 "engine_version", "command")})
    else:
        (out / TABLES_FILE).unlink(missing_ok=True)  # no class to interpolate: no stale whole tables either
    write_json_atomic(out / "environment.json", {"env": env, "import": provenance})
    return provenance


def summary_text(prov: dict) -> str:
    lines = [f"imported {prov['rows']} rows from {prov['source']} {prov['package_version']} "
             f"({prov['system']}, {prov['engine']} {prov['engine_version']})"]
    for table, t in prov["tables"].items():
        skipped = "; ".join(f"{n} {why}" for why, n in sorted(t["skipped"].items())) or "none skipped"
        lines.append(f"  {table:<28} {t['engine_version']:<14} kept {t['rows_kept']:>6} of {t['rows_read']:>7}  "
                     f"({skipped})")
    whole = prov.get("whole_tables")
    if whole:
        lines.append(f"  whole tables (every kernel, for interpolation): {whole['classes']} classes, "
                     f"{whole['rows']:,} rows in {whole['file']}")
    return "\n".join(lines)
