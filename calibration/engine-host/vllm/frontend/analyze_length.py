"""runs_length/*.json (run_length.sh) -> results.json key processes.api_server.output_length_dependence
and a markdown table on stdout. Every other key of results.json is left as it is (load, add one
key, dump with the file's own format: indent=1, no trailing newline).

Two designs (run_length.sh):
 * separate processes (base_start, hist{H}_tok, hist{H}_one, base_end): one process per H. The two
   H=0 runs (start/end of the session) differ by 11-17 %, more than the length effect, so this
   design cannot resolve it; reported as `separate_processes`.
 * same process, interleaved (interleaved, interleaved_b: H = 0/1000/4000 three times each per
   process, history in one multi-token step): headline. Per (B, H) the per-step samples of the 6
   points are pooled (300 steps) and their median is taken; H=0 of the same processes is the baseline.
 * interleaved_comp: component timers, B=1024, H = 0 4000 0 4000 in one process.
Slope per B: least squares through zero over H in {1000, 4000}:
    slope_B = sum(dt_H * H) / sum(H^2) / B,  dt_H = median_H - median_baseline   (s/token/stream)
usage: python analyze_length.py [runs_length] [results.json] [--no-write]
"""
import json
import os
import statistics
import sys

args = [x for x in sys.argv[1:] if not x.startswith("--")]
RUNS = args[0] if args else "runs_length"
OUTF = args[1] if len(args) > 1 else "results.json"
HS = [1000, 4000]


def load(name):
    return json.load(open(os.path.join(RUNS, name + ".json")))


def main():
    runs = {n: load(n) for n in ("base_start", "hist1000_tok", "hist4000_tok", "hist4000_one",
                                 "hist1000_one", "base_end")}
    ilv = {n: load(n) for n in ("interleaved", "interleaved_b")}
    comp = load("interleaved_comp")
    Bs = sorted(int(b) for b in runs["base_start"]["results"])

    def med(n, B, k="cpu_proc"):
        return statistics.median(runs[n]["results"][str(B)]["samples"][k])

    def mean(n, B, k="cpu_proc"):
        return statistics.fmean(runs[n]["results"][str(B)]["samples"][k])

    def per_b(f, n):
        return {str(B): f(n, B) for B in Bs}

    def r(n, B):
        return runs[n]["results"][str(B)]

    base = {B: med("base_start", B) for B in Bs}
    ok = all(r(n, B)["client_check_ok"] for n in runs for B in Bs)
    points = {}
    for n in runs:
        for B in Bs:
            x = r(n, B)
            st = x.get("state_after_timed_steps") or {}
            points[f"{n}/{B}"] = {
                "cpu_median_s": med(n, B), "cpu_mean_s": mean(n, B),
                "cpu_p10_s": x["cpu_proc_s"]["p10"], "cpu_p90_s": x["cpu_proc_s"]["p90"],
                "wall_median_s": med(n, B, "wall"),
                "main_thread_cpu_median_s": med(n, B, "cpu_main"),
                "load1_at_point_start": x["load1_start"],
                "load1_at_timed_start": x.get("load1_before_timed"),
                "load1_end": x["load1_end"],
                "waited_for_load_s": (x.get("wait_before_point") or {}).get("waited_s", 0.0)
                + ((x.get("hist") or {}).get("wait_before_timed") or {}).get("waited_s", 0.0),
                "other_cpu_cores": x["other_cpu_cores"],
                "output_tokens_at_end_mean": st.get("output_tokens_mean"),
                "output_text_chars_at_end_mean": st.get("output_text_chars_mean"),
                "history_prephase_wall_s": (x.get("hist") or {}).get("prephase_wall_s"),
                "client_check_ok": x["client_check_ok"],
            }
    # ---- same-process interleaved points
    il_pts = {}   # (B, H) -> list of (run, key, result)
    for n, d in ilv.items():
        for k, x in d["results"].items():
            B, h, i = k.split("/")
            il_pts.setdefault((int(B), int(h[1:])), []).append((n, k, x))

    def il_pool(B, H, what="cpu_proc"):
        return [v for _, _, x in il_pts[(B, H)] for v in x["samples"][what]]

    def il_med(B, H):
        return statistics.median(il_pool(B, H))

    def il_mean(B, H):
        return statistics.fmean(il_pool(B, H))

    def slope(getmed, b0):
        return {str(B): sum((getmed(H, B) - b0[B]) * H for H in HS) / sum(H * H for H in HS)
                / B * 1e9 for B in Bs}

    il0 = {B: il_med(B, 0) for B in Bs}
    key = {
        "what": ("api server process CPU (getrusage, all threads) per decode step, median, when every"
                 " request had already streamed H output tokens before the 20 warm-up + 50 timed steps."
                 " Headline (keys 1000/4000/baseline_same_session): SAME server process, H = 0/1000/4000"
                 " interleaved, 3 points per H in each of 2 processes (run_length.sh `interleaved`,"
                 " `interleaved_b`), per-step samples pooled (300 steps per value); the history was"
                 " delivered as one multi-token EngineCoreOutput per request (harness.py --hist-seq,"
                 " --hist-chunk 0; same state length as token by token: 4070 output tokens, ~15.05k chars"
                 " at H=4000). `separate_processes`: the originally planned one-rep design, one process per"
                 " H, history token by token (H un-timed decode steps); its two H=0 runs differ by 11-17 %,"
                 " more than the effect, so it does not resolve it. VM: AMD EPYC 2 vCPU, not the Intel"
                 " Xeon VM of the main sweep: compare only with the same-session baseline. Grows per"
                 " step: detokenizer output_text += (O(len) copy, v1/engine/detokenizer.py L119) and chat"
                 " previous_texts[i] += delta_text (O(len) copy, entrypoints/openai/chat_completion/"
                 "serving.py L1020); token_ids lists only appended (O(1))."),
        "cpu": runs["base_start"]["env_start"]["cpu_model"] + ", nproc "
        + str(runs["base_start"]["env_start"]["nproc"]),
        "date": runs["base_start"]["env_start"]["time"][:10],
        "runs": RUNS + "/ (run_length.sh)",
    }
    for H in HS:
        key[str(H)] = {
            "api_cpu_median_s": {str(B): il_med(B, H) for B in Bs},
            "api_cpu_mean_s": {str(B): il_mean(B, H) for B in Bs},
            "ratio_to_baseline": {str(B): il_med(B, H) / il0[B] for B in Bs},
            "point_medians_s": {str(B): [statistics.median(x["samples"]["cpu_proc"])
                                         for _, _, x in il_pts[(B, H)]] for B in Bs},
            "load1_at_point_start": {str(B): [x["load1_start"] for _, _, x in il_pts[(B, H)]]
                                     for B in Bs},
            "load1_at_timed_start": {str(B): [x.get("load1_before_timed")
                                              for _, _, x in il_pts[(B, H)]] for B in Bs},
            "other_cpu_cores": {str(B): [x["other_cpu_cores"] for _, _, x in il_pts[(B, H)]]
                                for B in Bs},
        }
    key["baseline_same_session"] = {
        "what": "H=0 points of the same two interleaved processes",
        "api_cpu_median_s": {str(B): il0[B] for B in Bs},
        "api_cpu_mean_s": {str(B): il_mean(B, 0) for B in Bs},
        "point_medians_s": {str(B): [statistics.median(x["samples"]["cpu_proc"])
                                     for _, _, x in il_pts[(B, 0)]] for B in Bs},
        "load1_at_point_start": {str(B): [x["load1_start"] for _, _, x in il_pts[(B, 0)]]
                                 for B in Bs},
        "other_cpu_cores": {str(B): [x["other_cpu_cores"] for _, _, x in il_pts[(B, 0)]]
                            for B in Bs},
    }
    key["slope_ns_per_token_per_stream"] = slope(lambda H, B: il_med(B, H), il0)
    key["per_length_ns_per_token_per_stream"] = {
        str(H): {str(B): (il_med(B, H) - il0[B]) / H / B * 1e9 for B in Bs} for H in HS}

    base = {B: med("base_start", B) for B in Bs}
    sep = {"what": ("one process per H, one rep; hist{H}_tok: history token by token (H un-timed"
                    " decode steps); hist{H}_one: history in one multi-token step; base_start ran first,"
                    " base_end last (order: base_start, 1000_tok, 4000_tok, 4000_one, 1000_one, base_end)"),
           "base_start_api_cpu_median_s": per_b(med, "base_start"),
           "base_end_api_cpu_median_s": per_b(med, "base_end")}
    for H in HS:
        sep[str(H)] = {"token_by_token_api_cpu_median_s": per_b(med, f"hist{H}_tok"),
                       "token_by_token_api_cpu_mean_s": per_b(mean, f"hist{H}_tok"),
                       "token_by_token_ratio_to_base_start": {
                           str(B): med(f"hist{H}_tok", B) / base[B] for B in Bs},
                       "one_step_history_api_cpu_median_s": per_b(med, f"hist{H}_one"),
                       "one_step_history_api_cpu_mean_s": per_b(mean, f"hist{H}_one")}
    sep["slope_ns_per_token_per_stream_token_by_token_vs_base_start"] = slope(
        lambda H, B: med(f"hist{H}_tok", B), base)
    sep["slope_ns_per_token_per_stream_token_by_token_vs_base_end"] = slope(
        lambda H, B: med(f"hist{H}_tok", B), {B: med("base_end", B) for B in Bs})
    key["separate_processes"] = sep

    # components (B=1024, same process, H = 0 4000 0 4000)
    cres = comp["results"]
    cnames = ["fe_decode", "fe_process_outputs", "fe_stats_record", "chat_chunk", "uvicorn_send",
              "rest_main_thread"]
    cby = {0: [], 4000: []}
    for k, x in cres.items():
        cby[int(k.split("/")[1][1:])].append(x)
    ctab = {}
    for H, xs in cby.items():
        ctab[str(H)] = {c: statistics.fmean(x["components_s"][c]["median"] for x in xs) for c in cnames}
        ctab[str(H)]["cpu_proc"] = statistics.fmean(
            statistics.median(x["samples"]["cpu_proc"]) for x in xs)
        ctab[str(H)]["gc_mean"] = statistics.fmean(
            sum(x["gc_s"][f"gc_gen{g}_s"]["mean"] for g in range(3)) for x in xs)
    key["components_B1024"] = {
        "what": ("interleaved_comp: one process, B=1024, H = 0 4000 0 4000 (history in one step), with"
                 " component timers; per H the mean over its 2 points of each component's median (s/step);"
                 " gc_mean = mean GC pause time per step (all generations)"),
        "by_H": ctab,
        "load1_at_point_start": [x["load1_start"] for x in cres.values()],
        "delta_4000_minus_0_s": {c: ctab["4000"][c] - ctab["0"][c] for c in ctab["0"]},
    }
    key["points"] = points
    key["client_check_all_ok"] = ok and all(
        x["client_check_ok"] for d in list(ilv.values()) + [comp] for x in d["results"].values())

    # markdown
    print("same process, interleaved (pooled 300 steps per value), ms/step")
    print("| B | H=0 | H=1000 | H=4000 | ratio 1000 | ratio 4000 | slope ns/token/stream |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for B in Bs:
        print(f"| {B} | {il0[B]*1e3:.2f} | {il_med(B, 1000)*1e3:.2f} | {il_med(B, 4000)*1e3:.2f} | "
              f"{il_med(B, 1000)/il0[B]:.3f} | {il_med(B, 4000)/il0[B]:.3f} | "
              f"{key['slope_ns_per_token_per_stream'][str(B)]:.2f} |")
    for B in Bs:
        for H in [0] + HS:
            print(B, H, "point medians ms:", [round(statistics.median(x["samples"]["cpu_proc"]) * 1e3, 2)
                                              for _, _, x in il_pts[(B, H)]],
                  "mean", round(il_mean(B, H) * 1e3, 2),
                  "load1 at timed start:", [x.get("load1_before_timed") for _, _, x in il_pts[(B, H)]],
                  "other_cpu:", [round(x["other_cpu_cores"], 2) for _, _, x in il_pts[(B, H)]])
    print("per_length_ns_per_token_per_stream", json.dumps(key["per_length_ns_per_token_per_stream"]))
    print()
    print("separate processes, ms/step")
    print("| B | base_start | 1000 tok | 4000 tok | 4000 one | 1000 one | base_end | slope vs start | slope vs end |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for B in Bs:
        print(f"| {B} | " + " | ".join(f"{med(n, B)*1e3:.2f}" for n in runs) + " | "
              f"{sep['slope_ns_per_token_per_stream_token_by_token_vs_base_start'][str(B)]:.2f} | "
              f"{sep['slope_ns_per_token_per_stream_token_by_token_vs_base_end'][str(B)]:.2f} |")
    print()
    print("| run/B | cpu med ms | mean | p10 | p90 | wall med | load start/timed/end | other_cpu | waited s | out tokens | text chars | pre-phase s |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for k, p in points.items():
        lt = p["load1_at_timed_start"]
        print(f"| {k} | {p['cpu_median_s']*1e3:.2f} | {p['cpu_mean_s']*1e3:.2f} | "
              f"{p['cpu_p10_s']*1e3:.2f} | {p['cpu_p90_s']*1e3:.2f} | {p['wall_median_s']*1e3:.2f} | "
              f"{p['load1_at_point_start']:.2f}/{lt if lt is None else format(lt, '.2f')}/{p['load1_end']:.2f} | "
              f"{p['other_cpu_cores']:.2f} | {p['waited_for_load_s']:.0f} | "
              f"{p['output_tokens_at_end_mean']} | {p['output_text_chars_at_end_mean']} | "
              f"{p['history_prephase_wall_s']} |")
    print()
    print("components B=1024 (ms/step):")
    for c in ctab["0"]:
        print(f"  {c:20s} H=0 {ctab['0'][c]*1e3:7.2f}  H=4000 {ctab['4000'][c]*1e3:7.2f}  "
              f"delta {(ctab['4000'][c]-ctab['0'][c])*1e3:+6.2f}")
    print("client_check_all_ok", key["client_check_all_ok"])

    if "--no-write" not in sys.argv:
        raw = open(OUTF).read()
        d = json.loads(raw)
        assert json.dumps(d, indent=1) == raw, "results.json format differs from indent=1"
        d["processes"]["api_server"]["output_length_dependence"] = key
        with open(OUTF, "w") as f:
            json.dump(d, f, indent=1)


if __name__ == "__main__":
    main()
