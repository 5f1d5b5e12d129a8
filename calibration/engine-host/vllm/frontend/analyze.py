"""Pool runs/{plain,comp}_rep*.json into results.json and print markdown tables.

Drop rules: a (rep, B) point is dropped when the 1-minute load average at the start of that B
exceeded 2.5 (as for ../harness.py's runs), or when everything but the server used more than 0.5
of a core on average during its timed steps (`other_cpu_cores` = /proc/stat busy time minus the
server's CPU; it includes our own client, 0.1-0.2 core; only judged when the timed window is
>= 0.1 s, because /proc/stat counts in 10 ms ticks). Pooled statistics use the per-step samples of the kept reps.
usage: python analyze.py [runs_dir] [results.json]
"""
import glob
import json
import os
import statistics
import sys
import time

RUNS = sys.argv[1] if len(sys.argv) > 1 else "runs"
OUTF = sys.argv[2] if len(sys.argv) > 2 else "results.json"
LOAD_MAX = 2.5
OTHER_MAX = 0.5


def bad(r):
    if r["load1_start"] > LOAD_MAX:
        return "load"
    if r["timed_window_s"] >= 0.1 and r["other_cpu_cores"] > OTHER_MAX:
        return "other_cpu"
    return None
COMPS = ["fe_decode", "fe_process_outputs", "fe_stats_record", "chat_chunk", "uvicorn_send",
         "rest_main_thread"]


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def fit(Bs, ys):
    n = len(Bs)
    mb, my = sum(Bs) / n, sum(ys) / n
    b = sum((x - mb) * (y - my) for x, y in zip(Bs, ys)) / sum((x - mb) ** 2 for x in Bs)
    return my - b * mb, b


def load_runs(kind):
    runs = {}
    for f in sorted(glob.glob(os.path.join(RUNS, f"{kind}_rep*.json"))):
        rep = int(f.rsplit("rep", 1)[1].split(".")[0])
        runs[rep] = json.load(open(f))
    return runs


def main():
    plain, comp = load_runs("plain"), load_runs("comp")
    any_run = next(iter(plain.values()))
    Bs = sorted(int(b) for b in any_run["results"])
    load, dropped, load_c, dropped_c = {}, [], {}, []
    pooled = {B: {"wall": [], "cpu_proc": [], "cpu_main": []} for B in Bs}
    client_ok = True
    client_cpu = {B: [] for B in Bs}
    other_cpu = {B: [] for B in Bs}
    per_rep = {B: [] for B in Bs}
    for rep, d in sorted(plain.items()):
        for B in Bs:
            r = d["results"][str(B)]
            load[f"{rep}/{B}"] = r["load1_start"]
            client_ok &= r["client_check_ok"]
            if bad(r):
                dropped.append(f"{rep}/{B} ({bad(r)})")
                continue
            for k in pooled[B]:
                pooled[B][k] += r["samples"][k]
            client_cpu[B].append(r["client_cpu_per_step_s"])
            other_cpu[B].append(r["other_cpu_cores"])
            per_rep[B].append(round(statistics.median(r["samples"]["cpu_proc"]), 7))
    cpooled = {B: {k: [] for k in COMPS + ["cpu_main", "cpu_proc", "wall"]} for B in Bs}
    gc_mean = {B: {"gc_gen0_s": [], "gc_gen1_s": [], "gc_gen2_s": []} for B in Bs}
    for rep, d in sorted(comp.items()):
        for B in Bs:
            r = d["results"][str(B)]
            load_c[f"{rep}/{B}"] = r["load1_start"]
            client_ok &= r["client_check_ok"]
            if bad(r):
                dropped_c.append(f"{rep}/{B} ({bad(r)})")
                continue
            cs = r["components_samples"]
            for k in COMPS[:-1]:
                cpooled[B][k] += cs[k]
            cpooled[B]["rest_main_thread"] += [
                m - sum(cs[k][i] for k in COMPS[:-1])
                for i, m in enumerate(r["samples"]["cpu_main"])]
            for k in ("cpu_main", "cpu_proc", "wall"):
                cpooled[B][k] += r["samples"][k]
            for k in gc_mean[B]:
                gc_mean[B][k] += r["gc_samples"][k]

    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    cpu_med = [med(pooled[B]["cpu_proc"]) for B in Bs]
    wall_med = [med(pooled[B]["wall"]) for B in Bs]
    main_med = [med(pooled[B]["cpu_main"]) for B in Bs]
    a, b = fit(Bs, cpu_med)
    a2, b2 = fit([B for B in Bs if B >= 64], [c for B, c in zip(Bs, cpu_med) if B >= 64])
    comp_med = {k: [med(cpooled[B][k]) for B in Bs] for k in COMPS}
    comp_fit = {k: dict(zip(("a_s", "b_s_per_req"), fit(Bs, comp_med[k]))) for k in COMPS}
    env = any_run["env_start"]
    res = {
        "engine": "vllm", "version": env["vllm"],
        "cpu": f"{env['cpu_model']}, nproc {env['nproc']}",
        "date": any_run["env_start"]["time"][:10],
        "B": Bs,
        "processes": {"api_server": {
            "what": ("vLLM 0.19.0 OpenAI API server process (uvloop + uvicorn/httptools + "
                     "FastAPI, AsyncLLM front end), per decode step of B streaming chat "
                     "completions, 1 token each: ZMQ recv + msgpack decode + "
                     "OutputProcessor.process_outputs + stat loggers + per-request "
                     "generate() wake + chat delta chunk build/JSON + SSE write to socket; "
                     "saturated back-to-back steps; process CPU = getrusage(RUSAGE_SELF), "
                     "all threads"),
            "cpu_median_s": cpu_med,
            "wall_median_s": wall_med,
            "cpu_p10_s": [pct(pooled[B]["cpu_proc"], 0.1) for B in Bs],
            "cpu_p90_s": [pct(pooled[B]["cpu_proc"], 0.9) for B in Bs],
            "cpu_mean_s": [statistics.fmean(pooled[B]["cpu_proc"]) for B in Bs],
            "wall_p10_s": [pct(pooled[B]["wall"], 0.1) for B in Bs],
            "wall_p90_s": [pct(pooled[B]["wall"], 0.9) for B in Bs],
            "main_thread_cpu_median_s": main_med,
            "cpu_us_per_request": [c / B * 1e6 for c, B in zip(cpu_med, Bs)],
            "per_rep_cpu_median_s": {str(B): per_rep[B] for B in Bs},
            "n_steps_pooled": [len(pooled[B]["cpu_proc"]) for B in Bs],
            "fit_cpu_all_B": {"a_s": a, "b_s_per_req": b},
            "fit_cpu_B_ge_64": {"a_s": a2, "b_s_per_req": b2},
            "components_cpu_median_s": comp_med,
            "components_fit": comp_fit,
            "components_note": (
                "From separate --components sweeps (same harness plus timers). Each is the "
                "per-step sum of perf_counter time inside that piece of synchronous code on "
                "the saturated main thread (~CPU); rest_main_thread = main-thread CPU "
                "(thread_time) minus the five timed pieces: ZMQ recv, asyncio task "
                "switches, AsyncLLM.generate() wake-ups, Starlette StreamingResponse and "
                "middleware layers, the timer overhead itself. GC pauses fall inside "
                "whichever piece triggered them; gc_*_mean_s gives them separately."),
            "components_run_cpu_median_s": [med(cpooled[B]["cpu_proc"]) for B in Bs],
            "components_run_wall_median_s": [med(cpooled[B]["wall"]) for B in Bs],
            "components_run_main_thread_cpu_median_s": [med(cpooled[B]["cpu_main"])
                                                        for B in Bs],
            "gc_mean_s_per_step": {k: [statistics.fmean(gc_mean[B][k]) if gc_mean[B][k]
                                       else None for B in Bs]
                                   for k in ("gc_gen0_s", "gc_gen1_s", "gc_gen2_s")},
            "load_components": load_c, "dropped_components": dropped_c,
            "client_cpu_per_step_s_median": [med(client_cpu[B]) for B in Bs],
            "other_cpu_cores_during_timed_steps": [med(other_cpu[B]) for B in Bs],
            "client_check_all_ok": client_ok,
        }},
        "load": load, "dropped": dropped,
        "notes": [],
        "env": env,
        "config": any_run.get("config"),
        "serve_argv": any_run.get("serve_argv"),
    }
    # diagnostics (runs_diag/, one repetition each; not pooled into the headline numbers)
    dd = os.path.join(os.path.dirname(os.path.abspath(RUNS)), "runs_diag")
    diag = {}
    for name in ("gcoff", "extralayer"):
        f = os.path.join(dd, f"plain_{name}.json")
        if os.path.exists(f):
            d = json.load(open(f))
            diag[name] = {
                "cpu_median_s": [statistics.median(d["results"][str(B)]["samples"]["cpu_proc"])
                                 for B in Bs],
                "delta_vs_pooled_plain_s": [
                    statistics.median(d["results"][str(B)]["samples"]["cpu_proc"]) - c
                    for B, c in zip(Bs, cpu_med)],
                "load1_start": [d["results"][str(B)]["load1_start"] for B in Bs],
                "other_cpu_cores": [d["results"][str(B)]["other_cpu_cores"] for B in Bs]}
    diag["gcoff"]["what"] = ("separate process with gc.disable() after startup (the real server "
                             "keeps GC on with the startup heap frozen); one repetition; "
                             "confounded by process-to-process variation, see gc_ab")
    diag["extralayer"]["what"] = ("one more pure-ASGI pass-through layer like the counting "
                                  "layer (estimates the counting layer's own cost); one rep")
    f = os.path.join(dd, "plain_gcab.json")
    if os.path.exists(f):
        d = json.load(open(f))
        ab = {"what": ("one process per B, 200 timed steps, GC enabled/disabled alternately in "
                       "blocks of 25 steps (same heap, so no process-to-process variation); "
                       "gc_pause = gc.callbacks-timed pauses on the GC-on steps")}
        for Bk, r in d["results"].items():
            sm, g = r["samples"], r["gc_samples"]
            on = [c for c, e in zip(sm["cpu_proc"], sm["gc_enabled"]) if e]
            off = [c for c, e in zip(sm["cpu_proc"], sm["gc_enabled"]) if not e]
            pause = [a + b + c for a, b, c, e in zip(g["gc_gen0_s"], g["gc_gen1_s"],
                                                     g["gc_gen2_s"], sm["gc_enabled"]) if e]
            ab[Bk] = {"cpu_median_gc_on_s": statistics.median(on),
                      "cpu_median_gc_off_s": statistics.median(off),
                      "cpu_mean_gc_on_s": statistics.fmean(on),
                      "cpu_mean_gc_off_s": statistics.fmean(off),
                      "gc_pause_median_s": statistics.median(pause),
                      "gc_pause_mean_s": statistics.fmean(pause)}
        diag["gc_ab"] = ab
    f = os.path.join(dd, "plain_gctiming.json")
    if os.path.exists(f):
        d = json.load(open(f))
        diag["gc_pause_plain"] = {
            "what": "plain sweep with only the gc.callbacks timer; per-step GC pause (s)",
            **{Bk: {k: r["gc_s"][k]["mean"] for k in r["gc_s"]} | {
                "pause_median_s": statistics.median(
                    [a + b + c for a, b, c in zip(r["gc_samples"]["gc_gen0_s"],
                                                  r["gc_samples"]["gc_gen1_s"],
                                                  r["gc_samples"]["gc_gen2_s"])])}
               for Bk, r in d["results"].items()}}
    f = os.path.join(dd, "pyspy_breakdown.json")
    if os.path.exists(f):
        diag["pyspy_B2048"] = json.load(open(f))
        diag["pyspy_B2048"]["what"] = (
            "py-spy 0.4.3, Python frames only, 100 Hz, --nonblocking, B=2048, 400 timed steps "
            "(141.5 ms/step CPU in that run); shares of steady-state samples; GC and native "
            "code are attributed to the Python line that runs them")
    res["processes"]["api_server"]["diagnostics"] = diag
    notes_f = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.json")
    if os.path.exists(notes_f):
        res["notes"] = json.load(open(notes_f))
    with open(OUTF, "w") as f:
        json.dump(res, f, indent=1)

    # tables
    print("| B | cpu ms/step [p10-p90] | wall ms/step | main-thread cpu ms | cpu us/req |")
    print("|---:|---:|---:|---:|---:|")
    ap = res["processes"]["api_server"]
    for i, B in enumerate(Bs):
        print(f"| {B} | {ap['cpu_median_s'][i]*1e3:.3f} [{ap['cpu_p10_s'][i]*1e3:.3f}-"
              f"{ap['cpu_p90_s'][i]*1e3:.3f}] | {ap['wall_median_s'][i]*1e3:.3f} | "
              f"{ap['main_thread_cpu_median_s'][i]*1e3:.3f} | "
              f"{ap['cpu_us_per_request'][i]:.1f} |")
    print(f"\nfit all B: a={a*1e3:.3f} ms b={b*1e6:.2f} us/req; B>=64: a={a2*1e3:.3f} ms "
          f"b={b2*1e6:.2f} us/req")
    print("\ncomponents (ms/step median; us/req in parentheses)")
    print("| B | " + " | ".join(COMPS) + " | comp-run main cpu | comp-run proc cpu | "
          "gc0+1+2 mean |")
    print("|---:|" + "---:|" * (len(COMPS) + 3))
    for i, B in enumerate(Bs):
        cells = [f"{comp_med[k][i]*1e3:.3f} ({comp_med[k][i]/B*1e6:.1f})" for k in COMPS]
        g = sum(ap["gc_mean_s_per_step"][k][i] or 0 for k in ap["gc_mean_s_per_step"])
        print(f"| {B} | " + " | ".join(cells) +
              f" | {ap['components_run_main_thread_cpu_median_s'][i]*1e3:.3f} | "
              f"{ap['components_run_cpu_median_s'][i]*1e3:.3f} | {g*1e3:.3f} |")
    print("\ncomponent fits (a ms, b us/req):",
          {k: (round(v["a_s"] * 1e3, 3), round(v["b_s_per_req"] * 1e6, 2))
           for k, v in comp_fit.items()})
    print("\nclient cpu/step ms:", [round(x * 1e3, 2) for x in ap["client_cpu_per_step_s_median"]])
    print("other cpu cores:", [round(x, 2) for x in ap["other_cpu_cores_during_timed_steps"]])
    print("load:", load, "dropped:", dropped, "| comp dropped:", dropped_c)
    print("client checks all ok:", client_ok)
    if "gc_ab" in diag:
        print("gc A/B:", json.dumps({k: {kk: round(vv * 1e3, 2) for kk, vv in v.items()}
                                     for k, v in diag["gc_ab"].items() if k != "what"}))
    for name in ("gcoff", "extralayer"):
        if name in diag:
            print(f"diag {name} cpu ms:", [round(x * 1e3, 3) for x in diag[name]["cpu_median_s"]],
                  "delta ms:", [round(x * 1e3, 3) for x in diag[name]["delta_vs_pooled_plain_s"]])


if __name__ == "__main__":
    main()
