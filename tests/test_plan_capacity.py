"""`perfmodel plan` without --gpus: capacity across parts and engines, mixed-part disaggregation, the JSON that
`perfmodel deploy` reads, and one clear line (exit 2) for bad input."""
from __future__ import annotations

import json
import shlex

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError

BASE = ["plan", "--arch", "h200-sxm,b200", "--model", "qwen3-0.6b", "--slo-ttft-ms", "300", "--slo-tpot-ms", "8",
        "--requests", "60", "--tp-options", "1,2", "--batch-options", "64,max", "--finalists", "2"]
PRICES = {"h200-sxm": 3.0, "b200": 4.5}  # test input, as a user would give them


def run(args, capsys):
    rc = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def capacity_doc(tmp_path_factory):
    path = tmp_path_factory.mktemp("capacity") / "plan.json"
    rc = main(BASE + ["--rate", "200", "--gpu-hour-usd", "h200-sxm=3,b200=4.5", "--format", "json", "--out", str(path)])
    assert rc == 0
    return path, json.loads(path.read_text())


def test_rows_are_whole_plans_ranked_by_cost(capacity_doc):
    _, doc = capacity_doc
    rows = doc["candidates"]
    assert doc["kind"] == "capacity plan" and doc["cost_basis"] == "usd_per_hour"
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["usd_per_hour"] for r in rows] == sorted(r["usd_per_hour"] for r in rows)
    assert doc["chosen"] == rows[0]
    for p in doc["parts"]:
        assert p["gpu_hour_usd"] == PRICES[p["key"]] and "user input" in p["price_source"]
    for r in rows:
        assert sum(r["gpus_by_part"].values()) == r["gpus"]
        assert r["usd_per_hour"] == pytest.approx(sum(PRICES[k] * n for k, n in r["gpus_by_part"].items()))
        # the end-to-end simulation at the target rate met the target (else the plan grew or was left out)
        assert r["attainment"] >= doc["attainment"] and r["rate_req_s"] == 200
        assert r["binding"] and r["joules_per_token"] > 0
        if r["layout"] == "aggregated":
            assert r["gpus"] == r["instances"] * r["tp"] * r["pp"]
            assert r["instances"] * r["instance_rate_req_s"] >= 200 * (1 - 1e-9)
        else:
            assert r["gpus"] == r["prefill_instances"] * r["tp"] + r["decode_instances"] * r["decode_tp"]
            assert r["prefill_instances"] * r["prefill_instance_rate_req_s"] >= 200 * (1 - 1e-9)
            assert r["kv_transfer"]["bytes_per_request"] > 0
    kinds = {(r["layout"], r.get("mixed_parts", False)) for r in rows}
    assert kinds >= {("aggregated", False), ("disaggregated", False), ("disaggregated", True)}
    mixed = [r for r in rows if r.get("mixed_parts")]
    assert all(r["prefill_arch"]["key"] != r["decode_arch"]["key"] for r in mixed)
    assert all(r["kv_transfer"]["link"] == "scale-out network" for r in mixed)  # two parts: two hosts


def test_higher_rate_never_needs_fewer_gpus(capsys):
    gpus = []
    for rate in (100, 800):
        rc, out, err = run(["plan", "--arch", "h200-sxm", "--model", "qwen3-0.6b", "--slo-ttft-ms", "300",
                            "--slo-tpot-ms", "8", "--requests", "60", "--tp-options", "1", "--batch-options", "64",
                            "--no-disagg", "--rate", rate, "--format", "json"], capsys)
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["cost_basis"] == "gpus" and doc["candidates"][0]["usd_per_hour"] is None
        gpus.append(doc["candidates"][0]["gpus"])
    assert gpus[1] > gpus[0]


def _scripts(folder):
    out = {}
    for p in folder.glob("*.sh"):
        cmds = []
        for line in p.read_text().splitlines():
            if "=" in line and not line.startswith(("#", "set ", "cd ")):
                words = shlex.split(line.rstrip(" &\\"))
                cmds.append(dict(w.split("=", 1) for w in words if "=" in w and w.split("=")[0].isupper()))
        out[p.name] = cmds
    return out


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
@pytest.mark.parametrize("which", ["chosen", "disaggregated", "mixed"])
def test_deploy_reads_every_kind_of_capacity_plan(capacity_doc, tmp_path, capsys, engine, which):
    path, doc = capacity_doc
    rows = doc["candidates"]
    row = {"chosen": rows[0], "disaggregated": next(r for r in rows if r["layout"] == "disaggregated"
                                                    and not r["mixed_parts"]),
           "mixed": next(r for r in rows if r.get("mixed_parts"))}[which]
    out = tmp_path / "launch"
    rc, _, err = run(["deploy", path, "--engine", engine, "--rank", row["rank"], "--out", out], capsys)
    assert rc == 0, err
    readme = (out / "README.txt").read_text()
    assert row["describe"] in readme
    if row["layout"] == "disaggregated":
        scripts = _scripts(out)
        assert {"prefill.sh", "decode.sh"} <= set(scripts)
        decode_gpus = [c["CUDA_VISIBLE_DEVICES"] for c in scripts["decode.sh"] if "CUDA_VISIBLE_DEVICES" in c]
        first = decode_gpus[0].split(",")[0]
        if which == "mixed":  # decode runs on a host of the other part: its GPUs count from 0 there
            assert first == "0"
            assert "Mixed parts" in readme and row["prefill_arch"]["name"] in readme
            assert row["decode_arch"]["name"] in (out / "decode.sh").read_text()
        else:
            assert int(first) == row["prefill_instances"] * row["tp"]
            assert "Mixed parts" not in readme


def test_table_names_prices_as_user_input(capsys):
    rc, out, err = run(BASE + ["--rate", "200", "--gpu-hour-usd", "h200-sxm=3", "--gpu-hour-usd", "b200=4.5",
                               "--no-disagg"], capsys)
    assert rc == 0, err
    assert "(user input)" in out and "binding" in out and "search:" in out


@pytest.mark.parametrize("extra,needle", [
    (["--rate", "10"], "--slo"),
    (["--slo-ttft-ms", "300"], "--rate"),
    (["--rate", "0", "--slo-ttft-ms", "300"], "--rate"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--gpu-hour-usd", "mi300x=2"], "--gpu-hour-usd"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--gpu-hour-usd", "3"], "--gpu-hour-usd"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--gpu-hour-usd", "b200=-1"], "--gpu-hour-usd"),
    (["--gpus", "2", "--slo-ttft-ms", "300"], "--arch"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--max-gpus", "0"], "--max-gpus"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--arrival", "constant"], "--arrival"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--arrival", "trace", "/nonexistent.csv"], "trace"),
    (["--rate", "10", "--slo-ttft-ms", "300", "--engines", "foo"], "--engines"),
])
def test_bad_input_is_one_line(extra, needle, capsys):
    rc, _, err = run(["plan", "--arch", "h200-sxm,b200", "--model", "qwen3-0.6b"] + extra, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_gpus_mode_refuses_capacity_flags(capsys):
    rc, _, err = run(["plan", "--arch", "h200-sxm", "--model", "qwen3-0.6b", "--gpus", "2", "--slo-ttft-ms", "300",
                      "--rate", "10"], capsys)
    assert rc == 2 and "--rate" in err and "--gpus" in err


def test_trace_sets_the_rate(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,isl,osl\n" + "".join(f"{i * 0.01:.3f},{512 + 7 * (i % 5)},64\n" for i in range(200)))
    rc, out, err = run(["plan", "--arch", "h200-sxm", "--model", "qwen3-0.6b", "--slo-ttft-ms", "300",
                        "--slo-tpot-ms", "8", "--requests", "60", "--tp-options", "1", "--batch-options", "64",
                        "--no-disagg", "--arrival", "trace", trace, "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["rate_req_s"] == pytest.approx(100.0, rel=1e-6)  # 199 gaps of 10 ms
    assert doc["workload"]["trace"] == str(trace)


def test_speculation_screen_prices_tpot_per_emitted_token(tmp_path):
    """With --mtp a step is a verify step emitting ~E tokens a sequence: the closed-form screen takes TPOT as the
    step over E (as the simulator and `plan --gpus` do). It once took the whole verify step as TPOT and refused
    every layout ("no layout meets the SLOs even at a trickle") that the simulator serves within the SLOs (a verify
    step here is about 2.5 times the objective; the screen's TPOT per emitted token about 0.85 of it)."""
    path = tmp_path / "plan.json"
    rc = main(["plan", "--arch", "h200", "--model", "deepseek-v3", "--dtype", "fp8", "--mtp", "2", "--mtp-accept",
               "0.8", "--rate", "4", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "30", "--tp-options", "8",
               "--batch-options", "16,32", "--no-disagg", "--requests", "100", "--format", "json", "--out", str(path)])
    assert rc == 0
    doc = json.loads(path.read_text())
    assert doc["scenario"]["mtp"] == 2
    chosen = doc["chosen"]
    assert chosen["attainment"] >= doc["attainment"] and chosen["tpot_p90_ms"] <= 30


def test_an_engine_a_part_does_not_run_is_a_note(capsys):
    """--engines trtllm across an NVIDIA and an AMD part: the AMD part is left out with a note (the note once
    read an attribute InputError does not have, and the command ended in a traceback)."""
    rc, out, err = run(["plan", "--arch", "h200-sxm,mi300x", "--model", "qwen3-0.6b", "--rate", "20", "--slo-tpot-ms",
                        "8", "--requests", "60", "--tp-options", "1", "--batch-options", "64", "--finalists", "1",
                        "--no-disagg", "--engines", "trtllm"], capsys)
    assert rc == 0, err
    assert "note: trtllm on AMD Instinct MI300X: TensorRT-LLM runs on nvidia parts" in out


def test_a_price_may_name_the_part_as_given_to_arch():
    from perfmodel.cli.serve import _prices

    keys, names = ["h200-sxm", "b200"], ["h200", "b200"]
    assert _prices(["h200=3.5,b200=5"], keys, names) == {"h200-sxm": 3.5, "b200": 5.0}
    assert _prices(["h200-sxm=3.5"], keys, names) == {"h200-sxm": 3.5}
    with pytest.raises(InputError, match="not one of the parts planned"):
        _prices(["mi300x=2"], keys, names)
