"""Per-decode-step CPU cost of vLLM's API-server process (front end) streaming to B clients.

Runs, in this one process, vLLM 0.19.0's real OpenAI API server the way `vllm serve` runs a
single API server: uvloop.run(...) -> setup_server(args) -> build_async_engine_client(args, ...)
-> AsyncLLM (real InputProcessor / OutputProcessor / AsyncMPClient with its ZMQ sockets and
MsgpackDecoder, StatLoggerManager with the logging + Prometheus loggers) -> build_and_serve(...)
-> build_app / init_app_state / serve_http (uvicorn, httptools, the real FastAPI app, the real
OpenAIServingChat). Everything is parsed from real `vllm serve` CLI arguments.

The only fake is the EngineCore: instead of launching one, AsyncLLM gets `client_addresses`
(the path that vLLM's multi-API-server mode uses for externally managed engines), and a
stand-in engine in this process (i) answers the ZMQ ready handshake and utility calls,
(ii) receives the ADD requests (to learn the request ids), and (iii) is the driver: per
step it pushes ONE pre-encoded EngineCoreOutputs (vLLM's MsgpackEncoder, encoded before the
timed steps so the engine's encode cost is not in this process) with one real text token
per request through a ZMQ PUSH socket to the AsyncMPClient's PULL socket, then waits until
all B SSE chunks of that step were handed to uvicorn (fe_mw.StepCounterMiddleware, loaded
via vLLM's own --middleware option), then immediately pushes the next step (saturated).

Per step it records: wall (perf_counter), process CPU (getrusage(RUSAGE_SELF) user+sys: all
threads of this process: the main asyncio thread, ZMQ I/O threads, idle helper threads), and
main-thread CPU (time.thread_time). With --components it also times, per step (perf_counter
inside synchronous code, the main thread is saturated so wall ~= CPU there):
  fe_decode           MsgpackDecoder.decode of the step's EngineCoreOutputs
  fe_process_outputs  OutputProcessor.process_outputs (all 128-request chunks)
  fe_stats_record     StatLoggerManager.record (Prometheus + logging stat loggers)
  chat_chunk          OpenAIServingChat.chat_completion_stream_generator body: from receiving
                      a RequestOutput to yielding the "data: ...\\n\\n" string (delta chunk
                      build + pydantic model_dump_json + f-string)
  uvicorn_send        uvicorn's ASGI send() for the body messages (chunked framing +
                      transport.write -> socket send syscall)
  rest (computed)     main-thread CPU minus the above: zmq recv, asyncio task switches,
                      AsyncLLM.generate() wakeups (RequestOutputCollector), Starlette
                      StreamingResponse + middleware layers, GC, timers.
The components run adds wrappers (extra generator layers), so its totals are reported
separately from the plain run.

Output-length option (--hist H, added for runs_length/, see run_length.sh): before the warm-up
steps every request first receives H earlier output tokens (continuing text), so that the
per-request state that grows with output length (detokenizer output_text / token_ids, the chat
generator's previous_texts[i]) is already H tokens long during the timed steps. The history is
delivered in ceil(H/K) un-timed pre-steps of K = --hist-chunk tokens per request (K=1: token by
token, exactly like decode steps; K=0 (default): all H tokens in ONE EngineCoreOutput per request,
which vLLM processes as one multi-token delta). Pre-steps are encoded lazily (not pre-encoded),
are driven like decode steps (push, wait for all B chunks) and are not timed. --hist 0 (default)
gives exactly the original behaviour. --max-load X waits (up to --max-load-wait s) before each
point, and before the timed steps when H>0, until the 1-minute load average is <= X.
--hist-seq H1 H2 ... runs, for each B, one point per listed H in one process (interleaved check).

usage: python harness.py --bs 1 8 64 --warmup 20 --steps 50 --out runs/rep1.json [--components]
       python harness.py --bs 256 1024 --hist 4000 --hist-chunk 1 --max-load 1.5 --out runs_length/x.json
"""
import argparse
import asyncio
import gc
import glob
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# ---- platform: no GPU here. CpuPlatform lets VllmConfig/ModelConfig be built from the CLI
# args; none of the front-end code measured here depends on the platform.
import vllm.platforms as _P  # noqa: E402
from vllm.platforms.cpu import CpuPlatform  # noqa: E402

_P._current_platform = CpuPlatform()

import msgspec  # noqa: E402
import uvloop  # noqa: E402
import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

import vllm  # noqa: E402
from vllm.entrypoints.openai.api_server import (  # noqa: E402
    build_and_serve, build_async_engine_client, setup_server)
from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402
from vllm.v1.engine import (EngineCoreEvent, EngineCoreEventType, EngineCoreOutput,  # noqa: E402
                            EngineCoreOutputs, EngineCoreRequest, EngineCoreRequestType,
                            FinishReason, UtilityOutput)
from vllm.v1.metrics.stats import SchedulerStats  # noqa: E402
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult  # noqa: E402

import fe_mw  # noqa: E402

MODEL_DIR = "/tmp/fe-vllm/model_qwen3moe"
CLIENT = os.path.join(HERE, "client.py")
pc = time.perf_counter


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summ(xs):
    return {"median": statistics.median(xs), "p10": pct(xs, 0.1), "p90": pct(xs, 0.9),
            "mean": statistics.fmean(xs), "n": len(xs)}


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_stat_busy():
    """Whole-machine busy CPU seconds (all cores) from /proc/stat, to see other load."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / hz


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def text_token_stream(tok, n_min=60000):
    """Real English/code text -> token ids (same source as ../harness.py)."""
    sp = os.path.dirname(os.path.dirname(vllm.__file__))
    ids = []
    for f in sorted(glob.glob(os.path.join(sp, "*.dist-info", "METADATA"))):
        with open(f, errors="ignore") as fh:
            ids += tok.encode(fh.read(), add_special_tokens=False)
        if len(ids) >= n_min:
            break
    return ids


class FakeEngine:
    """Stand-in EngineCore endpoint (ZMQ DEALER in / PUSH out), living in this process."""

    def __init__(self, in_addr, out_addr):
        self.actx = zmq.asyncio.Context()
        self.dealer = self.actx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.IDENTITY, (0).to_bytes(2, "little"))
        self.dealer.setsockopt(zmq.RCVHWM, 0)
        self.dealer.connect(in_addr)
        self.sctx = zmq.Context(io_threads=1)
        self.push = self.sctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 0)
        self.push.connect(out_addr)
        self.enc = MsgpackEncoder()
        self.added = []
        self.want = 1 << 62
        self.added_event = asyncio.Event()
        self.n_abort = 0
        self.utility_calls = []

    async def ready(self):
        await self.dealer.send(b"")  # what EngineCoreProc's input thread sends first

    async def input_loop(self):
        dreq = MsgpackDecoder(EngineCoreRequest)
        dgen = MsgpackDecoder()
        while True:
            type_frame, *data = await self.dealer.recv_multipart(copy=False)
            rt = EngineCoreRequestType(bytes(type_frame.buffer))
            if rt == EngineCoreRequestType.ADD:
                req = dreq.decode(data)
                self.added.append((req.request_id, len(req.prompt_token_ids or [])))
                if len(self.added) >= self.want:
                    self.added_event.set()
            elif rt == EngineCoreRequestType.UTILITY:
                client_index, call_id, method, uargs = dgen.decode(data)
                self.utility_calls.append(method)
                result = ("generate",) if method == "get_supported_tasks" else None
                out = EngineCoreOutputs(utility_output=UtilityOutput(
                    call_id, result=UtilityResult(result)))
                self.push.send_multipart(self.enc.encode(out))
            elif rt == EngineCoreRequestType.ABORT:
                self.n_abort += len(dgen.decode(data))

    def encode_steps(self, rids, stream, n_steps, B, offsets, pos0=0, first=True):
        """Pre-encode n_steps decode steps + one final (finish=LENGTH) step.
        Step j carries the token at output position pos0 + j of each request's text;
        `first`: step 0 is the request's first output (events attached)."""
        frames = []
        L = len(stream)
        for j in range(n_steps + 1):
            last = j == n_steps
            ts = time.monotonic()
            outs = []
            for k, (rid, plen) in enumerate(rids):
                o = EngineCoreOutput(request_id=rid,
                                     new_token_ids=[stream[(offsets[k] + pos0 + j) % L]],
                                     finish_reason=FinishReason.LENGTH if last else None)
                if j == 0 and first:  # what the scheduler attaches to a request's first output
                    o.num_cached_tokens = 0
                    o.events = [EngineCoreEvent(EngineCoreEventType.QUEUED, ts - 0.02),
                                EngineCoreEvent(EngineCoreEventType.SCHEDULED, ts - 0.01)]
                outs.append(o)
            eco = EngineCoreOutputs(
                engine_index=0, outputs=outs, timestamp=ts,
                scheduler_stats=SchedulerStats(num_running_reqs=B, num_waiting_reqs=0,
                                               step_counter=j, kv_cache_usage=0.3),
                finished_requests={r for r, _ in rids} if last else None)
            frames.append([bytes(b) for b in self.enc.encode(eco)])
        return frames

    def encode_hist_step(self, rids, stream, B, offsets, pos, n_tok, first, step_counter):
        """One un-timed history pre-step: n_tok tokens per request (output positions
        pos .. pos+n_tok-1), as one EngineCoreOutput per request (multi-token delta if n_tok>1)."""
        L = len(stream)
        ts = time.monotonic()
        outs = []
        for k, (rid, plen) in enumerate(rids):
            b = offsets[k] + pos
            o = EngineCoreOutput(request_id=rid,
                                 new_token_ids=[stream[(b + i) % L] for i in range(n_tok)])
            if first:
                o.num_cached_tokens = 0
                o.events = [EngineCoreEvent(EngineCoreEventType.QUEUED, ts - 0.02),
                            EngineCoreEvent(EngineCoreEventType.SCHEDULED, ts - 0.01)]
            outs.append(o)
        eco = EngineCoreOutputs(
            engine_index=0, outputs=outs, timestamp=ts,
            scheduler_stats=SchedulerStats(num_running_reqs=B, num_waiting_reqs=0,
                                           step_counter=step_counter, kv_cache_usage=0.3))
        return self.enc.encode(eco)


class Comp:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fe_decode = self.fe_process_outputs = self.fe_stats_record = 0.0
        self.chat_chunk = 0.0
        self.gc_s = [0.0, 0.0, 0.0]   # per generation (overlaps the components above)
        self.gc_n = [0, 0, 0]
        self._gc_t0 = None


def _gc_cb(phase, info):
    if phase == "start":
        COMP._gc_t0 = pc()
    elif COMP._gc_t0 is not None:
        g = info["generation"]
        COMP.gc_s[g] += pc() - COMP._gc_t0
        COMP.gc_n[g] += 1
        COMP._gc_t0 = None


COMP = Comp()


def install_component_timers(engine_client):
    dec = engine_client.engine_core.decoder
    orig_decode = dec.decode

    def decode(*a, **k):
        t0 = pc()
        r = orig_decode(*a, **k)
        COMP.fe_decode += pc() - t0
        return r
    dec.decode = decode

    op = engine_client.output_processor
    orig_po = op.process_outputs

    def process_outputs(*a, **k):
        t0 = pc()
        r = orig_po(*a, **k)
        COMP.fe_process_outputs += pc() - t0
        return r
    op.process_outputs = process_outputs

    lm = engine_client.logger_manager
    if lm is not None:
        orig_rec = lm.record

        def record(*a, **k):
            t0 = pc()
            r = orig_rec(*a, **k)
            COMP.fe_stats_record += pc() - t0
            return r
        lm.record = record

    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    orig_gen = OpenAIServingChat.chat_completion_stream_generator

    def patched(self, request, result_generator, *a, **k):
        box = [0.0]

        async def timed_results():
            async for res in result_generator:
                box[0] = pc()
                yield res

        async def outer():
            async for s in orig_gen(self, request, timed_results(), *a, **k):
                COMP.chat_chunk += pc() - box[0]
                yield s
                box[0] = pc()
        return outer()
    OpenAIServingChat.chat_completion_stream_generator = patched
    fe_mw.STATE.time_send = True
    gc.callbacks.append(_gc_cb)


async def wait_port(port, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise RuntimeError("server did not come up")


async def wait_load(max_load, max_wait):
    """--max-load: wait until the 1-min load average is <= max_load (0: no waiting)."""
    l0 = loadavg()
    t0 = time.monotonic()
    if max_load > 0:
        while loadavg() > max_load and time.monotonic() - t0 < max_wait:
            await asyncio.sleep(5)
    return {"load1_before_wait": l0, "waited_s": round(time.monotonic() - t0, 1),
            "load1_after_wait": loadavg()}


async def run_B(a, B, eng, engine_client, stream, tok_model, hist=None):
    loop_warm, n_steps = a.warmup, a.steps
    if B >= 2048 and a.steps_2048:
        n_steps = a.steps_2048
    total = loop_warm + n_steps
    H = a.hist if hist is None else hist
    K = a.hist_chunk if a.hist_chunk > 0 else max(H, 1)
    pre_sizes = [min(K, H - s) for s in range(0, H, K)]   # [] when H == 0
    P = len(pre_sizes)
    eng.added.clear()
    eng.want = B
    eng.added_event.clear()
    st = fe_mw.STATE
    wait_point = await wait_load(a.max_load, a.max_load_wait)
    load_start = loadavg()
    max_tokens = max(4096, H + total + 8)
    client = await asyncio.create_subprocess_exec(
        a.client_python, CLIENT, "--port", str(a.port), "--n", str(B), "--model", tok_model,
        "--max-tokens", str(max_tokens), stdout=subprocess.PIPE)
    t_adm = pc()
    await asyncio.wait_for(eng.added_event.wait(), timeout=600)
    t_adm = pc() - t_adm
    await asyncio.sleep(0.5)
    assert len(eng.added) == B, (len(eng.added), B)
    rids = list(eng.added)
    offsets = [(i * 7919) % len(stream) for i in range(B)]
    frames = eng.encode_steps(rids, stream, total, B, offsets, pos0=H, first=(P == 0))
    st.count = 0
    target = 0
    ev = st.event
    hist_info = None
    if P:   # un-timed history pre-steps: every request streams H tokens first
        w0, c0, pos = pc(), cpu_self(), 0
        for p, n in enumerate(pre_sizes):
            fr = eng.encode_hist_step(rids, stream, B, offsets, pos, n, p == 0, p)
            pos += n
            target += 2 * B if p == 0 else B
            st.target = target
            ev.clear()
            eng.push.send_multipart(fr, copy=False)
            await ev.wait()
        hist_info = {"H": H, "chunk_tokens": K, "n_presteps": P,
                     "prephase_wall_s": pc() - w0, "prephase_cpu_s": cpu_self() - c0}
        hist_info["wait_before_timed"] = await wait_load(a.max_load, a.max_load_wait)
    rec = {"wall": [], "cpu_proc": [], "cpu_main": []}
    comp = {k: [] for k in ("fe_decode", "fe_process_outputs", "fe_stats_record",
                            "chat_chunk", "uvicorn_send")}
    gcs = {"gc_gen0_s": [], "gc_gen1_s": [], "gc_gen2_s": [], "gc_gen0_n": [],
           "gc_gen1_n": [], "gc_gen2_n": []}
    busy0 = wall0 = cpu0 = None
    loadavg_at_timed = None
    for j in range(total):
        if j == loop_warm:
            loadavg_at_timed = loadavg()
            busy0, wall0, cpu0 = proc_stat_busy(), pc(), cpu_self()
        if a.gc_ab and j >= loop_warm:   # diagnostic: alternate GC on/off in blocks of 25 steps
            if ((j - loop_warm) // 25) % 2:
                gc.disable()
            else:
                gc.enable()
        target += 2 * B if (j == 0 and P == 0) else B  # first output: role + content chunk
        st.target = target
        ev.clear()
        COMP.reset()
        st.send_s = 0.0
        if a.rusage_detail:
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
        w0, c0, m0 = pc(), cpu_self(), time.thread_time()
        eng.push.send_multipart(frames[j], copy=False)
        await ev.wait()
        w1, c1, m1 = pc(), cpu_self(), time.thread_time()
        if a.rusage_detail and j >= loop_warm:   # diagnostic: sys CPU and minor faults per step
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            rec.setdefault("cpu_sys", []).append(ru1.ru_stime - ru0.ru_stime)
            rec.setdefault("minflt", []).append(ru1.ru_minflt - ru0.ru_minflt)
        if j >= loop_warm:
            rec["wall"].append(w1 - w0)
            rec["cpu_proc"].append(c1 - c0)
            rec["cpu_main"].append(m1 - m0)
            if a.gc_ab:
                rec.setdefault("gc_enabled", []).append(int(gc.isenabled()))
            if a.components or a.gc_timing:
                for g in range(3):
                    gcs[f"gc_gen{g}_s"].append(COMP.gc_s[g])
                    gcs[f"gc_gen{g}_n"].append(COMP.gc_n[g])
            if a.components:
                comp["fe_decode"].append(COMP.fe_decode)
                comp["fe_process_outputs"].append(COMP.fe_process_outputs)
                comp["fe_stats_record"].append(COMP.fe_stats_record)
                comp["chat_chunk"].append(COMP.chat_chunk)
                comp["uvicorn_send"].append(st.send_s)
    busy1, wall1, cpu1 = proc_stat_busy(), pc(), cpu_self()
    if a.gc_ab:
        gc.enable()
    load_end = loadavg()
    assert st.count == target, (st.count, target)
    # length of the per-request state during the timed steps (read after them, not timed)
    rs = list(engine_client.output_processor.request_states.values())
    state_check = {
        "n_requests": len(rs),
        "output_tokens_mean": statistics.fmean(d.detokenizer.num_output_tokens() for d in rs),
        "output_text_chars_mean": statistics.fmean(len(d.detokenizer.output_text) for d in rs),
    } if rs else None
    # finish every request (finish_reason=length) and let the client drain to [DONE]
    eng.push.send_multipart(frames[total], copy=False)
    out, _ = await asyncio.wait_for(client.communicate(), timeout=600)
    cres = json.loads(out.decode().strip().splitlines()[-1])
    for _ in range(100):
        if engine_client.output_processor.get_num_unfinished_requests() == 0:
            break
        await asyncio.sleep(0.05)
    expected_events = P + total + 3   # role + P history + total content + final + [DONE]
    ok = (cres["all_done"] and cres["all_200"] and cres["events_min"] == expected_events
          and cres["events_max"] == expected_events)
    res = {"B": B, "steps": n_steps, "warmup": loop_warm,
           "wall_s": summ(rec["wall"]), "cpu_proc_s": summ(rec["cpu_proc"]),
           "cpu_main_s": summ(rec["cpu_main"]),
           "samples": {k: [round(x, 7) for x in v] for k, v in rec.items()},
           "load1_start": load_start, "load1_end": load_end,
           "other_cpu_cores": ((busy1 - busy0) - (cpu1 - cpu0)) / (wall1 - wall0),
           "timed_window_s": wall1 - wall0, "admission_s": t_adm,
           "client": cres, "client_events_expected": expected_events, "client_check_ok": ok,
           "unfinished_after": engine_client.output_processor.get_num_unfinished_requests(),
           "prompt_len_tokens": rids[0][1]}
    if H or a.max_load > 0:
        res.update({"hist": hist_info, "hist_tokens": H, "state_after_timed_steps": state_check,
                    "wait_before_point": wait_point, "load1_before_timed": loadavg_at_timed,
                    "client_max_tokens": max_tokens})
    if a.components:
        res["components_s"] = {k: summ(v) for k, v in comp.items()}
        rest = [m - sum(comp[k][i] for k in comp) for i, m in enumerate(rec["cpu_main"])]
        res["components_s"]["rest_main_thread"] = summ(rest)
        res["components_samples"] = {k: [round(x, 7) for x in v] for k, v in comp.items()}
    if a.components or a.gc_timing:
        # GC pauses, timed with gc.callbacks; they happen INSIDE the components above
        res["gc_s"] = {k: summ(v) for k, v in gcs.items()}
        res["gc_samples"] = {k: [round(x, 7) for x in v] for k, v in gcs.items()}
    # the client also uses CPU (other core); its total over the whole stream:
    res["client_cpu_per_step_s"] = cres["client_cpu_s"] / (total + 2)
    return res


async def amain(a):
    pid = os.getpid()
    in_addr = f"ipc:///tmp/fe-vllm/ipc_in_{pid}"
    out_addr = f"ipc:///tmp/fe-vllm/ipc_out_{pid}"
    serve_argv = ["--model", MODEL_DIR, "--max-model-len", "8192",
                  "--max-num-seqs", "2048", "--host", "127.0.0.1", "--port", str(a.port),
                  "--middleware", "fe_mw.StepCounterMiddleware"] + shlex.split(a.extra_serve_args)
    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(serve_argv)
    validate_parsed_serve_args(args)

    fe_mw.STATE.event = asyncio.Event()
    eng = FakeEngine(in_addr, out_addr)
    await eng.ready()
    in_task = asyncio.create_task(eng.input_loop())

    listen_address, sock = setup_server(args)
    out = {"env_start": env_info(), "args": vars(a), "serve_argv": serve_argv, "results": {}}
    async with build_async_engine_client(
            args, client_config={"input_address": in_addr, "output_address": out_addr}
    ) as engine_client:
        server_task = asyncio.create_task(
            build_and_serve(engine_client, listen_address, sock, args))
        await wait_port(a.port)
        if a.components:
            install_component_timers(engine_client)
        if a.gc_timing and not a.components:   # diagnostic: GC pause timing only
            gc.callbacks.append(_gc_cb)
        if a.gc_off:   # diagnostic only: the real server keeps gc on (frozen startup heap)
            gc.disable()
        tok = engine_client.get_tokenizer()
        stream = text_token_stream(tok)
        out["config"] = {
            "loop": type(asyncio.get_running_loop()).__module__,
            "tokenizer": type(tok).__name__,
            "detokenizer_note": "FastIncrementalDetokenizer (PreTrainedTokenizerFast)",
            "log_stats": engine_client.log_stats,
            "stat_loggers": [type(x).__name__ for x in
                             (engine_client.logger_manager.stat_loggers
                              if engine_client.logger_manager and hasattr(
                                  engine_client.logger_manager, "stat_loggers") else [])],
            "stream_interval": engine_client.vllm_config.scheduler_config.stream_interval,
            "chunk_size": int(os.environ.get("VLLM_V1_OUTPUT_PROC_CHUNK_SIZE", "128")),
            "gc_threshold": gc.get_threshold(), "gc_frozen_at_start": gc.get_freeze_count(),
            "utility_calls": list(eng.utility_calls),
        }
        # --hist-seq: several (B, H) points in this one process, results keyed "B/hH/i"
        points = ([(B, None) for B in a.bs] if not a.hist_seq
                  else [(B, H) for B in a.bs for H in a.hist_seq])
        for i, (B, H) in enumerate(points):
            t0 = time.time()
            r = await run_B(a, B, eng, engine_client, stream, MODEL_DIR, hist=H)
            out["results"][str(B) if H is None else f"{B}/h{H}/{i}"] = r
            line = (f"B={B} wall={r['wall_s']['median']*1e3:.3f}ms "
                    f"cpu_proc={r['cpu_proc_s']['median']*1e3:.3f}ms "
                    f"cpu_main={r['cpu_main_s']['median']*1e3:.3f}ms "
                    f"load={r['load1_start']:.2f}/{r['load1_end']:.2f} "
                    f"other_cpu={r['other_cpu_cores']:.2f} ok={r['client_check_ok']} "
                    f"client_cpu/step={r['client_cpu_per_step_s']*1e3:.3f}ms")
            if r.get("hist"):
                h = r["hist"]
                line += (f" | hist={h['H']} chunk={h['chunk_tokens']} presteps={h['n_presteps']}"
                         f" pre_wall={h['prephase_wall_s']:.1f}s"
                         f" load_timed={r['load1_before_timed']:.2f}"
                         f" out_tok={r['state_after_timed_steps']['output_tokens_mean']:.0f}"
                         f" text_chars={r['state_after_timed_steps']['output_text_chars_mean']:.0f}")
            if a.components:
                line += " | " + " ".join(f"{k}={v['median']*1e3:.3f}"
                                         for k, v in r["components_s"].items())
            if a.components or a.gc_timing:
                line += " | gc(mean ms, n/step) " + " ".join(
                    f"g{g}={r['gc_s'][f'gc_gen{g}_s']['mean']*1e3:.2f}/"
                    f"{r['gc_s'][f'gc_gen{g}_n']['mean']:.2f}" for g in range(3))
            print(f"[{a.tag}] {line} ({time.time()-t0:.0f}s)", file=sys.stderr, flush=True)
        out["config"]["n_abort_seen"] = eng.n_abort
        thr = []
        for t in sorted(glob.glob("/proc/self/task/*")):
            try:
                thr.append(open(os.path.join(t, "comm")).read().strip())
            except OSError:
                pass
        out["config"]["threads_at_end"] = thr
        out["config"]["gc_counts_end"] = gc.get_count()
        out["config"]["gc_stats_end"] = gc.get_stats()
        out["env_end"] = env_info()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(0)   # skip the shutdown dance (no real engine to stop)


def env_info():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import fastapi, starlette, uvicorn, pydantic, httptools, transformers, tokenizers
    return {"cpu_model": model, "nproc": os.cpu_count(), "loadavg": open(
        "/proc/loadavg").read().split()[:3], "python": sys.version.split()[0],
        "vllm": vllm.__version__, "fastapi": fastapi.__version__,
        "starlette": starlette.__version__, "uvicorn": uvicorn.__version__,
        "pydantic": pydantic.__version__, "httptools": httptools.__version__,
        "uvloop": uvloop.__version__, "pyzmq": zmq.__version__, "msgspec": msgspec.__version__,
        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        "platform": platform.platform(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 8, 64, 256, 512, 1024, 2048])
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--steps-2048", type=int, default=0)
    ap.add_argument("--port", type=int, default=18000)
    ap.add_argument("--components", action="store_true")
    ap.add_argument("--gc-off", action="store_true")
    ap.add_argument("--gc-ab", action="store_true",
                    help="diagnostic: GC on/off alternating in blocks of 25 timed steps")
    ap.add_argument("--gc-timing", action="store_true",
                    help="diagnostic: only the gc.callbacks timer, no component timers")
    ap.add_argument("--hist", type=int, default=0,
                    help="output tokens every request has already streamed before the warm-up")
    ap.add_argument("--hist-seq", type=int, nargs="+", default=None,
                    help="for each B, run one point per H in this list, in this order, in this process")
    ap.add_argument("--hist-chunk", type=int, default=0,
                    help="tokens per request per history pre-step (0: all H in one pre-step)")
    ap.add_argument("--max-load", type=float, default=0.0,
                    help="wait until 1-min load <= this before each point (0: off)")
    ap.add_argument("--max-load-wait", type=float, default=600.0)
    ap.add_argument("--rusage-detail", action="store_true",
                    help="diagnostic: also record per-step sys CPU and minor page faults")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default="run")
    ap.add_argument("--client-python", default="/usr/bin/python3")
    ap.add_argument("--extra-serve-args", default="",
                    help="extra `vllm serve` CLI args, one string (split with shlex)")
    a = ap.parse_args()
    uvloop.run(amain(a))   # as `vllm serve` does (entrypoints/cli/serve.py)


if __name__ == "__main__":
    main()
