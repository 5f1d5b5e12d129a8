"""Micro-benchmark of the O(output length) per-request copies done every step in the 0.5.9 HTTP-server
process with default stream_output=False (tokenizer_manager.py L1551/L1560, serving_chat.py L682-683)."""
import time, random
for B, H in [(256, 4000), (1024, 4000), (1024, 1000)]:
    ids = [[random.randrange(100000) for _ in range(H)] for _ in range(B)]
    texts = ["x" * (4 * H) for _ in range(B)]
    keep = [None] * B
    ts = []
    for step in range(30):
        t = time.process_time()
        for i in range(B):
            ids[i].append(5)
            keep[i] = ids[i].copy()          # tokenizer_manager.py L1560
            texts[i] = texts[i] + "ab"         # L1551 (+= with a second reference alive)
            sb = texts[i][:-2]; sb = sb + texts[i][-2:]   # serving_chat.py L682-683
        ts.append(time.process_time() - t)
    ts.sort(); print(B, H, f"{ts[15]*1e3:.2f} ms/step", f"{ts[15]/B*1e6:.1f} us/req")
