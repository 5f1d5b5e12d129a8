"""SGLang 0.5.9 HTTP-server process (TokenizerManager + FastAPI/uvicorn) per-decode-step CPU cost.

REAL SGLang code in this process (sglang 0.5.9 wheel, --no-deps, torch 2.13.0+cpu):
  * TokenizerManager(server_args, port_args): the real constructor, real zmq.asyncio sockets, real
    handle_loop (auto_create_handle_loop), _result_dispatcher -> _handle_batch_output, ReqState,
    generate_request -> _tokenize_one_request -> _send_one_request -> _wait_one_response.
  * TemplateManager.initialize_templates, OpenAIServingChat (handle_request ->
    _handle_streaming_request -> StreamingResponse(_generate_chat_stream)).
  * The real FastAPI `app` object of sglang.srt.entrypoints.http_server (its routes, CORSMiddleware,
    validate_json_request dependency, exception handlers), served by uvicorn with the uvloop loop
    (http_server.py L163/L1966) and uvicorn's default HTTP protocol (`--http`, see REPORT).
FAKES: the scheduler and the detokenizer. A driver coroutine on the server's own event loop plays the
  detokenizer: it pushes one pickled BatchStrOutput per step into the TokenizerManager's real
  zmq PULL socket (ipc, like DetokenizerManager.send_to_tokenizer). The BatchStrOutputs were produced
  at setup (untimed) by the real DetokenizerManager.handle_batch_token_id_out from synthetic
  BatchTokenIDOutputs (steps.py), one real text token per request per step. The FastAPI lifespan is
  replaced by a no-op (the real one builds the other OpenAI handlers and starts a warm-up thread);
  app.state.openai_serving_chat is set directly.
Per step: send msg, then wait until every SSE event of that step has been handed to uvicorn
  (counted by an outermost ASGI wrapper after uvicorn's send() returned, i.e. after transport.write).
"""
import stubs  # noqa: F401  (torchvision / sgl_kernel stubs)
import argparse, asyncio, contextlib, gc, json, os, pickle, resource, statistics, sys, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--B", type=int, required=True)
ap.add_argument("--port", type=int, default=30123)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--http", default="auto", choices=["auto", "h11", "httptools"])
ap.add_argument("--components", action="store_true", help="instrument per-component timers")
ap.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after setup (as POST /freeze_gc would)")
ap.add_argument("--hist", type=int, default=0, help="output tokens already streamed before step 1 (steps.py)")
ap.add_argument("--profile", default=None, help="cProfile the timed steps, write pstats text here")
ap.add_argument("--out", default=None)
ap.add_argument("--tag", default="")
A = ap.parse_args()

import zmq
import uvicorn
import sglang
import sglang.srt.entrypoints.http_server as hs  # sets uvloop event-loop policy (L163)
from sglang.srt.server_args import ServerArgs, PortArgs
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.managers.template_manager import TemplateManager
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
from sglang.srt.utils import set_uvicorn_logging_configs
from steps import MODEL, text_stream, build_token_steps, make_detokenizer

B = A.B
SA = ServerArgs(model_path=MODEL, host="127.0.0.1", port=A.port, skip_server_warmup=True,
                device="cuda")  # defaults as on a GPU server; nothing here touches a GPU
PA = PortArgs.init_new(SA)
tm = TokenizerManager(SA, PA)
tm.max_req_input_len = tm.context_len - 1  # engine.py L1087 sets it from the scheduler's info
template_manager = TemplateManager()
template_manager.initialize_templates(tokenizer_manager=tm, model_path=SA.model_path,
                                      chat_template=SA.chat_template, completion_template=SA.completion_template)
hs.set_global_state(hs._GlobalState(tokenizer_manager=tm, template_manager=template_manager,
                                    scheduler_info={"max_req_input_len": tm.max_req_input_len}))
app = hs.app
app.state.openai_serving_chat = OpenAIServingChat(tm, template_manager)


@contextlib.asynccontextmanager
async def _noop_lifespan(_app):
    yield
app.router.lifespan_context = _noop_lifespan

pc = time.perf_counter


class C:  # counters
    n = 0; target = None; fut = None
    # component accumulators (seconds, this step)
    recv = handle = build = send = 0.0
    t_content = 0.0; t_yield = 0.0
    gc_runs = [0, 0, 0]


def _gc_cb(phase, info):
    if phase == "start":
        C.gc_runs[info["generation"]] += 1
gc.callbacks.append(_gc_cb)


async def counting_app(scope, receive, send):
    """Outermost ASGI wrapper: `send` here is uvicorn's own send (h11/httptools protocol)."""
    if scope["type"] != "http":
        return await app(scope, receive, send)

    async def send2(msg):
        await send(msg)  # returns after transport.write (unless write-paused)
        if msg["type"] == "http.response.body" and msg.get("body"):
            if A.components:
                C.send += pc() - C.t_yield
            C.n += 1
            if C.fut is not None and C.n >= C.target and not C.fut.done():
                C.fut.set_result(None)
    await app(scope, receive, send2)


if A.components:
    # recv: pickle.loads of the message (zmq.asyncio recv_pyobj = recv + pickle.loads)
    _real_sock = tm.recv_from_detokenizer

    class _RecvW:
        def __getattr__(self, k): return getattr(_real_sock, k)
        async def recv_pyobj(self, flags=0):
            b = await _real_sock.recv(flags)
            t = pc(); o = pickle.loads(b); C.recv += pc() - t
            return o
    tm.recv_from_detokenizer = _RecvW()
    _disp = tm._result_dispatcher

    def _timed_disp(obj):
        t = pc(); r = _disp(obj); C.handle += pc() - t
        return r
    tm._result_dispatcher = _timed_disp
    _gen = tm.generate_request

    async def _gen_w(obj, request=None):
        async for out in _gen(obj, request):
            C.t_content = pc()
            yield out
    tm.generate_request = _gen_w
    _chat = app.state.openai_serving_chat
    _stream = _chat._generate_chat_stream

    async def _stream_w(*a, **k):
        async for s in _stream(*a, **k):
            t = pc(); C.build += t - C.t_content; C.t_yield = t
            yield s
            C.t_content = pc()  # a second chunk from the same content (role chunk) starts here
    _chat._generate_chat_stream = _stream_w

# scheduler side: drain TokenizedGenerateReqInput (to know rids / prompt lengths)
sched_reqs = {}


def _drain():
    ctx = zmq.Context(1)
    s = ctx.socket(zmq.PULL); s.connect(PA.scheduler_input_ipc_name)
    while True:
        o = s.recv_pyobj()
        rid = getattr(o, "rid", None)
        if rid is not None:
            sched_reqs[rid] = len(getattr(o, "input_ids", []) or [])
threading.Thread(target=_drain, daemon=True).start()

TOK = tm.tokenizer
STREAM = text_stream(TOK)
res = {"B": B, "args": vars(A), "steps": []}


async def driver(server):
    t_start = pc()
    while not server.started:
        await asyncio.sleep(0.05)
    print("SERVER_READY", flush=True)
    while len(sched_reqs) < B or len(tm.rid_to_state) < B:
        await asyncio.sleep(0.05)
        if pc() - t_start > 600:
            raise SystemExit(f"timeout: {len(sched_reqs)} sched, {len(tm.rid_to_state)} states")
    rids = list(tm.rid_to_state.keys())
    plens = [sched_reqs[r] for r in rids]
    n_steps = 1 + A.warmup + A.steps + 1
    tok_steps = build_token_steps(rids, plens, n_steps, STREAM, seed=B, hist=A.hist)
    detok = make_detokenizer(SA)
    str_outs = [detok.handle_batch_token_id_out(o) for o in tok_steps]
    payload = [pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL) for o in str_outs]  # = send_pyobj
    expected = [sum(1 for s in o.output_strs if s) for o in str_outs]
    expected[0] += B  # first content also emits the role chunk
    res["msg_bytes_median"] = statistics.median(len(p) for p in payload)
    res["empty_str_frac"] = 1 - sum(expected[1:-1]) / (B * (n_steps - 2))
    res["prompt_tokens_req0"] = plens[0]
    ctx = zmq.Context(1)
    push = ctx.socket(zmq.PUSH); push.connect(PA.tokenizer_ipc_name)
    loop = asyncio.get_running_loop()
    res["loop"] = type(loop).__module__ + "." + type(loop).__name__
    res["http_protocol"] = type(server.config.http_protocol_class).__name__ if not isinstance(
        server.config.http_protocol_class, type) else server.config.http_protocol_class.__name__
    await asyncio.sleep(0.5)
    gc.collect()
    if A.gc_freeze:
        gc.freeze()
    prof = None
    for k in range(n_steps - 1):
        if A.profile and k == 1 + A.warmup:
            import cProfile
            prof = cProfile.Profile(); prof.enable()
        C.target = C.n + expected[k]; C.fut = loop.create_future()
        C.recv = C.handle = C.build = C.send = 0.0
        g0 = list(C.gc_runs)
        w0, c0, t0 = pc(), time.process_time(), time.thread_time()
        push.send(payload[k], copy=False)
        await C.fut
        w1, c1, t1 = pc(), time.process_time(), time.thread_time()
        if k >= 1 + A.warmup:
            st = {"wall": w1 - w0, "cpu": c1 - c0, "thread_cpu": t1 - t0, "events": expected[k],
                  "gc": [a - b for a, b in zip(C.gc_runs, g0)]}
            if A.components:
                st.update(recv=C.recv, handle=C.handle, build=C.build, send=C.send)
            res["steps"].append(st)
    if prof is not None:
        prof.disable()
        import pstats, io
        sio = io.StringIO()
        ps = pstats.Stats(prof, stream=sio); ps.sort_stats("tottime").print_stats(45)
        ps.sort_stats("cumulative").print_stats(45)
        open(A.profile, "w").write(sio.getvalue())
    # finish all requests (last step carries finish_reason), let the streams close
    C.fut = None
    push.send(payload[-1], copy=False)
    t_end = pc()
    while tm.rid_to_state and pc() - t_end < 60:
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    res["total_events_sent"] = C.n
    res["expected_events_before_finish"] = sum(expected[:-1])
    res["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    res["threads"] = threading.active_count()
    res["sglang"] = sglang.__version__
    server.should_exit = True


async def main():
    set_uvicorn_logging_configs(SA)
    cfg = uvicorn.Config(counting_app, host=SA.host, port=SA.port, root_path=SA.fastapi_root_path,
                         log_level=SA.log_level_http or SA.log_level, timeout_keep_alive=5,
                         loop="uvloop", http=A.http)
    server = uvicorn.Server(cfg)
    cfg.load()
    await asyncio.gather(server.serve(), driver(server))


asyncio.run(main())


def summ(xs):
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
    return {"median": statistics.median(xs), "p10": q(.1), "p90": q(.9), "mean": statistics.fmean(xs)}


keys = ["wall", "cpu", "thread_cpu"] + (["recv", "handle", "build", "send"] if A.components else [])
res["summary"] = {k: summ([s[k] for s in res["steps"]]) for k in keys}
res["gc_runs_timed"] = [sum(s["gc"][g] for s in res["steps"]) for g in range(3)]
print(f"B={B} http={res['http_protocol']} wall={res['summary']['wall']['median']*1e3:.3f}ms "
      f"cpu={res['summary']['cpu']['median']*1e3:.3f}ms thr={res['summary']['thread_cpu']['median']*1e3:.3f}ms "
      f"events={res['total_events_sent']} load={res['loadavg_end'][0]}", flush=True)
if A.out:
    json.dump(res, open(A.out, "w"), indent=1)
os._exit(0)
