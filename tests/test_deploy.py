"""``perfmodel deploy`` (issue 29, launch files): every file it writes is parsed here (scripts by shlex, YAML by
yaml.safe_load, JSON arguments by json) and every flag, key and environment variable checked against the option
tables in perfmodel/deploy/options/, by a checker of its own (not the writer's), so that a renamed option fails
this test rather than a launch."""
from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfmodel.cli import main

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = ROOT / "perfmodel" / "deploy" / "options"
ENGINES = ("trtllm", "vllm", "sglang")
SCRIPT_LINES = {"set -euo pipefail", 'cd "$(dirname "$0")"', "wait"}
TRT_FILES = {"extra-llm-api-options.yaml": "extra_llm_api_options",
             "extra-llm-api-options-prefill.yaml": "extra_llm_api_options",
             "extra-llm-api-options-decode.yaml": "extra_llm_api_options", "disagg-config.yaml": "disagg_config"}


def table(name: str) -> dict:
    return yaml.safe_load((OPTIONS / f"{name}.yaml").read_text(encoding="utf-8"))


# --- the checker: parse what was written, check it against the tables ------------------------------------------

def check_tree(spec: dict, data, where: str) -> None:
    keys = spec.get("keys")
    if keys is None:
        check_leaf(spec, data, where)
        return
    for item in data if isinstance(data, list) else [data]:
        assert isinstance(item, dict), where
        for k, v in item.items():
            assert k in keys, f"{where}.{k}: not in the option table"
            check_tree(keys[k], v, f"{where}.{k}")


def check_leaf(spec: dict, v, where: str) -> None:
    kind = spec["value"]
    ok = {"int": lambda: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
          "str": lambda: isinstance(v, str), "bool": lambda: isinstance(v, bool),
          "int_list": lambda: isinstance(v, list) and all(isinstance(x, int) for x in v),
          "str_list": lambda: isinstance(v, list) and all(isinstance(x, str) for x in v),
          "map": lambda: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())}[kind]
    assert ok(), f"{where}: {v!r} is not {kind}"
    if "choices" in spec:
        assert v in spec["choices"], f"{where}: {v!r} not among {spec['choices']}"


def check_argv(words: list[str], engine: str, where: str) -> tuple[str, dict]:
    """(program, {flag: [values]}) of one command, every flag and value checked against the engine's table."""
    t = table(engine)
    progs = sorted(t["programs"].items(), key=lambda kv: -len(kv[1]["argv"]))
    for name, spec in progs:
        if words[:len(spec["argv"])] == spec["argv"]:
            break
    else:
        raise AssertionError(f"{where}: {words[:3]} starts no program of the {engine} table")
    rest = words[len(spec["argv"]):]
    flags: dict[str, list] = {}
    if "positional" in spec:
        assert rest and not rest[0].startswith("-"), f"{where}: the positional argument is missing"
        flags["<positional>"] = [rest[0]]
        rest = rest[1:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag in spec["flags"], f"{where}: {flag} is not in the {engine} {name} table"
        f = spec["flags"][flag]
        i += 1
        kind = f["value"]
        if kind == "none":
            value = True
        elif kind == "url_port":
            value = (rest[i], int(rest[i + 1]))
            assert rest[i].startswith("http://"), where
            i += 2
        else:
            text = rest[i]
            i += 1
            if kind == "json":
                value = json.loads(text)
                check_tree(f, value, f"{where} {flag}")
            else:
                value = {"int": int, "float": float, "str": str}[kind](text)
                if "choices" in f:
                    assert text in f["choices"], f"{where} {flag}: {text!r} not among {f['choices']}"
        flags.setdefault(flag, []).append(value)
    return name, flags


def script_commands(text: str, engine: str, where: str) -> list[tuple[dict, str, dict]]:
    """(environment, program, flags) of every command a script starts; any other line fails."""
    lines = text.replace("\\\n", "").splitlines()  # bash's line continuation
    assert lines[0] == "#!/usr/bin/env bash", where
    out = []
    for line in lines[1:]:
        s = line.strip()
        if not s or s.startswith("#") or s in SCRIPT_LINES:
            continue
        words = shlex.split(s)
        assert words[-1] == "&", f"{where}: {s[:60]}"
        words = words[:-1]
        env = {}
        while re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            k, v = words.pop(0).split("=", 1)
            assert k in table(engine)["env"], f"{where}: environment variable {k} not in the {engine} table"
            env[k] = v
        prog, flags = check_argv(words, engine, where)
        out.append((env, prog, flags))
    return out


def check_manifest(text: str, engine: str) -> list[dict]:
    k8s = table("kubernetes")
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert "&id" not in text and "*id" not in text  # no YAML anchors
    for d in docs:
        kind = d["kind"]
        assert kind in k8s["kinds"] and d["apiVersion"] == k8s["kinds"][kind]["apiVersion"]
        check_tree(k8s["kinds"][kind], d, f"k8s.yaml {kind}")
        if kind in ("Deployment", "StatefulSet"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                check_argv(c["command"], engine, f"k8s.yaml {d['metadata']['name']}")
                for e in c.get("env", []):
                    assert e["name"] in table(engine)["env"]
        if kind == "ConfigMap":
            for name, content in d["data"].items():
                check_tree(table(engine)["files"][TRT_FILES[name]], yaml.safe_load(content), f"ConfigMap {name}")
    return docs


def check_folder(folder: Path, engine: str) -> dict:
    """Every file written, parsed and checked; returns what was found."""
    found = {"scripts": {}, "yaml": {}, "k8s": None}
    for p in sorted(folder.iterdir()):
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".sh":
            found["scripts"][p.name] = script_commands(text, engine, p.name)
            if shutil.which("bash"):
                r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
                assert r.returncode == 0, r.stderr
        elif p.name == "k8s.yaml":
            found["k8s"] = check_manifest(text, engine)
        elif p.suffix == ".yaml":
            data = yaml.safe_load(text)
            check_tree(table(engine)["files"][TRT_FILES[p.name]], data, p.name)
            found["yaml"][p.name] = data
        else:
            assert p.name == "README.txt", p.name
    return found


# --- plans ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory) -> dict:
    """A real plan (the smallest that ranks an aggregated and a disaggregated layout), made once."""
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    rc = main(["plan", "--arch", "h200-sxm", "--model", "qwen3-0.6b", "--gpus", "2", "--slo-ttft-ms", "1000",
               "--slo-tpot-ms", "30", "--requests", "20", "--tp-options", "1", "--batch-options", "max",
               "--format", "json", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert {c["layout"] for c in doc["candidates"]} == {"aggregated", "disaggregated"}
    return doc


def write_plan(tmp_path: Path, doc: dict, name: str = "plan.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc), encoding="utf-8")
    return p


def deploy(capsys, *args) -> tuple[int, str, str]:
    rc = main(["deploy", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def rank_of(doc: dict, layout: str) -> int:
    return next(c["rank"] for c in doc["candidates"] if c["layout"] == layout)


# --- every engine x aggregated/disaggregated -------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", ["aggregated", "disaggregated"])
def test_every_engine_and_layout(plan_doc, tmp_path, capsys, engine, layout):
    plan = write_plan(tmp_path, plan_doc)
    row = next(c for c in plan_doc["candidates"] if c["layout"] == layout)
    out = tmp_path / "out"
    rc, _, err = deploy(capsys, plan, "--engine", engine, "--out", out, "--rank", row["rank"])
    assert rc == 0, err
    found = check_folder(out, engine)
    scripts = found["scripts"]
    tp_flag = {"trtllm": "--tp_size", "vllm": "--tensor-parallel-size", "sglang": "--tp-size"}[engine]
    cap_flag = {"trtllm": "--max_batch_size", "vllm": "--max-num-seqs", "sglang": "--max-running-requests"}[engine]
    model = "Qwen/Qwen3-0.6B"  # the library entry's source
    gpus = []
    if layout == "aggregated":
        assert set(scripts) == {"serve.sh"}
        cmds = scripts["serve.sh"]
        assert len(cmds) == row["instances"]
        for env, _, flags in cmds:
            assert flags[tp_flag] == [row["tp"]] and flags[cap_flag] == [row["batch"]]
            assert model in flags.get("<positional>", []) + flags.get("--model-path", [])
            gpus += env["CUDA_VISIBLE_DEVICES"].split(",")
    else:
        routers = {"trtllm": {"router.sh"}, "sglang": {"router.sh"}, "vllm": set()}[engine]
        assert set(scripts) == {"prefill.sh", "decode.sh"} | routers
        assert len(scripts["prefill.sh"]) == row["prefill_instances"]
        assert len(scripts["decode.sh"]) == row["decode_instances"]
        for env, _, flags in scripts["prefill.sh"] + scripts["decode.sh"]:
            gpus += env["CUDA_VISIBLE_DEVICES"].split(",")
        for _, _, flags in scripts["decode.sh"]:
            assert flags[tp_flag] == [row["decode_tp"]] and flags[cap_flag] == [row["batch"]]
        if engine == "vllm":
            for _, _, flags in scripts["prefill.sh"] + scripts["decode.sh"]:
                assert flags["--kv-transfer-config"] == [{"kv_connector": "NixlConnector", "kv_role": "kv_both"}]
        if engine == "sglang":
            assert {f["--disaggregation-mode"][0] for _, _, f in scripts["prefill.sh"]} == {"prefill"}
            assert {f["--disaggregation-mode"][0] for _, _, f in scripts["decode.sh"]} == {"decode"}
            (_, _, router), = scripts["router.sh"]
            assert len(router["--prefill"]) == row["prefill_instances"] and "--pd-disaggregation" in router
        if engine == "trtllm":
            cfg = found["yaml"]["disagg-config.yaml"]
            assert cfg["context_servers"]["num_instances"] == row["prefill_instances"]
            assert len(cfg["generation_servers"]["urls"]) == row["decode_instances"]
            assert found["yaml"]["extra-llm-api-options-prefill.yaml"]["cache_transceiver_config"]
    assert len(gpus) == len(set(gpus)) == row["gpus"]  # each GPU used once, all of the plan's
    workloads = [d for d in found["k8s"] if d["kind"] in ("Deployment", "StatefulSet")]
    pods = {d["metadata"]["name"].rsplit("-", 1)[-1]: d["spec"]["replicas"] for d in workloads}
    if layout == "aggregated":
        assert pods == {"serve": row["instances"]}
    else:
        assert pods["prefill"] == row["prefill_instances"] and pods["decode"] == row["decode_instances"]
        assert {d["kind"] for d in workloads if d["metadata"]["name"].endswith(("prefill", "decode"))} == {"StatefulSet"}
    readme = (out / "README.txt").read_text()
    opts = table(engine)
    for needle in (f"rank {row['rank']}", row["describe"], "TTFT p90", "TPOT p90", "throughput",
                   f"{opts['name']} {opts['version']}", model, "k8s.yaml"):
        assert needle in readme, needle


def test_option_tables_follow_the_presets_and_name_sources():
    from perfmodel.cli.deploy import ENGINES as CLI_ENGINES
    from perfmodel.deploy.options import ENGINES as DEPLOY_ENGINES
    from perfmodel.engines import ENGINES as PRESETS

    assert CLI_ENGINES == DEPLOY_ENGINES == ENGINES

    def leaves(node, where):
        if "keys" in node:
            assert "source" in node or where.count(".") == 0, where
            for k, v in node["keys"].items():
                yield from leaves(v, f"{where}.{k}")
        else:
            yield where, node

    for engine in ENGINES:
        t = table(engine)
        assert t["preset"] == PRESETS[engine].version, engine  # a preset moving on means reading the names again
        assert t["version"] and t["read_from"] and t["image"]
        for prog in t["programs"].values():
            for flag, spec in prog["flags"].items():
                assert spec.get("source") and spec.get("value"), (engine, flag)
                for where, leaf in leaves(spec, flag) if "keys" in spec else ():
                    assert leaf.get("source"), (engine, where)
        for name, spec in t.get("env", {}).items():
            assert spec.get("source"), name
        for fname, f in t.get("files", {}).items():
            for where, leaf in leaves(f, fname):
                assert leaf.get("source") and leaf.get("value"), (engine, where)
    k8s = table("kubernetes")
    for kind, spec in k8s["kinds"].items():
        for where, leaf in leaves(spec, kind):
            assert leaf.get("source") and leaf.get("value"), where


def test_writer_emits_only_what_the_tables_hold():
    from perfmodel.deploy.options import Argv, OptionError, checked_tree, table as opt_table

    a = Argv("vllm", "serve").positional("m")
    with pytest.raises(OptionError):
        a.flag("--tensor-parallel")  # a near miss is still not in the table
    with pytest.raises(OptionError):
        a.flag("--kv-cache-dtype", "fp8_e4m3")  # a value outside the table's choices
    with pytest.raises(OptionError):
        a.flag("--speculative-config", {"method": "mtp", "num_draft_tokens": 2})  # a JSON key not in the table
    with pytest.raises(OptionError):
        a.setenv("VLLM_SOMETHING", "1")
    with pytest.raises(OptionError):
        checked_tree(opt_table("trtllm")["files"]["extra_llm_api_options"], {"kv_cache_config": {"free": 1}}, "x")
    with pytest.raises(OptionError):
        Argv("sglang", "launch_server").positional("m")  # SGLang takes the model as --model-path


# --- MoE, attention DP, MTP, fp8: a plan that records its scenario --------------------------------------------

def moe_plan(doc: dict, mode: str) -> dict:
    d = copy.deepcopy(doc)
    d["model"] = {"key": "deepseek-v3", "name": "DeepSeek-V3"}
    d["scenario"] = {"dtype": "fp8", "ep": 8, "attention_dp": 8, "mtp": 2, "engine": "trtllm", "prefill_chunk": 4096,
                     "mem_fraction": 0.85}
    row = next(c for c in d["candidates"] if c["layout"] == mode)
    row.update(tp=1, engine="trtllm", gpus=16 if mode == "aggregated" else 24, batch=64)
    if mode == "aggregated":
        row["instances"] = 2
    else:
        row.update(prefill_instances=2, decode_instances=1, decode_tp=1)
    return d


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_moe_layout_with_mtp_and_fp8(plan_doc, tmp_path, capsys, engine, mode):
    doc = moe_plan(plan_doc, mode)
    row = next(c for c in doc["candidates"] if c["layout"] == mode)
    out = tmp_path / "out"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", engine, "--out", out, "--rank", row["rank"])
    assert rc == 0, err
    found = check_folder(out, engine)
    name = "serve.sh" if mode == "aggregated" else "decode.sh"
    env, _, flags = found["scripts"][name][0]
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 8
    assert flags.get("<positional>", flags.get("--model-path")) == ["deepseek-ai/DeepSeek-V3"]
    if engine == "trtllm":
        assert flags["--tp_size"] == [8] and flags["--ep_size"] == [8] and flags["--max_num_tokens"] == [4096]
        assert flags["--kv_cache_free_gpu_memory_fraction"] == [0.85]
        opts = found["yaml"][flags["--extra_llm_api_options"][0]]
        assert opts["enable_attention_dp"] is True and opts["kv_cache_config"] == {"dtype": "fp8"}
        assert opts["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    elif engine == "vllm":
        assert flags["--tensor-parallel-size"] == [1] and flags["--data-parallel-size"] == [8]
        assert "--enable-expert-parallel" in flags and flags["--quantization"] == ["fp8"]
        assert flags["--speculative-config"] == [{"method": "mtp", "num_speculative_tokens": 2}]
        assert flags["--gpu-memory-utilization"] == [0.9]  # the plan's 0.85 is TensorRT-LLM's share, not vLLM's
    else:
        assert flags["--tp-size"] == [8] and flags["--dp-size"] == [8] and "--enable-dp-attention" in flags
        assert flags["--ep-size"] == [8] and flags["--speculative-algorithm"] == ["NEXTN"]
        assert flags["--speculative-num-draft-tokens"] == [3] and flags["--kv-cache-dtype"] == ["fp8_e4m3"]
    readme = (out / "README.txt").read_text()
    assert "2 draft tokens" in readme and "weights: fp8 (the plan)" in readme


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("width", [8, 16])
def test_wide_expert_parallelism_deploys_the_all_to_all_it_was_planned_with(plan_doc, tmp_path, capsys, engine, width):
    # attention DP over more GPUs than one node: the plan priced the engine's all-to-all (Engine.exchange_for), and
    # the launch files select it where the engine's option is known (SGLang's flag, vLLM's environment variable);
    # within a node the engines' default gather, nothing written
    doc = moe_plan(plan_doc, "disaggregated")
    doc["scenario"].update(ep=width, attention_dp=width, engine=engine)
    row = next(c for c in doc["candidates"] if c["layout"] == "disaggregated")
    row.update(engine=engine, gpus=3 * width)
    out = tmp_path / "out"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", engine, "--out", out, "--rank", row["rank"])
    assert rc == 0, err
    found = check_folder(out, engine)
    wide = width > 8
    readme = (out / "README.txt").read_text()
    if engine == "sglang":
        for name in ("prefill.sh", "decode.sh"):
            flags = found["scripts"][name][0][2]
            assert flags.get("--moe-a2a-backend") == (["deepep"] if wide else None), name
    elif engine == "vllm":
        env = {name: found["scripts"][name][0][0].get("VLLM_ALL2ALL_BACKEND") for name in ("prefill.sh", "decode.sh")}
        assert env == ({"prefill.sh": "deepep_high_throughput", "decode.sh": "deepep_low_latency"} if wide
                       else {"prefill.sh": None, "decode.sh": None})
    else:
        assert ("TensorRT-LLM's all-to-all" in " ".join(readme.split())) == wide
        for role in ("prefill", "decode"):
            opts = found["yaml"][f"extra-llm-api-options-{role}.yaml"]
            assert opts.get("moe_config") == ({"backend": "WIDEEP"} if wide else None), role


def test_a_plans_recorded_exchange_is_deployed_and_checked(plan_doc, tmp_path, capsys):
    doc = moe_plan(plan_doc, "aggregated")
    doc["scenario"].update(engine="sglang", moe_exchange="all_to_all")  # --moe-exchange all_to_all at DEP 8
    row = next(c for c in doc["candidates"] if c["layout"] == "aggregated")
    row["engine"] = "sglang"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", "sglang", "--out", tmp_path / "a",
                        "--rank", row["rank"])
    assert rc == 0, err
    assert check_folder(tmp_path / "a", "sglang")["scripts"]["serve.sh"][0][2]["--moe-a2a-backend"] == ["deepep"]
    doc["scenario"]["moe_exchange"] = "broadcast"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc, "bad.json"), "--engine", "sglang", "--out", tmp_path / "b",
                        "--rank", row["rank"])
    assert rc == 2 and "scenario.moe_exchange" in err and "expected gather or all_to_all" in err


@pytest.mark.parametrize("engine, flag", [("vllm", "--api-server-count"), ("sglang", "--tokenizer-worker-num")])
def test_a_plans_api_servers_are_deployed(plan_doc, tmp_path, capsys, engine, flag):
    """The API server processes a plan was priced with (--api-servers) start with it; none recorded, none set."""
    doc = moe_plan(plan_doc, "aggregated")
    doc["scenario"].update(engine=engine, api_servers=3, mtp=0)
    row = next(c for c in doc["candidates"] if c["layout"] == "aggregated")
    row["engine"] = engine
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", engine, "--out", tmp_path / "a",
                        "--rank", row["rank"])
    assert rc == 0, err
    assert check_folder(tmp_path / "a", engine)["scripts"]["serve.sh"][0][2][flag] == [3]
    doc["scenario"].pop("api_servers")
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc, "none.json"), "--engine", engine, "--out", tmp_path / "b",
                        "--rank", row["rank"])
    assert rc == 0, err
    assert flag not in check_folder(tmp_path / "b", engine)["scripts"]["serve.sh"][0][2]


@pytest.mark.parametrize("engine, change, field", [
    ("trtllm", {"tp": 2, "gpus": 32}, "scenario.attention_dp"),  # enable_attention_dp runs attention at TP 1
    ("trtllm", {"draft": "llama-3.1-8b"}, "scenario.draft"),  # only MTP is mapped for TensorRT-LLM
    ("vllm", {"ep": 4}, "scenario.ep"),  # vLLM's EP spans every TP x DP rank
    ("sglang", {"kv_dtype": "fp4"}, "scenario.kv_dtype"),
])
def test_layouts_an_engine_cannot_express_are_refused(plan_doc, tmp_path, capsys, engine, change, field):
    doc = moe_plan(plan_doc, "aggregated")
    row = next(c for c in doc["candidates"] if c["layout"] == "aggregated")
    row.update(change)
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", engine, "--out", tmp_path / "o", "--rank",
                        row["rank"])
    assert rc == 2 and err.count("\n") == 1 and field in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_amd_part_gets_rocm_devices(plan_doc, tmp_path, capsys):
    doc = copy.deepcopy(plan_doc)
    doc["arch"]["vendor"] = "amd"
    out = tmp_path / "o"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", "vllm", "--out", out, "--rank",
                        rank_of(doc, "disaggregated"))
    assert rc == 0, err
    found = check_folder(out, "vllm")
    env, _, _ = found["scripts"]["prefill.sh"][0]
    assert "HIP_VISIBLE_DEVICES" in env and "CUDA_VISIBLE_DEVICES" not in env
    pods = [d for d in found["k8s"] if d["kind"] == "StatefulSet"]
    assert all("amd.com/gpu" in d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] for d in pods)


# --- quoting -------------------------------------------------------------------------------------------------

HOSTILE = "a b'c\"d $(touch /tmp/pwned) `id`; rm -rf ~ && x|y > z * ? yes"


@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_model_path_is_quoted_everywhere(plan_doc, tmp_path, capsys, engine):
    doc = copy.deepcopy(plan_doc)
    for c in doc["candidates"]:
        c["describe"] = "x\n$(reboot)\n" + c["describe"]  # a line break in plan text must not start a command
    doc["model"]["key"] = "Hostile $(id)\nkey"
    plan = write_plan(tmp_path, doc)
    row = rank_of(doc, "disaggregated")
    out = tmp_path / "out"
    rc, _, err = deploy(capsys, plan, "--engine", engine, "--out", out, "--rank", row, "--model-path", HOSTILE,
                        "--image", "registry.example/img:y")
    assert rc == 0, err
    found = check_folder(out, engine)  # every line parses; no stray command
    for name, cmds in found["scripts"].items():
        for _, prog, flags in cmds:
            if prog not in ("router", "disaggregated"):
                assert flags.get("<positional>", flags.get("--model-path")) == [HOSTILE]
    for d in found["k8s"]:
        assert re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])?", d["metadata"]["name"]) and len(d["metadata"]["name"]) <= 63
        if d["kind"] in ("Deployment", "StatefulSet"):
            c = d["spec"]["template"]["spec"]["containers"][0]
            assert c["image"] == "registry.example/img:y"
            if c["name"] != "router":
                assert HOSTILE in c["command"]
    for p in out.iterdir():
        if p.suffix == ".sh":
            assert "\n$(reboot)" not in p.read_text()


@pytest.mark.parametrize("bad, needle", [("--trust-remote-code", "starts with '-'"), ("a\nb", "control"),
                                         ("", "empty")])
def test_model_path_that_would_become_an_option_is_refused(plan_doc, tmp_path, capsys, bad, needle):
    rc, _, err = deploy(capsys, write_plan(tmp_path, plan_doc), "--engine", "vllm", "--out", tmp_path / "o",
                        f"--model-path={bad}")
    assert rc == 2 and err.count("\n") == 1 and needle in err and "--model-path" in err
    assert not (tmp_path / "o").exists()


def test_unknown_model_gets_a_stated_placeholder(plan_doc, tmp_path, capsys):
    doc = copy.deepcopy(plan_doc)
    doc["model"] = {"key": "my-own-model", "name": "Mine"}
    out = tmp_path / "o"
    rc, _, err = deploy(capsys, write_plan(tmp_path, doc), "--engine", "sglang", "--out", out)
    assert rc == 0, err
    found = check_folder(out, "sglang")
    assert found["scripts"]["serve.sh"][0][2]["--model-path"] == ["REPLACE-WITH-MODEL-PATH"]
    readme = (out / "README.txt").read_text()
    assert "PLACEHOLDER" in readme and "--model-path" in readme


# --- choosing the layout ------------------------------------------------------------------------------------

def test_default_rank_is_the_best_planned_for_the_engine(plan_doc, tmp_path, capsys):
    doc = copy.deepcopy(plan_doc)
    doc["candidates"][0]["engine"] = "vllm"
    doc["candidates"][1]["engine"] = "sglang"
    plan = write_plan(tmp_path, doc)
    rc, _, err = deploy(capsys, plan, "--engine", "sglang", "--out", tmp_path / "s")
    assert rc == 0 and f"rank {doc['candidates'][1]['rank']}" in err
    assert "predicted" not in err  # planned for this engine: no note
    rc, _, err = deploy(capsys, plan, "--engine", "trtllm", "--out", tmp_path / "t")
    assert rc == 0 and "rank 1" in err and "note: the plan predicted rank 1 for engine vllm" in err
    assert "predicted rank 1 for engine vllm" in (tmp_path / "t" / "README.txt").read_text()


def test_a_later_deploy_points_out_files_of_an_earlier_one(plan_doc, tmp_path, capsys):
    plan = write_plan(tmp_path, plan_doc)
    out = tmp_path / "o"
    assert deploy(capsys, plan, "--engine", "vllm", "--out", out, "--rank", rank_of(plan_doc, "disaggregated"))[0] == 0
    rc, _, err = deploy(capsys, plan, "--engine", "vllm", "--out", out, "--rank", rank_of(plan_doc, "aggregated"))
    assert rc == 0 and "prefill.sh is from an earlier deploy" in err
    assert (out / "serve.sh").stat().st_mode & 0o100  # scripts are executable


# --- bad input: one line, exit 2, no traceback, nothing written ------------------------------------------------

def _bad_plans(doc: dict) -> dict:
    no_tp = copy.deepcopy(doc)
    del no_tp["candidates"][0]["tp"]
    gpus = copy.deepcopy(doc)
    gpus["candidates"][0]["gpus"] += 1
    amd = copy.deepcopy(doc)
    amd["arch"]["vendor"] = "amd"
    return {"missing": None, "not-json": "{not json", "not-a-plan": json.dumps({"tool": "perfmodel"}),
            "empty": json.dumps({"model": {"key": "x"}, "candidates": []}),
            "no-tp": json.dumps(no_tp), "gpus": json.dumps(gpus), "amd": json.dumps(amd)}


@pytest.mark.parametrize("case, args, needles", [
    ("missing", [], ["no such file"]),
    ("not-json", [], ["not valid JSON"]),
    ("not-a-plan", [], ["candidates", "not a plan JSON"]),
    ("empty", [], ["candidates", "non-empty"]),
    ("no-tp", [], ["candidates[0].tp", "missing"]),
    ("gpus", [], ["candidates[0].gpus"]),
    ("amd", ["--engine", "trtllm"], ["arch.vendor", "nvidia"]),
    ("ok", ["--rank", "99"], ["--rank", "out of range"]),
    ("ok", ["--rank", "two"], ["--rank"]),
])
def test_bad_input_is_one_line_and_exit_2(plan_doc, tmp_path, capsys, case, args, needles):
    plans = _bad_plans(plan_doc)
    plan = tmp_path / "plan.json"
    if case == "ok":
        plan.write_text(json.dumps(plan_doc))
    elif plans[case] is not None:
        plan.write_text(plans[case])
    argv = ["--engine", "vllm", *args] if "--engine" not in args else args
    rc, out, err = deploy(capsys, plan, *argv, "--out", tmp_path / "o")
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("perfmodel: error:"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    if case != "missing":
        assert str(plan) in err or "--rank" in err
    assert not (tmp_path / "o").exists()


def test_unknown_engine_is_one_line_and_exit_2(plan_doc, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["deploy", str(write_plan(tmp_path, plan_doc)), "--engine", "tgi", "--out", str(tmp_path / "o")])
    _, err = capsys.readouterr()
    assert e.value.code == 2 and err.count("\n") == 1 and "--engine" in err and "invalid choice" in err


@pytest.mark.parametrize("where", ["plan", "plan-in-folder", "no-parent", "a-file"])
def test_out_is_refused_where_it_would_overwrite_or_guess(plan_doc, tmp_path, capsys, where):
    plan = write_plan(tmp_path, plan_doc)
    if where == "plan":
        out = plan
    elif where == "plan-in-folder":  # the plan saved as README.txt in the folder
        (tmp_path / "d").mkdir()
        plan = write_plan(tmp_path / "d", plan_doc, "README.txt")
        out = tmp_path / "d"
    elif where == "no-parent":
        out = tmp_path / "missing" / "o"
    else:
        out = tmp_path / "file.txt"
        out.write_text("x")
    before = plan.read_bytes()
    rc, _, err = deploy(capsys, plan, "--engine", "vllm", "--out", out)
    assert rc == 2 and err.count("\n") == 1 and "--out" in err and "Traceback" not in err, err
    assert plan.read_bytes() == before


def test_the_command_line_starts_without_the_deploy_modules():
    code = ("import sys; import perfmodel.cli as c; c.build_parser(); "
            "bad = [m for m in sys.modules if m.startswith(('perfmodel.deploy', 'torch', 'matplotlib', 'numpy'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_plan_records_its_scenario_and_deploy_reads_it(tmp_path):
    """`plan --format json` writes what its layouts ran under beyond each row (weights' format, EP, attention DP,
    MTP), and deploy takes the weights' format from it rather than the engine's default."""
    plan_json = tmp_path / "plan.json"
    assert main(["plan", "--arch", "h200-sxm", "--model", "llama-3.1-8b", "--gpus", "2", "--dtype", "fp8",
                 "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--requests", "40", "--engines", "vllm",
                 "--format", "json", "--out", str(plan_json)]) == 0
    doc = json.loads(plan_json.read_text())
    assert doc["scenario"]["dtype"] == "fp8" and doc["scenario"]["ep"] == 1 and doc["scenario"]["mtp"] == 0
    out = tmp_path / "launch"
    assert main(["deploy", str(plan_json), "--engine", "vllm", "--out", str(out)]) == 0
    assert "weights: fp8 (the plan)" in (out / "README.txt").read_text()
