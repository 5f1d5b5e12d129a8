"""The latency model's parameters: documented defaults, or a profile fitted from measurements.

A :class:`Profile` holds only *structural* parameters of the cost model (fractions of peak, fixed
latencies, tile-pipeline constants, collective alpha/beta), never a table of times. ``calibration/<name>/
profile.json`` stores a fitted one; :func:`find_profile_for` picks the profile whose device matches a spec.

Defaults (``DEFAULTS``) are estimates, each with the reason it has its value; a projection made with them
says it is uncalibrated.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .errors import InputError
from .sampling import SAMPLE_PASSES, SAMPLING_KINDS

# How a table's rows were timed, which sets the power-limited clock each row ran at (perfmodel.power_clock): at least
# ``warmup_calls`` calls and ``warmup_s`` of warmup, then ``target_s`` of timed calls, at least ``min_reps`` and at
# most ``max_reps`` of them.
# This suite's Timer (perfmodel/measure/timing.py): 25 ms and 2 calls of warmup, 80 ms of 10-200 flushed calls.
SUITE_TIMING = {"warmup_calls": 2.0, "warmup_s": 0.025, "min_reps": 10.0, "target_s": 0.08, "max_reps": 200.0}
# NVIDIA aiconfigurator's collectors: a few warmup calls and a few timed CUDA-graph replays (estimate: the
# collectors' scripts are not in the aiconfigurator-core package; milliseconds of load for most rows)
IMPORT_TIMING = {"warmup_calls": 3.0, "warmup_s": 0.0, "min_reps": 6.0, "target_s": 0.0, "max_reps": 6.0}
TIMING_FIELDS = ("gemm_timing", "attn_timing")

MEMORY_OP_KINDS = ("copy", "reduce", "rmsnorm", "layernorm", "swiglu", "gelu", "rotary", "residual",
                   "embedding", "kv_write", "moe_permute", "topk", "fused", "quantize", *SAMPLING_KINDS)



# --- the overlap parameters (perfmodel.cost.overlap uses them; kept here so the schema check below needs no
# import from the cost layer) ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class OverlapParam:
    default: float
    lo: float
    hi: float
    reason: str


OVERLAP_PARAMS: dict[str, OverlapParam] = {
    "sm_share": OverlapParam(
        0.18, 0.0, 0.95,
        "estimate: NCCL runs one CTA per channel, each holding an SM; on Hopper with NVSwitch it opens 16 to 32 "
        "channels for large messages, so ~24 of 132 SMs (0.18) are lost to compute while a collective runs"),
    "interference": OverlapParam(
        0.10, 0.0, 10.0,
        "estimate: beside a compute-bound GEMM, NCCL's copies compete for L2 and HBM (a ring moves ~2x the bus "
        "bytes through HBM, ~15% of an H200's bandwidth at 350 GB/s bus) and its CTAs wait for SMs the GEMM "
        "holds; taken as 10% slower than alone"),
    "chunk_overhead_s": OverlapParam(
        5.0e-6, 0.0, 1.0e-3,
        "estimate: each extra GEMM chunk adds one launch inside a stream (~1 us) and the ramp-up and partial "
        "last wave of a smaller GEMM (the profile's gemm_overhead_s default, 4 us)"),
    "chunk_alpha_s": OverlapParam(
        1.0e-5, 0.0, 1.0e-3,
        "estimate: the fixed latency every chunk's collective pays again when the caller does not give the "
        "collective's own (an NCCL small-message all-reduce over 8 NVLink GPUs takes ~10-20 us)"),
    "chunks": OverlapParam(
        4.0, 1.0, 64.0,
        "estimate: async tensor parallelism splits a GEMM into one chunk per rank; 4 when the caller gives no "
        "group"),
    "fused_sm_share": OverlapParam(
        0.06, 0.0, 0.95,
        "estimate: fused GEMM-collective kernels move data with the copy engine or TMA from a few warps of the "
        "GEMM's own CTAs (Flux, arXiv 2406.06858), not whole SMs: ~1/16 of the compute"),
    "fused_interference": OverlapParam(
        0.05, 0.0, 10.0, "estimate: as `interference`, halved: no separate kernels wait for SMs"),
    "fused_chunks": OverlapParam(
        16.0, 1.0, 4096.0,
        "estimate: tile-level overlap; 16 waves of output tiles stand for many small chunks (only the first "
        "chunk's compute and the last chunk's transfer are exposed)"),
}


def check_overlap_params(values) -> str | None:
    """None if ``values`` is a valid ``Profile.overlap`` object, else what is wrong (one line)."""
    if not isinstance(values, dict):
        return "an object of overlap parameters"
    for k, v in values.items():
        if k not in OVERLAP_PARAMS:
            return f"overlap parameters among {', '.join(OVERLAP_PARAMS)} (not {k!r})"
        p = OVERLAP_PARAMS[k]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and p.lo <= v <= p.hi):
            return f"{k} a number in [{p.lo:g}, {p.hi:g}]"
    return None


@dataclass(frozen=True)
class Profile:
    name: str = "defaults"
    description: str = "documented defaults (uncalibrated estimates)"
    device: str = ""  # device name the profile was measured on, e.g. "NVIDIA H200"
    spec_key: str = ""  # hardware spec it was measured against, e.g. "h200-sxm"
    carried_from: str = ""  # set when carried to another part by transfer rules
    fitted: bool = False
    # the software stack whose kernels were measured: "torch" (this project's suite: plain PyTorch and its SDPA
    # backends) or a serving engine's key (trtllm, vllm, sglang) for tables imported from that engine
    engine: str = "torch"
    # families taken from other profiles when one was composed for a projection (perfmodel.evidence), in words
    other_sources: str = ""

    # GEMM: per-SM tile pipeline. Time of one output tile = 2*tm*tn*(k + k0) / (per-SM peak * eta * tile_eff)
    gemm_eta: dict[str, float] = field(default_factory=lambda: {
        "bf16": 0.80, "fp8": 0.70, "tf32": 0.78, "fp64": 0.85, "fp4": 0.65, "int8": 0.70})
    # (estimate: cuBLAS on Hopper reaches ~790 of 989 TFLOP/s bf16 on 8192^3, KINDS.md of the device library)
    gemm_k0: float = 96.0  # K-loop prologue/epilogue, in K elements (estimate: a few pipeline stages of 64)
    gemm_tile_c: float = 24.0  # tile efficiency 1 / (1 + c (1/tm + 1/tn) - c/256-normalised); smaller tiles lose
    # per format, a factor on gemm_tile_c where the format's tensor rate per SM clock moved unlike bf16's when
    # carried (perfmodel.transfer); absent: 1
    gemm_tile_c_fmt: dict[str, float] = field(default_factory=dict)
    gemm_overhead_s: float = 4.0e-6  # fixed cost of a GEMM launch, ramp-up and tail (estimate)
    gemm_mem_eta: float = 0.85  # fraction of HBM bandwidth a memory-bound GEMM streams at (estimate)
    gemm_softness: float = 4.0  # p of the p-norm joining compute and memory time (large -> max)
    gemm_splitk_min_k: float = 512.0  # split-K / stream-K never cuts K below this many elements
    gemm_wave_q: float = 0.5  # share of a partial last wave that is paid (1: whole waves; 0: perfectly balanced)
    gemm_misaligned_eta: float = 0.3  # rate of the fallback kernels for rows not 16-byte aligned (estimate)
    # how the GEMM rows were timed (perfmodel.power_clock.measure_window: the power-limited clock a row saw):
    # this suite's Timer (perfmodel/measure/timing.py) unless the profile says otherwise
    gemm_timing: dict[str, float] = field(default_factory=lambda: dict(SUITE_TIMING))
    # a format's streaming efficiency relative to gemm_mem_eta (fitted where measured; 1 otherwise)
    gemm_mem_eta_scale: dict[str, float] = field(default_factory=dict)
    # fixed cost of quantizing a linear layer's input, per format (fp8, fp8_block, fp4): fitted from an engine's
    # linear-module times; without one, an elementwise kernel's fixed cost (perfmodel.cost.gemm.quant_prologue)
    gemm_prologue_s: dict[str, float] = field(default_factory=dict)
    gemm_prologue_eta: dict[str, float] = field(default_factory=dict)  # its input pass, a ratio to the bandwidth
    # per format (gemm_format): the most K splits its kernels use (else unlimited); fitted where an engine's
    # tables measure the format
    gemm_max_split: dict[str, float] = field(default_factory=dict)
    # MoE grouped products (perfmodel.graph.moe_expert_ops), per format: compute and streaming efficiency relative
    # to the dense kernels', and a fixed cost of the grouped launch (routing set-up); fitted from an engine's MoE
    # tables; absent: as dense products
    gemm_grouped_eta: dict[str, float] = field(default_factory=dict)
    gemm_grouped_mem: dict[str, float] = field(default_factory=dict)
    gemm_grouped_overhead_s: float = 0.0
    # a fused MoE module's time under a skewed router over its time under balanced routing (perfmodel.routing.ROUTINGS),
    # keyed "<routing>:<ep|local>:<tokens in the step, a power of two>" (with or without expert parallelism): the
    # medians over an engine's MoE tables, which time every shape under each routing (perfmodel.fit.skew); prices
    # the skew where no table prices the module (perfmodel.cost.tables.skew_ratio); absent: balanced
    gemm_grouped_skew: dict[str, float] = field(default_factory=dict)
    # per MoE format (gemm_format): time per token-expert pair of the whole group's routing, local or not (the
    # kernels sort, expand or zero-fill every pair before expert parallelism drops the other ranks': vLLM's Triton
    # MoE writes zeros for non-local pairs); the floor an engine's MoE tables show at wide EP; fitted from them,
    # absent: none
    moe_pair_s: dict[str, float] = field(default_factory=dict)
    # distinct operand tiles in flight per SM needed to stream at full bandwidth (estimate, by Little's law:
    # ~3 MB in flight for 4.8 TB/s at ~600 ns latency is ~35 tiles of 128 x 64 bf16 four stages deep: 0.25/SM);
    # carried to another SM count and bandwidth so that the total follows the bandwidth (perfmodel.transfer)
    gemm_mem_ctas: float = 0.25
    # Tables as measured (perfmodel.cost.tables): the imported calibration folder whose measured rows anchor this
    # family's prices on the part it was measured on ('' none). Set by load_profile from the folder a profile is read
    # from (never by a fit), carried with the family by perfmodel.evidence.compose, cleared by perfmodel.transfer.carry.
    gemm_table: str = ""
    gemm_grouped_table: str = ""
    comm_table: str = ""  # as gemm_table, for collectives (perfmodel.cost.comm_tables)

    # Memory-bound kernels: time = alpha + bytes / (eta * HBM bandwidth)
    mem_eta: dict[str, float] = field(default_factory=lambda: {
        "copy": 0.90, "reduce": 0.90, "rmsnorm": 0.80, "layernorm": 0.75, "swiglu": 0.55, "gelu": 0.75,
        "rotary": 0.35, "residual": 0.85, "embedding": 0.70, "kv_write": 0.70, "moe_permute": 0.60,
        "topk": 0.50, "fused": 0.85, "quantize": 0.80,
        # sampling: the reduce kernel's efficiency over each method's passes (estimate until measured:
        # perfmodel.measure.sampling, fitted by perfmodel.fit.sampling)
        **{f"sample_{m}": 0.90 / n for m, n in SAMPLE_PASSES.items()}})
    # (estimate: copy ~4.3 of 4.8 TB/s on an H200 per KINDS.md; eager chains such as silu(g)*u move more
    #  bytes than the minimum, so their effective eta is lower)
    mem_alpha_s: dict[str, float] = field(default_factory=lambda: {k: 4.0e-6 for k in MEMORY_OP_KINDS})
    # Row-wise kernels (one CTA a row): a row costs row_s per element, rows_per_sm rows run at once per SM
    row_s: dict[str, float] = field(default_factory=lambda: {"rmsnorm": 1.0e-9, "layernorm": 1.0e-9})
    rows_per_sm: float = 8.0

    # Standalone versus in-stream. Every time above is the op's cost inside a stream of kernels (a decoder
    # layer replayed from a CUDA graph). Timed on its own with events, an op also pays the launch latency
    # of its kernel (standalone_overhead_s), and an op that is several eager PyTorch calls cannot finish
    # before the host has issued them (host_floor_s, per kind).
    standalone_overhead_s: float = 2.0e-6  # estimate
    flush_writeback: float = 0.5  # share of one L2 of dirty lines written back during a standalone op (estimate)
    host_floor_s: dict[str, float] = field(default_factory=dict)

    # Gated DeltaNet's chunked prefill (perfmodel.cost.scan): a call's fixed time, one step of its state pass over
    # the chunks, and its parallel work per token and value head. Defaults: calibration/h200-sxm-sglang's fit
    # (perfmodel.fit.deltanet) to aiconfigurator-core 0.12.0's SGLang 0.5.14 gdn_perf table on the H200,
    # flash-linear-attention's chunk_gated_delta_rule under CUDA graphs (1,946 shapes; median |error| 22.8%
    # in-sample, 23.4% held out); a fitted profile's own measurements or an engine's table replace them.
    deltanet_scan: dict[str, float] = field(default_factory=lambda: {
        "fixed_s": 2.381e-05, "chunk_s": 2.315e-06, "token_s": 3.16e-09})

    # Fused attention, per SDPA backend (perfmodel.attention_kernels): a flash-style block walk whose
    # (block_q x block_k) blocks run at attn_eta of the dense peak; decode streams the KV cache at
    # attn_dec_eta of HBM bandwidth. Defaults (estimates): FlashAttention-2 reaches about 35% of H100's
    # dense bf16 peak and cuDNN's fused attention about 60% (FA3 paper, arXiv 2407.08608, Fig. 5);
    # decode over a long GQA cache about 80% (flash) and 92% (cuDNN) of HBM bandwidth (H100, issue 7).
    attn_eta: dict[str, float] = field(default_factory=lambda: {"flash": 0.35, "cudnn": 0.60, "efficient": 0.20})
    attn_dec_eta: dict[str, float] = field(default_factory=lambda: {"flash": 0.80, "cudnn": 0.92, "efficient": 0.60})
    attn_overhead_s: dict[str, float] = field(default_factory=lambda: {"flash": 8e-6, "cudnn": 8e-6, "efficient": 8e-6})
    attn_cta_blocks: dict[str, float] = field(default_factory=lambda: {"flash": 1.0, "cudnn": 1.0, "efficient": 1.0})
    attn_tail: dict[str, float] = field(default_factory=lambda: {"flash": 0.1, "cudnn": 0.1, "efficient": 0.1})
    # softmax on the SM's non-tensor units, per backend: cycles per score and the p-norm joining it with the
    # block's products (perfmodel.cost.attention); absent: not modelled (the backend's attn_eta absorbs it)
    attn_sfu_cycles: dict[str, float] = field(default_factory=dict)
    attn_sfu_p: dict[str, float] = field(default_factory=dict)
    # per backend: each CTA's own latency in SM cycles, and the CTAs per SM needed to stream KV at full bandwidth
    # (perfmodel.cost.attention); absent: no CTA latency, one CTA per SM
    attn_cta_cycles: dict[str, float] = field(default_factory=dict)
    attn_mem_ctas: dict[str, float] = field(default_factory=dict)
    # p of the p-norm joining block compute and KV streaming (as gemm_softness; estimate until fitted)
    attn_softness: dict[str, float] = field(default_factory=lambda: {"flash": 4.0, "cudnn": 4.0, "efficient": 4.0})
    attn_timing: dict[str, float] = field(default_factory=lambda: dict(SUITE_TIMING))  # as gemm_timing
    # Block shapes (query rows x keys) per backend, prefill and ".decode" (structural, not fitted):
    # FlashAttention-2 forward for head dim 128 tiles 128 x 64 and its split-KV decode kernel 64 x 128
    # (flash-attention csrc/flash_fwd_launch_template.h); cuDNN's kernels, by the names the profiler
    # recorded on the H200 (calibration/h200), tile 64 x 128 for prefill ("..._64x128x128_...") and
    # 16 x 128 for decode ("..._16x128x128_..."); the memory-efficient kernel 64 x 64 (its kernel names).
    attn_block_q: dict[str, float] = field(default_factory=lambda: {
        "flash": 128, "flash.decode": 64, "cudnn": 64, "cudnn.decode": 16, "efficient": 64, "efficient.decode": 64})
    attn_block_k: dict[str, float] = field(default_factory=lambda: {
        "flash": 64, "flash.decode": 128, "cudnn": 128, "cudnn.decode": 128, "efficient": 64, "efficient.decode": 64})
    # the backend plain PyTorch dispatches to, per phase, as the suite's profiler saw it (none measured:
    # FlashAttention-2, PyTorch's first choice before cuDNN attention was preferred on Hopper)
    attn_default: dict[str, str] = field(default_factory=lambda: {"prefill": "flash", "decode": "flash"})
    attn_table: str = ""  # as gemm_table, for attention

    # Launches: extra time per kernel on top of its own duration
    launch_graph_s: float = 1.0e-6  # inside a CUDA graph replay (estimate)
    launch_eager_s: float = 6.0e-6  # host dispatch per op in eager PyTorch (estimate)
    # device time a kernel adds to a stream it was launched into one by one (no graph), the host far ahead: the
    # front end fetching each launch (estimate: about 1 us; the launch family's queued mode measures it)
    launch_queued_s: float = 1.0e-6
    # a request's first token from its logits to the host (sampler kernels, copy, wait), greedy, keyed by the
    # vocabulary size; measured by the launch family's round_trip mode (empty: perfmodel.host_costs's estimate)
    token_return_s: dict[str, float] = field(default_factory=dict)

    # Collectives (perfmodel.cost.comm). Measured: alpha (fixed seconds) and eta (bus bandwidth / the spec's
    # scale-up link bandwidth) per collective and world size, keyed "all_reduce:8", fitted by `perfmodel fit`
    # from the suite's collective rows. Otherwise the defaults: comm_base_s, plus the spec's per-hop latency
    # (interconnect.*.latency) for every ring step, and a bus-bandwidth fraction of the link's.
    comm_alpha_s: dict[str, float] = field(default_factory=dict)
    comm_eta: dict[str, float] = field(default_factory=dict)
    # DeepEP's low-latency MoE kernels (perfmodel.cost.comm.deepep_time), per direction ("ll.dispatch",
    # "ll.combine"): a call's fixed time, a time per expert of the model (every rank signals each expert its count)
    # and the bandwidth its per-rank bytes move at, over the spec's scale-up link bandwidth; fitted by `perfmodel
    # fit` from an engine's measured DeepEP tables inside one node (perfmodel.fit.deepep); none: the collective model
    deepep_alpha_s: dict[str, float] = field(default_factory=dict)
    deepep_expert_s: dict[str, float] = field(default_factory=dict)
    deepep_eta: dict[str, float] = field(default_factory=dict)
    # DeepEP's normal kernels across nodes, per direction and node count ("normal.dispatch:2"): a call's fixed
    # time and the bandwidth the bytes each rank sends over its NIC (a token once per remote node) move at, over
    # the spec's scale-out bandwidth per GPU; fitted from an engine's measured tables of 2 to 8 nodes
    # (perfmodel.fit.deepep). Both carry to another part as they are (its own NICs' bandwidth).
    deepep_scaleout_alpha_s: dict[str, float] = field(default_factory=dict)
    deepep_scaleout_eta: dict[str, float] = field(default_factory=dict)
    # fixed cost of one collective: launch and the peers' synchronisation (estimate: NCCL's own tuning model
    # starts a ring at 6.6 us (LL) to 8.4 us (Simple), src/graph/tuning.cc baseLat)
    comm_base_s: float = 6.0e-6
    scaleup_eta: float = 0.80  # NCCL bus bandwidth / link bandwidth on NVLink (estimate)
    scaleout_eta: float = 0.80
    # Compute-communication overlap (perfmodel.cost.overlap): SM share taken by collectives, interference,
    # chunk overhead, fitted from the suite's overlap rows; keys missing take OVERLAP_PARAMS
    overlap: dict[str, float] = field(default_factory=dict)

    # Training kernels (backward GEMMs, attention backward, optimizer step, loss), fitted by
    # perfmodel.fit.training from the suite's training rows; empty: perfmodel.train's documented defaults. It also
    # holds the MoE expert products' grouped efficiency (grouped_gemm_eta and grouped_gemm_rows0, fitted from a
    # folder's grouped-gemm/ rows): relative to the dense GEMM model, carried unchanged (perfmodel.transfer)
    training: dict = field(default_factory=dict)
    # Power model (static power, energy per FLOP by format and per HBM byte), fitted by perfmodel.energy
    # from the suite's power rows; empty: perfmodel.energy's documented defaults
    power: dict = field(default_factory=dict)
    # Host costs of an eager framework (transformers' generate(), perfmodel.host_costs): seconds the host spends
    # per kernel, per eager decode step and around a graph replay, per request (HOST_FIELDS), and ``source``,
    # where they were measured; fitted by perfmodel.fit.host from a measurement folder's hf/ (host.csv,
    # kernels.csv). They describe the machine the calibration ran on, not its GPU: carried to every part
    # unchanged. Empty: perfmodel.host_costs's documented defaults
    host: dict = field(default_factory=dict)

    # Uncertainty: quantiles of log(measured / predicted) per op family, from held-out residuals
    residual_quantiles: dict[str, list[float]] = field(default_factory=lambda: {
        "gemm": [-0.15, 0.0, 0.15], "attention": [-0.2, 0.0, 0.2], "memory": [-0.15, 0.0, 0.15],
        "comm": [-0.3, 0.0, 0.3]})
    carry_spread: float = 0.0  # extra log-spread added when the profile is carried to another part
    validation: dict = field(default_factory=dict)  # held-out error summary, written by the fitter
    provenance: dict = field(default_factory=dict)  # environment and command of the measurements

    def with_(self, **kw) -> "Profile":
        return replace(self, **kw)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @property
    def label(self) -> str:
        if not self.fitted:
            return "none (documented defaults)"
        base = f"{self.name} (carried from {self.carried_from})" if self.carried_from else self.name
        return f"{base} + {self.other_sources}" if self.other_sources else base


DEFAULTS = Profile()


# Fields that hold a dict of numbers keyed by format, kind or backend: a profile file may give some keys and
# take the rest from the defaults.
_NUMBER_DICTS = ("gemm_eta", "gemm_tile_c_fmt", "gemm_mem_eta_scale", "gemm_prologue_s", "gemm_prologue_eta", "gemm_max_split",
                 "gemm_grouped_eta", "gemm_grouped_mem", "gemm_grouped_skew", "moe_pair_s",
                 "attn_sfu_cycles", "attn_sfu_p", "attn_cta_cycles", "attn_mem_ctas", "mem_eta", "mem_alpha_s", "row_s", "host_floor_s", "attn_eta", "attn_dec_eta",
                 "attn_overhead_s", "attn_cta_blocks", "attn_tail", "attn_softness", "attn_block_q", "attn_block_k",
                 "token_return_s", "deltanet_scan", "deepep_alpha_s", "deepep_expert_s", "deepep_eta",
                 "deepep_scaleout_alpha_s", "deepep_scaleout_eta")
_MAY_BE_ZERO = ("gemm_grouped_overhead_s",)  # a cost that may be absent
_FREE_DICTS = ("validation", "provenance", "training", "power", "host")  # checked by their own users
# Per-collective fitted parameters, keyed "<collective>:<world size>" (perfmodel.cost.comm)
_COMM_DICTS = ("comm_alpha_s", "comm_eta")
_COMM_KEY = re.compile(r"^(all_reduce|engine_all_reduce|all_gather|reduce_scatter|all_to_all|p2p):([1-9][0-9]*)$")
# Fields earlier versions wrote that no longer exist: read and ignored, so older profile.json files load.
# scaleup_alpha_s, scaleout_alpha_s: the latency of one ring step, part-independent estimates; now the spec's
# interconnect.scale_up.latency / scale_out.latency (a property of the part's fabric), or the fitted alpha.
# gemm_power_drop, gemm_power_tau, gemm_format_power_drop: a fitted power-limited slowdown of long kernels, now the
# physics of perfmodel.power_clock (issue 24: fitted on tables, it slowed a step's GEMMs by up to 1.8x).
RETIRED_FIELDS = ("scaleup_alpha_s", "scaleout_alpha_s", "gemm_power_drop", "gemm_power_tau", "gemm_format_power_drop")
_TEXT = ("name", "description", "device", "spec_key", "carried_from", "engine", "other_sources", "gemm_table",
         "gemm_grouped_table", "attn_table", "comm_table")
# The table field of each family a fit may record as measured (perfmodel.cost.tables.TABLE_FIELD)
TABLE_FIELDS = {"gemm": "gemm_table", "attention": "attn_table", "moe": "gemm_grouped_table", "comm": "comm_table"}
# A fraction of a datasheet peak may pass 1 by the clock headroom (rates are quoted at a sustained clock
# below max boost: 1980 / 1830 MHz on Hopper), never by 2.
MAX_ETA = 2.0
# Physical ranges, checked at load (one line naming the file and field): a fraction of a datasheet rate or
# bandwidth reaches at most 1.5 (clock headroom and a datasheet quoted low, never more; the shipped profiles
# reach 1.2); ratios between two rates (gemm_mem_eta_scale, the grouped-GEMM ratios, comm_eta) keep MAX_ETA;
# a fixed time (launch, overhead, alpha, prologue, a row's element, the power ramp) is under 1 s per kernel
# (the shipped profiles reach 0.02 s); a share is within [0, 1]; any other number (tile constants, cycles,
# block sizes, p-norms) under 10^6. `gemm_overhead_s: 1e308` loaded before and gave infinite times.
MAX_FRACTION_OF_PEAK = 1.5
MAX_TIME_S = 1.0
MAX_OTHER = 1e6
MAX_LOG_SPREAD = 5.0  # a quantile or spread of log(measured / predicted): e^5, a factor of 150
# comm_eta: bus bandwidth over the spec's link bandwidth, which the fitter bounds at 2 (perfmodel.fit)
_RELATIVE_ETA = ("gemm_mem_eta_scale", "gemm_grouped_eta", "gemm_grouped_mem", "comm_eta", "deepep_eta")
_SHARES = ("gemm_wave_q",)
_TIMES = ()  # times whose name does not end in _s


def _range_problem(key: str, v: float) -> str | None:
    """What ``v`` (finite, non-negative: checked before) of field ``key`` should be, when out of range."""
    if key.endswith("_s") or key in _TIMES:
        return None if v <= MAX_TIME_S else f"a time under {MAX_TIME_S:g} s per kernel"
    if key in _SHARES:
        return None if v <= 1 else "a share in [0, 1]"
    if "eta" in key:
        top = MAX_ETA if key in _RELATIVE_ETA else MAX_FRACTION_OF_PEAK
        return None if v <= top else (f"a ratio to the datasheet rate or bandwidth in (0, {top:g}] "
                                      "(fractions of peak)")
    return None if v <= MAX_OTHER else f"a number under {MAX_OTHER:g}"


# The training parameters the cost code divides by or multiplies with (perfmodel.train.cost.TRAIN_DEFAULTS): each
# a positive finite number (a dict of them per backend or kind) in range; `adamw_eta: 0` had divided by zero.
_TRAINING_RANGES = {"gemm_dgrad_scale": MAX_ETA * 5, "gemm_wgrad_scale": MAX_ETA * 5, "attn_bwd_ratio": 100.0,
                    "mem_bwd_scale": MAX_ETA * 5, "loss_scale": 100.0, "adamw_eta": MAX_FRACTION_OF_PEAK,
                    "adamw_alpha_s": MAX_TIME_S, "grouped_gemm_eta": MAX_ETA, "grouped_gemm_rows0": MAX_OTHER,
                    "fp8_split_over_fast": 10.0}
_TRAINING_MAY_BE_ZERO = ("grouped_gemm_rows0",)  # rows of per-expert cost: none is a fit's answer too


def _check_training(value: dict, file: str) -> None:
    for k, top in _TRAINING_RANGES.items():
        v = value.get(k)
        if v is None:
            continue
        items = v.items() if isinstance(v, dict) else [("", v)]
        for sub, x in items:
            number = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            if not (number and (0 <= x if k in _TRAINING_MAY_BE_ZERO else 0 < x) and x <= top):
                where = f"training.{k}" + (f".{sub}" if sub else "")
                kind = "a number >= 0" if k in _TRAINING_MAY_BE_ZERO else "a positive number"
                raise InputError(f"expected {kind} up to {top:g}, got {json.dumps(x)[:40]}", file=file,
                                 field=where)


# The power section's figures (perfmodel.power_clock.ClockModel, perfmodel.energy): every one a finite number >= 0
# (text is the fit's "source"), the ones divided by positive, the shares at most 1; a zero alpha or tau had divided
# by zero and a negative energy per FLOP had given negative joules with exit 0 (the hostile corpus, issue 27)
_POWER_POSITIVE = ("alpha", "tau_s", "slow_tau_s", "tdp_w")
_POWER_SHARES = ("alone_share", "fast_share")


def _check_power(value: dict, file: str, where: str = "power") -> None:
    for k, v in value.items():
        field = f"{where}.{k}"
        if isinstance(v, dict):
            _check_power(v, file, field)
            continue
        if k == "source" and isinstance(v, str):
            continue
        if k == "fitted" and isinstance(v, bool):
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        low_ok = number and (v > 0 if k in _POWER_POSITIVE else v >= 0)
        top = 1.0 if k in _POWER_SHARES else MAX_OTHER
        if not (low_ok and v <= top):
            what = "a positive number" if k in _POWER_POSITIVE else "a number >= 0"
            raise InputError(f"expected {what} up to {top:g}, got {json.dumps(v)[:40]}", file=file, field=field)


HOST_FIELDS = ("kernel_s", "step_s", "graph_step_s", "request_s")  # Profile.host's times


def _check_host(value: dict, file: str) -> None:
    for k, v in value.items():
        if k == "source" and isinstance(v, str):
            continue
        if k not in HOST_FIELDS:
            raise InputError(f"expected host costs among {', '.join(HOST_FIELDS)} and source, got {k!r}"[:120],
                             file=file, field="host")
        if not (_positive(v) and v <= MAX_TIME_S):
            raise InputError(f"expected a time in (0, {MAX_TIME_S:g}] s, got {json.dumps(v)[:40]}", file=file,
                             field=f"host.{k}")
    missing = [k for k in HOST_FIELDS if k not in value]
    if value and missing:
        raise InputError(f"host costs lack {', '.join(missing)}", file=file, field="host")


def load_profile(path: str | Path) -> Profile:
    """Read ``profile.json`` (or a calibration folder holding one), checking every field."""
    from .io import check_input_path, loads_json, read_input_bytes

    check_input_path(path, what="a calibration profile (profile.json or its folder)")
    p = Path(path)
    if p.is_dir():
        p = p / "profile.json"
    if not p.is_file():
        raise InputError("no calibration profile here (expected profile.json; run `perfmodel fit DIR` first)",
                         file=str(path))
    raw = read_input_bytes(p, what="a calibration profile", max_bytes=16 << 20)
    try:
        data = loads_json(raw, file=str(p), what="a calibration profile", parse_constant=_no_constant)
    except ValueError as e:
        raise InputError(str(e), file=str(p)) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object of profile fields", file=str(p))
    known = {f.name for f in fields(Profile)}
    for retired in RETIRED_FIELDS:
        data.pop(retired, None)
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"unknown profile field(s): {', '.join(unknown)}", file=str(p))
    base = asdict(DEFAULTS)
    for key, value in data.items():
        _check_field(key, value, base[key], str(p))
    for key in _NUMBER_DICTS + ("attn_default", "residual_quantiles"):
        merged = dict(base[key])
        merged.update(data.get(key, {}))
        data[key] = merged
    return _with_tables(Profile(**{**base, **data}), p.parent)


def _with_tables(prof: Profile, folder: Path) -> Profile:
    """The profile with each measured family's table field naming ``folder`` where it holds an engine's imported
    tables (its rows, its whole tables or its collectives, and the import's provenance), else cleared: a file never
    names another folder's table. An installed package carries the whole tables and the collectives, not the rows."""
    from .measure.store import MEASUREMENTS
    from .paths import COLLECTIVES_FILE

    imported = prof.fitted and prof.engine != "torch" and isinstance(prof.provenance.get("import"), dict)
    shipped = (MEASUREMENTS, MEASUREMENTS + ".gz", "tables.npz", COLLECTIVES_FILE)  # (cost.table_store.FILE)
    rows = any((folder / name).is_file() for name in shipped)
    measured = prof.provenance.get("measured_families") if imported and rows else None
    measured = measured if isinstance(measured, list) else []
    where = str(folder.resolve())
    return prof.with_(**{f: (where if fam in measured else "") for fam, f in TABLE_FIELDS.items()})


def _no_constant(name: str):
    raise ValueError(f"not valid JSON: {name} is not a number a profile may hold")


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_field(key: str, value, default, file: str) -> None:
    """One line naming the field and what was expected, for a value of the wrong type or range."""
    def bad(expected: str):
        return InputError(f"expected {expected}, got {json.dumps(value)[:60]}", file=file, field=key)

    if key in _TEXT:
        if not isinstance(value, str):
            raise bad("a string")
    elif key == "fitted":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif key in TIMING_FIELDS:
        if not isinstance(value, dict) or set(value) != set(SUITE_TIMING) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_OTHER
                for v in value.values()):
            raise bad(f"an object of non-negative numbers with the keys {', '.join(SUITE_TIMING)}")
    elif key in _FREE_DICTS:
        if not isinstance(value, dict):
            raise bad("an object")
        if key == "training":
            _check_training(value, file)
        elif key == "power":
            _check_power(value, file)
        elif key == "host":
            _check_host(value, file)
    elif key in _COMM_DICTS:
        if not isinstance(value, dict) or not all(isinstance(k, str) and _COMM_KEY.match(k) and int(k.split(":")[1]) >= 2
                                                  for k in value):
            raise bad('an object keyed "<collective>:<world size>" (e.g. "all_reduce:8", world size >= 2)')
        if not all(_positive(v) for v in value.values()):
            raise bad("positive finite numbers")
        for k, v in value.items():
            problem = _range_problem(key, v)
            if problem:
                raise InputError(f"expected {problem}, got {v!r}", file=file, field=f"{key}.{k}")
    elif key == "overlap":
        problem = check_overlap_params(value)
        if problem is not None:
            raise bad(problem)
    elif key in _NUMBER_DICTS:
        if not isinstance(value, dict) or not all(isinstance(k, str) and (_positive(v) or (v == 0 and key in (
                "host_floor_s", "deepep_expert_s", "deepep_alpha_s"))) for k, v in value.items()):
            raise bad("an object of positive finite numbers")
        for k, v in value.items():
            problem = _range_problem(key, v)
            if problem:
                raise InputError(f"expected {problem}, got {v!r}", file=file, field=f"{key}.{k}")
    elif key == "attn_default":
        from .attention_kernels import KERNELS

        if not isinstance(value, dict) or not all(v in KERNELS for v in value.values()):
            raise bad(f"an object of phase -> attention backend ({', '.join(KERNELS)})")
    elif key == "residual_quantiles":
        if not isinstance(value, dict) or not all(
                isinstance(q, list) and len(q) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                          and math.isfinite(x) and abs(x) <= MAX_LOG_SPREAD for x in q)
                and q[0] <= q[1] <= q[2] for q in value.values()):
            raise bad(f"an object of [p10, p50, p90] lists of ascending numbers within +-{MAX_LOG_SPREAD:g} "
                      "(logs of measured / predicted)")
    elif key == "carry_spread":
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and 0 <= value <= MAX_LOG_SPREAD):
            raise bad(f"a non-negative number up to {MAX_LOG_SPREAD:g} (a log-spread)")
    elif isinstance(default, (int, float)) and not isinstance(default, bool):
        if key in _MAY_BE_ZERO and isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value \
                <= MAX_TIME_S:
            return
        if not _positive(value):
            raise bad("a positive finite number")
        problem = _range_problem(key, value)
        if problem:
            raise bad(problem)


def save_profile(profile: Profile, path: Path) -> None:
    from .io import write_text_atomic

    write_text_atomic(path, profile.to_json() + "\n")
