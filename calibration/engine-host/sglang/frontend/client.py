"""Cheap streaming client: B raw TCP sockets, hand-written HTTP/1.1 POST /v1/chat/completions
(stream=true), drained by a selectors loop with plain recv(); no HTTP/SSE parsing except for a few
sample sockets whose bytes are kept to count `data:` events at the end."""
import argparse, json, resource, selectors, socket, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--B", type=int, required=True)
ap.add_argument("--port", type=int, default=30123)
ap.add_argument("--timeout", type=float, default=900)
ap.add_argument("--out", default=None)
A = ap.parse_args()

body = json.dumps({"model": "default", "stream": True, "max_tokens": 30000, "ignore_eos": True,
                   "temperature": 0.0,
                   "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}).encode()
req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
       b"Accept: text/event-stream\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

# wait for the server to listen
t0 = time.time()
while True:
    try:
        socket.create_connection(("127.0.0.1", A.port), timeout=1).close(); break
    except OSError:
        if time.time() - t0 > 300: sys.exit("server never came up")
        time.sleep(0.2)

sel = selectors.DefaultSelector()
nbytes = [0] * A.B; first = [b""] * A.B
SAMPLE = set(range(min(4, A.B))) | {A.B - 1}
keep = {i: bytearray() for i in SAMPLE}
socks = []
for i in range(A.B):
    s = socket.create_connection(("127.0.0.1", A.port))
    s.sendall(req); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, i); socks.append(s)
    if i % 128 == 127:
        time.sleep(0.02)  # stay under the listen backlog
open_n = A.B
t_conn = time.time() - t0
ru0 = resource.getrusage(resource.RUSAGE_SELF)
while open_n and time.time() - t0 < A.timeout:
    for key, _ in sel.select(timeout=1.0):
        i = key.data
        try:
            d = key.fileobj.recv(262144)
        except (BlockingIOError, InterruptedError):
            continue
        except ConnectionError:
            d = b""
        if not d:
            sel.unregister(key.fileobj); key.fileobj.close(); open_n -= 1; continue
        nbytes[i] += len(d)
        if not first[i]:
            first[i] = d[:16]
        if i in SAMPLE:
            keep[i] += d
        elif d.endswith(b"0\r\n\r\n") or d.endswith(b"[DONE]\n\n"):
            pass
    # close finished streams: chunked terminator seen on sample sockets only; others close on keep-alive timeout
out = {"B": A.B, "open_at_end": open_n, "total_bytes": sum(nbytes), "min_bytes": min(nbytes),
       "max_bytes": max(nbytes), "status_200": sum(f.startswith(b"HTTP/1.1 200") for f in first),
       "sample_data_events": {i: keep[i].count(b"data: {") for i in SAMPLE},
       "sample_done": {i: b"data: [DONE]" in keep[i] for i in SAMPLE},
       "elapsed_s": time.time() - t0, "connect_s": t_conn}
ru1 = resource.getrusage(resource.RUSAGE_SELF)
out["cpu_connect_s"] = ru0.ru_utime + ru0.ru_stime
out["cpu_drain_s"] = (ru1.ru_utime + ru1.ru_stime) - out["cpu_connect_s"]
print("CLIENT", json.dumps(out), flush=True)
if A.out:
    json.dump(out, open(A.out, "w"))
