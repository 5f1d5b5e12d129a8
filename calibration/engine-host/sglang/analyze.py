import json, glob, statistics, sys
import numpy as np
files = sorted(glob.glob(sys.argv[1] if len(sys.argv) > 1 else "runs/rep*.json"))
runs = [json.load(open(f)) for f in files]
MAXLOAD = float(sys.argv[3]) if len(sys.argv) > 3 else 99.0
excluded = []
BS = [1, 8, 64, 256, 512, 1024, 1536, 2048]
comps = ["filter_batch", "update_running_batch", "prepare_for_decode", "run_batch_cpu_bits", "batch_copy",
         "process_batch_result_decode", "stream_output", "process_decode_excl_stream", "scheduler_sum",
         "detok_recv", "detok_handle", "detok_send", "tm_recv", "tm_handle_batch_output"]
def pct(xs, p):
    xs = sorted(xs); k = (len(xs)-1)*p; lo, hi = int(k), min(int(k)+1, len(xs)-1); return xs[lo]+(xs[hi]-xs[lo])*(k-lo)
out = {"files": files, "env": [r["env_start"] for r in runs], "loadavg_per_B": {}, "table": {}, "fits": {}}
for B in BS:
    out["loadavg_per_B"][B] = [r["results"][str(B)]["_meta"]["loadavg"] for r in runs]
    out["table"][B] = {}
    for c in comps:
        w = []; cm = []
        for r in runs:
            if c not in r["results"][str(B)]:
                continue
            if float(r["results"][str(B)]["_meta"]["loadavg"][0]) > MAXLOAD:
                if c == comps[0]: excluded.append((r["args"].get("mode"), B, r["results"][str(B)]["_meta"]["loadavg"][0]))
                continue
            x = r["results"][str(B)][c]
            w += x.get("wall_samples", []) or [x["median_s"]]
            cm.append(x["cpu_median_s"])
        if c == "process_decode_excl_stream":  # no samples stored: median of per-rep medians
            w = [r["results"][str(B)][c]["median_s"] for r in runs
                 if float(r["results"][str(B)]["_meta"]["loadavg"][0]) <= MAXLOAD]
        if not w:
            out["table"][B][c] = {"median_ms": float("nan"), "p10_ms": float("nan"), "p90_ms": float("nan"), "cpu_median_ms": float("nan")}; continue
        out["table"][B][c] = {"median_ms": statistics.median(w)*1e3, "p10_ms": pct(w, .1)*1e3,
                              "p90_ms": pct(w, .9)*1e3, "cpu_median_ms": statistics.median(cm)*1e3}
lines = ["| B | " + " | ".join(comps) + " |", "|---:|" + "---:|"*len(comps)]
for B in BS:
    lines.append(f"| {B} | " + " | ".join(f"{out['table'][B][c]['median_ms']:.3f}" for c in comps) + " |")
lines += ["", "| component | a (ms) | b (µs/req) | b cpu-time (µs/req) | b fit B>=64 | per-req µs @256 | @1024 | @2048 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
x = np.array(BS, float)
for c in comps:
    if any(np.isnan(out["table"][B][c]["median_ms"]) for B in BS):
        continue
    y = np.array([out["table"][B][c]["median_ms"] for B in BS]) / 1e3
    yc = np.array([out["table"][B][c]["cpu_median_ms"] for B in BS]) / 1e3
    b, a = np.polyfit(x, y, 1); bc, ac = np.polyfit(x, yc, 1); b64, a64 = np.polyfit(x[2:], y[2:], 1)
    per = {B: out["table"][B][c]["median_ms"]*1e3/B for B in (256, 1024, 2048)}
    out["fits"][c] = {"a_s": a, "b_s_per_req": b, "b_cpu_s_per_req": bc, "b_fit_ge64": b64,
                      "residuals_ms": list((y - (a + b*x))*1e3), "per_req_us": per}
    lines.append(f"| {c} | {a*1e3:.3f} | {b*1e6:.2f} | {bc*1e6:.2f} | {b64*1e6:.2f} | {per[256]:.2f} | {per[1024]:.2f} | {per[2048]:.2f} |")
print("\n".join(lines))
out["excluded_load_gt"] = {"max_load": MAXLOAD, "excluded": excluded}
print("excluded (mode,B,load):", excluded)
print("\nloadavg per B (1-min, per rep):", {B: [l[0] for l in v] for B, v in out["loadavg_per_B"].items()})
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "results.json", "w"), indent=1)
