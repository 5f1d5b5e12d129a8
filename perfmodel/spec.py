"""Hardware specs: the validated, SI-unit view of one ``hardware/*.yaml`` file.

Every figure carries where it came from (datasheet, derived, estimate, measured). The loader
(``load_spec``) resolves ``extends:``, parses units and checks the schema; any problem is an
:class:`~perfmodel.errors.InputError` naming the file, the field path and what was expected, on one line.

YAML schema (``hardware/README.md`` has the same, with the conventions behind the shipped files)::

    name: NVIDIA H100 SXM5 80GB
    vendor: nvidia          # nvidia | amd | other
    generation: hopper      # ampere | ada | hopper | blackwell | blackwell-ultra | blackwell-rtx | cdna3 | cdna4 | ...
    aliases: [h100]         # optional; other names load_spec() accepts; NOT inherited through extends
    extends: other.yaml     # optional: a file beside this one, else a library spec (file name, key, alias)
    note: free text         # optional
    compute:
      sm_count:    {value: 132, source: datasheet, ref: "NVIDIA H100 datasheet"}   # integer (CUs on AMD)
      boost_clock: {value: 1980 MHz, source: datasheet}
      tensor:                       # DENSE rates (no 2:4 sparsity); a part lacking a format leaves it out
        fp64: {value: 66.9 TFLOPS, source: datasheet}    # optional
        tf32: {...}                                      # optional
        bf16: {...}                                      # required; also used for fp16
        fp8:  {...}                                      # optional
        fp4:  {...}                                      # optional
        int8: {...}                                      # optional (TOPS written as TFLOPS or OPS)
      vector_fp32: {value: 66.9 TFLOPS, source: derived}
    memory:
      capacity:    {value: 80 GB, ...}
      bandwidth:   {value: 3.35 TB/s, ...}
      l2:          {value: 50 MiB, ...}
      smem_per_sm: {value: 228 KiB, ...}
    interconnect:
      scale_up:
        bandwidth: {value: 450 GB/s, source: derived, ref: "NVLink4 900 GB/s bidirectional, halved"}
        domain:    {value: 8, source: datasheet}        # integer: GPUs in one NVLink / xGMI domain
        latency:   {value: 1 us, source: estimate}  # per ring step (hop): perfmodel.cost.comm
      scale_out:
        bandwidth: {value: 50 GB/s, source: estimate}   # per GPU, per direction
        latency:   {value: 8 us, source: estimate}  # per ring step over the network
      pcie:        {value: 64 GB/s, source: derived}    # host link, per direction
    power:
      tdp: {value: 700 W, source: datasheet}

Each leaf figure is a mapping: ``value`` (a number, taken as SI, or a string with a unit), ``source`` (one
of :data:`SOURCES`), optional ``ref`` and ``note``. All bandwidths are per GPU and per direction. Every
figure is required except ``compute.tensor.{fp64,tf32,fp8,fp4,int8}``.

``extends:`` names the parent: a path relative to the child's folder, looked up there first, then (a bare name)
the spec library hardware/ by file name, key or alias (``b200``, ``b200.yaml``, ``hgx-b200``); nothing else is
reachable. It deep-merges: the child's mappings override the parent's key by key; a figure mapping is
replaced whole; a figure set to ``null`` in a child drops the inherited (optional) figure. ``name``,
``vendor`` and ``generation`` are inherited unless the child gives them; ``aliases`` are not inherited.
"""
from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from . import generations, safeyaml
from .errors import InputError
from .paths import hardware_dir
from .units import parse_quantity

SOURCES = ("datasheet", "derived", "estimate", "measured")


@dataclass(frozen=True)
class Figure:
    """One number of a spec, in SI, with its provenance."""

    value: float
    source: str  # one of SOURCES
    text: str = ""  # as written in the file, e.g. "4.8 TB/s"
    ref: str = ""  # citation, where known
    file: str = ""  # the file (in an extends chain) that set it


@dataclass(frozen=True)
class HardwareSpec:
    """A GPU (or accelerator) as the cost model sees it. All values SI."""

    key: str  # file stem, e.g. "h100-sxm"
    name: str
    vendor: str
    generation: str
    sm_count: int
    boost_clock_hz: float
    tensor_flops: dict[str, float]  # dense FLOP/s per dtype key: fp64, tf32, bf16, fp8, fp4, int8
    vector_fp32_flops: float
    hbm_bytes: float  # the datasheet's nominal capacity
    hbm_bandwidth: float  # bytes/s
    l2_bytes: float
    smem_per_sm_bytes: float
    scaleup_bandwidth: float  # bytes/s per GPU per direction
    scaleup_domain: int  # GPUs in one scale-up (NVLink) domain
    scaleup_latency: float  # s per ring step (hop) of a collective inside the domain
    scaleout_bandwidth: float  # bytes/s per GPU per direction
    scaleout_latency: float  # s per ring step over the scale-out network
    pcie_bandwidth: float  # bytes/s per direction
    tdp_w: float
    hbm_visible_bytes: float = 0.0  # what a process sees (nvidia-smi memory.total); 0: derived from hbm_bytes
    # measured (or estimated) sustained ceilings, SUSTAINED_FIELDS keys without "sustained.": bf16, fp8, fp4 (FLOP/s),
    # bandwidth, allreduce_busbw (bytes/s), allreduce_latency (s); only the transfer rules read them
    sustained: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)  # dotted field path -> Figure
    files: tuple[str, ...] = ()  # the extends chain, most derived first
    sha256: str = ""  # of the spec file's bytes and every file it extends
    # the parts this spec is a what-if of, nearest first: the keys of the files it extends, as far up the chain as
    # vendor and generation stay the same (:func:`lineage_rank`); a renamed copy (spec_with(key=...)) adds the old key
    lineage: tuple[str, ...] = ()

    def tensor_rate(self, dtype_key: str) -> float:
        """Dense tensor-core FLOP/s for ``dtype_key``; falls back to the next wider format the part has."""
        for key in _FALLBACK.get(dtype_key, (dtype_key,)):
            if key in self.tensor_flops:
                return self.tensor_flops[key]
        raise KeyError(dtype_key)

    def has_native(self, dtype_key: str) -> bool:
        return dtype_key in self.tensor_flops

    def source_of(self, path: str) -> str:
        fig = self.figures.get(path)
        return fig.source if fig else "derived"


# A format a part lacks runs at the rate of the next wider one it has (fp8 on an A100 runs as bf16).
_FALLBACK = {
    "fp4": ("fp4", "fp8", "bf16"),
    "fp8": ("fp8", "bf16"),
    "int8": ("int8", "fp8", "bf16"),
    "bf16": ("bf16",),
    "tf32": ("tf32", "bf16"),
    "fp64": ("fp64",),
}


# ---------------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------------


class SpecField(NamedTuple):
    """One numeric field of a spec: attribute on HardwareSpec, YAML dotted path, unit dimension, label.

    ``attr`` is a plain attribute name, except tensor rates, written ``tensor_flops.<dtype>``; use
    :func:`spec_value` to read any of them from a spec.
    """

    attr: str
    path: str
    dimension: str
    label: str


TENSOR_DTYPES = ("fp64", "tf32", "bf16", "fp8", "fp4", "int8")

SPEC_FIELDS: tuple[SpecField, ...] = (
    SpecField("sm_count", "compute.sm_count", "count", "SMs / CUs"),
    SpecField("boost_clock_hz", "compute.boost_clock", "frequency", "Boost clock"),
    SpecField("tensor_flops.fp64", "compute.tensor.fp64", "flop_rate", "FP64 tensor (dense)"),
    SpecField("tensor_flops.tf32", "compute.tensor.tf32", "flop_rate", "TF32 tensor (dense)"),
    SpecField("tensor_flops.bf16", "compute.tensor.bf16", "flop_rate", "BF16/FP16 tensor (dense)"),
    SpecField("tensor_flops.fp8", "compute.tensor.fp8", "flop_rate", "FP8 tensor (dense)"),
    SpecField("tensor_flops.fp4", "compute.tensor.fp4", "flop_rate", "FP4 tensor (dense)"),
    SpecField("tensor_flops.int8", "compute.tensor.int8", "flop_rate", "INT8 tensor (dense)"),
    SpecField("vector_fp32_flops", "compute.vector_fp32", "flop_rate", "FP32 vector"),
    SpecField("hbm_bytes", "memory.capacity", "bytes", "HBM capacity"),
    SpecField("hbm_visible_bytes", "memory.visible", "bytes", "Device-visible memory"),
    SpecField("hbm_bandwidth", "memory.bandwidth", "bandwidth", "HBM bandwidth"),
    SpecField("l2_bytes", "memory.l2", "bytes", "L2 cache"),
    SpecField("smem_per_sm_bytes", "memory.smem_per_sm", "bytes", "Shared memory per SM"),
    SpecField("scaleup_bandwidth", "interconnect.scale_up.bandwidth", "bandwidth",
              "Scale-up bandwidth (per direction)"),
    SpecField("scaleup_domain", "interconnect.scale_up.domain", "count", "Scale-up domain (GPUs)"),
    SpecField("scaleup_latency", "interconnect.scale_up.latency", "time", "Scale-up latency (per ring step)"),
    SpecField("scaleout_bandwidth", "interconnect.scale_out.bandwidth", "bandwidth",
              "Scale-out bandwidth (per direction)"),
    SpecField("scaleout_latency", "interconnect.scale_out.latency", "time", "Scale-out latency (per ring step)"),
    SpecField("pcie_bandwidth", "interconnect.pcie", "bandwidth", "Host link / PCIe (per direction)"),
    SpecField("tdp_w", "power.tdp", "power", "TDP"),
)

# What the part sustains, measured by microbenchmarks (or estimated for a part nobody has measured): the dense
# product rate of large GEMMs at the power-limited clock, the bandwidth streaming kernels reach, and NCCL's
# all-reduce bus bandwidth and small-message time inside the scale-up domain. The cost model never reads them;
# the transfer rules carry a profile's efficiencies relative to them (perfmodel.transfer), so a part whose
# sustained ceilings differ from its datasheet's by another ratio than the measured part's is not carried as
# if they did not. All optional.
SUSTAINED_FIELDS: tuple[SpecField, ...] = (
    SpecField("sustained.bf16", "sustained.tensor.bf16", "flop_rate", "Sustained BF16 GEMM rate"),
    SpecField("sustained.fp8", "sustained.tensor.fp8", "flop_rate", "Sustained FP8 GEMM rate"),
    SpecField("sustained.fp4", "sustained.tensor.fp4", "flop_rate", "Sustained FP4 GEMM rate"),
    SpecField("sustained.bandwidth", "sustained.bandwidth", "bandwidth", "Sustained HBM streaming bandwidth"),
    SpecField("sustained.allreduce_busbw", "sustained.allreduce_busbw", "bandwidth",
              "Sustained all-reduce bus bandwidth (large messages)"),
    SpecField("sustained.allreduce_latency", "sustained.allreduce_latency", "time",
              "All-reduce time of a small message"),
)

# Figures that derive from others, and what from (issue 26: "derived figures follow what they derive from"). A
# datasheet's dense rates are SMs x FLOP per clock per SM x boost clock; a sustained ceiling is a measured share of
# its datasheet figure. Where a spec changes a basis figure and not a figure derived from it that it inherits, the
# derived figure is rescaled by the basis' ratio (keeping its per-SM-per-clock rate, or its measured share), and
# its Figure says so (source "derived"): :func:`_derive_figures` for an extends chain, :func:`spec_with` for a sweep.
# In order: a tensor rate follows the SMs and clock, then its sustained ceiling follows the rate.
DERIVED: dict[str, tuple[str, ...]] = {
    **{f"compute.tensor.{d}": ("compute.sm_count", "compute.boost_clock") for d in TENSOR_DTYPES},
    "compute.vector_fp32": ("compute.sm_count", "compute.boost_clock"),
    "sustained.tensor.bf16": ("compute.tensor.bf16",), "sustained.tensor.fp8": ("compute.tensor.fp8",),
    "sustained.tensor.fp4": ("compute.tensor.fp4",), "sustained.bandwidth": ("memory.bandwidth",),
    "sustained.allreduce_busbw": ("interconnect.scale_up.bandwidth",),
    "sustained.allreduce_latency": ("interconnect.scale_up.latency",),
}

_BY_PATH = {f.path: f for f in SPEC_FIELDS + SUSTAINED_FIELDS}
_BY_ATTR = {f.attr: f for f in SPEC_FIELDS + SUSTAINED_FIELDS}
_OPTIONAL = ({f"compute.tensor.{k}" for k in ("fp64", "tf32", "fp8", "fp4", "int8")} | {"memory.visible"}
             | {f.path for f in SUSTAINED_FIELDS})

# Device-visible memory where no reading is given: a nominal "80 GB" of HBM is 80 GiB of DRAM, of which the
# driver exposes 99.57% (nvidia-smi memory.total: 81559 of 81920 MiB on an H100 SXM, 143771 of 144384 MiB
# on an H200, both read on lent machines).
VISIBLE_SHARE = 0.9957
VISIBLE_RULE = ("estimate: nominal GB read as GiB x 0.9957, the share nvidia-smi exposes on H100 SXM "
                "(81559 MiB) and H200 (143771 MiB)")


def visible_from_nominal(nominal_bytes):
    """Device-visible bytes for a nominal capacity (given in decimal bytes, as "80 GB" parses)."""
    return nominal_bytes / 1e9 * 2**30 * VISIBLE_SHARE
_REQUIRED = tuple(f.path for f in SPEC_FIELDS if f.path not in _OPTIONAL)
_INTEGER = {"compute.sm_count", "interconnect.scale_up.domain"}
_TOP_SCALARS = ("name", "vendor", "generation", "aliases", "extends", "note")
VENDORS = ("nvidia", "amd", "other")
_FIGURE_KEYS = ("value", "source", "ref", "note")


def _tree() -> dict:
    """The nested key layout of the schema: a dict for each mapping level, None for a figure."""
    root: dict = {k: "scalar" for k in _TOP_SCALARS}
    for f in SPEC_FIELDS + SUSTAINED_FIELDS:
        node = root
        *parents, leaf = f.path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = None
    return root


_SCHEMA = _tree()

# Dense bf16 FLOP per clock per SM (per CU on AMD) of each generation's tensor cores, with their sources:
# perfmodel.generations (a view of that table, for the sparse guard below and its readers)
BF16_FLOP_PER_CLK_PER_SM = generations.flop_per_clk_table("bf16")
SPARSE_GUARD = 1.5  # a bf16 rate above 1.5x the table's FLOP/clk/SM is taken for a 2:4 sparse figure
# Largest plausible dense rate of a format relative to dense bf16; a generation may raise it
# (perfmodel.generations rate_ratio_limits: Blackwell Ultra's FP4 is 1.5x Blackwell's).
_RATIO_LIMITS = {"fp8": 2.2, "fp4": 4.5}


def spec_value(spec: HardwareSpec, attr: str) -> float | None:
    """The SI value of ``attr`` (a :data:`SPEC_FIELDS` attr) on ``spec``; None for a format it lacks."""
    if attr.startswith("tensor_flops."):
        return spec.tensor_flops.get(attr.split(".", 1)[1])
    if attr.startswith("sustained."):
        return spec.sustained.get(attr.split(".", 1)[1])
    return getattr(spec, attr)


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _err(message: str, file: str | Path | None, field: str | None = None) -> InputError:
    text = _one_line(message)
    if len(text) > 240:  # a value echoed in the message may be as long as the file allows
        text = text[:237] + "..."
    return InputError(text, file=str(file) if file else None, field=field)


def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


# ---------------------------------------------------------------------------------------------------
# Reading one file
# ---------------------------------------------------------------------------------------------------


class _Raw(NamedTuple):
    path: Path
    data: bytes
    top: dict  # scalars: name, vendor, generation, aliases, extends, note
    figures: dict  # dotted path -> raw figure mapping, or None (drop an inherited figure)


_RAW_CACHE: dict[Path, tuple[int, _Raw]] = {}


SPEC_WHAT = "hardware spec file"


def _read_raw(path: Path) -> _Raw:
    try:
        st = path.stat()
    except OSError as e:
        raise _err(f"cannot read spec file ({e.strerror})", path) from None
    hit = _RAW_CACHE.get(path)
    if hit and hit[0] == st.st_mtime_ns:
        return hit[1]
    # size, nesting, aliases and duplicate keys are limited by the safe loader (perfmodel.safeyaml), which keeps
    # the parsed value on disk for the next process
    data = safeyaml.read_limited(path, what=SPEC_WHAT)
    doc = safeyaml.load(data, file=str(path), what=SPEC_WHAT, cached=True)
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else f"a {type(doc).__name__}"
        raise _err(f"expected a mapping of spec fields (name:, compute:, memory:, ...), the file is {kind}",
                   path, "(top level)")
    top: dict = {}
    figures: dict = {}
    _walk(doc, _SCHEMA, "", path, top, figures)
    raw = _Raw(path, data, top, figures)
    _RAW_CACHE[path] = (st.st_mtime_ns, raw)
    return raw


def _walk(node: dict, schema: dict, prefix: str, path: Path, top: dict, figures: dict) -> None:
    from .safeyaml import key_text

    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if not isinstance(key, str) or key not in schema:
            hint = ""
            if prefix == "compute.tensor." and key == "fp16":
                hint = "fp16 is filed under bf16 (same rate); "
            else:
                hint = _suggest(key, schema)
            raise _err(f"unknown key; {hint}expected one of: {', '.join(schema)}", path, f"{prefix}{key_text(key)}")
        sub = schema[key]
        if sub == "scalar":
            top[key] = _check_top(key, value, path)
        elif sub is None:  # a figure
            if value is None:
                figures[dotted] = None
                continue
            if not isinstance(value, dict):
                raise _err(f"expected a figure mapping like {{value: {value!r}, source: datasheet}}, "
                           f"got {value!r}", path, dotted)
            for k in value:
                if k not in _FIGURE_KEYS:
                    raise _err(f"unknown key {key_text(k)!r} in a figure; {_suggest(k, _FIGURE_KEYS)}"
                               f"expected: {', '.join(_FIGURE_KEYS)}", path, f"{dotted}.{key_text(k)}")
            for k in ("value", "source"):
                if value.get(k) is None:
                    raise _err(f"missing {k!r}; a figure is {{value: ..., source: one of "
                               f"{'|'.join(SOURCES)}}}", path, f"{dotted}.{k}")
            src = value["source"]
            if src not in SOURCES:
                raise _err(f"source {src!r} is not one of {', '.join(SOURCES)}; "
                           f"{_suggest(src, SOURCES) or 'say how the figure was got'}", path, f"{dotted}.source")
            for k in ("ref", "note"):
                if k in value and not isinstance(value[k], (str, int, float)):
                    raise _err(f"expected text, got {value[k]!r}", path, f"{dotted}.{k}")
            figures[dotted] = value
        else:
            if value is None:
                continue  # an empty section ("power:") adds nothing
            if not isinstance(value, dict):
                raise _err(f"expected a mapping with keys {', '.join(sub)}, got {value!r}", path, dotted)
            _walk(value, sub, dotted + ".", path, top, figures)


def _check_top(key: str, value: Any, path: Path) -> Any:
    if key == "aliases":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
            raise _err(f"expected a list of names, got {value!r}", path, key)
        return tuple(a.lower() for a in value)
    if value is None or not isinstance(value, str) or not value.strip():
        raise _err(f"expected a non-empty text value, got {value!r}", path, key)
    value = value.strip()
    if key == "vendor" and value.lower() not in VENDORS:
        raise _err(f"vendor {value!r} is not one of {', '.join(VENDORS)}", path, key)
    if key in ("vendor", "generation"):
        value = value.lower()
    return value


# ---------------------------------------------------------------------------------------------------
# Building a spec
# ---------------------------------------------------------------------------------------------------

_SPEC_CACHE: dict[Path, tuple[tuple[tuple[Path, int], ...], HardwareSpec]] = {}


def _chain(path: Path) -> list[_Raw]:
    chain: list[_Raw] = []
    seen: list[Path] = []
    current = path
    while True:
        if current in seen:
            names = " -> ".join(p.name for p in seen + [current])
            raise _err(f"extends loop: {names}", seen[-1], "extends")
        seen.append(current)
        raw = _read_raw(current)
        chain.append(raw)
        parent = raw.top.get("extends")
        if not parent:
            return chain
        current = _extends_target(current, parent)


def _extends_target(including: Path, parent: str) -> Path:
    """The file ``extends: parent`` names: first in the including file's own folder (a path relative to it, as
    written), then, for a bare name, in the spec library (hardware/) by file name, key or alias, so a what-if
    anywhere can say ``extends: b200``. Confined to those two places and to .yaml/.yml files: a spec cannot pull
    in (and an error cannot show a line of) any other file on the machine. The name given is echoed, never the
    contents of what it points at."""
    shown = repr(parent if len(parent) <= 80 else parent[:77] + "...")
    base = including.parent
    target = base / parent
    try:
        if not target.suffix:
            target = target.with_suffix(".yaml")
        real = target.resolve()
    except (OSError, RuntimeError, ValueError):
        raise _err(f"extends target {shown} cannot be resolved", including, "extends") from None
    library = hardware_dir().resolve()
    allowed = (real.parent == base.resolve()) or (real == library or library in real.parents)
    if not allowed:
        raise _err(f"extends target {shown} lies outside the spec library ({library}) and this file's folder; "
                   f"copy the base spec next to this file", including, "extends")
    if real.suffix not in (".yaml", ".yml"):
        raise _err(f"extends target {shown} is not a .yaml spec file", including, "extends")
    # A file never extends itself: `extends: b200` in a what-if named b200.yaml means the library's b200.
    if real.is_file() and real != including.resolve():
        return real
    if "/" not in parent and os.sep not in parent and not parent.startswith("."):  # a bare name
        found = _library_target(parent, library, including, shown)
        if found is not None:
            return found
    if real.is_file():  # the file itself and no library part of that name: the loop error says so
        return real
    names = _library_names(library)
    close = difflib.get_close_matches(parent.lower(), names, n=3, cutoff=0.5)
    hint = f"; closest in the library: {', '.join(close)}" if close else ""
    raise _err(f"extends target {shown} not found in this file's folder nor, by file name, key or alias, in the "
               f"spec library {library}{hint}", including, "extends")


def _library_target(name: str, library: Path, including: Path, shown: str) -> Path | None:
    """The library spec a bare ``extends:`` name gives by file name (``b200.yaml``), key (``b200``) or alias
    (``hgx-b200``); no prefix guessing, so a what-if's base does not change when the library grows."""
    low = name.lower()
    stem = low[:-5] if low.endswith(".yaml") else low[:-4] if low.endswith(".yml") else low
    files = _spec_files(library)
    hits = [p for p in files if p.name.lower() == low or p.stem.lower() == stem]
    if not hits:
        for p in files:
            try:
                if stem in _read_raw(p.resolve()).top.get("aliases", ()):
                    hits.append(p)
            except InputError:
                continue  # a broken library file is reported when it is loaded itself
    if len(hits) > 1:
        raise _err(f"extends target {shown} names several library specs: {', '.join(p.stem for p in hits)}; "
                   f"give the file name", including, "extends")
    if not hits:
        return None
    real = hits[0].resolve()
    if real.suffix not in (".yaml", ".yml") or not (library in real.parents):  # a link out of the library
        raise _err(f"extends target {shown} lies outside the spec library ({library}) and this file's folder; "
                   f"copy the base spec next to this file", including, "extends")
    return real


def _library_names(library: Path) -> list[str]:
    names = []
    for p in _spec_files(library):
        names.append(p.stem)
        try:
            names.extend(_read_raw(p.resolve()).top.get("aliases", ()))
        except InputError:
            continue
    return names


def _build(path: Path) -> HardwareSpec:
    chain = _chain(path)
    top: dict = {}
    merged: dict[str, tuple[dict | None, Path]] = {}
    for raw in reversed(chain):  # base first, most derived last
        for k, v in raw.top.items():
            if k != "aliases" or raw is chain[0]:
                top[k] = v
        for p, fig in raw.figures.items():
            merged[p] = (fig, raw.path)
    head = chain[0].path
    for k in ("name", "vendor", "generation"):
        if k not in top:
            raise _err(f"missing required field {k!r}", head, k)

    figures: dict[str, Figure] = {}
    for p, (fig, src_file) in merged.items():
        if fig is None:
            if p not in _OPTIONAL:
                raise _err("a required figure cannot be dropped with null", src_file, p)
            continue
        figures[p] = _figure(p, fig, src_file)
    for p in _REQUIRED:
        if p not in figures:
            ex = {"count": "8", "frequency": "1980 MHz", "flop_rate": "989.4 TFLOPS", "bytes": "80 GB",
                  "bandwidth": "3.35 TB/s", "time": "3 us", "power": "700 W"}[_BY_PATH[p].dimension]
            raise _err(f"missing required figure; expected e.g. {{value: {ex}, source: datasheet}}", head, p)

    _derive_visible(figures, merged, chain)
    _derive_figures(figures, merged, chain)
    v = {p: f.value for p, f in figures.items()}
    spec = HardwareSpec(
        key=head.stem,
        name=top["name"],
        vendor=top["vendor"],
        generation=top["generation"],
        sm_count=int(v["compute.sm_count"]),
        boost_clock_hz=v["compute.boost_clock"],
        tensor_flops={d: v[f"compute.tensor.{d}"] for d in TENSOR_DTYPES if f"compute.tensor.{d}" in v},
        vector_fp32_flops=v["compute.vector_fp32"],
        hbm_bytes=v["memory.capacity"],
        hbm_visible_bytes=v["memory.visible"],
        hbm_bandwidth=v["memory.bandwidth"],
        l2_bytes=v["memory.l2"],
        smem_per_sm_bytes=v["memory.smem_per_sm"],
        scaleup_bandwidth=v["interconnect.scale_up.bandwidth"],
        scaleup_domain=int(v["interconnect.scale_up.domain"]),
        scaleup_latency=v["interconnect.scale_up.latency"],
        scaleout_bandwidth=v["interconnect.scale_out.bandwidth"],
        scaleout_latency=v["interconnect.scale_out.latency"],
        pcie_bandwidth=v["interconnect.pcie"],
        tdp_w=v["power.tdp"],
        sustained={f.attr.split(".", 1)[1]: v[f.path] for f in SUSTAINED_FIELDS if f.path in v},
        figures=dict(sorted(figures.items(), key=lambda kv: _ORDER.get(kv[0], 99))),
        files=tuple(str(r.path) for r in chain),
        sha256=_hash(r.data for r in chain),
        lineage=_lineage(chain),
    )
    _check_plausible(spec)
    return spec


def _lineage(chain: list) -> tuple[str, ...]:
    """The keys of the files a spec extends, nearest first, while each keeps the spec's vendor and generation:
    a file that changes either starts another part, whose measurements are not this one's."""
    def identity(rank: int) -> tuple:  # vendor and generation in force at chain[rank] (what it and its bases set)
        out = {}
        for raw in reversed(chain[rank:]):
            out.update({k: raw.top[k] for k in ("vendor", "generation") if k in raw.top})
        return out.get("vendor"), out.get("generation")

    own = identity(0)
    keys = []
    for rank in range(1, len(chain)):
        if identity(rank) != own:
            break
        keys.append(chain[rank].path.stem)
    return tuple(keys)


def lineage_rank(spec_key: str, hw: "HardwareSpec") -> int | None:
    """How near the part ``spec_key`` names is to ``hw`` as its measurements go: 0 for ``hw`` itself (its key or
    an alias), k for the k-th part it is a what-if of (:attr:`HardwareSpec.lineage`), None for another part.
    A spec that extends a part is that part with the figures it changes: the part's calibration prices it at the
    spec's own figures, as ``sweep --vary`` prices the part's (issue 26)."""
    if not spec_key:
        return None
    if spec_key == hw.key or spec_key in getattr(hw, "aliases", ()):
        return 0
    lineage = getattr(hw, "lineage", ())
    return lineage.index(spec_key) + 1 if spec_key in lineage else None


_ORDER = {f.path: i for i, f in enumerate(SPEC_FIELDS + SUSTAINED_FIELDS)}


def _derive_visible(figures: dict, merged: dict, chain: list) -> None:
    """Fill ``memory.visible`` by :data:`VISIBLE_RULE` when no file gives it, or when a file further down
    the extends chain changed the capacity without giving it (a what-if part with more HBM)."""
    rank = {r.path: i for i, r in enumerate(chain)}  # 0: the most derived file
    vis = merged.get("memory.visible")
    cap_file = merged["memory.capacity"][1]
    if vis is not None and vis[0] is not None and rank[vis[1]] <= rank[cap_file]:
        return
    nominal = figures["memory.capacity"]
    figures["memory.visible"] = Figure(value=visible_from_nominal(nominal.value), source="estimate",
                                       text="(derived)", ref=VISIBLE_RULE, file=nominal.file)


def library_part(hw: "HardwareSpec") -> "HardwareSpec":
    """The library part ``hw`` stands for: the library's file of its key (a sweep's what-if keeps the part's key
    and changes its figures), else the part a what-if file extends (its lineage), else ``hw`` itself. What is
    chosen or counted by a part's own figures (its evidence, its kernels' concurrency) is chosen by these."""
    for key in (hw.key, *getattr(hw, "lineage", ())):
        try:
            return load_spec(key)
        except InputError:  # a user's file, not in the library
            continue
    return hw


def what_if_of(hw: "HardwareSpec") -> tuple[str, list[str]] | None:
    """(the part ``hw`` is a what-if of, the figures it changes: dotted paths) or None for a part of its own
    (:attr:`HardwareSpec.lineage`)."""
    import numpy as np

    if not hw.lineage:
        return None
    try:
        parent = load_spec(hw.lineage[0])
    except InputError:  # a renamed copy of a spec that is not in the library
        return hw.lineage[0], []
    changed = [p for p, f in hw.figures.items()
               if p not in parent.figures or not np.array_equal(np.asarray(f.value), parent.figures[p].value)]
    return parent.key, changed


def _derive_figures(figures: dict, merged: dict, chain: list) -> None:
    """Rescale each inherited figure of :data:`DERIVED` whose basis figures a file further down the extends chain
    changed without restating it: by the basis' ratio between the file that gave it and now."""
    rank = {r.path: i for i, r in enumerate(chain)}  # 0: the most derived file
    given = {p: rank[f] for p, (fig, f) in merged.items() if fig is not None}  # where each figure was set
    for path, bases in DERIVED.items():
        fig = figures.get(path)
        if fig is None or path not in given:
            continue
        at = given[path]
        factor, why = 1.0, []
        for basis in bases:
            if basis not in figures or given.get(basis, at) >= at:
                continue  # given beside (or below) the derived figure: the file stated both
            then = next((r for r in chain[at:] if r.figures.get(basis) is not None), None)
            if then is None:
                continue
            ratio = figures[basis].value / _figure(basis, then.figures[basis], then.path).value
            if ratio != 1.0:  # restated at the same value: nothing to follow
                factor *= ratio
                why.append(basis)
        if why:
            figures[path] = Figure(value=fig.value * factor, source="derived", text="(derived)",
                                   ref=f"{Path(fig.file).name}'s figure rescaled with {' and '.join(why)} "
                                       f"(x{factor:.4g})", file=figures[why[0]].file)
            given[path] = min(given[basis] for basis in why)  # a figure derived from it follows it in turn


def _hash(blobs) -> str:
    h = hashlib.sha256()
    for b in blobs:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _figure(p: str, fig: dict, file: Path) -> Figure:
    dim = _BY_PATH[p].dimension
    raw_value = fig["value"]
    where = f"{p}.value"
    value = parse_quantity(raw_value, dim, file=str(file), field=where)
    if value != value or value in (float("inf"), float("-inf")):
        raise _err(f"expected a finite number, got {raw_value!r}", file, where)
    if value <= 0:
        raise _err(f"expected a positive value, got {raw_value!r}", file, where)
    if p in _INTEGER and not float(value).is_integer():
        raise _err(f"expected a whole number, got {raw_value!r}", file, where)
    ref = fig.get("ref", "")
    note = fig.get("note", "")
    return Figure(value=float(value), source=fig["source"], text=str(raw_value),
                  ref=_one_line(ref if ref else note), file=str(file))


def bf16_flop_per_clk_per_sm(spec: HardwareSpec) -> float:
    """Dense bf16 FLOP per clock per SM implied by the spec's rate, SM count and boost clock."""
    return spec.tensor_flops["bf16"] / (spec.sm_count * spec.boost_clock_hz)


# Physical ranges a figure of any accelerator, past or plausible future, falls in: a value outside is a typo or
# a unit slip (1e-300 B/s, 1e308 SMs), refused before it can turn a projection into inf or NaN.
PHYSICAL_RANGE = {
    "count": (1, 1e6), "frequency": (1e7, 1e11), "flop_rate": (1e9, 1e19), "bytes": (1e3, 1e15),
    "bandwidth": (1e6, 1e16), "time": (1e-10, 1.0), "power": (1.0, 1e5),
}


def _check_plausible(spec: HardwareSpec) -> None:
    for path, fig in spec.figures.items():
        lo, hi = PHYSICAL_RANGE[_BY_PATH[path].dimension]
        if not lo <= fig.value <= hi:
            raise _err(f"{fig.text or fig.value} is outside any physical range for this figure "
                       f"({lo:g} .. {hi:g} in SI units)", fig.file, path)
    bf16 = spec.tensor_flops["bf16"]
    fig = spec.figures["compute.tensor.bf16"]
    table = BF16_FLOP_PER_CLK_PER_SM.get(spec.generation)
    if table:
        per = bf16_flop_per_clk_per_sm(spec)
        if per > SPARSE_GUARD * table:
            raise _err(
                f"{fig.text or bf16} is {per:.0f} FLOP/clk/SM at {spec.sm_count} SMs x "
                f"{spec.boost_clock_hz / 1e6:.0f} MHz, {per / table:.2f}x the {table} of a dense "
                f"{spec.generation} part: it looks like a 2:4 sparse rate; give the dense one (half)",
                fig.file, "compute.tensor.bf16")
    limits = {**_RATIO_LIMITS, **generations.rate_ratio_limits(spec.generation)}
    for dtype, limit in limits.items():
        rate = spec.tensor_flops.get(dtype)
        if rate is not None and rate > limit * bf16 * (1 + 1e-9):
            f = spec.figures[f"compute.tensor.{dtype}"]
            raise _err(
                f"{f.text} is {rate / bf16:.2f}x the bf16 rate ({spec.figures['compute.tensor.bf16'].text}), "
                f"more than the {limit}x a dense {dtype} rate can be: a sparse figure filed as dense, "
                f"or a sparse-vs-dense mix", f.file, f"compute.tensor.{dtype}")


# ---------------------------------------------------------------------------------------------------
# Finding a spec by name
# ---------------------------------------------------------------------------------------------------

_RESOLVE_CACHE: dict[tuple[str, str, int], Path] = {}


def _spec_files(hdir: Path) -> list[Path]:
    if not hdir.is_dir():
        return []
    return sorted(p for p in hdir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def resolve_spec(name_or_path: str | Path) -> Path:
    """The spec file ``name_or_path`` names: a path, a file in hardware/, a unique stem prefix, or an alias."""
    text = str(name_or_path).strip()
    if not text:
        raise _err("expected a hardware name (e.g. h100) or a path to a spec file", None, "hardware")
    direct = Path(text).expanduser()
    if direct.is_file():
        return direct.resolve()
    hdir = hardware_dir()
    try:
        dir_mtime = hdir.stat().st_mtime_ns
    except OSError:
        dir_mtime = -1
    ck = (text, str(hdir), dir_mtime)
    hit = _RESOLVE_CACHE.get(ck)
    if hit is not None and hit.is_file():
        return hit
    found = _resolve_uncached(text, hdir)
    _RESOLVE_CACHE[ck] = found
    return found


def _resolve_uncached(text: str, hdir: Path) -> Path:
    if "/" in text or os.sep in text or text.startswith("~"):
        # a path names a file: never the library's file of the same name (`--arch ./b200.yaml` with no such
        # file had loaded hardware/b200.yaml)
        raise _err(f"no spec file at {text!r} (a path names a file; a bare name looks in {hdir})", None, "hardware")
    for cand in (hdir / text, hdir / f"{text}.yaml", hdir / f"{text}.yml"):
        if cand.is_file():
            return cand.resolve()
    files = _spec_files(hdir)
    low = text.lower()
    if "/" not in text and os.sep not in text:
        stem = low[:-5] if low.endswith(".yaml") else low
        prefixed = [p for p in files if p.stem.lower().startswith(stem + "-")]
        if len(prefixed) == 1:
            return prefixed[0].resolve()
        aliased = []
        for p in files:
            try:
                if stem in _read_raw(p.resolve()).top.get("aliases", ()):
                    aliased.append(p)
            except InputError:
                continue
        if len(aliased) == 1:
            return aliased[0].resolve()
        several = prefixed or aliased
        if several:
            raise _err(f"{text!r} matches several specs: {', '.join(p.stem for p in several)}; "
                       f"give the full name", None, "hardware")
    names = [p.stem for p in files]
    for p in files:
        try:
            names.extend(_read_raw(p.resolve()).top.get("aliases", ()))
        except InputError:
            continue
    close = difflib.get_close_matches(low, names, n=4, cutoff=0.4)
    close += [n for n in names if low and low in n and n not in close][: 4 - len(close)]
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(p.stem for p in files)}"
    raise _err(f"no spec file or hardware named {text!r} (looked in {hdir}); {hint}", None, "hardware")


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


def _fresh(spec: HardwareSpec) -> HardwareSpec:
    # The cached spec stays pristine: each caller gets its own dicts.
    return replace(spec, tensor_flops=dict(spec.tensor_flops), figures=dict(spec.figures))


def load_spec(name_or_path: str | Path) -> HardwareSpec:
    """Load, validate and convert to SI the spec ``name_or_path`` names (see :func:`resolve_spec`).

    Parsed specs are cached by file and modification time (of every file in the extends chain).
    """
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    path = resolve_spec(name_or_path)
    hit = _SPEC_CACHE.get(path)
    if hit is not None:
        stamps, spec = hit
        try:
            if all(p.stat().st_mtime_ns == m for p, m in stamps):
                return _fresh(spec)
        except OSError:
            pass
    spec = _build(path)
    # the folders too: a file added beside a spec may take over a bare `extends:` name the library answered
    watched = list(dict.fromkeys([*map(Path, spec.files), *(Path(f).parent for f in spec.files)]))
    stamps = tuple((p, p.stat().st_mtime_ns) for p in watched)
    _SPEC_CACHE[path] = (stamps, spec)
    return _fresh(spec)


def list_specs() -> list[HardwareSpec]:
    """Every spec in hardware/, sorted by key."""
    return sorted((load_spec(p.resolve()) for p in _spec_files(hardware_dir())), key=lambda s: s.key)


def library_aliases() -> dict[str, tuple[str, ...]]:
    """Every spec of hardware/ by key, with the other names its file gives it (``aliases``)."""
    out = {}
    for p in _spec_files(hardware_dir()):
        try:
            out[p.stem] = tuple(_read_raw(p.resolve()).top.get("aliases", ()))
        except InputError:
            continue
    return out


def clear_cache() -> None:
    _RAW_CACHE.clear()
    _SPEC_CACHE.clear()
    _RESOLVE_CACHE.clear()


_TEXT_FIELDS = ("name", "vendor", "generation", "key")


def _sustained_key(path: str) -> str:
    """``sustained.tensor.bf16`` -> ``bf16``, ``sustained.bandwidth`` -> ``bandwidth`` (HardwareSpec.sustained)."""
    return path.split(".", 1)[1].replace("tensor.", "")


def _figure_value(spec: HardwareSpec, attr: str):
    """A numeric field by its attribute name (``tensor_flops.<dtype>`` included; None where the part lacks it)."""
    return spec.tensor_flops.get(attr.split(".", 1)[1]) if attr.startswith("tensor_flops.") else getattr(spec, attr)


def spec_with(spec: HardwareSpec, **overrides: Any) -> HardwareSpec:
    """A copy of ``spec`` with some SI fields replaced, for what-if sweeps and sensitivity analysis.

    ``spec_with(h100, hbm_bandwidth=4.8e12, tensor_flops={"bf16": 1.2e15})``. Values are SI numbers or
    strings with units ("4.8 TB/s"). ``tensor_flops`` entries given replace the part's (others are kept).
    ``name``/``vendor``/``generation``/``key`` may be overridden too. Overridden figures get source
    ``estimate`` and ref ``what-if override``; the sha256 changes so caches keyed on it tell them apart.
    No plausibility check is run: a what-if may be implausible on purpose.
    """
    figures = dict(spec.figures)
    changes: dict[str, Any] = {}
    tensor = dict(spec.tensor_flops)

    def set_fig(sf: SpecField, raw: Any) -> float:
        if hasattr(raw, "shape"):  # a numpy array of SI values: a vectorised sweep over this figure
            if not (raw > 0).all():
                raise _err("expected positive values", "spec_with", sf.attr)
            figures[sf.path] = Figure(value=raw, source="estimate", text="(swept)", ref="what-if sweep", file="")
            return raw
        value = parse_quantity(raw, sf.dimension, file="spec_with", field=sf.attr)
        if not value > 0 or value == float("inf"):
            raise _err(f"expected a positive value, got {raw!r}", "spec_with", sf.attr)
        if sf.path in _INTEGER and not float(value).is_integer():
            raise _err(f"expected a whole number, got {raw!r}", "spec_with", sf.attr)
        figures[sf.path] = Figure(value=float(value), source="estimate",
                                  text=raw if isinstance(raw, str) else repr(raw),
                                  ref="what-if override", file="")
        return value

    for name, raw in overrides.items():
        if name in _TEXT_FIELDS:
            changes[name] = str(raw)
        elif name == "tensor_flops":
            if not isinstance(raw, dict):
                raise _err(f"expected a mapping of dtype to FLOP/s, got {raw!r}", "spec_with", name)
            for dtype, rate in raw.items():
                sf = _BY_ATTR.get(f"tensor_flops.{dtype}")
                if sf is None:
                    raise _err(f"unknown tensor dtype {dtype!r}; expected one of {', '.join(TENSOR_DTYPES)}",
                               "spec_with", f"tensor_flops.{dtype}")
                tensor[dtype] = set_fig(sf, rate)
        elif name.startswith("tensor_flops.") and name in _BY_ATTR:
            tensor[name.split(".", 1)[1]] = set_fig(_BY_ATTR[name], raw)
        elif name in _BY_ATTR:
            value = set_fig(_BY_ATTR[name], raw)
            changes[name] = int(value) if _BY_ATTR[name].path in _INTEGER and not hasattr(value, "shape") else value
        else:
            options = [f.attr for f in SPEC_FIELDS if "." not in f.attr] + ["tensor_flops", *_TEXT_FIELDS]
            raise _err(f"not a spec field; {_suggest(name, options)}expected one of: {', '.join(options)}",
                       "spec_with", name)
    sustained = dict(spec.sustained)
    given = {_BY_ATTR[n].path for n in overrides if n in _BY_ATTR}
    given |= {f"compute.tensor.{d}" for d in (overrides.get("tensor_flops") or {})}
    for path, bases in DERIVED.items():  # a derived figure follows what it derives from (DERIVED)
        changed = [b for b in bases if b in given]
        old = (spec.sustained.get(_sustained_key(path)) if path.startswith("sustained.")
               else _figure_value(spec, _BY_PATH[path].attr))
        if not changed or path in given or old is None:
            continue
        factor = 1.0
        for b in changed:
            attr = _BY_PATH[b].attr
            new = tensor.get(attr.split(".", 1)[1]) if attr.startswith("tensor_flops.") else changes.get(attr)
            factor = factor * new / _figure_value(spec, attr)
        value = old * factor
        given.add(path)
        if path.startswith("sustained."):
            if not hasattr(value, "shape"):  # a swept array is not carried (the profile is resolved once)
                sustained[_sustained_key(path)] = float(value)
            continue
        attr = _BY_PATH[path].attr
        if attr.startswith("tensor_flops."):
            tensor[attr.split(".", 1)[1]] = value
        else:
            changes[attr] = value
        figures[path] = Figure(value=value, source="derived", text="(derived)",
                               ref=f"rescaled with {' and '.join(changed)}", file="")
    if "hbm_bytes" in overrides and "hbm_visible_bytes" not in overrides:  # visible memory follows capacity
        changes["hbm_visible_bytes"] = changes["hbm_bytes"] * (spec.hbm_visible_bytes / spec.hbm_bytes)
        figures["memory.visible"] = Figure(value=changes["hbm_visible_bytes"], source="estimate",
                                           text="(follows capacity)", ref="what-if override", file="")
    tag = repr(sorted((k, repr(v)) for k, v in overrides.items()))
    if changes.get("key", spec.key) != spec.key:  # a renamed copy is a what-if of the spec it was made from ...
        same = all(changes.get(k, getattr(spec, k)) == getattr(spec, k) for k in ("vendor", "generation"))
        changes["lineage"] = (spec.key, *spec.lineage) if same else ()  # ... unless it is another vendor's or family's
    elif any(changes.get(k, getattr(spec, k)) != getattr(spec, k) for k in ("vendor", "generation")):
        changes["lineage"] = ()
    return replace(spec, **changes, tensor_flops=tensor, sustained=sustained,
                   figures=dict(sorted(figures.items(), key=lambda kv: _ORDER.get(kv[0], 99))),
                   sha256=_hash([spec.sha256.encode(), tag.encode()]))
