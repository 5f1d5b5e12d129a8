"""The tuning model's constants, and the tune profile that stores fitted values of them.

Every constant of :mod:`.gemm_model` and :mod:`.attention_model` that is not a documented hardware figure
is here, with the estimate it starts from and the physical range a fit may move it in. Without a tune
profile the estimates are used (and the profile-derived ones come from the part's latency profile, which
``perfmodel fit`` calibrated on cuBLAS); ``perfmodel tune fit DIR`` fits them to measured Triton rows and
writes ``DIR/tune_profile.json``, which :func:`find_tune_profile` picks for the part it was measured on.

A tune profile holds constants only (never a time, a shape or a configuration), plus the evidence the
fit reported (train and held-out shapes, k-fold), so that a reader sees what the constants were judged on.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..errors import InputError

TUNE_PROFILE = "tune_profile.json"
FORMAT = "perfmodel-tune-profile/1"


@dataclass(frozen=True)
class TuneConstants:
    # Fraction of the dense tensor peak an MMA family sustains when fed (estimates): Hopper's wgmma as
    # cuBLAS uses it reaches ~790 of 989 TFLOP/s bf16 on an H200 (device library, KINDS.md), ~0.8;
    # Ampere-style mma.sync on Hopper ~2/3 of that (FlashAttention-2, built on mma.sync, runs at ~55-65%
    # of FlashAttention-3's wgmma throughput on an H100: Shah et al. 2024, figure 4). On Ampere parts
    # mma.sync is the full-rate path and takes the wgmma figure.
    mma_eta_wgmma: float = 0.80
    mma_eta_mma_sync: float = 0.52
    # Latency of a global load that misses L1 (L2 hit or HBM): a floor plus an exponential tail (queueing
    # under load), so a K step whose loads were issued D seconds ahead waits on average
    # tail * exp(-(D - floor) / tail) past D >= floor (and floor - D + tail below it). Pointer-chasing
    # microbenchmarks put Hopper's L2 at ~260 ns and HBM at ~480 ns unloaded (estimates: floor 0.4 us,
    # tail 0.2 us)
    load_latency_s: float = 0.4e-6
    latency_tail_s: float = 0.2e-6
    # Fixed cost of one K step not overlapped within a CTA: barrier, async-copy and MMA waits, fences,
    # pointer increments (estimate: ~100 clocks; a bar.sync alone is ~20-30 when every warp has arrived)
    step_overhead_clk: float = 100.0
    # L2 -> SM read bandwidth of the whole chip, bytes a clock: the A100 whitepaper's 5120; no Hopper
    # figure is published (estimate)
    l2_bytes_per_clk: float = 5120.0
    # p of the p-norm that joins the resources a K step needs on the SM (tensor, shared memory, L2 -> SM):
    # a hard max would let a step keep two of them both near saturation at no cost; queues in front of
    # each make such a step slower than its longest part (estimate: 6)
    resource_join: float = 6.0
    # p of the p-norm that joins, for a round of CTAs resident on one SM together, their shared resource
    # time (j x one CTA's) and one CTA's own time (latency, fixed costs): each hides the others' stalls,
    # not perfectly (estimate: 6)
    overlap_join: float = 6.0
    # Spilled registers: shared-memory/L1 accesses a spilled 32-bit register costs per K step (estimate:
    # stored and reloaded once a step, 2)
    spill_accesses: float = 2.0
    # SM clocks per operand element when K is not a multiple of 16 elements: Triton cannot prove 16-byte
    # aligned rows, loads each element on its own (no vector, no asynchronous copy, no software pipeline).
    # Estimate: one 2-byte load a thread, 32 lanes a clock through the load/store unit -> 1/32
    unaligned_clk_per_element: float = 1.0 / 32.0
    # Fixed cost of the split-K reduction kernel, queued behind the matmul (estimate: the profile's copy
    # kernel alpha plus a graph launch gap; from the profile when one is given)
    splitk_reduce_s: float = 4.0e-6
    # Fraction of the HBM bandwidth the streaming operands reach (profile gemm_mem_eta when given)
    hbm_eta: float = 0.85
    # Fixed cost of one kernel as timed alone: launch, ramp-up, tail (profile gemm_overhead_s when given)
    launch_s: float = 4.0e-6
    # p of the p-norm joining SM time and HBM time (profile gemm_softness when given)
    softness: float = 4.0
    # Share of one L2 of dirty lines, left by the benchmark's L2 flush, that the kernel writes back to
    # HBM while it reads (profile flush_writeback when given)
    flush_writeback: float = 0.5
    # Attention: fp32 operations a score (scale, mask select, running max, subtract, row sum, convert:
    # a count of the kernel's operations, 6) and the cost of a K/V step whose score tile is split over
    # warps along the key axis: the row max and sum cross warps through shared memory, and P is
    # re-laid-out for the P @ V MMA (estimate: ~200 clocks a step for each extra warp column)
    attn_fp32_ops_per_score: float = 6.0
    attn_split_clk: float = 200.0

    def as_dict(self) -> dict:
        return asdict(self)


# name -> (lower, upper): the physical range a fit may move each constant in
BOUNDS: dict[str, tuple[float, float]] = {
    "mma_eta_wgmma": (0.4, 1.0),
    "mma_eta_mma_sync": (0.2, 0.95),
    "load_latency_s": (0.1e-6, 3.0e-6),
    "latency_tail_s": (0.01e-6, 3.0e-6),
    "step_overhead_clk": (5.0, 1000.0),
    "l2_bytes_per_clk": (1500.0, 20000.0),
    "spill_accesses": (0.05, 50.0),
    "resource_join": (1.5, 40.0),
    "overlap_join": (1.5, 40.0),
    "unaligned_clk_per_element": (0.003, 2.0),
    "splitk_reduce_s": (0.3e-6, 20e-6),
    "hbm_eta": (0.4, 1.0),
    "launch_s": (0.3e-6, 20e-6),
    "softness": (1.2, 20.0),
    "flush_writeback": (0.0, 1.0),
    "attn_fp32_ops_per_score": (2.0, 60.0),
    "attn_split_clk": (1.0, 5000.0),
}
assert set(BOUNDS) == {f.name for f in fields(TuneConstants)}


def default_constants(prof=None) -> TuneConstants:
    """The estimates, with the constants the part's latency profile also holds taken from it."""
    c = TuneConstants()
    if prof is None:
        return c
    return replace(c, hbm_eta=prof.gemm_mem_eta, launch_s=prof.gemm_overhead_s, softness=prof.gemm_softness,
                   flush_writeback=prof.flush_writeback,
                   splitk_reduce_s=prof.launch_graph_s + prof.mem_alpha_s.get("copy", 4.0e-6))


def with_values(c: TuneConstants, values: dict) -> TuneConstants:
    return replace(c, **values)


# --- the tune profile file --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TuneProfile:
    spec_key: str
    device: str
    constants: TuneConstants
    fitted: tuple[str, ...]  # names the fit moved; the rest are the estimates
    evidence: dict  # what the fit reported (held-out and k-fold figures, shapes used): for the reader
    path: str = ""

    @property
    def label(self) -> str:
        from ..paths import repo_root

        where = self.path or self.spec_key
        try:
            where = str(Path(where).resolve().relative_to(repo_root().resolve()))
        except (ValueError, OSError):
            pass
        return f"tune profile {where}"


def _number(v, where: str, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputError(f"expected a finite number, got {v!r}", file=path, field=where)
    return float(v)


def parse_tune_profile(doc, path: str = "") -> TuneProfile:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"not a tune profile (expected \"format\": \"{FORMAT}\")", file=path)
    consts = doc.get("constants")
    if not isinstance(consts, dict):
        raise InputError("expected an object of constants", file=path, field="constants")
    known = {f.name for f in fields(TuneConstants)}
    unknown = sorted(set(consts) - known)
    if unknown:
        raise InputError(f"unknown constant {unknown[0]!r} (known: {', '.join(sorted(known))})", file=path,
                         field="constants")
    values = {}
    for name, v in consts.items():
        x = _number(v, f"constants.{name}", path)
        lo, hi = BOUNDS[name]
        if not lo <= x <= hi:
            raise InputError(f"{x:g} is outside its physical range [{lo:g}, {hi:g}]", file=path,
                             field=f"constants.{name}")
        values[name] = x
    fitted = doc.get("fitted", [])
    if not isinstance(fitted, list) or not all(isinstance(x, str) and x in known for x in fitted):
        raise InputError("expected a list of constant names", file=path, field="fitted")
    spec_key = doc.get("spec_key")
    if not isinstance(spec_key, str) or not spec_key:
        raise InputError("expected the hardware spec the rows were measured on", file=path, field="spec_key")
    evidence = doc.get("evidence", {})
    return TuneProfile(spec_key, str(doc.get("device", "")), replace(TuneConstants(), **values), tuple(fitted),
                       evidence if isinstance(evidence, dict) else {}, path)


def load_tune_profile(path) -> TuneProfile:
    from ..safeyaml import load_json

    p = Path(path)
    if p.is_dir():
        p = p / TUNE_PROFILE
    if not p.is_file():
        raise InputError("no tune profile here (make one with `perfmodel tune fit DIR`)", file=str(path))
    return parse_tune_profile(load_json(p.read_bytes(), file=str(p), what="tune profile"), str(p))


def tune_profile_document(tp: TuneProfile) -> dict:
    return {"format": FORMAT, "spec_key": tp.spec_key, "device": tp.device,
            "constants": tp.constants.as_dict(), "fitted": list(tp.fitted), "evidence": tp.evidence}


def save_tune_profile(tp: TuneProfile, path) -> None:
    from ..io import write_text_atomic

    write_text_atomic(Path(path), json.dumps(tune_profile_document(tp), indent=1, allow_nan=False) + "\n")


def find_tune_profile(hw) -> TuneProfile | None:
    """The tune profile measured on this part (``calibration/*/tune_profile.json`` whose spec_key is the
    part's key or an alias), or None. A profile that does not load is skipped with a one-line warning."""
    import sys

    from ..paths import calibration_dir

    names = {hw.key, *getattr(hw, "aliases", ())}
    root = calibration_dir()
    if not root.is_dir():
        return None
    for p in sorted(root.glob(f"*/{TUNE_PROFILE}")):
        try:
            tp = load_tune_profile(p)
        except InputError as e:
            print(f"perfmodel: warning: skipping tune profile {e}", file=sys.stderr)
            continue
        if tp.spec_key in names:
            return tp
    return None


def resolve_constants(hw, prof, arg=None) -> tuple[TuneConstants, str]:
    """(constants, where they come from) for ranking on ``hw``: ``arg`` None: the part's tune profile if
    one exists, else the estimates; ``"none"``: the estimates; a path: that tune profile."""
    if arg is not None and str(arg).lower() == "none":
        return default_constants(prof), "estimates (no tune profile)"
    tp = load_tune_profile(arg) if arg is not None else find_tune_profile(hw)
    if tp is None:
        return default_constants(prof), "estimates (no tune profile for this part)"
    return tp.constants, tp.label
