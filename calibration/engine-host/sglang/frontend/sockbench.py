"""Micro-benchmark: cost of one ~300-byte socket.send() on a loopback TCP connection whose peer (another
process) drains it, as uvicorn's transport.write does per SSE event. Shows how much of the per-event
'send' component is the syscall itself (on loopback it also includes the receiver's TCP processing)."""
import os, socket, selectors, sys, time, json
N, ROUNDS, SZ = 256, 100, 300
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1024); port = ls.getsockname()[1]
pid = os.fork()
if pid == 0:
    sel = selectors.DefaultSelector(); cs = []
    for _ in range(N):
        c = socket.create_connection(("127.0.0.1", port)); c.setblocking(False); sel.register(c, selectors.EVENT_READ); cs.append(c)
    left = N
    while left:
        for k, _ in sel.select(1):
            d = k.fileobj.recv(262144)
            if not d:
                sel.unregister(k.fileobj); left -= 1
    os._exit(0)
srv = [ls.accept()[0] for _ in range(N)]
payload = b"x" * SZ
for s in srv: s.send(payload)
time.sleep(0.2)
rows = []
for r in range(ROUNDS):
    t0 = os.times(); w0 = time.perf_counter()
    for s in srv:
        s.send(payload)
    w1 = time.perf_counter(); t1 = os.times()
    rows.append(((w1 - w0) / N, (t1.user - t0.user) / N, (t1.system - t0.system) / N))
    time.sleep(0.002)
for s in srv: s.close()
os.waitpid(pid, 0)
rows.sort()
med = rows[len(rows) // 2]
tot_u = sum(r[1] for r in rows) / len(rows); tot_s = sum(r[2] for r in rows) / len(rows)
out = {"per_send_wall_median_us": med[0] * 1e6, "per_send_user_mean_us": tot_u * 1e6, "per_send_sys_mean_us": tot_s * 1e6,
       "payload_bytes": SZ, "sockets": N, "rounds": ROUNDS}
print(json.dumps(out))
if len(sys.argv) > 1:
    json.dump(out, open(sys.argv[1], "w"))
