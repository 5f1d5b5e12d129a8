"""Cheap streaming client: B raw HTTP/1.1 keep-alive sockets, one chat-completion POST each
(stream=true), drained with a selectors (epoll) loop and plain recv(). No SSE/JSON parsing:
it only counts SSE event terminators (b"\\n\\n") per socket, so that the harness can check that
every stream received every event. Stdlib only. Prints one JSON line at the end.

usage: python client.py --port 8000 --n 256 --model NAME [--max-tokens 4096] [--timeout 1200]
"""
import argparse
import json
import os
import resource
import selectors
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=1200.0)
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < a.n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(a.n + 256, soft)), hard))

    socks = []
    for i in range(a.n):
        body = json.dumps({
            "model": a.model,
            "messages": [{"role": "user", "content":
                          f"Write a very long story about lighthouse keeper number {i}."}],
            "stream": True, "max_tokens": a.max_tokens, "ignore_eos": True,
            "temperature": 0.7}).encode()
        req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {a.host}:{a.port}\r\n"
               f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        s = socket.create_connection((a.host, a.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        s.setblocking(False)
        socks.append(s)

    sel = selectors.DefaultSelector()
    n_events = [0] * a.n          # count of b"\n\n" (SSE event terminators)
    n_bytes = [0] * a.n
    last = [b""] * a.n            # last 8 bytes, for markers split across recv()
    done = [False] * a.n          # saw b"[DONE]"
    status_ok = [False] * a.n
    head = [b""] * a.n
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
    t0 = time.monotonic()
    n_recv = 0
    remaining = a.n
    while remaining and time.monotonic() - t0 < a.timeout:
        for key, _ in sel.select(timeout=1.0):
            i = key.data
            s = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            n_recv += 1
            if not data:
                sel.unregister(s)
                remaining -= 1
                continue
            if n_bytes[i] == 0:
                head[i] = data[:64]
                status_ok[i] = data.startswith(b"HTTP/1.1 200")
            n_bytes[i] += len(data)
            n_events[i] += data.count(b"\n\n") + (1 if last[i][-1:] == b"\n" and data[:1] == b"\n" else 0)
            tail = last[i] + data[:8]
            last[i] = data[-8:]
            if b"[DONE]" in data or b"[DONE]" in tail:   # last event of the stream; the chunked terminator follows
                done[i] = True
                sel.unregister(s)
                remaining -= 1
    ru = resource.getrusage(resource.RUSAGE_SELF)
    for s in socks:
        s.close()
    out = {"n": a.n, "all_done": all(done), "n_done": sum(done), "all_200": all(status_ok),
           "events_min": min(n_events), "events_max": max(n_events),
           "bytes_total": sum(n_bytes), "n_recv_calls": n_recv,
           "client_cpu_s": ru.ru_utime + ru.ru_stime, "elapsed_s": time.monotonic() - t0,
           "head0": head[0].decode(errors="replace")}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
