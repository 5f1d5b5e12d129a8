"""Per-step host (CPU) cost of vLLM V1 scheduling + output handling, no GPU.

Drives the real vllm.v1 Scheduler / AsyncScheduler (vllm 0.34.0) with a hand-made
VllmConfig (Qwen3-30B-A3B dims from a local config.json, no weights) and a hand-made
KVCacheConfig, B requests with ~1,000-token prompts, then steady decode:
    schedule() -> fake ModelRunnerOutput (1 sampled token / request) -> update_from_output()
Also times, per step, the other CPU pieces that can run without CUDA:
  * mr_gather   : GPUModelRunner.gather_batch_req_state (real function, fake `self`)
  * mr_tolist   : the CPU half of AsyncOutput.get_output (tensor.tolist + trim) -- replica
  * serialize   : MsgpackEncoder.encode(EngineCoreOutputs)  (engine-core output thread)
  * fe_decode   : MsgpackDecoder.decode (front-end / API-server process)
  * fe_outproc  : OutputProcessor.process_outputs with FastIncrementalDetokenizer
                  (tokenizer: Tekken vocab from the mistral_common wheel, converted to a
                  HF fast tokenizer), DELTA outputs into RequestOutputCollector queues,
                  chunks of 128 as AsyncLLM.output_handler does, log_stats on.
Usage: python harness.py --mode async|sync --bs 1 8 64 ... --steps 50 --warmup 20
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import types

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import numpy as np
import torch

import vllm
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.metrics.stats import IterationStats
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

MODEL_DIR = "/tmp/vllm-host/model_qwen3moe"
BLOCK = 16
N_LAYERS, N_KV_HEADS, HEAD = 48, 4, 128  # Qwen3-30B-A3B
PROMPT_BASE = 1000
CHUNK = 128  # VLLM_V1_OUTPUT_PROC_CHUNK_SIZE default


PREFIX_CACHING = True


def make_vllm_config(mode: str, max_seqs: int, max_batched: int) -> VllmConfig:
    mc = ModelConfig(model=MODEL_DIR, tokenizer=MODEL_DIR, dtype="bfloat16",
                     max_model_len=8192, skip_tokenizer_init=True)
    sc = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_batched,
                         max_model_len=8192, is_encoder_decoder=False,
                         async_scheduling=(mode == "async"))
    return VllmConfig(model_config=mc, cache_config=CacheConfig(block_size=BLOCK,
                                                         enable_prefix_caching=PREFIX_CACHING),
                      scheduler_config=sc, device_config=DeviceConfig(device="cuda"))


def make_kv_cache_config(num_blocks: int) -> KVCacheConfig:
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=N_KV_HEADS, head_size=HEAD,
                             dtype=torch.bfloat16)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(N_LAYERS)]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(names, spec)])


def load_tokenizer():
    from vllm.tokenizers import get_tokenizer
    return get_tokenizer(MODEL_DIR)


def text_token_stream(tok, n_min=60000):
    """Real English/code text -> token ids, so detokenization sees realistic tokens."""
    import glob
    sp = os.path.dirname(os.path.dirname(vllm.__file__))
    files = sorted(glob.glob(os.path.join(sp, "*.dist-info", "METADATA")))
    ids = []
    for f in files:
        with open(f, errors="ignore") as fh:
            ids += tok.encode(fh.read(), add_special_tokens=False)
        if len(ids) >= n_min:
            break
    return ids


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(wall, cpu):
    return {
        "median_s": statistics.median(wall), "p10_s": pct(wall, 0.1),
        "p90_s": pct(wall, 0.9), "mean_s": statistics.fmean(wall),
        "cpu_median_s": statistics.median(cpu), "cpu_p10_s": pct(cpu, 0.1),
        "cpu_p90_s": pct(cpu, 0.9), "cpu_mean_s": statistics.fmean(cpu), "n": len(wall),
    }


class Timer:
    def __init__(self):
        self.wall, self.cpu = {}, {}

    def run(self, name, fn, *a, record=True, **kw):
        w0, c0 = time.perf_counter(), time.process_time()
        r = fn(*a, **kw)
        w1, c1 = time.perf_counter(), time.process_time()
        if record:
            self.wall.setdefault(name, []).append(w1 - w0)
            self.cpu.setdefault(name, []).append(c1 - c0)
        return r


def fake_runner_self(sched):
    """Minimal stand-in for GPUModelRunner's CPU-side request state, enough for the
    real gather_batch_req_state(). Mirrors req_states.{req_id_to_index, prefill_len.np,
    num_computed_prefill_tokens}."""
    n = sched.max_num_running_reqs
    rs = types.SimpleNamespace(req_id_to_index={}, prefill_len=types.SimpleNamespace(
        np=np.zeros(n, np.int32)), num_computed_prefill_tokens=np.zeros(n, np.int32),
        max_seq_len=np.zeros(n, np.int32))
    return types.SimpleNamespace(req_states=rs, use_pp=False, pcp_manager=None,
                                 adaptive_verification=None, decode_query_len=1)


def run_one(B, mode, steps, warmup, tok, stream, do_frontend, seed=0):
    rng = np.random.default_rng(seed)
    max_batched = 16384
    vcfg = make_vllm_config(mode, max_seqs=max(B, 1), max_batched=max_batched)
    # decode tokens also accrue during the ~B*1008/max_batched prefill steps
    est_prefill_steps = (B * (PROMPT_BASE + BLOCK)) // max_batched + 2
    total_tokens = PROMPT_BASE + BLOCK + est_prefill_steps + warmup + steps + 16
    num_blocks = B * (total_tokens // BLOCK + 2) + 64
    vcfg.cache_config.num_gpu_blocks = num_blocks
    kvc = make_kv_cache_config(num_blocks)
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kvc, vcfg)
    SchedCls = vcfg.scheduler_config.get_scheduler_cls()
    som = StructuredOutputManager(vcfg)
    sched = SchedCls(vllm_config=vcfg, kv_cache_config=kvc, structured_output_manager=som,
                     block_size=sched_bs, hash_block_size=hash_bs, log_stats=True,
                     include_finished_set=False)
    # Prefix-caching block hasher exactly as EngineCore builds it.
    hash_fn = get_hash_fn_by_name(vcfg.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    block_hasher = get_request_block_hasher(hash_bs, hash_fn,
                                            vcfg.num_hash_lookahead_tokens)

    opp = OutputProcessor(tok, log_stats=True) if do_frontend else None
    eos = tok.eos_token_id if tok is not None else 2
    offsets = {}
    for i in range(B):
        plen = PROMPT_BASE + (i % BLOCK)  # stagger block boundaries: B/16 new blocks/step
        prompt = rng.integers(1000, 131072, size=plen, dtype=np.int32)
        sp = SamplingParams(max_tokens=4096, temperature=1.0,
                            output_kind=RequestOutputKind.DELTA)
        sp.update_from_generation_config({}, eos)
        rid = f"chatcmpl-{i:06d}-{rng.integers(1 << 30):08x}"
        ecr = EngineCoreRequest(request_id=rid, prompt_token_ids=prompt, mm_features=None,
                                sampling_params=sp, pooling_params=None,
                                arrival_time=time.time(), lora_request=None,
                                cache_salt=None, data_parallel_rank=None,
                                external_req_id=rid)
        sched.add_request(Request.from_engine_core_request(ecr, block_hasher))
        if opp is not None:
            opp.add_request(ecr, None, queue=RequestOutputCollector(
                RequestOutputKind.DELTA, rid))
        offsets[rid] = int(rng.integers(0, len(stream)))

    fself = fake_runner_self(sched)
    enc, dec = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
    pos = {rid: 0 for rid in offsets}

    samples_at = {}  # id(scheduler_output) -> req_ids whose prompt is done by this step

    def note_samplers(so):
        # decided at schedule time (num_computed_tokens already advanced by schedule())
        samples_at[id(so)] = {rid for rid in so.num_scheduled_tokens
                              if sched.requests[rid].num_computed_tokens
                              >= sched.requests[rid].num_prompt_tokens}

    def fake_output(so):
        req_ids = list(so.num_scheduled_tokens.keys())
        sampled = []
        do_sample = samples_at.pop(id(so))
        for rid in req_ids:
            if rid in do_sample:  # prompt done -> sample
                p = pos[rid]
                pos[rid] = p + 1
                sampled.append([stream[(offsets[rid] + p) % len(stream)]])
            else:
                sampled.append([])
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled)

    def sync_runner_state(so):
        # what GPUModelRunner.add_requests / update_requests keep on the CPU side
        rs = fself.req_states
        for nr in so.scheduled_new_reqs:
            idx = rs.req_id_to_index.setdefault(nr.req_id, len(rs.req_id_to_index))
            rs.prefill_len.np[idx] = nr.prompt_len
        for rid in so.num_scheduled_tokens:
            r = sched.requests[rid]
            idx = rs.req_id_to_index[rid]
            rs.num_computed_prefill_tokens[idx] = min(r.num_computed_tokens,
                                                      r.num_prompt_tokens)

    T = Timer()
    n_prefill_steps = 0
    pending = []  # async mode: scheduled batches waiting for their output

    def frontend(eco_bytes, record):
        outs = T.run("fe_decode", dec.decode, eco_bytes, record=record)
        it = IterationStats()

        def proc():
            o = outs.outputs
            for s in range(0, len(o), CHUNK):
                opp.process_outputs(o[s:s + CHUNK], outs.timestamp, it)
        T.run("fe_outproc", proc, record=record)
        # drain the per-request queues (the generate() coroutines would do this)
        for st in opp.request_states.values():
            if st.queue is not None:
                st.queue.get_nowait()

    def process(so, record):
        mro = fake_output(so)
        sampled_np = np.array([t[0] if t else 0 for t in mro.sampled_token_ids],
                              dtype=np.int64).reshape(-1, 1)
        nsamp_np = np.array([len(t) for t in mro.sampled_token_ids], dtype=np.int32)

        def tolist():  # replica of AsyncOutput.get_output's CPU part
            sti = sampled_np.tolist()
            for token_ids, n in zip(sti, nsamp_np.tolist()):
                del token_ids[n:]
            return sti
        T.run("mr_tolist", tolist, record=record)
        ecos = T.run("update_from_output", sched.update_from_output, so, mro,
                     record=record)
        for eco in ecos.values():
            buf = T.run("serialize", enc.encode, eco, record=record)
            if opp is not None:
                frontend(buf, record)

    def one_step(record):
        so = T.run("schedule", sched.schedule, record=record)
        note_samplers(so)
        sync_runner_state(so)
        if so.total_num_scheduled_tokens > 0:
            T.run("mr_gather", GPUModelRunner.gather_batch_req_state, fself, so, False,
                  record=record)
        if mode == "async":
            pending.append(so)
            if len(pending) < 2:
                return so
            so_done = pending.pop(0)
        else:
            so_done = so
        process(so_done, record)
        return so

    # prefill until every request has finished its prompt (not recorded)
    while True:
        so = one_step(record=False)
        n_prefill_steps += 1
        if all(r.num_computed_tokens >= r.num_prompt_tokens for r in sched.running) \
                and len(sched.running) == B and not any(
                    so.num_scheduled_tokens[r] > 1 for r in so.num_scheduled_tokens):
            break
        if n_prefill_steps > 10000:
            raise RuntimeError("prefill did not finish")
    gc.collect()
    gc.freeze()  # EngineCore does freeze_gc_heap() after startup
    for _ in range(warmup):
        one_step(record=False)
    for _ in range(steps):
        so = one_step(record=True)
        assert len(so.num_scheduled_tokens) == B and so.total_num_scheduled_tokens == B, \
            (len(so.num_scheduled_tokens), so.total_num_scheduled_tokens)
    gc.unfreeze()
    res = {k: dict(summarize(T.wall[k], T.cpu[k]), wall_samples=T.wall[k],
                   cpu_samples=T.cpu[k]) for k in T.wall}
    res["_meta"] = {"B": B, "mode": mode, "scheduler_cls": SchedCls.__name__,
                    "prefill_steps": n_prefill_steps, "num_gpu_blocks": num_blocks,
                    "kv_usage_end": sched.get_kv_cache_usage(),
                    "prefix_caching": vcfg.cache_config.enable_prefix_caching,
                    "hash_algo": vcfg.cache_config.prefix_caching_hash_algo,
                    "max_num_batched_tokens": max_batched,
                    "num_preemptions_seen": sum(r.num_preemptions for r in sched.running)
                    if hasattr(sched.running[0], "num_preemptions") else None}
    r0 = sched.running[0]
    res["_meta"]["sanity"] = {
        "req0_num_computed_tokens": r0.num_computed_tokens,
        "req0_num_output_tokens": r0.num_output_tokens,
        "req0_num_blocks": len(sched.kv_cache_manager.get_block_ids(r0.request_id)[0]),
        "req0_num_block_hashes": len(r0.block_hashes),
        "req0_text_tail": (opp.request_states[r0.request_id].detokenizer.output_text[-80:]
                           if opp is not None else None),
        "detokenizer_cls": (type(opp.request_states[r0.request_id].detokenizer).__name__
                            if opp is not None else None)}
    return res


def env_info():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu_model": model, "nproc": os.cpu_count(),
            "loadavg": open("/proc/loadavg").read().split()[:3],
            "python": sys.version.split()[0], "vllm": vllm.__version__,
            "torch": torch.__version__, "platform": platform.platform()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="async", choices=["async", "sync"])
    ap.add_argument("--bs", type=int, nargs="+",
                    default=[1, 8, 64, 256, 512, 1024, 1536, 2048])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--no-frontend", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-prefix-caching", action="store_true")
    a = ap.parse_args()
    global PREFIX_CACHING
    PREFIX_CACHING = not a.no_prefix_caching
    tok = None if a.no_frontend else load_tokenizer()
    stream = text_token_stream(tok) if tok is not None else list(range(1000, 60000))
    out = {"env_start": env_info(), "args": vars(a), "results": {}}
    for B in a.bs:
        t0 = time.perf_counter()
        r = run_one(B, a.mode, a.steps, a.warmup, tok, stream, not a.no_frontend)
        out["results"][str(B)] = r
        line = " ".join(f"{k}={v['median_s']*1e3:.3f}ms" for k, v in r.items()
                        if not k.startswith("_"))
        print(f"[{a.mode}] B={B} ({time.perf_counter()-t0:.1f}s) {line}", flush=True)
        gc.collect()
    out["env_end"] = env_info()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
