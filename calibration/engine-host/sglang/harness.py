"""Per-decode-step host (CPU) cost of SGLang scheduling + output processing, no GPU.

REAL SGLang code (sglang 0.5.23, installed --no-deps, torch 2.13.0+cpu), run on CPU tensors:
  * ScheduleBatch.init_new / prepare_for_extend (setup only, not timed)
  * filter_batch()            (Scheduler.get_next_batch_to_run calls it every step; no-op when nothing finished)
  * prepare_for_decode()      (alloc_for_decode -> real TokenToKVPoolAllocator (CPU), ReqToTokenPool.write,
                               per-req decode_batch_idx / kv lens, seq_lens tensors)
  * (ForwardBatch.init_new in TpModelWorker.forward_batch_generation needs a ModelRunner: NOT measured)
  * batch.copy()              (overlap loop: result_queue.append((batch.copy(), result)))
  * SchedulerBatchResultProcessor.process_batch_result_decode (per-req output_ids.extend, update_finish_state,
    _handle_finish_state_updated_req, SchedulerOutputStreamer.stream_output -> BatchTokenIDOutput -> sock_send
    (real msgpack/pickle serialization into a fake socket)
  * DetokenizerManager.handle_batch_token_id_out (separate process in SGLang) + sock_send of BatchStrOutput
FAKES: model forward (next_token_ids = CPU int64 tensor of real text tokens), copy_done=None (no CUDA event),
  metrics_reporter (no-op object: report_decode_stats logging every 40 steps not measured), zmq socket (buffer),
  tree cache = real RadixCache but untouched in steady decode. Tokenizer = Tekken 131k BPE (as vLLM harness).
"""
import stubs  # torchvision stub
import argparse, array, gc, json, os, pickle, platform, statistics, sys, time, types
import numpy as np
import torch

from sglang.srt.server_args import ServerArgs
from sglang.srt.runtime_context import publish
MODEL = "/tmp/sglang-host/model"
SA = ServerArgs(model_path=MODEL, device="cuda", skip_server_warmup=True)
publish(SA, role="scheduler")
from sglang.srt.runtime_context import get_parallel
get_parallel().override_permanently(dp_rank=None)
import sglang
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer
from sglang.srt.managers.scheduler_components.output_sender import SenderWrapper
from sglang.srt.managers.detokenizer_manager import DetokenizerManager
from sglang.srt.managers.io_struct import sock_send, sock_recv
from sglang.srt.disaggregation.utils import DisaggregationMode

PROMPT_BASE = 1000
MC = ModelConfig.from_server_args(SA)


class FakeSock:
    """Stands in for a zmq PUSH/PULL pair: keeps the last message (bytes or pickled obj)."""
    def __init__(self): self.msgs = []
    def send(self, data, flags=0): self.msgs.append(("b", bytes(data)))
    def send_pyobj(self, obj, flags=0, protocol=pickle.HIGHEST_PROTOCOL):
        self.msgs.append(("p", pickle.dumps(obj, protocol)))
    def recv(self, flags=0): return self.msgs.pop(0)[1]
    def recv_pyobj(self, flags=0): return pickle.loads(self.msgs.pop(0)[1])


class NoopMetrics:
    num_generated_tokens = 0
    forward_ct_decode = 0
    def report_decode_stats(self, *a, **k): pass
    def update_spec_metrics(self, *a, **k): pass


def pct(xs, p):
    xs = sorted(xs); k = (len(xs) - 1) * p; lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(w, c):
    return {"median_s": statistics.median(w), "p10_s": pct(w, .1), "p90_s": pct(w, .9),
            "mean_s": statistics.fmean(w), "cpu_median_s": statistics.median(c), "n": len(w)}


class Timer:
    def __init__(self): self.wall, self.cpu, self.on = {}, {}, False
    def run(self, name, fn, *a, **kw):
        w0, c0 = time.perf_counter(), time.process_time()
        r = fn(*a, **kw)
        w1, c1 = time.perf_counter(), time.process_time()
        if self.on:
            self.wall.setdefault(name, []).append(w1 - w0); self.cpu.setdefault(name, []).append(c1 - c0)
        return r


def load_tokenizer():
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer
    return get_tokenizer(MODEL)


def text_stream(tok, n_min=60000):
    import glob
    sp = os.path.dirname(os.path.dirname(sglang.__file__))
    ids = []
    for f in sorted(glob.glob(os.path.join(sp, "*.dist-info", "METADATA"))):
        ids += tok.encode(open(f, errors="ignore").read(), add_special_tokens=False)
        if len(ids) >= n_min: break
    return ids


def run_one(B, steps, warmup, tok, stream, seed=0, mode="overlap"):
    ovl = mode == "overlap"
    rng = np.random.default_rng(seed)
    total = PROMPT_BASE + 16 + warmup + steps + 8
    r2t = ReqToTokenPool(size=B + 4, max_context_len=8192, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=B * total + 1024, dtype=torch.bfloat16, device="cpu",
                                   kvcache=None, need_sort=False)
    tc = RadixCache(CacheInitParams(disable=False, req_to_token_pool=r2t,
                                    token_to_kv_pool_allocator=alloc, page_size=1))
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else {2}
    reqs, offs = [], []
    for i in range(B):
        plen = PROMPT_BASE + (i % 16)
        sp = SamplingParams(max_new_tokens=4096, temperature=1.0)
        sp.normalize(tok); sp.verify(MC.vocab_size)
        r = Req(f"chatcmpl-{i:06d}-{int(rng.integers(1 << 30)):08x}", "",
                array.array("q", rng.integers(1000, 131000, size=plen).tolist()), sp,
                eos_token_ids=eos, vocab_size=MC.vocab_size, stream=True)
        r.tokenizer = tok
        r.init_next_round_input(tc)
        r.extend_end = len(r.full_untruncated_fill_ids)
        reqs.append(r); offs.append(int(rng.integers(0, len(stream))))
    batch = ScheduleBatch.init_new(reqs, r2t, alloc, tc, MC, ovl, SpeculativeAlgorithm.NONE)
    batch.prepare_for_extend()
    # prefill "result": first sampled token per request (not timed)
    for i, r in enumerate(reqs):
        r.output_ids.append(stream[offs[i] % len(stream)])
    pos = [1] * B

    sock_sched = FakeSock(); sock_detok = FakeSock()
    streamer = SchedulerOutputStreamer(send_to_detokenizer=SenderWrapper(sock_sched), tree_cache=tc,
        server_args=SA, is_generation=True, spec_algorithm=SpeculativeAlgorithm.NONE,
        disaggregation_mode=DisaggregationMode.NULL, enable_hicache_storage=lambda: False)
    T = Timer()

    class TimedStreamer:  # proxy: times the real SchedulerOutputStreamer.stream_output
        def stream_output(self, reqs, return_logprob, skip_req=None):
            return T.run("stream_output", streamer.stream_output, reqs, return_logprob, skip_req)

    class NoBeams:
        def commit_decode(self, batch): return set()  # real one returns set() when no beam groups

    proc = SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=ovl,
        enable_overlap_mlx=False, model_config=MC, token_to_kv_pool_allocator=alloc, tree_cache=tc,
        hisparse_coordinator=None, req_to_token_pool=r2t, decode_offload_manager=None,
        metrics_collector=None, metrics_reporter=NoopMetrics(), draft_worker=None, model_worker=None,
        logprob_result_processor=None, output_streamer=TimedStreamer(), beam_coordinator=NoBeams(),
        abort_request=None)

    detok = DetokenizerManager.__new__(DetokenizerManager)
    detok.tokenizer = tok
    detok.vocab_size = len(tok)
    detok.init_running_status(SA)

    # TokenizerManager (front-end process): real _handle_batch_output with a stand-in self
    import asyncio
    from sglang.srt.managers.tokenizer_manager import TokenizerManager, ReqState
    from sglang.srt.managers.io_struct import GenerateReqInput
    loop = asyncio.new_event_loop()
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.rid_to_state = {}
    tm.enable_metrics = False
    tm.incremental_streaming_output = False
    tm.dump_requests_folder = None
    tm.crash_dump_folder = None
    tm.skip_tokenizer_init = False
    try:
        from sglang.srt.observability.req_time_stats import APIServerReqTimeStats
    except Exception:
        APIServerReqTimeStats = None
    for r in reqs:
        obj = GenerateReqInput(input_ids=list(r.origin_input_ids[:8]), stream=True, rid=r.rid,
                               sampling_params={"max_new_tokens": 4096})
        ts = APIServerReqTimeStats() if APIServerReqTimeStats else None
        tm.rid_to_state[r.rid] = ReqState([], False, asyncio.Event(), obj, time_stats=ts)

    def tm_side(str_out_bytes):
        obj = T.run("tm_recv", lambda: pickle.loads(str_out_bytes))
        T.run("tm_handle_batch_output", loop.run_until_complete, tm._handle_batch_output(obj))
        for st in tm.rid_to_state.values():  # consumer coroutines (_wait_one_response) would drain
            st.out_list.clear(); st.event.clear()

    pending = []  # overlap: (batch copy, result) waiting one step

    def fake_forward(b):
        ids = []
        for i in range(B):
            ids.append(stream[(offs[i] + pos[i]) % len(stream)]); pos[i] += 1
        return GenerationBatchResult(logits_output=None, next_token_ids=torch.tensor(ids, dtype=torch.int64),
                                     can_run_cuda_graph=True)

    def detok_side():
        obj = T.run("detok_recv", sock_recv, sock_sched)
        out = T.run("detok_handle", detok.handle_batch_token_id_out, obj)
        T.run("detok_send", sock_send, sock_detok, out)
        tm_side(sock_detok.msgs.pop(0)[1])
        sock_detok.msgs.clear()

    # Stand-in Scheduler `self` for the real Scheduler.update_running_batch / record_batch_in_overlap
    from collections import deque
    from sglang.srt.managers.scheduler import Scheduler
    sself = types.SimpleNamespace(enable_skip_finishing_decode=ovl, result_queue=deque(),
        forward_ct=0, token_to_kv_pool_allocator=alloc, tree_cache=tc, decode_offload_manager=None,
        new_token_ratio_tracker=types.SimpleNamespace(decay_step=lambda: None),
        batch_record_ct=0, batch_record_buf=[None, None])
    sself._reqs_finishing_inflight = types.MethodType(Scheduler._reqs_finishing_inflight, sself)
    real_pfd = batch.prepare_for_decode
    batch.prepare_for_decode = lambda: T.run("prepare_for_decode", real_pfd)

    def step():
        t0w, t0c = time.perf_counter(), time.process_time()
        # get_next_batch_to_run: filter_batch every step, then update_running_batch
        # (_reqs_finishing_inflight, filter_batch, check_decode_mem, prepare_for_decode)
        T.run("filter_batch", batch.filter_batch)
        T.run("update_running_batch", Scheduler.update_running_batch, sself, batch)
        # run_batch CPU bits (overlap): _forward_isolation's sampling_info.copy_for_forward +
        # record_batch_in_overlap (dataclass field snapshot)
        def run_batch_bits():
            si = batch.sampling_info
            batch.sampling_info = si.copy_for_forward()
            if ovl:
                Scheduler.record_batch_in_overlap(sself, batch)
            batch.sampling_info = si
        T.run("run_batch_cpu_bits", run_batch_bits)
        # ForwardBatch.init_new(batch, model_runner) needs a ModelRunner (GPU): not measured
        f0w, f0c = time.perf_counter(), time.process_time()
        res = fake_forward(batch)
        fw, fc = time.perf_counter() - f0w, time.process_time() - f0c  # excluded from scheduler_sum
        if not ovl:  # event_loop_normal: process this batch's result right away
            T.run("process_batch_result_decode", proc.process_batch_result_decode, batch, res)
        else:
          cp = T.run("batch_copy", batch.copy)
          pending.append((cp, res)); sself.result_queue.append((cp, res))
          if len(pending) >= 2:  # overlap: process the previous batch's result now
            b, r = pending.pop(0); sself.result_queue.popleft()
            T.run("process_batch_result_decode", proc.process_batch_result_decode, b, r)
        w, c = time.perf_counter() - t0w - fw, time.process_time() - t0c - fc
        if T.on:
            T.wall.setdefault("scheduler_sum", []).append(w); T.cpu.setdefault("scheduler_sum", []).append(c)
        while sock_sched.msgs:
            detok_side()

    step()  # first decode step
    gc.collect(); gc.freeze()  # Scheduler calls freeze_gc after init
    for _ in range(warmup): step()
    T.on = True
    for _ in range(steps): step()
    T.on = False
    gc.unfreeze()
    res = {k: summarize(T.wall[k], T.cpu[k]) | {"wall_samples": T.wall[k]} for k in T.wall}
    if "stream_output" in res and "process_batch_result_decode" in res:
        pb = [a - b for a, b in zip(T.wall["process_batch_result_decode"], T.wall["stream_output"])]
        pc = [a - b for a, b in zip(T.cpu["process_batch_result_decode"], T.cpu["stream_output"])]
        res["process_decode_excl_stream"] = summarize(pb, pc)
    r0 = reqs[0]
    res["_meta"] = {"B": B, "seq_len_req0": int(batch.seq_lens_cpu[0]), "out_len_req0": len(r0.output_ids), "mode": mode,
                    "finished": sum(r.finished() for r in reqs), "kv_free": alloc.available_size(),
                    "detok_text_tail": detok.decode_status[r0.rid].get_decoded_text()[-60:]
                    if r0.rid in detok.decode_status else None,
                    "tm_text_tail": tm.rid_to_state[r0.rid].get_text()[-60:],
                    "tm_out_ids": len(tm.rid_to_state[r0.rid].output_ids) if hasattr(tm.rid_to_state[r0.rid], "output_ids") else None}
    return res


def env_info():
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return {"cpu_model": model, "nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3],
            "python": sys.version.split()[0], "sglang": sglang.__version__, "torch": torch.__version__,
            "platform": platform.platform()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 8, 64, 256, 512, 1024, 1536, 2048])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--mode", default="overlap", choices=["overlap", "normal"])
    a = ap.parse_args()
    tok = load_tokenizer(); stream = text_stream(tok)
    out = {"env_start": env_info(), "args": vars(a), "results": {}}
    for B in a.bs:
        t0 = time.perf_counter()
        r = run_one(B, a.steps, a.warmup, tok, stream, mode=a.mode)
        r["_meta"]["loadavg"] = open("/proc/loadavg").read().split()[:3]
        out["results"][str(B)] = r
        print(f"B={B} ({time.perf_counter()-t0:.1f}s) load={r['_meta']['loadavg'][0]} " + " ".join(
            f"{k}={v['median_s']*1e3:.3f}" for k, v in r.items() if not k.startswith("_")), flush=True)
        gc.collect()
    out["env_end"] = env_info()
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
