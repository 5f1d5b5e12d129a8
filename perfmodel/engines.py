"""Serving-engine presets: which kernels, fusions, launch mode, KV format, chunk size and memory share each
engine runs with, every choice with its source.

A :class:`~perfmodel.scenario.Scenario` leaves these fields ``None`` ("the engine's"); resolving it for a
part (:meth:`Scenario.for_hardware`) fills them from the engine's preset, keeping any the user set.
``auto`` is TensorRT-LLM on NVIDIA parts and vLLM elsewhere.

Sources are the engines' documentation and source defaults as of late 2025; where a default depends on
the installation or the GPU, the value and the rule are stated and marked as an estimate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from .errors import InputError

AUTO = "auto"
GiB = 2**30


# Which models a model-dependent default applies to (:class:`ModelDefault`): a predicate on the model, and the words a
# projection's assumptions name them by
MODEL_CLASSES = {
    "linear_attention": (lambda m: getattr(m, "linear_attention", None) is not None,
                         "models with Gated DeltaNet linear-attention layers (Qwen3-Next, Qwen3.5)"),
    "sparse_attention": (lambda m: bool(getattr(getattr(m, "mla", None), "index_topk", 0)),
                         "models with DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5)"),
}


# the GPUs of one HGX node: a larger NVLink domain (an NVL72 rack) spans several nodes' trays
NODE_GPUS = 8
# SGLang's DeepEP payloads (sources["moe_all_to_all"]): the low-latency dispatch in fp8, the normal one in fp8
# where the experts run fp8 (or narrower), both combines in bf16
SGLANG_A2A_PAYLOAD = {"ll.dispatch": "fp8", "ll.combine": "bf16", "normal.dispatch": "fp8_experts",
                      "normal.combine": "bf16"}
# vLLM's: fp8 blocks out for block-fp8 experts, else bf16 (its DeepEP dispatch takes fp8 with 128-blocks of scales
# only: vLLM 0.24.0's fused_moe/all2all_utils.py use_fp8_dispatch for the low-latency kernels, and
# prepare_finalize/deepep_ht.py quantizing before the normal dispatch only for block quantization, read from its
# wheel), bf16 back
VLLM_A2A_PAYLOAD = {"ll.dispatch": "block_fp8_experts", "ll.combine": "bf16", "normal.dispatch": "block_fp8_experts",
                    "normal.combine": "bf16"}
# TensorRT-LLM's, as aiconfigurator-core 0.12.0 reads them (sdk/operations/moe_comm.py communication_dtype_for):
# DeepEP's low-latency calls in the experts' format both ways (bf16, fp8, NVFP4 out and fp4 back), its
# high-throughput ones NVFP4 out for NVFP4 experts and bf16 otherwise, bf16 back (its combine under NVFP4 experts
# times as its bf16 one); the MNNVL all-to-all the experts' format out (the preset quantizes before the exchange)
# and bf16 back
TRTLLM_A2A_PAYLOAD = {"ll.dispatch": "experts", "ll.combine": "experts", "normal.dispatch": "fp4_experts",
                      "normal.combine": "bf16", "mnnvl.dispatch": "experts", "mnnvl.combine": "bf16"}


def _np():
    import numpy

    return numpy


def host_curve(knots, seqs, xp=None):
    """Seconds at ``seqs`` sequences along a measured curve ``knots`` ((sequences, seconds), ascending): from none at
    no sequences straight to the first, linear between measured counts, past the last at the last stretch's slope.
    Written as a sum of clipped stretches so that numbers, arrays and spreadsheet cells (``xp``, a math backend of
    :mod:`perfmodel.cost.backend`) take the same formula."""
    if isinstance(seqs, (int, float)):
        def clip(v, width):
            return max(v, 0.0) if width is None else min(max(v, 0.0), width)
    else:
        if xp is None:  # an array of sequences (a sweep): numpy's own
            import numpy as xp

        def clip(v, width):
            return xp.maximum(v, 0.0) if width is None else xp.clip(v, 0.0, width)

    pts = ((0, 0.0),) + tuple(knots)
    t = 0.0
    for i, ((x0, y0), (x1, y1)) in enumerate(zip(pts, pts[1:])):
        last = i == len(pts) - 2
        t = t + (y1 - y0) / (x1 - x0) * clip(seqs - x0, None if last else x1 - x0)
    return t


# the tokens a stream had already sent, on average, over the timed steps of the front-end harnesses' main sweeps
# (calibration/engine-host/*/frontend: 20 warm-up steps, then 50 timed ones: 22 to 71 sent in SGLang's, whose first
# step comes before the warm-up, 21 to 70 in vLLM's): the length their curves stand for
FRONTEND_BASE_TOKENS = 46.5


def default_api_servers(per_dp_rank: bool, attention_dp: int) -> int:
    """The API servers an engine starts by default: one per attention-DP rank where it does so, else one."""
    return max(int(attention_dp), 1) if per_dp_rank else 1


@dataclass(frozen=True)
class ModelDefault:
    """A default the engine sets for some models only, as its server arguments resolve per architecture: scenario
    field ``field`` takes ``value`` for the models of class ``models`` (:data:`MODEL_CLASSES`) on the NVIDIA
    generations listed (empty: every part), unless the user set the field."""

    field: str
    value: object
    models: str
    what: str  # the default in words ("synchronous scheduling")
    source: str
    generations: tuple[str, ...] = ()

    def applies(self, model, generation: str) -> bool:
        return MODEL_CLASSES[self.models][0](model) and (not self.generations or generation in self.generations)

    def note(self) -> str:
        where = f" on {'/'.join(self.generations)} parts" if self.generations else ""
        return f"{self.what}{where} for {MODEL_CLASSES[self.models][1]}"


@dataclass(frozen=True)
class Engine:
    key: str
    name: str
    attention: dict[str, str]  # attention kernel per NVIDIA generation; "*" for any other part
    kernels: str  # fused (norm + residual, one SwiGLU kernel, packed decode attention) | torch (plain PyTorch)
    rotary: str  # kv_write (inside the KV-cache write) | kernel (one kernel on q and k) | eager (five torch calls)
    launch: str  # auto (decode from CUDA graphs, prefill eager) | graph | eager
    fp8_kv: bool  # fp8 weights imply an fp8 KV cache
    fp8_attention: bool  # with an fp8 KV cache, attention's matrix products run in fp8
    prefill_chunk: int  # prefill tokens per scheduler step
    max_batch: int  # most sequences the scheduler runs at once (``--batch max`` is also capped by memory)
    mem_policy: str  # free: the KV cache takes mem_fraction of what is free after weights and activations;
    # total: weights, activations and KV cache together take mem_fraction of the device; static: weights and KV cache
    # take it, activations and CUDA graphs live in the rest (SGLang's mem_fraction_static)
    mem_fraction: float | dict[int, float]  # one share, or one per TP degree (the largest key <= tp applies)
    mem_reserve: float  # bytes per GPU outside the engine's pool: CUDA context, library workspaces, graphs
    sources: dict[str, str] = field(default_factory=dict)
    vendors: tuple[str, ...] = ("nvidia", "amd", "other")
    kv_cache: str = "paged"  # paged (a block pool) | dynamic | static (Hugging Face transformers' caches)
    batching: str = "continuous"  # continuous (a scheduler admits requests into the running batch) | static
    # how an MoE layer over attention-data-parallel ranks meets the tokens of the other ranks: gather (every
    # rank's tokens all-gathered before the experts, their outputs reduce-scattered after) | all_to_all (each
    # token dispatched to the ranks of its experts and combined back, DeepEP-style); and whether the tokens travel
    # in the experts' GEMM format (fp8 or NVFP4 with their scales) rather than bf16
    moe_exchange: str = "gather"
    moe_quantized_exchange: bool = False
    # wide expert parallelism: where attention DP spreads the MoE over more GPUs than one node, the engine's
    # deployments exchange by all_to_all on its own kernels instead (``sources["wide_ep"]``; exchange_for)
    wide_ep_all_to_all: bool = False
    # the kernels an all_to_all exchange runs on: per_rank (a token sent once to every rank holding any of its
    # experts, in the exchange format above: TensorRT-LLM's MNNVL all-to-all, DeepEP's normal mode) | deepep
    # (decode steps on DeepEP's low-latency kernels, every routed token-expert pair a message of its own,
    # dispatched in fp8 with a fp32 scale per 128 values and a 16-byte header, combined in bf16; prefill per_rank)
    moe_all_to_all: str = "per_rank"
    # the kernels of an all_to_all exchange on a part whose NVLink domain spans several nodes (GB200 / GB300 NVL72)
    # where the engine runs others there: mnnvl (TensorRT-LLM's NVLink one-sided all-to-all, a token once per rank
    # holding any of its experts, priced from its measured table where a profile fitted it); None: the same
    moe_all_to_all_nvl: str | None = None
    # the payload format of DeepEP's calls, per "<kernel>.<direction>" (ll.dispatch, ll.combine, normal.dispatch,
    # normal.combine): bf16 | fp8 (a fp32 scale per 128 values) | experts (the experts' product format: fp8 or
    # NVFP4, else bf16) | fp8_experts (fp8 where the experts' products take a byte or less, else bf16) |
    # block_fp8_experts (fp8 where they run fp8 with block scales, else bf16) | fp4_experts (NVFP4 where they run
    # fp4, else bf16); perfmodel.graph.deepep_payload reads it
    a2a_payload: dict[str, str] = field(default_factory=lambda: dict(SGLANG_A2A_PAYLOAD))
    # the release whose documented defaults the preset follows, and the one NVIDIA's imported kernel tables
    # were measured with (calibration/<part>-<engine>/environment.json)
    version: str = ""
    # the format the engine's MoE runs weight-only MXFP4 experts' products in, per NVIDIA generation ("*": any
    # other): bf16 activations (W4A16), or fp8 (MXFP8 activations, W4A8)
    weight_only_moe: dict[str, str] = field(default_factory=lambda: {"*": "bf16"})
    # which other engines' measured kernels stand closest to this one's where its own were not measured, nearest
    # first (perfmodel.evidence ranks the GEMM, MoE, attention and collective evidence by it; the reason is in
    # ``near_source``). An engine absent from the list ranks after every listed one.
    near: tuple[str, ...] = ()
    # how the scheduler admits a request: "no_evict" (only when the KV cache can hold it to its last token:
    # ``--batch max`` caps the running sequences) | "preempt" (while free blocks hold the prompt, preempting or
    # retracting when decode runs out: the preset's sequence limit caps them, blocks decide the rest)
    admission: str = "preempt"
    # how a step meets prompts and decoding sequences: "mixed" (prompt chunks ride in the decode steps, within the
    # token budget) | "prefill_first" (waiting prompts run in a step of their own, ahead of the decoding sequences,
    # which wait); ``schedule_source`` says where it is read; ``own_schedule``: the engine's own default where the
    # preset schedules otherwise (None: the same)
    schedule: str = "mixed"
    schedule_source: str = ""
    own_schedule: str | None = None
    # each attention-data-parallel rank's step budget: "per_rank" (every rank schedules its own requests within the
    # whole prefill_chunk) | "split" (within prefill_chunk / attention_dp); ``sources["dp_budget"]``
    dp_budget: str = "per_rank"
    # whether the attention-DP ranks pad their tokens to the busiest rank's in steps replayed from CUDA graphs (the
    # MoE layers then meet DP x the busiest rank's tokens); ``sources["dp_pad"]``
    dp_pad: bool = False
    # the launch mode with a static KV cache where it differs from ``launch`` (transformers' generate() compiles the
    # decode step of a compileable cache: ``sources["launch"]``); None: ``launch``
    static_cache_launch: str | None = None
    near_source: str = ""  # why ``near`` is in that order
    admission_source: str = ""  # the engine's documentation or source for ``admission``
    # the words a benchmark row's source or notes name the engine by (perfmodel.validate.engine_of), lower case
    words: tuple[str, ...] = ()
    # the engine's own host work a step against the sequences it runs (scheduling, KV-block bookkeeping, output
    # processing): a measured curve ((sequences, seconds), host_curve) per scheduling mode, "sync" (the host work runs
    # between the device's steps: the step takes their sum) and "async" (the next step is scheduled while the
    # device runs this one: the step takes the longer); empty: not measured, no cost. ``async_scheduling``: the
    # mode the preset's release runs by default (:func:`async_scheduling_for` gives another release's)
    scheduler_host: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # the engine's front end: the processes between its scheduler and the clients (detokenising, and the HTTP server
    # turning every token into a streamed event), each a pipeline stage beside the scheduler: a measured curve
    # ((sequences, seconds) of one process's work a decode step, host_curve) per process; a step goes no faster than
    # the slowest of them (they overlap the device and the scheduler, never add to them); empty: not measured, none.
    # ``frontend_split``: the processes that share the streams among the API servers (:attr:`Scenario.api_servers`);
    # ``api_servers_per_dp_rank``: the engine starts one API server per attention-DP rank by default (else one)
    frontend_host: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    frontend_split: tuple[str, ...] = ()
    # how a front-end process's work grows with the tokens each stream has already sent (its per-request state is
    # copied every step): a measured curve ((sequences, seconds per step per token a stream has streamed past
    # FRONTEND_BASE_TOKENS), host_curve) per process; a process without one does not grow
    frontend_length: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    api_servers_per_dp_rank: bool = False
    # the engine's own defaults for the step budget and memory share from the device's memory and the layout:
    # (visible bytes, tp, pp, attention_dp, model, chunk or None) -> (prefill_chunk, mem_fraction); None: fixed
    memory_rule: Callable | None = None
    async_scheduling: bool = False
    # when a MoE layer's shared experts run on a second CUDA stream beside its router and routed experts (the two
    # paths then overlap, perfmodel.step_accounting.stream_regions): "graph" (steps replayed from a CUDA graph),
    # "small" (steps of at most SHARED_STREAM_TOKENS tokens a rank), "never"; ``sources["shared_stream"]``
    shared_stream: str = "never"
    # the engine folds a DeepSeek-V3 layout's one shared expert into the routed experts' module, as one more
    # expert every token picks, where the experts are not split by expert parallelism
    fused_shared_expert: bool = False
    # MLA with a query latent: the hidden state projected into the query latent and the KV latent by one product
    fused_latent_proj: bool = False
    # block-fp8 experts on DeepGEMM's grouped product over the worst-case contiguous layout (one of MOE_PADDINGS):
    # "computed" (every 128-row block, padding included: vLLM 0.12), "skipped" (the padded blocks skipped, the
    # activation and re-quantization still over every row: vLLM 0.13-0.17 where DeepGEMM runs), "none" (a layout of
    # the routed rows); :func:`moe_padding_for`, perfmodel.graph.padded_expert_ops; ``sources["moe_padding"]``
    moe_padding: str = "none"
    # the model families whose TP all-reduce the engine folds into the residual add and RMSNorm after it (one
    # kernel), on the NVIDIA generations listed, in steps of at most ALLREDUCE_NORM_TOKENS tokens without attention
    # data parallelism; ``sources["allreduce_norm"]``
    allreduce_norm: tuple[str, ...] = ()
    allreduce_norm_generations: tuple[str, ...] = ()
    # defaults the engine sets per model architecture (its server arguments' model-specific adjustments)
    model_defaults: tuple[ModelDefault, ...] = ()

    def model_defaults_for(self, model, generation: str) -> tuple[ModelDefault, ...]:
        """The rules of :attr:`model_defaults` that apply to ``model`` on a part of ``generation`` (none without a
        model)."""
        if model is None:
            return ()
        return tuple(d for d in self.model_defaults if d.applies(model, generation))

    def defaults_for_model(self, model, generation: str) -> dict:
        """The scenario fields this engine sets for ``model`` on a part of ``generation`` over its preset."""
        return {d.field: d.value for d in self.model_defaults_for(model, generation)}

    def scheduler_host_s(self, seqs, async_scheduling: bool, xp=None):
        """The engine's host seconds for a step of ``seqs`` sequences in the given mode (``xp``: a math backend,
        :mod:`perfmodel.cost.backend`, for arrays or spreadsheet formulas); 0 where not measured."""
        knots = self.scheduler_host.get("async" if async_scheduling else "sync")
        return host_curve(knots, seqs, xp) if knots else 0.0

    def api_servers_for(self, attention_dp: int) -> int:
        """The API server processes the engine starts by default for a layout of ``attention_dp`` ranks."""
        return default_api_servers(self.api_servers_per_dp_rank, attention_dp)

    def frontend_host_s(self, seqs, api_servers: int = 1, xp=None, streamed: float = FRONTEND_BASE_TOKENS):
        """Seconds of its slowest front-end process a step of ``seqs`` streamed sequences takes (the processes of
        :attr:`frontend_split` each take ``seqs`` / ``api_servers`` of them), each stream having sent ``streamed``
        tokens on average (:attr:`frontend_length`); 0 where not measured or with no API server (``api_servers`` 0:
        an offline run, no stream)."""
        if not self.frontend_host or not api_servers:
            return 0.0
        longer = max(float(streamed) - FRONTEND_BASE_TOKENS, 0.0)

        def process_s(name, knots):
            n = seqs / api_servers if name in self.frontend_split and api_servers > 1 else seqs
            t = host_curve(knots, n, xp)
            if longer and name in self.frontend_length:
                t = t + host_curve(self.frontend_length[name], n, xp) * longer
            return t

        times = [process_s(name, knots) for name, knots in sorted(self.frontend_host.items())]
        out = times[0]
        for t in times[1:]:
            out = max(out, t) if isinstance(out, (int, float)) and isinstance(t, (int, float)) else (
                (xp or _np()).maximum(out, t))
        return out

    def exchange_for(self, moe_group: int, attention_dp: int, ep: int) -> str:
        """How the MoE layers of a layout meet other ranks' tokens: all_to_all where attention data parallelism
        spreads the experts over more GPUs than one node (:attr:`wide_ep_all_to_all`), else :attr:`moe_exchange`."""
        if self.wide_ep_all_to_all and attention_dp > 1 and ep > 1 and moe_group > NODE_GPUS:
            return "all_to_all"
        return self.moe_exchange

    def all_to_all_for(self, hw) -> str:
        """The kernels an all_to_all exchange runs on ``hw`` (:attr:`moe_all_to_all`, :attr:`moe_all_to_all_nvl`
        where the part's NVLink domain is larger than one 8-GPU node)."""
        if self.moe_all_to_all_nvl and getattr(hw, "scaleup_domain", 8) > NODE_GPUS:
            return self.moe_all_to_all_nvl
        return self.moe_all_to_all

    def attention_for(self, generation: str) -> str:
        return self.attention.get(generation, self.attention["*"])

    def weight_only_act_for(self, generation: str) -> str:
        return self.weight_only_moe.get(generation, self.weight_only_moe["*"])

    def memory_for(self, hw, tp: int, pp: int = 1, attention_dp: int = 1, model=None,
                   chunk: int | None = None) -> tuple[int, float]:
        """(prefill tokens a step, memory share) of the preset on ``hw`` for the layout: the engine's own rule of
        the device's memory where it has one (``memory_rule``), else the fixed chunk and the share by TP. ``chunk``:
        a step budget the user set (the rule's share then reserves for it)."""
        if self.memory_rule is not None and getattr(hw, "hbm_visible_bytes", 0):
            return self.memory_rule(hw.hbm_visible_bytes, tp, pp, attention_dp, model, chunk)
        return chunk or self.prefill_chunk, self.fraction_for(tp)

    def fraction_for(self, tp: int) -> float:
        if isinstance(self.mem_fraction, dict):
            return self.mem_fraction[max(k for k in self.mem_fraction if k <= tp)]
        return self.mem_fraction


# vLLM V1's engine-core host work a decode step, measured without a GPU on this project's development machine
# (calibration/engine-host/vllm: vLLM 0.34.0's real Scheduler and output handling driven with a fake model
# output, B = 1 to 2,048 running sequences, a 2-vCPU AMD EPYC VM at load 0.7-1.8): the medians, (sequences,
# seconds) per scheduling mode, priced along them (host_curve; tests/test_engine_host.py reads them from the
# committed results). A line through them had put 0.07 ms at 64 sequences where the run measured 0.66.
VLLM_SCHEDULER_HOST = {
    "sync": ((1, 44.5e-6), (8, 129.6e-6), (64, 660.7e-6), (256, 2492.9e-6), (512, 5797.0e-6), (1024, 11861.0e-6),
             (1536, 24387.8e-6), (2048, 31199.0e-6)),
    "async": ((1, 49.0e-6), (8, 147.1e-6), (64, 759.1e-6), (256, 2892.5e-6), (512, 6117.7e-6), (1024, 13714.7e-6),
              (1536, 24132.4e-6), (2048, 36567.2e-6))}
VLLM_SCHEDULER_SOURCE = (
    "measured: vLLM 0.34.0's Scheduler.schedule, update_from_output, the model runner's CPU-only batch gathering "
    "and the output serialisation, per decode step, on a 2-vCPU AMD EPYC VM without a GPU "
    "(calibration/engine-host/vllm, REPORT.md), its medians at 1 to 2,048 running sequences, interpolated; the "
    "model runner's work that needs CUDA (block tables, input and metadata preparation, launches) and the API "
    "server's process (a separate process, 9.8 us a sequence, overlapped) are not in it; a datacenter host's "
    "faster cores would take less (not measured)")
VLLM_ASYNC_SOURCE = (
    "vLLM 0.13.0 and earlier: SchedulerConfig.async_scheduling = False; from 0.14.0 its default None is resolved "
    "to True by VllmConfig unless an option is incompatible (pipeline parallelism before 0.16, some speculative "
    "methods) (vllm/config/scheduler.py and vllm/config/vllm.py of the 0.12.0, 0.13.0, 0.14.0, 0.16.0 and 0.19.0 "
    "wheels, read offline; 0.34.0 the same); the preset follows 0.11, as its launch files do (perfmodel deploy): "
    "synchronous (--scheduling async for 0.14 and later)")


# vLLM's API server a decode step (calibration/engine-host/vllm/frontend: vLLM 0.19.0's own server as `vllm serve`
# starts it, the engine core faked, streaming one token to each of B chat-completion clients over loopback sockets; a
# 2-vCPU Intel Xeon VM at load 0.6-1.1): the process's CPU medians, (sequences, seconds)
VLLM_FRONTEND_HOST = {
    "api_server": ((1, 257.0e-6), (8, 580.5e-6), (64, 2624.5e-6), (256, 10761.5e-6), (512, 28178.0e-6),
                   (1024, 66769.5e-6), (2048, 141676.0e-6))}
# ... and how it grows with the tokens each stream has already sent (the same harness on the AMD EPYC development VM,
# 2.3x / 1.7x slower at 256 / 1,024 streams: H = 0, 1,000 and 4,000 interleaved in one server process, 3 points each
# in two processes, pooled; results.json, processes.api_server.output_length_dependence; its detokenizer's output text
# and the chat stream's previous text are copied every step): 1.048 / 1.115 times its own baseline at 256 streams
# after 1,000 / 4,000 tokens, 1.074 / 1.196 at 1,024, less than linear from 1,000 to 4,000 (single points spread 1.5x).
# Carried to this curve's VM as a share of its work: the least-squares growth per token over the two lengths
# (2.99e-5 and 5.04e-5) times the curve at 256 and 1,024 (tests/test_engine_host.py recomputes them)
VLLM_FRONTEND_LENGTH = {"api_server": ((256, 3.2209e-7), (1024, 3.3674e-6))}
VLLM_FRONTEND_SOURCE = (
    "measured: vLLM 0.19.0's API server process per decode step streaming to B clients (ZMQ receive and msgpack "
    "decode, OutputProcessor's detokenising, the stat loggers, each request's generate() waking, the chat chunk built "
    "and serialised by pydantic, Starlette and uvicorn writing it to the socket), the engine core faked, on a 2-vCPU "
    "Intel Xeon VM (calibration/engine-host/vllm/frontend, REPORT.md): its medians at 1 to 2,048 streams, "
    "interpolated; one API server (vLLM 0.11.0's --api-server-count default 1, entrypoints/openai/cli_args.py, as "
    "the preset follows 0.11), where 0.19.0 starts one per data-parallel rank (entrypoints/cli/serve.py: "
    "api_server_count defaults to data_parallel_size), each streaming its share; its work growing with the tokens a "
    "stream has already sent (runs after 1,000 and 4,000 tokens at 256 and 1,024 streams on another VM, carried as a "
    "share of the work; a projection's streams have sent half the output); the benchmark client's own work is "
    "not in it")


# SGLang's scheduler thread a decode step, measured the same way (calibration/engine-host/sglang: SGLang 0.5.23's
# filter_batch, update_running_batch with prepare_for_decode, the batch copy and process_batch_result_decode with
# stream_output, the forward faked; the same VM at load 2.0-2.5): "async" its default overlap scheduler, "sync"
# --disable-overlap-schedule; the medians as vLLM's
SGLANG_SCHEDULER_HOST = {
    "sync": ((1, 128.1e-6), (8, 180.8e-6), (64, 608.9e-6), (256, 3993.5e-6), (512, 8770.3e-6), (1024, 18394.8e-6),
             (1536, 30345.8e-6), (2048, 40156.9e-6)),
    "async": ((1, 183.5e-6), (8, 199.4e-6), (64, 638.8e-6), (256, 2737.7e-6), (512, 6645.4e-6), (1024, 17497.2e-6),
              (1536, 29902.1e-6), (2048, 47504.9e-6))}
# SGLang's front end a decode step (calibration/engine-host/sglang/frontend: SGLang 0.5.9's own TokenizerManager and
# OpenAI chat serving under uvicorn as launch_server runs them, and its DetokenizerManager, the scheduler faked, one
# token to each of B streaming clients over loopback sockets; the same 2-vCPU Intel Xeon VM): each process's CPU
# medians, (sequences, seconds)
SGLANG_FRONTEND_HOST = {
    "http_server": ((1, 230.1e-6), (8, 587.5e-6), (64, 3633.4e-6), (256, 16413.6e-6), (512, 38814.5e-6),
                    (1024, 89163.6e-6), (2048, 206474.8e-6)),
    "detokenizer": ((1, 75.3e-6), (8, 149.1e-6), (64, 694.1e-6), (256, 2588.9e-6), (512, 5103.4e-6),
                    (1024, 10024.0e-6), (2048, 21767.3e-6))}
# ... and how its HTTP server's work grows with the tokens each stream has already sent (the same harness, one
# repetition each, at 256 and 1,024 streams that had streamed 1,000 and 4,000 tokens before the timed steps:
# results.json, processes.http_server.output_length_dependence; TokenizerManager copies each request's output ids and
# text every step): linear in the length at either count (12.4 and 12.7 ns a token a stream at 256, 34.6 and 32.4
# at 1,024), the step's extra seconds per token past the main sweep's (sequences, seconds), least squares over the
# two lengths through none at the main sweep's length (tests/test_engine_host.py recomputes them); the detokenizer
# grows far less (never the slower one)
SGLANG_FRONTEND_LENGTH = {"http_server": ((256, 3.2146e-6), (1024, 33.050e-6))}
SGLANG_FRONTEND_SOURCE = (
    "measured: SGLang 0.5.9's HTTP server process per decode step streaming to B clients (the BatchStrOutput "
    "received, TokenizerManager._handle_batch_output, each request's _wait_one_response waking, the chat chunk built "
    "and serialised by pydantic, Starlette and uvicorn (h11, what a plain install of 0.5.9 resolves) writing it to the "
    "socket) and its detokenizer process (BatchTokenIDOutput received, handle_batch_token_id_out, BatchStrOutput "
    "sent), the scheduler faked, on a 2-vCPU Intel Xeon VM (calibration/engine-host/sglang/frontend, REPORT.md): "
    "each process's medians at 1 to 2,048 streams, interpolated, the slower binding; one HTTP server by default "
    "(tokenizer_worker_num = 1, server_args.py), the streams shared by --tokenizer-worker-num of them, the "
    "detokenizer one process; the HTTP server's work growing with the tokens a stream has already sent (runs after "
    "1,000 and 4,000 tokens at 256 and 1,024 streams, per token by least squares; a projection's streams have sent "
    "half the output); the benchmark client's own work is not in it")
SGLANG_SCHEDULER_SOURCE = (
    "measured: SGLang 0.5.23's scheduler-thread work a decode step (batch filtering, prepare_for_decode with the CPU "
    "KV allocator and radix cache, the batch copy, process_batch_result_decode and stream_output's pickling) on the "
    "2-vCPU AMD EPYC development VM at load 2.0-2.5, the forward faked (calibration/engine-host/sglang, REPORT.md): "
    "its medians at 1 to 2,048 running sequences with and without the overlap scheduler, interpolated; ForwardBatch "
    "set-up and launches, and the "
    "detokenizer and tokenizer-manager processes (separate, overlapped) are not in it")
VLLM_SHARED_STREAM_SOURCE = (
    "vLLM from 0.12.0 runs a MoE layer's shared experts on a separate CUDA stream, started before the router, in "
    "steps of at most VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD = 256 tokens (fused_moe/layer.py "
    "_maybe_setup_shared_experts_stream and vllm/envs.py of the 0.12.0 and 0.19.0 wheels; not in 0.11.0, read "
    "offline); the preset follows 0.11: never (--shared-stream small for 0.12 and later)")
SGLANG_SHARED_STREAM_SOURCE = (
    "SGLang 0.5.9 (read offline): DeepseekV2MoE, Qwen2MoeSparseMoeBlock (Qwen3.5) and Glm4MoeSparseMoeBlock run the "
    "router and routed experts on alt_stream beside the shared experts while a CUDA graph is captured "
    "(forward_normal_dual_stream under get_is_capture_mode(): decode steps); Qwen3-Next below 1,024 tokens; the "
    "DeepEP path always (forward_deepep, not modelled apart)")
SGLANG_FUSED_SHARED_SOURCE = (
    "SGLang 0.5.9 DeepseekV2ForCausalLM.determine_num_fused_shared_experts: DeepSeek-V3/R1's layout (256 routed "
    "experts, one shared) on CUDA without expert parallelism or DeepEP fuses the shared expert into the routed "
    "experts' module (num_fused_shared_experts = 1, top-k + 1: one more expert every token picks)")
SGLANG_ALLREDUCE_NORM_SOURCE = (
    "SGLang 0.5.9 server_args.py turns enable_flashinfer_allreduce_fusion on for DeepseekV3ForCausalLM (DeepSeek-V3, "
    "Kimi K2), KimiK25ForConditionalGeneration, GptOssForCausalLM, Glm4MoeForCausalLM and Qwen3MoeForCausalLM on "
    "SM90 and SM100 without DP attention, on one node, without an all-to-all backend; layers/communicator.py then "
    "runs each TP all-reduce with the residual add and RMSNorm after it as one kernel (forward_with_allreduce_fusion, "
    "FlashInfer's TensorRT-LLM all-reduce fusion) in steps of at most FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048 tokens "
    "(read offline); priced as the all-reduce alone (the norm's work inside it: estimate)")
MiB = 2**20
# SGLang 0.5.9's ServerArgs._handle_gpu_memory_settings (identical in 0.5.10.post1; both wheels read offline): by the
# GPU's memory in MiB (nvidia-smi memory.total, get_nvgpu_memory_capacity), from the least: (upper bound, chunked
# prefill size, cuda_graph_max_bs below TP 4, at TP 4 and above)
SGLANG_MEMORY_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
                       (160 * 1024, 8192, 256, 512), (float("inf"), 16384, 512, 512))
SGLANG_MEMORY_SOURCE = (
    "SGLang 0.5.9 and 0.5.10.post1 server_args.py _handle_gpu_memory_settings (read offline): chunked_prefill_size "
    "and cuda_graph_max_bs by the GPU's memory (8192 below 160 GiB, 16384 above), mem_fraction_static = (memory - "
    "reserved) / memory with reserved = 512 MiB + 1.5 MiB a chunk token + 2 MiB a graph batch + TP x PP / 8 GiB (+ "
    "DP attention's padding), at least 10 GiB above 60 GiB, then x 0.95 x a ViT-size factor for a multimodal model "
    "(adjust_mem_fraction_for_vlm); the fraction holds the weights and the KV pool (model_runner_kv_cache_mixin.py: "
    "the pool is what is free after the weights less (1 - fraction) of the memory), activations and CUDA graphs the "
    "rest. With DP attention each rank's scheduler gets the chunk / DP (_handle_data_parallelism): the instance's "
    "step budget stays the chunk")


def sglang_memory(visible: float, tp: int, pp: int = 1, attention_dp: int = 1, model=None,
                  chunk: int | None = None) -> tuple[int, float]:
    """(chunked_prefill_size, mem_fraction_static) as SGLang sets them by default for a GPU of ``visible`` bytes
    (:data:`SGLANG_MEMORY_SOURCE`); ``chunk``: a chunk the user set, which the reserve is then sized for."""
    mem = visible / MiB
    _, default_chunk, graphs_small, graphs = next(t for t in SGLANG_MEMORY_TIERS if mem < t[0])
    graph_bs = graphs_small if tp < 4 else graphs
    chunk = int(chunk or default_chunk)
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if attention_dp > 1:  # enable_dp_attention
        reserved += graph_bs * attention_dp * 3 + (graph_bs * attention_dp * 1.5 if graph_bs > 300 else 0.0)
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((mem - reserved) / mem, 3)
    vit = getattr(model, "vision", None)
    if vit is not None:  # adjust_mem_fraction_for_vlm: every doubling of a ViT-L/14's size takes 10% more
        ratio = vit.layers * vit.hidden ** 2 / (24 * 1024 ** 2)
        fraction *= 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return chunk, fraction


SGLANG_SCHEDULE_SOURCE = (
    "SGLang managers/scheduler.py get_next_batch_to_run: a prefill batch of waiting requests (PrefillAdder, within "
    "chunked_prefill_size) runs whenever one can be formed, the running requests decode otherwise; "
    "--enable-mixed-chunk (off by default, server_args.py) would fold decoding into it (0.4-0.5, read offline). The "
    "preset still schedules as vLLM does (--schedule prefill_first runs SGLang's): the simulated closed loop stays in "
    "lock-step waves, which SGLang's schedule turns into a burst a wave (every prompt of the wave prefilled before "
    "any decodes), and the measured SGLang TTFTs lie between the two; from a desynchronized start "
    "(--closed-loop-start spread) the two schedules nearly agree (docs/serving.md, Schedules)")
SGLANG_ASYNC_SOURCE = (
    "SGLang server_args.py: disable_overlap_schedule = False (0.5.9 and 0.5.23, read offline): the overlap "
    "scheduler prepares the next batch while the device runs this one (scheduler.py event_loop_overlap)")


# SGLang's defaults for the hybrid linear-attention architectures (server_args.py, 0.5.9 and 0.5.10.post1, read
# offline): _handle_model_specific_adjustments calls _handle_mamba_radix_cache for Qwen3NextForCausalLM and
# Qwen3_5(Moe)ForConditionalGeneration with sm100_default_attention_backend="triton"
SGLANG_MAMBA_SYNC_SOURCE = (
    "SGLang 0.5.9 and 0.5.10.post1 server_args.py (read offline): mamba_scheduler_strategy 'auto' resolves to "
    "'no_buffer', and with the radix cache on (the default) _handle_mamba_radix_cache sets disable_overlap_schedule "
    "for Qwen3NextForCausalLM and Qwen3_5(Moe)ForConditionalGeneration ('mamba no_buffer is not compatible with "
    "overlap schedule'): their host work runs between the device's steps")
SGLANG_MAMBA_TRITON_SOURCE = (
    "SGLang 0.5.9 and 0.5.10.post1 server_args.py (read offline): _handle_mamba_radix_cache(..., "
    "sm100_default_attention_backend='triton') for Qwen3NextForCausalLM and Qwen3_5(Moe)ForConditionalGeneration: "
    "with no --attention-backend given, their full-attention layers run the Triton backend on sm100 parts "
    "(B200, GB200, B300, GB300), where other models run trtllm_mha")
# SGLang's defaults for DeepSeek Sparse Attention (server_args.py, 0.5.9, read offline)
SGLANG_DSA_FP8_KV_SOURCE = (
    "SGLang 0.5.9 server_args.py (read offline): for DeepseekV3ForCausalLM and GlmMoeDsaForCausalLM checkpoints with "
    "DeepSeek Sparse Attention (is_deepseek_nsa), _set_default_nsa_kv_cache_dtype resolves --kv-cache-dtype auto to "
    "fp8_e4m3 on compute capability 10 and above (B200, GB200, B300, GB300) and to bfloat16 below (Hopper); "
    "_set_default_nsa_backends then decodes over the fp8 cache with its fp8 sparse kernels")
SGLANG_MODEL_DEFAULTS = (
    ModelDefault("async_scheduling", False, "linear_attention", "synchronous scheduling (no overlap scheduler)",
                 SGLANG_MAMBA_SYNC_SOURCE),
    ModelDefault("attention_kernel", "triton", "linear_attention", "Triton attention", SGLANG_MAMBA_TRITON_SOURCE,
                 generations=("blackwell", "blackwell-ultra")),
    ModelDefault("kv_dtype", "fp8", "sparse_attention", "an fp8 KV cache", SGLANG_DSA_FP8_KV_SOURCE,
                 generations=("blackwell", "blackwell-ultra")),
)

SHARED_STREAMS = ("graph", "small", "never")
# SGLang's FUSE_ALLREDUCE_MAX_BATCH_SIZE (layers/communicator.py, 0.5.9): the most tokens a step folds its all-reduce
ALLREDUCE_NORM_TOKENS = 2048
# vLLM's VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD default (vllm/envs.py, 0.12.0 to 0.19.0)
SHARED_STREAM_TOKENS = 256


_RELEASE = re.compile(r"^v?(\d+(?:\.\d+){0,3})(?:[.-]?(rc|a|b|alpha|beta)(\d*))?(?:[.-]?post(\d*))?")


def release_key(text: str | None) -> tuple | None:
    """An orderable key of a release string (``0.19.0``, ``1.3.0rc10``, ``0.5.6.post2``, ``1.2.0rc6.post3``), a
    release candidate before its release and a post-release after it; None where the text names no numbered
    release (``nightly-dev``, a commit)."""
    m = _RELEASE.match((text or "").strip().lower())
    if m is None:
        return None
    numbers = tuple(int(x) for x in m.group(1).split("."))
    numbers = numbers + (0,) * (4 - len(numbers))
    pre = (0, int(m.group(3) or 0)) if m.group(2) else (1, 0)
    post = int(m.group(4) or 0) + 1 if m.group(4) is not None else 0
    return (*numbers, *pre, post)


# When each release was built: the date of the METADATA entry in its PyPI wheel (read offline 2026-12-07, `pip
# download sglang==V --no-deps`). A nightly build of a date runs the code of that date, between two releases.
RELEASE_DATES = {
    "sglang": {"0.5.8": "2026-01-23", "0.5.9": "2026-02-23", "0.5.10": "2026-04-05", "0.5.11": "2026-05-07",
               "0.5.12": "2026-05-16", "0.5.13": "2026-06-11", "0.5.14": "2026-06-26"},
}
_NIGHTLY_DATE = re.compile(r"^nightly[\w.-]*?-(20\d{2})(\d{2})(\d{2})(?:-|$)")


def nightly_date(text: str | None) -> str | None:
    """The date (YYYY-MM-DD) in a nightly build's name (``nightly-dev-cu13-20260317-1eea7448``), else None."""
    m = _NIGHTLY_DATE.match((text or "").strip().lower())
    return "-".join(m.groups()) if m else None


def nightly_release(engine: str, text: str | None) -> str | None:
    """The release a dated nightly build of ``engine`` stands nearest (``nightly-dev-cu13-20260317-1eea7448``: the
    newest release built on or before its date, :data:`RELEASE_DATES`), as the tables of a release stand for the
    newest release not newer (:mod:`perfmodel.releases`); None for anything else (a numbered release, a nightly
    with no date, an engine whose dates were not read, a date before every release read)."""
    built, dates = nightly_date(text), RELEASE_DATES.get(engine)
    if built is None or not dates:
        return None
    older = [v for v, day in dates.items() if day <= built]
    return max(older, key=release_key) if older else None


def numbered_release(engine: str, text: str | None) -> str | None:
    """``text`` where it names a numbered release of ``engine``; a dated nightly's nearest release
    (:func:`nightly_release`); else None (``nightly-dev`` with no date, a name of no release)."""
    text = (text or "").strip()
    return text if release_key(text) is not None else nightly_release(engine, text)


def _release(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None  # "nightly-...": no release number


def shared_stream_for(engine: str, version: str) -> str | None:
    """When release ``version`` of ``engine`` runs the shared experts on a second stream (:attr:`Engine.
    shared_stream`); None where the release or the engine's rule is not known (the preset's then)."""
    release = _release(version) if engine == "vllm" else None
    if release is None:
        return None
    return "small" if release >= (0, 12) else "never"


# the layouts a MoE module's grouped products run over (Engine.moe_padding)
MOE_PADDINGS = ("computed", "skipped", "none")
# the generations DeepGEMM runs on (vLLM utils/deep_gemm.py is_deep_gemm_supported: capability 9.0 or the 10.x
# family from 0.13; 0.12 took 9.0 and 10.0 only, not the B300's 10.3)
DEEPGEMM_GENERATIONS = ("hopper", "blackwell", "blackwell-ultra")
SM100_GENERATIONS = ("blackwell", "blackwell-ultra")
# the routers (perfmodel.models.ROUTERS) FlashInfer's TensorRT-LLM block-fp8 MoE kernel routes itself as vLLM 0.15-0.17
# call it (RoutingMethodType DeepSeekV3, Renormalize, RenormalizeNaive; fused_moe/config.py get_routing_method_type
# names a router: sigmoid scores with a selection bias through grouped top-k are DeepSeekV3, a renormalized softmax
# top-k Renormalize, a sigmoid with a selection bias and plain top-k Unspecified)
TRTLLM_BLOCK_FP8_ROUTERS = ("sigmoid_bias_grouped", "softmax")

VLLM_PADDING_SOURCE = (
    "vLLM's fp8 MoE backend choice for block-fp8 experts, read from the 0.12.0, 0.13.0, 0.14.0, 0.15.1, 0.16.0, 0.17.0 "
    "and 0.19.0 wheels (2026-12-07): 0.12-0.14 take DeepGEMM on SM90/SM100 (utils/deep_gemm.py: capability 9.0 or "
    "10.0 in 0.12, 9.0 or the 10.x family from 0.13) where the MoE's TP degree is below 8 "
    "(VLLM_MOE_USE_DEEP_GEMM's default) and deep_gemm is importable (its release images install it: an estimate, the "
    "Dockerfile is not in the wheel), FlashInfer only when VLLM_USE_FLASHINFER_MOE_FP8 is set; 0.15-0.17 try FlashInfer's "
    "TensorRT-LLM kernel first (SM100, for the routers it routes itself: DeepSeekV3, Renormalize, RenormalizeNaive), "
    "then FlashInfer's CUTLASS one (block fp8 on SM90 only), then DeepGEMM, and 0.17 prefers Triton under TP and "
    "FlashInfer CUTLASS under EP on Hopper; 0.19 adds a modular TensorRT-LLM kernel that takes every router "
    "(experts/trtllm_fp8_moe.py TrtLlmFp8ExpertsModular), so DeepGEMM's MoE runs no more by default. Where it runs, "
    "VLLM_USE_DEEP_GEMM_E8M0's default takes it at every batch size, and fused_moe/deep_gemm_utils.py "
    "compute_aligned_M sizes the contiguous layout for the worst case, M x top-k + local experts x 127 rows rounded "
    "up to 128, when the experts' token counts are not on the host (never, in the modular kernel without expert "
    "parallelism's prepare); deepgemm_moe_permute fills the unused blocks' expert ids with zeros in 0.12 (DeepGEMM "
    "computes them as expert 0's) and with -1 from 0.13 (skipped), and DeepGemmExperts runs the activation and the "
    "re-quantization over every row of the layout (_act_mul_quant over M_sum rows) in every release")


def moe_padding_for(engine: str, version: str, generation: str | None = None, router: str | None = None,
                    moe_tp: int | None = None) -> str | None:
    """The layout release ``version`` of ``engine`` runs block-fp8 experts' grouped products over on a part of
    ``generation``, for a model of ``router`` (perfmodel.models.ROUTERS) with the experts split ``moe_tp`` ways
    (:attr:`Engine.moe_padding`, :data:`VLLM_PADDING_SOURCE`): "computed", "skipped" or "none"; None where the release
    or the engine's rule is not known (vLLM 0.18, whose wheel was not read; the preset's then). Without a part,
    router or split the rule assumes the one that runs DeepGEMM."""
    release = _release(version) if engine == "vllm" else None
    if release is None or release < (0, 12) or release == (0, 18):
        return None
    if generation is not None and (generation not in DEEPGEMM_GENERATIONS
                                   or release == (0, 12) and generation == "blackwell-ultra"):
        return "none"
    if release <= (0, 14):
        if moe_tp is not None and moe_tp >= 8:
            return "none"
        return "computed" if release == (0, 12) else "skipped"
    if release <= (0, 17) and generation in (None,) + SM100_GENERATIONS and router not in TRTLLM_BLOCK_FP8_ROUTERS:
        return "skipped"
    return "none"


# FlashInfer's TensorRT-LLM block-fp8 MoE kernel in vLLM on SM100 comes in two classes: the monolithic one routes
# tokens itself and takes only the routers its _supports_routing_method lists; the modular one takes every router
# (experts/trtllm_fp8_moe.py, read from the 0.19.0-0.24.0 wheels): 0.19 lists DeepSeekV3 alone, 0.20 also Renormalize
# and RenormalizeNaive, 0.21 also SigmoidRenorm and MiniMax2, 0.23 also Sigmoid (none of this project's routers:
# a top-1 sigmoid router is Llama4's). Keyed by the first release of each list, by perfmodel.models.ROUTERS.
VLLM_MONOLITHIC_ROUTERS = {(0, 19): ("sigmoid_bias_grouped",),
                           (0, 20): ("sigmoid_bias_grouped", "softmax"),
                           (0, 21): ("sigmoid_bias_grouped", "softmax", "sigmoid_bias")}
VLLM_MODULE_SOURCE = (
    "vLLM's FlashInfer TensorRT-LLM block-fp8 MoE on SM100 (fused_moe/oracle/fp8.py backend_to_kernel_cls: "
    "[TrtLlmFp8ExpertsMonolithic, TrtLlmFp8ExpertsModular], the first that supports the layer): the monolithic "
    "class routes tokens itself, for the routing methods its _supports_routing_method lists (0.19.0: DeepSeekV3; "
    "0.20.0: DeepSeekV3, Renormalize, RenormalizeNaive; 0.21.0 and 0.22.0: also SigmoidRenorm, MiniMax2; 0.23.0 and "
    "0.24.0: also Sigmoid), the modular one for every other router (experts/trtllm_fp8_moe.py of the 0.19.0-0.24.0 "
    "wheels, read offline 2026-12-07; a sigmoid router with a selection bias and no groups is MiniMax2 from 0.21, "
    "Unspecified in 0.20: fused_moe/config.py get_routing_method_type). "
    "aiconfigurator-core's 0.24 B200 table times both; the projection prices the class the release runs for the "
    "model's router from that kernel's rows (at the shapes both time alike but for top-k, the modular class at "
    "top-6 takes 1.01-1.17x the monolithic one's time at top-8 at one token: docs/engines.md)")


def moe_module_for(engine: str, version: str | None, generation: str | None, router: str | None) -> str | None:
    """The class of FlashInfer's TensorRT-LLM block-fp8 MoE kernel ``engine``'s release ``version`` runs for a model
    of ``router`` on a part of ``generation`` (:data:`VLLM_MONOLITHIC_ROUTERS`, the newest list not newer than the
    release): "monolithic", "modular", or None where the rule does not apply (another engine or part, a release with
    no number; before 0.19 the modular class does not exist). ``version`` None: the release of the engine folder's own
    tables (0.24)."""
    if engine != "vllm" or generation not in SM100_GENERATIONS or router is None:
        return None
    release = (0, 24) if version is None else _release(version)
    if release is None or release < (0, 19):
        return None
    routers = VLLM_MONOLITHIC_ROUTERS[max(k for k in VLLM_MONOLITHIC_ROUTERS if k <= release)]
    return "monolithic" if router in routers else "modular"


def release_defaults(engine: str, version: str | None, *, generation: str | None = None, router: str | None = None,
                     moe_tp: int | None = None, attention_dp: int = 1) -> dict:
    """What release ``version`` of ``engine`` runs by default where the rules read from its source know it
    (:func:`async_scheduling_for`, :func:`shared_stream_for`, :func:`moe_padding_for`, the last for a part of
    ``generation``, a model of ``router`` and experts split ``moe_tp`` ways), as scenario fields: a projection naming
    its release (``--engine-release``) runs these instead of the preset's."""
    if not version:
        return {}
    per_rank = api_servers_per_rank_for(engine, version)
    found = {"async_scheduling": async_scheduling_for(engine, version),
             "shared_stream": shared_stream_for(engine, version),
             "moe_padding": moe_padding_for(engine, version, generation, router, moe_tp),
             "moe_module": moe_module_for(engine, version, generation, router),
             "api_servers": None if per_rank is None else default_api_servers(per_rank, attention_dp)}
    return {field: value for field, value in found.items() if value is not None}


def api_servers_per_rank_for(engine: str, version: str) -> bool | None:
    """Whether release ``version`` of ``engine`` starts one API server per data-parallel rank by default
    (:attr:`Engine.api_servers_per_dp_rank`): vLLM 0.11.0 one (``--api-server-count`` default 1,
    entrypoints/openai/cli_args.py), 0.19.0 and later one per rank (entrypoints/cli/serve.py: api_server_count
    defaults to data_parallel_size), both read offline; None between them (not read) and for other engines."""
    release = _release(version) if engine == "vllm" else None
    if release is None:
        return None
    return False if release <= (0, 11) else True if release >= (0, 19) else None


def async_scheduling_for(engine: str, version: str) -> bool | None:
    """Whether release ``version`` of ``engine`` schedules asynchronously by default (:attr:`Engine.
    async_scheduling`); None where the release or the engine's rule is not known (the preset's then)."""
    release = _release(version) if engine == "vllm" else None
    return None if release is None else release >= (0, 14)


_RESERVE_NOTE = ("estimate: about 0.5 GiB of CUDA context plus cuBLAS/attention workspaces and captured CUDA "
                 "graphs; the engines do not publish one figure")

ENGINES: dict[str, Engine] = {e.key: e for e in (
    Engine(
        "trtllm", "TensorRT-LLM",
        attention={"*": "trtllm", "ampere": "flash"},
        kernels="fused", rotary="kv_write", launch="auto", fp8_kv=True, fp8_attention=True,
        prefill_chunk=8192, max_batch=2048, mem_policy="free", mem_fraction=0.9, mem_reserve=2 * GiB,
        moe_exchange="gather", moe_quantized_exchange=True, moe_all_to_all="deepep", moe_all_to_all_nvl="mnnvl",
        wide_ep_all_to_all=True,
        a2a_payload=dict(TRTLLM_A2A_PAYLOAD),
        weight_only_moe={"*": "bf16", "blackwell": "fp8", "blackwell-ultra": "fp8"},
        version="TensorRT-LLM 1.0 defaults (PyTorch backend, LLM API); kernel tables measured with 1.3.0rc20",
        near=("trtllm", "vllm", "sglang", "torch", "hf"), admission="no_evict",
        near_source="its kernels are its own (TRTLLM-gen, CUTLASS builds of its own); the other serving engines' "
                    "tables are the nearest measurement of a serving engine's modules, plain PyTorch's last",
        admission_source="TensorRT-LLM's default capacity scheduler policy GUARANTEED_NO_EVICT (SchedulerConfig): a "
                         "request starts only when the KV cache can hold it to its last token",
        schedule_source="TensorRT-LLM's in-flight batching: context (prompt) chunks and generation requests of one "
                        "iteration run in one forward pass (batch_manager, enable_chunked_context)",
        words=("tensorrt-llm", "trt-llm", "trtllm"), shared_stream="graph", fused_latent_proj=True,
        sources={
            "dp_budget": "estimate: with enable_attention_dp every rank's executor schedules its own requests within "
                         "max_num_tokens (TensorRT-LLM's source could not be read here)",
            "wide_ep": "estimate: TensorRT-LLM's wide-EP deployments (attention DP over a GB200 NVL72's or several "
                       "nodes' GPUs) run its all-to-all MoE (NVIDIA's 'Scaling Expert Parallelism in TensorRT-LLM' "
                       "blogs, read from memory, not here): the MNNVL kernels on NVL72, DeepEP's across HGX nodes",
            "fused_latent_proj": "TensorRT-LLM's DeepSeek-V3 attention projects the query and KV latents with one "
                                 "product (fused_a); aiconfigurator-core 0.12.0 composes its decode with the same "
                                 "2,112-wide product (sdk/models/deepseek.py, generation_downscale_gemm)",
            "shared_stream": "aiconfigurator-core 0.12.0 (sdk/models/deepseek.py, generation_moe_overlap): "
                             "TensorRT-LLM's DeepSeek-V3 MoE runs the shared experts and the routed ones on "
                             "different CUDA streams (maybe_execute_in_parallel) when CUDA graphs are enabled, which "
                             "it composes as the longer of the two paths: decode steps; its other MoE models with "
                             "shared experts alike (estimate: TensorRT-LLM's source could not be read here)",
            "weight_only_moe": "TensorRT-LLM's gpt-oss deployment: on Blackwell its TRTLLM-gen MoE runs the MXFP4 "
                               "experts with MXFP8 activations (quant algo W4A8_MXFP4_MXFP8), on Hopper the "
                               "Triton W4A16 MXFP4 kernels; aiconfigurator-core times both formats per part "
                               "(estimate: which one a given run used is not recorded)",
            "attention": "TensorRT-LLM docs, advanced/gpt-attention.md: context FMHA and XQA generation kernels",
            "moe_exchange": "TensorRT-LLM 1.x PyTorch backend with enable_attention_dp: the fused MoE all-gathers the "
                            "quantized (FP8 / NVFP4) inputs of every DP rank and reduce-scatters its outputs "
                            "(tensorrt_llm/_torch/modules/fused_moe); its MNNVL all-to-all is an option for wide EP "
                            "(estimate: which one a given run used is not recorded)",
            "moe_all_to_all": "estimate: TensorRT-LLM 1.x's wide-EP MoE with attention DP picks its all-to-all "
                              "per system (fused_moe select_alltoall_method_type, not read here): its MNNVL "
                              "all-to-all where the NVLink domain spans nodes (GB200 / GB300 NVL72), DeepEP's "
                              "kernels on an HGX node where enabled (TRTLLM_CAN_USE_DEEP_EP; low-latency under CUDA "
                              "graphs, normal otherwise); aiconfigurator-core 0.12.0 times both (moe_a2a_perf: "
                              "trtllm_deepep_ll / _ht on every part it covers; trtllm_alltoall_perf: NVLinkOneSided "
                              "on the GB200), the payloads in the formats its communication_dtype_for names",
            "kernels": "TensorRT-LLM fuses residual + RMSNorm, SwiGLU and RoPE into the attention preprocessing "
                       "(docs, advanced/gpt-attention.md; PyTorch backend fusion passes)",
            "fp8_kv": "TensorRT-LLM performance docs (perf-overview): FP8 checkpoints are benchmarked with an FP8 "
                      "KV cache",
            "fp8_attention": "estimate: TensorRT-LLM runs FP8 context FMHA when the KV cache is FP8 "
                             "(use_fp8_context_fmha); whether a given build enables it is not published per row",
            "prefill_chunk": "TensorRT-LLM max_num_tokens default 8192 (trtllm-serve / LLM API BuildConfig)",
            "max_batch": "TensorRT-LLM max_batch_size default 2048 (trtllm-serve / LLM API BuildConfig)",
            "mem_fraction": "TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction default 0.9 (of the memory free "
                            "after weights and activations)",
            "mem_reserve": _RESERVE_NOTE,
        }, vendors=("nvidia",)),
    Engine(
        "vllm", "vLLM",
        attention={"*": "flash", "hopper": "fa3", "blackwell": "flashinfer", "blackwell-ultra": "flashinfer"},
        kernels="fused", rotary="kernel", launch="auto", fp8_kv=False, fp8_attention=False,
        prefill_chunk=8192, max_batch=1024, mem_policy="total", mem_fraction=0.9, mem_reserve=2 * GiB,
        moe_exchange="gather", moe_quantized_exchange=False, moe_all_to_all="deepep", wide_ep_all_to_all=True,
        dp_pad=True,
        a2a_payload=dict(VLLM_A2A_PAYLOAD),
        version="vLLM 0.11 defaults (V1 engine); kernel tables measured with 0.24.0",
        near=("vllm", "sglang", "trtllm", "torch", "hf"), admission="preempt", words=("vllm",),
        scheduler_host=VLLM_SCHEDULER_HOST, async_scheduling=False, shared_stream="never", fused_latent_proj=True,
        frontend_host=VLLM_FRONTEND_HOST, frontend_split=("api_server",), frontend_length=VLLM_FRONTEND_LENGTH,
        api_servers_per_dp_rank=False,
        near_source="vLLM and SGLang share FlashInfer and CUTLASS kernels; TensorRT-LLM's next; plain PyTorch's "
                    "bf16 linear is the very call vLLM times for bf16",
        admission_source="vLLM V1 scheduler: admits while free KV blocks hold the prompt (max_num_seqs caps the "
                         "running sequences) and preempts by recomputation when decode runs out of blocks",
        schedule_source="vLLM V1 scheduler: the running requests' decode tokens first, then chunks of prompts, in "
                        "one step within max_num_batched_tokens (docs: chunked prefill, always on in V1)",
        sources={
            "wide_ep": "estimate: vLLM's expert-parallel deployment guide runs data parallelism over several nodes "
                       "with a DeepEP backend (--all2all-backend deepep_low_latency / deepep_high_throughput in "
                       "0.24.0's config/parallel.py; the default allgather_reducescatter gathers every rank's "
                       "tokens); the guide read from memory, not here",
            "dp_pad": "vLLM 0.24.0 (its wheel read offline): v1/worker/dp_utils.py coordinate_batch_across_dp "
                      "all-reduces each step's token counts over the DP ranks and pads every rank to the largest "
                      "where the step runs from a CUDA graph on every rank (should_dp_pad: the synced cudagraph mode "
                      "is not NONE, or micro-batching)",
            "dp_budget": "vLLM 0.24.0 (its wheel read offline): every data-parallel rank runs an engine core with its "
                         "own scheduler under the same max_num_batched_tokens (engine/arg_utils.py sets it without "
                         "regard to data_parallel_size); the coordinator sends a request to the engine of least 4 x "
                         "waiting + running (v1/engine/core_client.py)",
            "moe_exchange": "vLLM VLLM_ALL2ALL_BACKEND default allgather_reducescatter with data-parallel attention "
                            "and expert parallelism (vllm/envs.py, v0.11); DeepEP's kernels when asked "
                            "(--moe-exchange all_to_all); bf16 tokens (estimate for other versions)",
            "moe_all_to_all": "estimate: vLLM runs one DeepEP backend for every step (VLLM_ALL2ALL_BACKEND "
                              "deepep_low_latency or deepep_high_throughput); the preset takes the low-latency "
                              "kernels for decode steps and the normal ones for prefill, as a disaggregated "
                              "deployment's decode and prefill instances run them (docs/collectives.md); both "
                              "timed with vLLM 0.24.0 by aiconfigurator-core 0.12.0 (moe_a2a_perf deepep_ll / "
                              "deepep_ht, its 'default' payload taken as bf16); fp8 blocks out for block-fp8 "
                              "experts, bf16 otherwise and back (vLLM 0.24.0's all2all_utils.py and "
                              "prepare_finalize/deepep_ht.py, read from its wheel)",
            "attention": "vLLM V1 FLASH_ATTN backend runs vllm-flash-attn's FA3 on Hopper (FA2 elsewhere); "
                         "FlashInfer on Blackwell (vLLM docs, attention backends)",
            "kernels": "vLLM custom ops fused_add_rms_norm and silu_and_mul; rotary_embedding is its own kernel "
                       "before reshape_and_cache",
            "fp8_kv": "vLLM kv_cache_dtype default 'auto': the model's activation dtype",
            "max_batch": "vLLM V1 max_num_seqs default 1024 on GPUs with 70 GiB or more (vllm/engine/arg_utils.py, "
                         "256 on smaller ones); estimate: it depends on the version",
            "prefill_chunk": "vLLM V1 max_num_batched_tokens default 8192 for the OpenAI server on large-memory "
                             "GPUs (vllm/engine/arg_utils.py); estimate: it depends on the version and GPU",
            "mem_fraction": "vLLM gpu_memory_utilization default 0.9 of the device's memory",
            "mem_reserve": _RESERVE_NOTE,
            "scheduler_host": VLLM_SCHEDULER_SOURCE,
            "frontend_host": VLLM_FRONTEND_SOURCE,
            "async_scheduling": VLLM_ASYNC_SOURCE,
            "shared_stream": VLLM_SHARED_STREAM_SOURCE,
            "moe_padding": VLLM_PADDING_SOURCE,
            "moe_module": VLLM_MODULE_SOURCE,
            "fused_latent_proj": "vLLM's DeepseekV2MLAAttention: fused_qkv_a_proj, one MergedColumnParallelLinear "
                                 "of q_a_proj and kv_a_proj_with_mqa (models/deepseek_v2.py, 0.12.0, read offline)",
        }),
    Engine(
        "sglang", "SGLang",
        attention={"*": "flash", "hopper": "fa3", "blackwell": "trtllm", "blackwell-ultra": "trtllm"},
        kernels="fused", rotary="kernel", launch="auto", fp8_kv=False, fp8_attention=False,
        prefill_chunk=8192, max_batch=4096, mem_policy="static", mem_fraction={1: 0.88, 2: 0.87, 4: 0.85, 8: 0.81},
        memory_rule=sglang_memory,
        mem_reserve=2 * GiB, moe_exchange="gather", moe_quantized_exchange=False, moe_all_to_all="deepep",
        wide_ep_all_to_all=True,
        version="SGLang 0.5.9 defaults (server_args.py); kernel tables measured with 0.5.14",
        near=("sglang", "vllm", "trtllm", "torch", "hf"), admission="preempt", words=("sglang",),
        schedule="mixed", schedule_source=SGLANG_SCHEDULE_SOURCE, own_schedule="prefill_first", dp_budget="split",
        scheduler_host=SGLANG_SCHEDULER_HOST, async_scheduling=True, shared_stream="graph", fused_shared_expert=True,
        frontend_host=SGLANG_FRONTEND_HOST, frontend_split=("http_server",), frontend_length=SGLANG_FRONTEND_LENGTH,
        fused_latent_proj=True,
        allreduce_norm=("deepseek_v3", "gpt_oss", "glm4_moe", "qwen3_moe"),
        allreduce_norm_generations=("hopper", "blackwell", "blackwell-ultra"), model_defaults=SGLANG_MODEL_DEFAULTS,
        near_source="SGLang and vLLM share FlashInfer and CUTLASS kernels (sgl-kernel); TensorRT-LLM's next",
        admission_source="SGLang's scheduler admits while the KV pool holds the prompt (max_running_requests caps "
                         "the running sequences) and retracts requests when decode runs out (scheduler.py)",
        sources={
            "wide_ep": "estimate: SGLang's large-scale expert-parallel deployments (LMSYS's DeepSeek on 96 H100s and "
                       "on GB200 NVL72, read from memory) run --moe-a2a-backend deepep, --deepep-mode auto (0.5.14's "
                       "server_args.py: low-latency kernels for decode batches, normal ones for prefill; DeepEP sets "
                       "ep_size to tp_size) where the default none gathers every rank's tokens",
            "dp_budget": "SGLang 0.5.9 server_args.py _handle_data_parallelism (read offline): with "
                         "--enable-dp-attention chunked_prefill_size becomes chunked_prefill_size // dp_size, each DP "
                         "rank's scheduler its own requests within it (the DP controller deals them round robin)",
            "moe_exchange": "SGLang --moe-a2a-backend default none: with --enable-dp-attention every DP rank's tokens "
                            "are gathered before the MoE and its output scattered back (layers/dp_attention.py); "
                            "DeepEP (--moe-a2a-backend deepep) when asked (--moe-exchange all_to_all); estimate for "
                            "other versions",
            "moe_all_to_all": "SGLang 0.5.8 --deepep-mode auto: normal kernels for a batch with prefill, low-latency "
                              "ones otherwise (layers/moe/utils.py DeepEPMode.resolve); the low-latency dispatch in "
                              "fp8 unless SGLANG_DEEPEP_BF16_DISPATCH (token_dispatcher/deepep.py; NVFP4 for "
                              "experts with a global input scale, not modelled: sent as fp8); aiconfigurator-core "
                              "times both kernels with SGLang 0.5.12 (message bytes in docs/collectives.md)",
            "attention": "SGLang docs (attention backends): FA3 is the default on Hopper; on Blackwell its trtllm_mha "
                         "backend (TensorRT-LLM's kernels), the one aiconfigurator-core's SGLang 0.5.14 tables measure "
                         "on B200 and B300",
            "kernels": "sgl-kernel fused_add_rmsnorm and silu_and_mul; rotary applied by its own kernel",
            "fp8_kv": "SGLang kv_cache_dtype default 'auto': the model's dtype",
            "max_batch": "estimate: SGLang sizes max_running_requests from the KV pool; 4096 as an upper bound",
            "prefill_chunk": SGLANG_MEMORY_SOURCE,
            "mem_fraction": SGLANG_MEMORY_SOURCE + "; on a spec without visible memory, SGLang 0.4's share by TP: 0.88 "
                            "(TP 1), 0.87 (2), 0.85 (4), 0.81 (8+)",
            "mem_policy": SGLANG_MEMORY_SOURCE,
            "mem_reserve": _RESERVE_NOTE,
            "scheduler_host": SGLANG_SCHEDULER_SOURCE,
            "frontend_host": SGLANG_FRONTEND_SOURCE,
            "async_scheduling": SGLANG_ASYNC_SOURCE,
            "shared_stream": SGLANG_SHARED_STREAM_SOURCE,
            "fused_shared_expert": SGLANG_FUSED_SHARED_SOURCE,
            "allreduce_norm": SGLANG_ALLREDUCE_NORM_SOURCE,
            "fused_latent_proj": "SGLang's DeepseekV2AttentionMLA: fused_qkv_a_proj_with_mqa, one ReplicatedLinear of "
                                 "q_lora_rank + kv_lora_rank + qk_rope_head_dim outputs (models/deepseek_v2.py, "
                                 "0.5.9, read offline)",
        }),
    Engine(
        "torch", "plain PyTorch",
        attention={"*": "auto"},
        kernels="torch", rotary="eager", launch="eager", fp8_kv=False, fp8_attention=False,
        prefill_chunk=1 << 30, max_batch=1 << 30, mem_policy="total", mem_fraction=1.0, mem_reserve=2 * GiB,
        version="PyTorch as this project's calibration suite ran it (calibration/h200/environment.json)",
        near=("torch", "hf", "vllm", "sglang", "trtllm"), admission="preempt",
        near_source="transformers' eager layer calls the same F.linear and SDPA; vLLM times plain PyTorch's linear "
                    "for bf16, so its tables come next",
        admission_source="no scheduler: the preset's sequence limit (none) and memory decide the batch",
        sources={
            "attention": "F.scaled_dot_product_attention with no backend forced: what the calibration profile "
                         "saw PyTorch dispatch to on the part",
            "kernels": "the decoder layer as the calibration suite writes it: eager rotary, silu(g) * u, SDPA",
            "prefill_chunk": "no chunking: a request's prompt is one forward pass",
            "max_batch": "no scheduler: memory alone caps the batch",
            "mem_fraction": "no pool: the whole device less the reserve",
            "mem_reserve": _RESERVE_NOTE,
        }),
    Engine(
        "hf", "Hugging Face transformers generate()",
        attention={"*": "auto"},
        kernels="hf", rotary="eager", launch="eager", fp8_kv=False, fp8_attention=False,
        prefill_chunk=1 << 30, max_batch=1 << 30, mem_policy="total", mem_fraction=1.0, mem_reserve=2 * GiB,
        kv_cache="dynamic", batching="static", static_cache_launch="auto",
        version="transformers 5.17 generate() (measured: calibration/h200/hf)",
        near=("hf", "torch", "vllm", "sglang", "trtllm"), admission="preempt",
        near_source="transformers' eager layer runs plain PyTorch's kernels (F.linear, SDPA): this project's PyTorch "
                    "suite is its nearest evidence, before any serving engine's tables (vLLM's first: it times the "
                    "same F.linear for bf16)",
        admission_source="no scheduler: generate() runs the batch it is called with",
        sources={
            "attention": "attn_implementation='sdpa': F.scaled_dot_product_attention, PyTorch's dispatch (cuDNN on "
                         "the H200: calibration/h200/hf/kernels.csv)",
            "kernels": "transformers 5.17 LlamaDecoderLayer run eager: q, k, v, o, gate, up, down as seven products, "
                       "LlamaRMSNorm as eight kernels in fp32, rotary as five, SiLU and the product as two "
                       "(measured: 45 kernels a layer at batch 1, calibration/h200/hf/kernels.csv)",
            "kv_cache": "generate()'s default DynamicCache (torch.cat of the whole cache each step); "
                        "--kv-cache static: StaticCache",
            "launch": "eager with the dynamic cache: generate() runs the model in Python, one launch per kernel; the "
                      "host cost per kernel, per step and per request is measured (perfmodel.host_costs). With "
                      "--kv-cache static, auto: transformers 5.17's generate() compiles the decode step of a "
                      "compileable cache (torch.compile, replayed from CUDA graphs; measured about 7 ms a token for "
                      "Llama-3.1-8B at batch 1 on an H200) and runs the prompt eager; --launch eager is "
                      "generate(disable_compile=True)",
            "batching": "static: generate() runs one batch of requests from the first prompt token to the last "
                        "output token; no scheduler admits new ones",
            "prefill_chunk": "no chunking: generate() runs the prompt as one forward pass",
            "max_batch": "no scheduler: the batch is the call's",
            "mem_fraction": "no pool: the whole device less the reserve",
            "mem_reserve": _RESERVE_NOTE,
        }),
)}
CHOICES = (AUTO, *ENGINES)
# the engines that serve requests with a scheduler and ship their own measured GEMM and MoE modules
# (perfmodel.evidence: their own tables rank first for those families)
SERVING_ENGINES = ("trtllm", "vllm", "sglang")


def engine_distance(wanted: str, have: str) -> int:
    """How far engine ``have``'s measured kernels stand from engine ``wanted``'s: its place in ``wanted``'s
    :attr:`Engine.near` (0: the engine itself), past every listed one when absent or unknown."""
    order = ENGINES[wanted].near if wanted in ENGINES else (wanted,)
    return order.index(have) if have in order else len(order)


def engine_named_in(text: str) -> str | None:
    """The serving engine a benchmark row's source or notes name (:attr:`Engine.words`), or None."""
    text = text.lower()
    for key in SERVING_ENGINES:
        if any(w in text for w in ENGINES[key].words):
            return key
    return None


def engine_for(key: str, vendor: str = "nvidia") -> Engine:
    """The preset ``key`` names; ``auto``: TensorRT-LLM on NVIDIA parts, vLLM on others."""
    if key == AUTO:
        key = "trtllm" if vendor == "nvidia" else "vllm"
    try:
        return ENGINES[key]
    except KeyError:
        raise InputError(f"unknown engine {key!r}; expected one of {', '.join(CHOICES)}", field="--engine") from None
