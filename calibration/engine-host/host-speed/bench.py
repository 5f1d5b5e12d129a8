"""A host's speed at the Python work a serving engine's front end does, standard library only, so that the same
script runs on this project's development VM and on a lent GPU machine's host (which has none of the engines).

Per step of B streams (B = 256, 512, 1024), timed as process CPU and wall after warm-up:

- ``stream``: B coroutines each wait on an asyncio.Event (a request's state, as SGLang's TokenizerManager and vLLM's
  output collectors keep them); a step sets all B, and each woken coroutine builds an OpenAI-style chat-completion
  chunk (nested dicts), serialises it with json, frames it as a server-sent event in an HTTP/1.1 chunk and writes it
  to its own loopback socket, drained by a separate process that only reads;
- ``pickle``: B objects of 24 fields pickled and unpickled (the batch messages the engines' processes exchange);
- ``objects``: B small objects updated field by field with a few method calls each (per-request bookkeeping).

The engines' own front-end costs are measured with their own code in ../sglang/frontend and ../vllm/frontend on the
development VM; this script measures how much faster or slower another host runs work of the same kind
(``python bench.py --out FILE``; docs/engines.md, "The front end").
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import pickle
import platform
import selectors
import socket
import statistics
import sys
import time

SIZES = (256, 512, 1024)


def _drain(port: int, n: int, ready) -> None:
    """Accept ``n`` connections and read them until they close: the cheapest client there is."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(4096)
    ready.set()
    sel = selectors.DefaultSelector()
    open_ = 0
    for _ in range(n):
        c, _ = srv.accept()
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
        open_ += 1
    buf = bytearray(1 << 16)
    while open_:
        for key, _ in sel.select():
            try:
                got = key.fileobj.recv_into(buf)
            except BlockingIOError:
                continue
            if not got:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                open_ -= 1


class Stream:
    __slots__ = ("rid", "event", "writer", "text", "tokens")

    def __init__(self, rid, writer):
        self.rid, self.event, self.writer, self.text, self.tokens = rid, asyncio.Event(), writer, "", 0


async def _stream_steps(b: int, port: int, warmup: int, steps: int) -> list[tuple[float, float]]:
    streams = []
    for i in range(b):
        _, w = await asyncio.open_connection("127.0.0.1", port)
        streams.append(Stream(f"chatcmpl-{i:08x}", w))
    done = asyncio.Event()
    left = [0]
    words = ("the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")

    async def serve(s: Stream):
        created = int(time.time())
        while True:
            await s.event.wait()
            s.event.clear()
            tok = words[s.tokens % len(words)]
            s.tokens += 1
            s.text += tok
            chunk = {"id": s.rid, "object": "chat.completion.chunk", "created": created, "model": "model",
                     "choices": [{"index": 0, "delta": {"role": None, "content": tok, "reasoning_content": None,
                                                        "tool_calls": None},
                                  "logprobs": None, "finish_reason": None, "matched_stop": None}],
                     "usage": None}
            body = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
            s.writer.write(b"%x\r\n%s\r\n" % (len(body), body))
            left[0] -= 1
            if not left[0]:
                done.set()

    tasks = [asyncio.ensure_future(serve(s)) for s in streams]
    out = []
    for k in range(warmup + steps):
        left[0] = b
        done.clear()
        c0, t0 = time.process_time(), time.perf_counter()
        for s in streams:
            s.event.set()
        await done.wait()
        for s in streams:  # hand the bytes to the kernel, as uvicorn's transport does within its step
            if s.writer.transport.get_write_buffer_size():
                await s.writer.drain()
        c1, t1 = time.process_time(), time.perf_counter()
        if k >= warmup:
            out.append((c1 - c0, t1 - t0))
    for t in tasks:
        t.cancel()
    for s in streams:
        s.writer.close()
    return out


def stream(b: int, warmup: int, steps: int) -> list[tuple[float, float]]:
    port = 20000 + os.getpid() % 20000
    ready = mp.Event()
    p = mp.Process(target=_drain, args=(port, b, ready), daemon=True)
    p.start()
    ready.wait(30)
    try:
        return asyncio.run(_stream_steps(b, port, warmup, steps))
    finally:
        p.join(30)


class Item:
    def __init__(self, i: int):
        for k in range(24):
            setattr(self, f"f{k}", i * k if k % 3 else f"s{i}-{k}")


def _pickle_step(items) -> None:
    pickle.loads(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))


class Req:
    __slots__ = ("rid", "out", "n", "stop", "finished", "times")

    def __init__(self, rid):
        self.rid, self.out, self.n, self.stop, self.finished, self.times = rid, [], 0, {7, 9}, False, []

    def check(self, tok):
        return tok in self.stop or self.n >= 1 << 20

    def append(self, tok, now):
        self.out.append(tok)
        self.n += 1
        self.times.append(now)
        self.finished = self.check(tok)


def _objects_step(reqs, tok) -> None:
    now = time.perf_counter()
    for r in reqs:
        r.append(tok, now)
        if len(r.out) > 4096:
            del r.out[:2048], r.times[:2048]


def timed(fn, warmup: int, steps: int) -> list[tuple[float, float]]:
    out = []
    for k in range(warmup + steps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn(k)
        c1, t1 = time.process_time(), time.perf_counter()
        if k >= warmup:
            out.append((c1 - c0, t1 - t0))
    return out


def summary(samples) -> dict:
    cpu = [c for c, _ in samples]
    wall = [w for _, w in samples]
    return {"cpu_median_s": statistics.median(cpu), "wall_median_s": statistics.median(wall), "n": len(samples)}


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    doc = {"python": sys.version.split()[0], "cpu": cpu_model(), "nproc": os.cpu_count(),
           "platform": platform.platform(), "load_start": os.getloadavg(), "results": {}}
    for rep in range(args.reps):
        for b in SIZES:
            items = [Item(i) for i in range(b)]
            reqs = [Req(i) for i in range(b)]
            res = {"stream": summary(stream(b, 10, 30)),
                   "pickle": summary(timed(lambda k: _pickle_step(items), 10, 50)),
                   "objects": summary(timed(lambda k: _objects_step(reqs, k % 11), 10, 200))}
            doc["results"][f"{rep}/{b}"] = res
            print(rep, b, {k: round(v["cpu_median_s"] * 1e3, 3) for k, v in res.items()}, flush=True)
    doc["load_end"] = os.getloadavg()
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
