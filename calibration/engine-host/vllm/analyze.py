"""Pool the harness runs (runs/<mode>_rep*.json), write results.json and print
markdown tables + least-squares fits seconds = a + b*B (on pooled medians)."""
import glob
import json
import re
import statistics

import numpy as np

COMPS = ["schedule", "update_from_output", "mr_gather", "mr_tolist", "serialize",
         "fe_decode", "fe_outproc"]
ENGINE = ["schedule", "update_from_output", "mr_gather", "mr_tolist", "serialize"]


def pct(xs, p):
    return float(np.percentile(np.asarray(xs), p * 100))


def fit(Bs, ys):
    A = np.vstack([np.ones(len(Bs)), np.asarray(Bs, float)]).T
    (a, b), *_ = np.linalg.lstsq(A, np.asarray(ys, float), rcond=None)
    res = np.asarray(ys) - (a + b * np.asarray(Bs, float))
    return float(a), float(b), [float(r) for r in res]


def main():
    out = {"runs": {}, "pooled": {}, "fits": {}, "env": {}}
    for mode in ["sync", "async"]:
        files = sorted(glob.glob(f"runs/{mode}_rep*.json"))
        if not files:
            continue
        runs = [json.load(open(f)) for f in files]
        out["runs"][mode] = [{"file": f, "env_start": r["env_start"],
                              "env_end": r["env_end"],
                              "per_B": {B: {c: {k: v for k, v in d.items()
                                                if not k.endswith("samples")}
                                            for c, d in rr.items()}
                                        for B, rr in r["results"].items()}}
                             for f, r in zip(files, runs)]
        out["env"] = runs[0]["env_start"]
        Bs = sorted({int(B) for r in runs for B in r["results"]})
        pooled = {}
        for B in Bs:
            pooled[B] = {}
            for c in COMPS + ["engine_core_sum"]:
                if c == "engine_core_sum":
                    # per-step sum of the serial engine-core pieces
                    w = [sum(x) for r in runs for x in zip(
                        *[r["results"][str(B)][k]["wall_samples"] for k in ENGINE])]
                    p = [sum(x) for r in runs for x in zip(
                        *[r["results"][str(B)][k]["cpu_samples"] for k in ENGINE])]
                    rep_meds = [statistics.median([sum(x) for x in zip(
                        *[r["results"][str(B)][k]["wall_samples"] for k in ENGINE])])
                        for r in runs]
                else:
                    w = [x for r in runs for x in r["results"][str(B)][c]["wall_samples"]]
                    p = [x for r in runs for x in r["results"][str(B)][c]["cpu_samples"]]
                    rep_meds = [r["results"][str(B)][c]["median_s"] for r in runs]
                pooled[B][c] = {
                    "wall_median_s": pct(w, .5), "wall_p10_s": pct(w, .1),
                    "wall_p90_s": pct(w, .9), "wall_mean_s": float(np.mean(w)),
                    "cpu_median_s": pct(p, .5), "cpu_p10_s": pct(p, .1),
                    "cpu_p90_s": pct(p, .9), "cpu_mean_s": float(np.mean(p)),
                    "n_samples": len(w), "per_rep_wall_median_s": rep_meds,
                    "min_rep_wall_median_s": min(rep_meds)}
        out["pooled"][mode] = pooled
        fits = {}
        for c in COMPS + ["engine_core_sum"]:
            fits[c] = {}
            for key in ["wall_median_s", "cpu_median_s", "min_rep_wall_median_s"]:
                ys = [pooled[B][c][key] for B in Bs]
                a, b, res = fit(Bs, ys)
                big = [B for B in Bs if B >= 64]
                a2, b2, res2 = fit(big, [pooled[B][c][key] for B in big])
                fits[c][key] = {"a_s": a, "b_s_per_req": b, "residuals_s": res,
                                "B": Bs, "fit_B_ge_64": {"a_s": a2, "b_s_per_req": b2,
                                                         "residuals_s": res2}}
        out["fits"][mode] = fits

        print(f"\n### mode={mode}  ({len(runs)} runs x 50 steps, pooled; ms)")
        print("| B | " + " | ".join(COMPS + ["engine_core_sum"]) + " |")
        print("|---" * (len(COMPS) + 2) + "|")
        for B in Bs:
            cells = []
            for c in COMPS + ["engine_core_sum"]:
                d = pooled[B][c]
                cells.append(f"{d['wall_median_s']*1e3:.3f} ({d['cpu_median_s']*1e3:.3f})")
            print(f"| {B} | " + " | ".join(cells) + " |")
        print("\nfits (wall median, all B): a [ms], b [us/req], residuals [ms]")
        for c in COMPS + ["engine_core_sum"]:
            f = fits[c]["wall_median_s"]
            fc = fits[c]["cpu_median_s"]
            fb = f["fit_B_ge_64"]
            print(f"| {c} | {f['a_s']*1e3:.3f} | {f['b_s_per_req']*1e6:.2f} | "
                  f"{fc['b_s_per_req']*1e6:.2f} | {fb['a_s']*1e3:.3f} | "
                  f"{fb['b_s_per_req']*1e6:.2f} | "
                  + ", ".join(f"{r*1e3:+.2f}" for r in f["residuals_s"]) + " |")
        loads = [(r["env_start"]["loadavg"][0], r["env_end"]["loadavg"][0]) for r in runs]
        print("loadavg(1m) start/end per run:", loads)
    json.dump(out, open("results.json", "w"), indent=1)


if __name__ == "__main__":
    main()
