"""Micro-checks for the output-length section of REPORT.md (run with the venv's python):
 1. tokenizers DecodeStream.step cost vs output position (is the detokenizer's Rust state bounded?)
 2. `obj.attr += s` / `lst[i] += s` (the forms used at detokenizer.py L119 and chat serving.py
    L1020) vs a local `x += s` in a function: does the cost grow with the string length?
 3. the two per-request appends of a step for B requests, strings of H=0/1000/4000-like length,
    with 64 MB touched between steps so the strings are not in cache.
usage: /tmp/fe-vllm/venv/bin/python microbench_length.py  (needs /tmp/fe-vllm/model_qwen3moe)"""
import glob
import os
import statistics as st
import time

pc = time.perf_counter


def decode_stream():
    from transformers import AutoTokenizer
    from tokenizers.decoders import DecodeStream
    import vllm
    tok = AutoTokenizer.from_pretrained("/tmp/fe-vllm/model_qwen3moe")
    sp = os.path.dirname(os.path.dirname(vllm.__file__))
    ids = []
    for f in sorted(glob.glob(os.path.join(sp, "*.dist-info", "METADATA"))):
        ids += tok.encode(open(f, errors="ignore").read(), add_special_tokens=False)
        if len(ids) > 60000:
            break
    T = tok._tokenizer
    ds = DecodeStream(ids=ids[:35], skip_special_tokens=True)
    ts, n = [], 0
    for j in range(8000):
        t0 = pc()
        x = ds.step(T, ids[100 + j]) or ""
        ts.append(pc() - t0)
        n += len(x)
    print("1. DecodeStream.step median us at output position:",
          {a: round(st.median(ts[a:a + 500]) * 1e6, 2) for a in (0, 1000, 4000, 7000)},
          f"({n / 8000:.2f} chars/token)")


class O:
    pass


def concat_forms():
    def run(n):
        o = O(); o.s = "a" * n; lst = ["a" * n]; s = "a" * n
        t0 = pc()
        for _ in range(2000):
            o.s += "xyz"
        t1 = pc()
        for _ in range(2000):
            lst[0] += "xyz"
        t2 = pc()
        for _ in range(2000):
            s += "xyz"
        t3 = pc()
        return [round((b - a) / 2000 * 1e6, 3) for a, b in ((t0, t1), (t1, t2), (t2, t3))]
    for n in (100, 4000, 16000, 64000):
        a, l, loc = run(n)
        print(f"2. len {n:6d}: obj.attr += {a} us, lst[i] += {l} us, local += {loc} us")


def cold_appends():
    junk = bytearray(64 << 20)
    for B in (256, 1024):
        for L in (260, 3956, 15050):
            ds = [O() for _ in range(B)]
            prev = [""] * B
            for i, d in enumerate(ds):
                d.output_text = "x" * L
                prev[i] = "y" * L
            ts = []
            for step in range(30):
                for j in range(0, len(junk), 4096):
                    junk[j] = step & 255
                t0 = pc()
                for i in range(B):
                    d = ds[i]
                    d.output_text += "abcd"
                    prev[i] += "abcd"
                ts.append(pc() - t0)
            m = st.median(ts[5:])
            print(f"3. B={B} chars={L}: {m * 1e3:.3f} ms/step for 2 appends per request "
                  f"({m / B * 1e6:.2f} us/request)")


if __name__ == "__main__":
    print(open("/proc/loadavg").read().strip(), "|", [l.split(":", 1)[1].strip() for l in
          open("/proc/cpuinfo") if l.startswith("model name")][0])
    decode_stream()
    concat_forms()
    cold_appends()
