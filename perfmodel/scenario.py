"""An inference scenario: sequence lengths, batch, parallel layout, formats and modelling switches."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .dtypes import check_dtype
from .errors import InputError


ENGINE_FIELDS = ("kernels", "rotary", "launch", "attention_kernel", "fp8_attention", "prefill_chunk", "max_batch",
                 "mem_policy", "mem_fraction", "mem_reserve", "kv_cache", "batching", "weight_only_moe_act")
KV_CACHES = ("paged", "dynamic", "static")
SCHEDULES = ("mixed", "prefill_first")  # perfmodel.engines.Engine.schedule
DP_BUDGETS = ("per_rank", "split")  # perfmodel.engines.Engine.dp_budget
# how a closed loop's first C requests start (perfmodel.serve.workload.closed_loop_requests, docs/serving.md)
CLOSED_LOOP_STARTS = ("burst", "spread")


@dataclass(frozen=True)
class Scenario:
    isl: int = 1024  # input (prompt) tokens per request
    osl: int = 128  # output tokens per request
    batch: int | str = 1  # concurrent sequences per model replica, or "max"
    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline parallel
    ep: int = 1  # expert parallel: experts split over ep of the MoE group's ranks (ep divides tp x attention_dp)
    # attention data parallel: attention_dp groups of tp GPUs each run attention (and dense layers) on their own
    # share of the batch, while the MoE layers spread over all tp x attention_dp GPUs (TensorRT-LLM's
    # enable_attention_dp, SGLang's --enable-dp-attention; "DEP8" = tp 1, attention_dp 8, ep 8)
    attention_dp: int = 1
    # expert load imbalance: the busiest EP rank's routed tokens over the mean (1: uniform routing); the
    # ranks meet at every all-to-all, so the busiest sets the pace
    moe_imbalance: float = 1.0
    # how unevenly the router spreads tokens over experts, for the engines' measured MoE tables (a class each:
    # perfmodel.routing.ROUTINGS); None: the model family's (perfmodel.routing.default_routing)
    moe_routing: str | None = None
    # speculative decoding: mtp draft tokens a step, from the model's own multi-token-prediction layers
    # (DeepSeek-V3's MTP) or from a separate draft model (``draft``: a model name or file sharing the target's
    # vocabulary). mtp_accept: the probability that draft token i is accepted given the ones before it were, one
    # figure for every position or one per position (acceptance falls along the draft)
    mtp: int = 0
    mtp_accept: float | tuple[float, ...] | None = None
    draft: str | None = None
    # a token tree (EAGLE-2/3 and SGLang's --speculative-eagle-topk): each draft step after the first expands the
    # spec_topk best candidates of a sequence, and the verify step checks spec_verify tree nodes a sequence (the
    # verified token included; None: every node the drafts expand, 1 + mtp x spec_topk, a chain at spec_topk 1);
    # mtp_accept is then the acceptance of the tree's accepted path at each depth, as an engine measures it
    spec_topk: int = 1
    spec_verify: int | None = None
    dtype: str = "bf16"  # weights and GEMM operands
    kv_dtype: str | None = None  # KV cache; None: the engine's rule (fp8 with fp8/fp4 weights where it does that)
    act_dtype: str = "bf16"  # activations between kernels
    mode: str = "latency"  # latency (calibrated model) | sol (pure roofline)
    # how each step picks its tokens from the logits (perfmodel.ops.SAMPLING_METHODS): greedy (argmax, temperature
    # 0), random (temperature), top_k, top_p (sort-based); the requests' sampling parameters decide it
    sampling: str = "greedy"
    batching: str | None = None  # continuous (prefill amortised into a running stream) | static; None: the engine's
    # collective overlap: a method (none, stream, decomposed, fused; perfmodel.cost.overlap) or a fixed fraction
    # of every collective hidden (0: none, the default assumption)
    overlap: float | str = 0.0
    # The serving engine (perfmodel.engines): auto is TensorRT-LLM on NVIDIA parts, vLLM elsewhere. The
    # fields below are None until the scenario is resolved for a part (for_hardware): then the engine's
    # preset fills every one the user did not set.
    engine: str = "auto"
    # the engine release whose measured kernel tables price it, where its engine folder holds that release's tables
    # (perfmodel.releases: the nearest measured release); None: the folder's own (the newest imported)
    engine_release: str | None = None
    # the engine release whose defaults read from its source run (perfmodel.engines.release_defaults: scheduling, the
    # shared-expert stream, the MoE layout) while the engine folder's own tables price it: what a validation row
    # records; engine_release, where set, names both
    defaults_release: str | None = None
    # fused: a serving engine's kernels (residual add folded into the next norm, one SwiGLU kernel, decode
    # attention over real query rows); torch: the plain PyTorch layer the calibration suite measures; hf:
    # Hugging Face transformers' eager layer (separate q/k/v and gate/up products, eight-kernel RMSNorm)
    kernels: str | None = None
    rotary: str | None = None  # kv_write (folded into the KV-cache write) | kernel (one kernel) | eager
    # auto: decode replayed from a CUDA graph, prefill launched eagerly; graph or eager: both phases so
    launch: str | None = None
    attention_kernel: str | None = None  # perfmodel.attention_kernels: auto (PyTorch's dispatch), fa3, ...
    fp8_attention: bool | None = None  # attention's products in fp8 when the KV cache is fp8
    prefill_chunk: int | None = None  # prefill token budget per step in continuous batching
    max_batch: int | None = None  # most sequences the engine's scheduler runs at once (caps --batch max)
    # free: KV takes mem_fraction of what is free after weights; total: all of it; static: weights and KV (SGLang)
    mem_policy: str | None = None
    mem_fraction: float | None = None  # share of device-visible memory (policy total) or of the free memory
    mem_reserve: float | None = None  # bytes per GPU outside the engine's pool (context, workspaces, graphs)
    # how the KV cache is kept: paged (a serving engine's block pool); dynamic (transformers' DynamicCache: each
    # step concatenates the whole cache with the new token); static (StaticCache: max_cache_len = isl + osl
    # preallocated, attention over all of it)
    kv_cache: str | None = None
    # how the MoE layers meet the tokens of other attention-data-parallel ranks: gather | all_to_all; None: the
    # engine's (perfmodel.engines: moe_exchange, moe_quantized_exchange)
    moe_exchange: str | None = None
    moe_quantized_exchange: bool | None = None
    moe_all_to_all: str | None = None  # per_rank | deepep | mnnvl: the kernels of an all_to_all exchange (engine's)
    # whether the engine schedules the next step while the device runs this one (its host work a step then hides
    # behind the device's, perfmodel.engines.Engine.scheduler_host); None: the engine's release default
    async_scheduling: bool | None = None
    # the HTTP server processes streaming the engine's tokens to the clients (vLLM's --api-server-count, SGLang's
    # --tokenizer-worker-num): each a pipeline stage of its own whose work a step the step cannot outrun
    # (perfmodel.engines.Engine.frontend_host); 0: an offline run, no stream; None: the engine's default
    api_servers: int | None = None
    # the host CPU's speed at the engines' Python host work (scheduler, front end) relative to the development VMs
    # it was measured on (perfmodel.engines: scheduler_host on an AMD EPYC guest, frontend_host on an Intel Xeon
    # guest): 2.0 halves that work; None: 1.0
    host_speed: float | None = None
    # how the serving simulation's steps meet prompts and decoding sequences: mixed (prompt chunks ride in the decode
    # steps) | prefill_first (prompts run in steps of their own, the decoding sequences wait); None: the engine's
    schedule: str | None = None
    # each attention-data-parallel rank's step budget: per_rank (every rank schedules its own requests within the
    # whole prefill_chunk) | split (each rank within prefill_chunk / attention_dp); None: the engine's
    dp_budget: str | None = None
    # whether the attention-DP ranks pad their tokens to the busiest rank's in steps replayed from CUDA graphs (vLLM);
    # None: the engine's
    dp_pad: bool | None = None
    # when a MoE layer's shared experts run on a second CUDA stream beside the routed ones: graph (decode steps
    # replayed from a CUDA graph) | small (steps of at most 256 tokens a rank) | never; and whether a DeepSeek-V3
    # layout's shared expert is folded into the routed experts' module; None: the engine's (perfmodel.engines)
    shared_stream: str | None = None
    fused_shared_expert: bool | None = None
    # the layout block-fp8 experts' grouped products run over (perfmodel.engines.MOE_PADDINGS): DeepGEMM's worst-case
    # contiguous layout with its padded blocks computed (vLLM 0.12) or skipped (0.13-0.17 where DeepGEMM runs: the
    # activation and re-quantization still over every row), or none; perfmodel.graph.padded_expert_ops; None: the
    # engine's; none on parts outside perfmodel.engines.DEEPGEMM_GENERATIONS
    moe_padding: str | None = None
    # the class of FlashInfer's TensorRT-LLM block-fp8 MoE kernel vLLM runs on SM100 for the model's router:
    # monolithic | modular (perfmodel.engines.moe_module_for); "" where no such choice applies; None: the engine's
    moe_module: str | None = None
    # MLA's query and KV latents projected by one product (perfmodel.engines: fused_latent_proj); None: the engine's
    fused_latent_proj: bool | None = None
    # the model families whose TP all-reduce the engine folds into the residual add and RMSNorm after it on this part
    # (perfmodel.engines: allreduce_norm); None: the engine's
    allreduce_norm: tuple[str, ...] | None = None
    # the format a MoE of weight-only experts (gpt-oss's MXFP4) runs its products in: bf16, or fp8 (MXFP8
    # activations: TensorRT-LLM on Blackwell); None: the engine's for the part (perfmodel.engines)
    weight_only_moe_act: str | None = None
    # images and video per request (a multimodal model's vision encoder, perfmodel.vision): ``images`` pictures and
    # one video of ``video_frames`` frames, each ``image_size`` (width, height) pixels. ``image_tokens``: the LLM
    # tokens they become per request, set by perfmodel.vision.with_images for the model (0: text only); the
    # prompt the LLM prefills and caches is isl + image_tokens
    images: int = 0
    image_size: tuple[int, int] | None = None
    video_frames: int = 0
    image_tokens: int = 0

    @property
    def prompt(self):
        """Tokens of one request's prompt: its text (isl) and its images' tokens."""
        return self.isl + self.image_tokens if self.image_tokens else self.isl

    @property
    def has_images(self) -> bool:
        return bool(self.images or self.video_frames)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp

    def pads_ranks(self, phase: str) -> bool:
        """Whether a step of ``phase`` pads every attention-DP rank's tokens to the busiest rank's (``dp_pad``: in
        steps replayed from CUDA graphs)."""
        return bool(self.dp_pad) and self.attention_dp > 1 and self.launch_for(phase) == "graph"

    @property
    def rank_chunk(self) -> int:
        """Tokens one attention-data-parallel rank's step may carry: the prefill chunk, or its share of it where the
        engine splits the chunk over the ranks (``dp_budget``); the chunk itself without attention DP."""
        if self.attention_dp == 1 or self.dp_budget != "split":
            return self.prefill_chunk
        return max(self.prefill_chunk // self.attention_dp, 1)

    @property
    def acceptance(self) -> tuple[float, ...]:
        """Each draft position's acceptance given the positions before it were accepted (``mtp`` figures)."""
        a = self.mtp_accept
        if not self.mtp:
            return ()
        if isinstance(a, (tuple, list)) and len(a) != 1:
            return tuple(float(x) for x in a)
        one = a[0] if isinstance(a, (tuple, list)) else a  # one figure for every position
        return (float(one or 0.0),) * self.mtp

    @property
    def accepted_run(self) -> tuple[float, ...]:
        """The distribution of the tokens a verify step emits per sequence: P(1), ..., P(mtp + 1). The step
        emits the verified token and every draft token up to the first one rejected."""
        out, reach = [], 1.0
        for a in self.acceptance:
            out.append(reach * (1.0 - a))
            reach *= a
        return (*out, reach)

    @property
    def verify_tokens(self) -> int:
        """Tokens a verify step carries a sequence: the verified token and the nodes the drafts keep (a chain:
        1 + mtp; a tree: ``spec_verify``, by default every node the drafts expand, 1 + mtp x spec_topk); 1
        without speculation."""
        if not self.mtp:
            return 1
        return int(self.spec_verify) if self.spec_verify else 1 + self.mtp * self.spec_topk

    @property
    def tree(self) -> bool:
        """Whether the drafts form a tree (candidates beside each other at a depth) rather than one chain."""
        return bool(self.mtp) and (self.spec_topk > 1 or self.verify_tokens != 1 + self.mtp)

    @property
    def tokens_per_step(self) -> float:
        """Tokens a decode step emits per sequence: 1 without speculation; with k draft tokens accepted in turn
        (position i with probability a_i given the ones before), the expected run plus the verified token,
        1 + a_1 + a_1 a_2 + ... (with one figure a for all: (1 - a^(k+1)) / (1 - a))."""
        if not self.mtp:
            return 1.0
        return sum((n + 1) * p for n, p in enumerate(self.accepted_run))

    def _check_tree(self) -> None:
        """A token tree: its width and verified nodes fit the drafts (``spec_topk``, ``spec_verify``)."""
        w, n = self.spec_topk, self.spec_verify
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 16:
            raise InputError(f"expected 1 to 16 candidates a draft step, got {w!r}", field="--spec-topk")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= 256):
            raise InputError(f"expected 2 to 256 tokens a verify step, got {n!r}", field="--spec-verify")
        if (w > 1 or n is not None) and not self.mtp:
            raise InputError("a token tree drafts only with --mtp K (its depth: the draft steps)",
                             field="--spec-topk" if w > 1 else "--spec-verify")
        if n is not None and not 1 + self.mtp <= n <= 1 + self.mtp * w:
            raise InputError(f"a tree of {self.mtp} draft steps of {w} candidates verifies {1 + self.mtp} to "
                             f"{1 + self.mtp * w} tokens a sequence (the root and the nodes it keeps), got {n}",
                             field="--spec-verify")

    @property
    def moe_group(self) -> int:
        """GPUs one MoE layer spreads over: every attention group of a pipeline stage."""
        return self.tp * self.attention_dp

    @property
    def kv(self) -> str:
        if self.kv_dtype:
            return self.kv_dtype
        from .engines import engine_for

        fp8_kv = engine_for(self.engine).fp8_kv
        return "fp8" if fp8_kv and self.dtype in ("fp8", "fp4") else self.act_dtype

    @property
    def resolved_for_engine(self) -> bool:
        return self.engine != "auto" and all(getattr(self, f) is not None for f in ENGINE_FIELDS)

    def for_hardware(self, hw=None, model=None) -> "Scenario":
        """The scenario with the engine chosen for ``hw``'s vendor and every engine field filled from its
        preset where the user left it unset; the attention kernel follows ``hw``'s generation, and the engine's
        defaults for ``model``'s architecture (:attr:`perfmodel.engines.Engine.model_defaults`) replace the
        preset's where they apply."""
        if self.resolved_for_engine:
            return self
        from .engines import engine_for

        eng = engine_for(self.engine, getattr(hw, "vendor", "nvidia"))
        if getattr(hw, "vendor", "nvidia") not in eng.vendors:
            from .errors import InputError

            raise InputError(f"{eng.name} runs on {', '.join(eng.vendors)} parts, not on {hw.name}", field="--engine")
        kernels = self.kernels or eng.kernels
        chunk, fraction = eng.memory_for(hw, self.tp, self.pp, self.attention_dp, model, self.prefill_chunk)
        preset = {
            "kernels": kernels,
            "rotary": eng.rotary if kernels == eng.kernels else ("eager" if kernels in ("torch", "hf") else "kv_write"),
            "launch": eng.launch,
            "attention_kernel": eng.attention_for(getattr(hw, "generation", "")),
            "weight_only_moe_act": eng.weight_only_act_for(getattr(hw, "generation", "")),
            "fp8_attention": eng.fp8_attention,
            "prefill_chunk": chunk,
            "max_batch": eng.max_batch,
            "mem_policy": eng.mem_policy,
            "mem_fraction": fraction,
            "mem_reserve": eng.mem_reserve,
            "kv_cache": eng.kv_cache,
            "batching": eng.batching,
            "moe_exchange": eng.exchange_for(self.moe_group, self.attention_dp, self.ep),
            "moe_quantized_exchange": eng.moe_quantized_exchange,
            "moe_all_to_all": eng.all_to_all_for(hw),
            "async_scheduling": eng.async_scheduling,
            "api_servers": eng.api_servers_for(self.attention_dp),
            "schedule": eng.schedule,
            "dp_budget": eng.dp_budget,
            "dp_pad": eng.dp_pad,
            "shared_stream": eng.shared_stream,
            "fused_shared_expert": eng.fused_shared_expert,
            "moe_padding": eng.moe_padding,
            "fused_latent_proj": eng.fused_latent_proj,
            "allreduce_norm": (eng.allreduce_norm if getattr(hw, "vendor", "nvidia") == "nvidia"
                               and getattr(hw, "generation", "") in eng.allreduce_norm_generations else ()),
        }
        from .engines import DEEPGEMM_GENERATIONS, moe_module_for, release_defaults

        generation = getattr(hw, "generation", "")
        moe = getattr(model, "moe", None)
        # the block-fp8 MoE kernel's class the engine folder's own release runs for the model's router (vLLM on SM100)
        preset["moe_module"] = moe_module_for(eng.key, None, generation, moe.router if moe is not None else None) or ""
        # a named release's own, where read (the MoE layout by part, router and the experts' TP split)
        preset.update(release_defaults(eng.key, self.engine_release or self.defaults_release, generation=generation,
                                       router=moe.router if moe is not None else None,
                                       moe_tp=self.moe_group // self.ep, attention_dp=self.attention_dp))
        preset.update(eng.defaults_for_model(model, generation))
        filled = {k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in preset.items()}
        if generation not in DEEPGEMM_GENERATIONS:
            filled["moe_padding"] = "none"  # DeepGEMM, whose layout it is, runs on SM90 and SM100 only
        if eng.static_cache_launch and self.launch is None and filled["kv_cache"] == "static":
            filled["launch"] = eng.static_cache_launch  # the preset's launch with a static cache
        out = replace(self, engine=eng.key, **filled)
        if out.kernels == "hf" and out.kv_cache == "dynamic" and out.launch_for("decode") == "graph":
            from .errors import InputError

            raise InputError("transformers replays decode from CUDA graphs (torch.compile) only with its static "
                             "cache: add --kv-cache static, or keep --launch eager", field="--launch")
        return out

    def launch_for(self, phase: str) -> str:
        """graph or eager, for a step of ``phase``."""
        launch = self.launch or "auto"
        if launch != "auto":
            return launch
        return "graph" if phase == "decode" else "eager"

    def with_(self, **kw) -> "Scenario":
        return replace(self, **kw)

    def validated(self) -> "Scenario":
        for name in ("isl", "osl", "tp", "pp", "ep", "attention_dp"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"expected a positive integer, got {v!r}", field=f"--{name.replace('_', '-')}")
        for name in ("prefill_chunk", "max_batch"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise InputError(f"expected a positive integer, got {v!r}", field=f"--{name.replace('_', '-')}")
        if self.batch != "max" and (not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1):
            raise InputError(f"expected a positive integer or 'max', got {self.batch!r}", field="--batch")
        check_dtype(self.dtype, where="--dtype")
        if self.kv_dtype is not None:
            check_dtype(self.kv_dtype, where="--kv-dtype")
        check_dtype(self.act_dtype, where="--act-dtype")
        if self.moe_group % self.ep:
            group = f"--tp {self.tp}" + (f" x --attention-dp {self.attention_dp}" if self.attention_dp > 1 else "")
            raise InputError(f"--ep {self.ep} must divide {group} (experts are split over the MoE group's ranks)",
                             field="--ep")
        if not isinstance(self.mtp, int) or isinstance(self.mtp, bool) or not 0 <= self.mtp <= 16:
            raise InputError(f"expected 0 to 16 draft tokens a step, got {self.mtp!r}", field="--mtp")
        if self.mtp or self.mtp_accept is not None:  # given without --mtp it is unused, but still a probability
            given = self.mtp_accept if isinstance(self.mtp_accept, (tuple, list)) else (self.mtp_accept,)
            if not given or not all(isinstance(a, (int, float)) and not isinstance(a, bool) and 0.0 <= a < 1.0
                                    for a in given):
                got = "none given" if self.mtp_accept is None else f"got {self.mtp_accept!r}"
                raise InputError("with --mtp give the acceptance rate of a draft token, in [0, 1), or one per "
                                 f"position separated by commas; {got}", field="--mtp-accept")
            if self.mtp and len(given) not in (1, self.mtp):
                raise InputError(f"--mtp {self.mtp} drafts {self.mtp} tokens: give one acceptance rate or {self.mtp}, "
                                 f"got {len(given)}", field="--mtp-accept")
        if self.draft is not None and not self.mtp:
            raise InputError("a draft model drafts tokens only with --mtp K (the draft tokens a step)", field="--draft")
        self._check_tree()
        check_moe_imbalance(self.moe_imbalance)
        _choice(self.mode, ("latency", "sol"), "--mode")
        _choice(self.moe_exchange, ("gather", "all_to_all"), "--moe-exchange")
        _choice(self.moe_all_to_all, ("per_rank", "deepep", "mnnvl"), "moe_all_to_all")
        _choice(self.schedule, SCHEDULES, "--schedule")
        _choice(self.dp_budget, DP_BUDGETS, "dp_budget")
        from .engines import SHARED_STREAMS
        _choice(self.shared_stream, SHARED_STREAMS, "--shared-stream")
        from .routing import ROUTINGS
        _choice(self.moe_routing, ROUTINGS, "--moe-routing")
        from .sampling import SAMPLING_METHODS
        _choice(self.sampling, SAMPLING_METHODS, "--sampling")
        _choice(self.batching, ("continuous", "static"), "--batching")
        from .attention_kernels import canonical
        from .engines import CHOICES as ENGINES

        _choice(self.engine, ENGINES, "--engine")
        for value, flag in ((self.engine_release, "--engine-release"), (self.defaults_release, "defaults_release")):
            if value is not None:
                from .engines import RELEASE_DATES, release_key

                if not (isinstance(value, str) and len(value) <= 64 and value.isprintable()
                        and release_key(value) is not None):
                    first = min(RELEASE_DATES["sglang"].values())
                    raise InputError(f"expected a numbered engine release (0.19.0, 1.3.0rc10, 0.5.6.post2), or a "
                                     f"dated SGLang nightly of {first} or later (nightly-dev-20260317-...), got "
                                     f"{str(value)[:80]!r}", field=flag)
        if self.moe_padding is not None:
            from .engines import MOE_PADDINGS

            _choice(self.moe_padding, MOE_PADDINGS, "--moe-padding")
        if self.moe_module is not None:
            _choice(self.moe_module, ("", "monolithic", "modular"), "moe_module")
        _choice(self.kernels, ("fused", "torch", "hf"), "--kernels")
        _choice(self.kv_cache, KV_CACHES, "--kv-cache")
        _choice(self.rotary, ("kv_write", "kernel", "eager"), "--rotary")
        _choice(self.launch, ("auto", "graph", "eager"), "--launch")
        _choice(self.mem_policy, ("free", "total", "static"), "--mem-policy")
        if self.attention_kernel is not None:
            canonical(self.attention_kernel)
        from .cost.overlap import resolve_method

        resolve_method(self.overlap)
        if self.mem_fraction is not None and not (isinstance(self.mem_fraction, (int, float))
                                                  and 0.0 < self.mem_fraction <= 1.0):
            raise InputError(f"expected a fraction in (0, 1], got {self.mem_fraction!r}", field="--mem-fraction")
        if self.mem_reserve is not None and not (isinstance(self.mem_reserve, (int, float))
                                                 and 0.0 <= self.mem_reserve < 2**50):
            raise InputError(f"expected bytes >= 0, got {self.mem_reserve!r}", field="--mem-reserve")
        if self.host_speed is not None and not (isinstance(self.host_speed, (int, float))
                                                and not isinstance(self.host_speed, bool)
                                                and 0.05 <= self.host_speed <= 20.0):
            raise InputError(f"expected a speed from 0.05 to 20 (relative to the measuring VM), got "
                             f"{self.host_speed!r}", field="--host-speed")
        if self.api_servers is not None and (not isinstance(self.api_servers, int) or isinstance(self.api_servers, bool)
                                             or not 0 <= self.api_servers <= 1024):
            raise InputError(f"expected 0 to 1024 API server processes, got {self.api_servers!r}",
                             field="--api-servers")
        self._check_images()
        return self

    def _check_images(self) -> None:
        for name, cap in (("images", MAX_IMAGES), ("video_frames", MAX_VIDEO_FRAMES)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= cap:
                raise InputError(f"expected 0 to {cap}, got {v!r}", field=f"--{name.replace('_', '-')}")
        size = self.image_size
        if size is not None:
            if (not isinstance(size, (tuple, list)) or len(size) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_IMAGE_SIDE
                               for x in size)):
                raise InputError(f"expected WIDTHxHEIGHT, each 1 to {MAX_IMAGE_SIDE} pixels, got {size!r}",
                                 field="--image-size")
        if self.has_images and size is None:
            raise InputError("images need their size: add --image-size WIDTHxHEIGHT (pixels)", field="--image-size")
        if not isinstance(self.image_tokens, int) or isinstance(self.image_tokens, bool) or self.image_tokens < 0:
            raise InputError(f"expected a count >= 0, got {self.image_tokens!r}", field="image_tokens")


# Bounds on a request's images (sanity bounds, not any engine's limit): a side above 16384 pixels is beyond any
# camera or processor in use; video frames at most Qwen2VLVideoProcessor's max_frames (768, transformers 5.25)
MAX_IMAGES = 256
MAX_VIDEO_FRAMES = 768
MAX_IMAGE_SIDE = 16384


class UnresolvedScenario(TypeError):
    """A layer below the commands was handed a scenario not resolved for a part: a programming error (every
    command resolves its scenario once, in :mod:`perfmodel.resolve`), not bad input."""


def require_resolved(sc: Scenario, where: str) -> Scenario:
    """``sc``, checked to be resolved for a part (:func:`perfmodel.resolve.resolve_scenario`): the model layer
    takes the engine's fields as given and never fills them itself."""
    if not sc.resolved_for_engine:
        raise UnresolvedScenario(f"{where} needs a scenario resolved for a part (perfmodel.resolve.resolve_scenario "
                                 f"or setup); got engine {sc.engine!r} with engine fields unset")
    return sc


def parse_image_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` in pixels (``1092x1092``)."""
    parts = str(text).lower().replace("*", "x").split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"expected WIDTHxHEIGHT in pixels (1092x1092), got {text!r}", field="--image-size") from None
    if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
        raise InputError(f"expected each side 1 to {MAX_IMAGE_SIDE} pixels, got {text!r}", field="--image-size")
    return w, h


def check_moe_imbalance(value) -> None:
    """``--moe-imbalance`` (inference's and training's): the busiest expert rank's load over the mean, 1 to 1000."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1.0 <= value <= 1e3:
        raise InputError(f"expected the busiest rank's load over the mean, >= 1, got {value!r}",
                         field="--moe-imbalance")


def _choice(value, choices, flag: str) -> None:
    if value is not None and value not in choices:
        raise InputError(f"expected one of {', '.join(choices)}, got {value!r}", field=flag)


def parse_batch(text: str) -> int | str:
    if text == "max":
        return "max"
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected a positive integer or 'max', got {text!r}", field="--batch") from None
    if value < 1:
        raise InputError(f"expected a positive integer or 'max', got {text!r}", field="--batch")
    return value
