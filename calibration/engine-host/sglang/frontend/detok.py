"""SGLang 0.5.9 DetokenizerManager per-decode-step CPU cost (the body of
DetokenizerManager.event_loop, detokenizer_manager.py L144-L152):
  recv_from_scheduler.recv_pyobj()  (real zmq PULL over ipc + pickle.loads)
  _request_dispatcher(obj) -> handle_batch_token_id_out (L360) -> _decode_batch_token_id_output (L224)
  send_to_tokenizer.send_pyobj(out) (real zmq PUSH over ipc, pickle.dumps)
The DetokenizerManager is real (tokenizer, decode_status, dispatcher); its sockets are real zmq sockets
made here. The scheduler side (a PUSH socket sending pre-pickled BatchTokenIDOutputs, steps.py) and the
tokenizer side (a PULL sink) live in this process too, but outside the timed region; their zmq I/O
thread (one Context) is shared, so process_time() may include a little of their I/O-thread work.
"""
import stubs  # noqa: F401
import argparse, gc, json, os, pickle, statistics, sys, tempfile, time
import zmq
import sglang
from sglang.srt.server_args import ServerArgs
from steps import MODEL, text_stream, build_token_steps, make_detokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--bs", type=int, nargs="+", default=[1, 8, 64, 256, 512, 1024, 2048])
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--hist", type=int, default=0, help="output tokens already streamed before step 1 (steps.py)")
ap.add_argument("--out", default=None)
A = ap.parse_args()

SA = ServerArgs(model_path=MODEL, skip_server_warmup=True, device="cuda")
pc = time.perf_counter


def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def run(B, tok, stream):
    d = make_detokenizer(SA)
    ctx = zmq.Context(2)  # as DetokenizerManager.init_ipc_channels
    a = f"ipc://{tempfile.mktemp(prefix='fe-detok-a')}"; b = f"ipc://{tempfile.mktemp(prefix='fe-detok-b')}"
    d.recv_from_scheduler = ctx.socket(zmq.PULL); d.recv_from_scheduler.bind(a)
    d.send_to_tokenizer = ctx.socket(zmq.PUSH); d.send_to_tokenizer.connect(b)
    sched = ctx.socket(zmq.PUSH); sched.connect(a)
    sink = ctx.socket(zmq.PULL); sink.bind(b)
    rids = [f"{os.urandom(16).hex()}" for _ in range(B)]
    n = 1 + A.warmup + A.steps
    msgs = [pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL) for o in
            build_token_steps(rids, [30] * B, n, stream, seed=B, finish_last=False, hist=A.hist)]
    rows = []
    gc.collect()
    for k in range(n):
        sched.send(msgs[k], copy=False)
        while not d.recv_from_scheduler.poll(0):  # message has arrived before the clock starts
            time.sleep(0)
        w0, c0 = pc(), time.process_time()
        obj = d.recv_from_scheduler.recv_pyobj()
        w1, c1 = pc(), time.process_time()
        out = d._request_dispatcher(obj)
        w2, c2 = pc(), time.process_time()
        d.send_to_tokenizer.send_pyobj(out)
        w3, c3 = pc(), time.process_time()
        sink.recv()
        if k >= 1 + A.warmup:
            rows.append({"wall": w3 - w0, "cpu": c3 - c0, "recv": w1 - w0, "handle": w2 - w1, "send": w3 - w2,
                         "recv_cpu": c1 - c0, "handle_cpu": c2 - c1, "send_cpu": c3 - c2})
    ctx.destroy(linger=0)
    r = {k: {"median": statistics.median(x[k] for x in rows), "p10": pct([x[k] for x in rows], .1),
             "p90": pct([x[k] for x in rows], .9)} for k in rows[0]}
    r["msg_in_bytes_median"] = statistics.median(len(m) for m in msgs[1:])
    r["loadavg"] = open("/proc/loadavg").read().split()[:3]
    return r


tok = make_detokenizer(SA).tokenizer
stream = text_stream(tok)
res = {"sglang": sglang.__version__, "results": {}}
for B in A.bs:
    r = run(B, tok, stream)
    res["results"][str(B)] = r
    print(f"B={B} cpu={r['cpu']['median']*1e3:.3f}ms wall={r['wall']['median']*1e3:.3f}ms "
          f"recv={r['recv']['median']*1e3:.3f} handle={r['handle']['median']*1e3:.3f} send={r['send']['median']*1e3:.3f} "
          f"load={r['loadavg'][0]}", flush=True)
if A.out:
    json.dump(res, open(A.out, "w"), indent=1)
