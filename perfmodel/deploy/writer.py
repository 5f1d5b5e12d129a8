"""The launch files of one plan for one engine: shell scripts, the engine's config files, k8s.yaml and
README.txt, built in memory (:func:`build`) and written all or nothing (:func:`write`)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..engines import ENGINES
from ..errors import InputError
from ..safeyaml import printable
from . import kubernetes, sglang, trtllm, vllm
from .options import ENGINES as DEPLOY_ENGINES
from .options import table
from .plan import choose, read_plan
from .target import (PLACEHOLDER_MODEL, Site, Target, resolve_draft, resolve_model, user_text)

WRITERS = {"trtllm": trtllm, "vllm": vllm, "sglang": sglang}
# every file deploy may write into --out (a file of an earlier deploy that this one does not write is pointed out)
ALL_FILES = ("README.txt", "serve.sh", "prefill.sh", "decode.sh", "router.sh", "extra-llm-api-options.yaml",
             "extra-llm-api-options-prefill.yaml", "extra-llm-api-options-decode.yaml", "disagg-config.yaml",
             "k8s.yaml")
GPU_ENV = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES"}


@dataclass
class Deployment:
    files: dict[str, str]  # file name -> text
    target: Target
    summary: str  # one line: what was written for which plan


def one_line(text, limit: int = 200) -> str:
    """Plan text made safe for a comment or README line: printable, no line breaks."""
    return " ".join(printable(str(text), limit).split())


def build(plan_path: str, engine: str, *, rank: int | None = None, model_path: str | None = None,
          image: str | None = None) -> Deployment:
    if engine not in DEPLOY_ENGINES:
        raise InputError(f"unknown engine {printable(str(engine), 20)!r}; expected one of "
                         f"{', '.join(DEPLOY_ENGINES)}", field="--engine")
    if rank is not None and rank < 1:
        raise InputError(f"expected a rank >= 1, got {rank}", field="--rank")
    plan = read_plan(plan_path)
    layout, mismatch = choose(plan, rank, engine)
    preset = ENGINES[engine]
    for _key, name, vendor in layout.parts.values() or [(plan.arch_key, plan.arch_name, plan.vendor)]:
        if vendor not in preset.vendors:
            raise InputError(f"{preset.name} runs on {', '.join(preset.vendors)} parts; the plan is for "
                             f"{one_line(name or vendor, 60)}", file=plan.path, field="arch.vendor")
    path, origin, model = resolve_model(plan, model_path)
    t = Target(plan=plan, layout=layout, engine=engine, preset=preset, model_path=path, model_origin=origin,
               model=model)
    resolve_draft(t)
    if mismatch:
        t.notes.append(mismatch)
    opts = table(engine)
    if image is not None:
        image = user_text(image, "--image")
    else:
        image = opts["image"]
        if opts.get("image_pinned") is False:
            t.notes.append(f"k8s.yaml's image {image} is not pinned to {preset.name} {opts['version']} "
                           f"({opts['image_source']}): pass --image with that release's tag")
    mod = WRITERS[engine]
    local = Site(local=True)
    k8s = Site(local=False, name=kubernetes.object_name(plan.model_key, engine))
    files: dict[str, str] = {}
    cmds = mod.commands(t, local)
    _assign_gpus(t, cmds)
    files.update(_scripts(t, cmds))
    for name, data in mod.files(t, local).items():
        files[name] = _yaml_file(t, name, data)
    k8s_configs = {name: _yaml_dump(data) for name, data in mod.files(t, k8s).items()}
    files["k8s.yaml"] = (_header(t, "#", "Kubernetes objects that start the plan: one pod per instance")
                         + kubernetes.manifest(t, k8s, mod.commands(t, k8s), k8s_configs, image))
    t.notes.extend(mod.notes(t))
    files["README.txt"] = _readme(t, files, local, k8s, image)
    summary = (f"{preset.name} {opts['version']} launch files for plan rank {layout.rank} "
               f"({one_line(layout.describe, 80)}, {layout.gpus} GPUs)")
    return Deployment(files=dict(sorted(files.items(), key=lambda kv: ALL_FILES.index(kv[0]))), target=t,
                      summary=summary)


def write(dep: Deployment, out: str) -> list[str]:
    """Write the files into the folder ``out`` (created when its parent exists), all or nothing; refuse to
    replace the plan itself. Returns notes about files of an earlier deploy left there."""
    from ..io import write_files_atomic

    folder = Path(out)
    plan = dep.target.plan.path
    if folder.exists() and not folder.is_dir():
        if _same(folder, plan):
            raise InputError("is this command's plan input; refusing to overwrite it (give a folder)",
                             file=out, field="--out")
        raise InputError("exists and is not a folder; --out names the folder the launch files go in", file=out,
                         field="--out")
    if not folder.exists():
        parent = folder.resolve().parent
        if not parent.is_dir():
            raise InputError(f"the folder {printable(str(parent), 80)} does not exist (create it first)", file=out,
                             field="--out")
    targets = {folder / name: text for name, text in dep.files.items()}
    for p in targets:
        if p.exists() and _same(p, plan):
            raise InputError(f"{p.name} in this folder is the plan input; refusing to overwrite it (give another "
                             "folder)", file=out, field="--out")
    created = not folder.exists()
    if created:
        try:
            folder.mkdir()
        except OSError as e:
            raise InputError(f"cannot create the folder ({e.strerror or e})", file=out, field="--out") from None
    try:
        write_files_atomic(targets)
    except BaseException:
        if created:  # all or nothing: no empty folder left behind
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    for p in targets:
        if p.suffix == ".sh":
            try:
                os.chmod(p, os.stat(p).st_mode | 0o111 & ~_umask())
            except OSError:
                pass
    return [f"{folder / n} is from an earlier deploy and not part of this one" for n in ALL_FILES
            if n not in dep.files and (folder / n).exists()]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# --- the files -----------------------------------------------------------------------------------------

def _assign_gpus(t: Target, cmds: dict) -> None:
    """Each local instance its own GPUs, in role order (prefill first)."""
    var = GPU_ENV.get(t.vendor, "CUDA_VISIBLE_DEVICES")
    first = 0
    for role in t.roles():
        if t.layout.mixed:  # each role on hosts of its own part: its GPUs count from 0 there
            first = 0
        for a in cmds[role.name]:
            ids = ",".join(str(g) for g in range(first, first + role.gpus))
            first += role.gpus
            env = dict(a.env)
            a.env.clear()
            a.setenv(var, ids)
            for k, v in env.items():
                a.setenv(k, v)


def _header(t: Target, mark: str, what: str) -> str:
    lay = t.layout
    opts = table(t.engine)
    lines = [f"perfmodel deploy: {what}",
             f"{t.preset.name} {opts['version']} (options as perfmodel/deploy/options/{t.engine}.yaml records them)",
             f"plan {one_line(t.plan.path, 120)}, rank {lay.rank}: {lay.mode}, {one_line(lay.describe, 100)}, "
             f"{lay.gpus} GPUs; README.txt says where every value comes from"]
    return "".join(f"{mark} {line}\n" for line in lines)


def _scripts(t: Target, cmds: dict) -> dict[str, str]:
    out = {}
    roles = {r.name: r for r in t.roles()}
    for role, argvs in cmds.items():
        name = f"{role}.sh"
        r = roles.get(role)
        if r is not None:
            part = t.layout.parts.get(role)
            where = f"on a host of {one_line(part[1], 60)}" if part and t.layout.mixed else "on this host"
            what = (f"{r.count} {role} instance{'s' if r.count > 1 else ''} of {r.gpus} GPU{'s' if r.gpus > 1 else ''}"
                    f" {where}")
        else:
            what = "the router in front of the prefill and decode instances"
        text = "#!/usr/bin/env bash\n" + _header(t, "#", what) + "set -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
        for i, a in enumerate(argvs):
            text += "\n" + a.shell() + " &\n"
        text += "wait\n"
        out[name] = text
    return out


def _yaml_dump(data: dict) -> str:
    return kubernetes.dump(data)


def _yaml_file(t: Target, name: str, data: dict) -> str:
    what = ("the disaggregated server's routing table (trtllm-serve disaggregated -c)" if name == "disagg-config.yaml"
            else "extra LLM-API options (trtllm-serve --extra_llm_api_options)")
    return _header(t, "#", what) + _yaml_dump(data)


def _num(v, unit: str = "", digits: int = 3) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}{unit}"
    return f"{v:.{digits}g}{unit}"


def _settings(t: Target) -> list[str]:
    lay = t.layout
    rec = lay.scenario
    name = t.preset.name
    default = f"{name}'s preset default (perfmodel/engines.py, docs/engines.md); the plan records none"

    def origin(key):
        return "the plan" if t.recorded(key) is not None else default

    roles = t.roles()
    out = []
    for r in roles:
        batch = f", up to {r.batch} running sequences (the plan's batch)" if r.batch else ", the engine's sequence cap"
        out.append(f"{r.name}: {r.count} instance(s) of tp {r.tp} x pp {lay.pp} x attention-dp {lay.attention_dp} = "
                   f"{r.gpus} GPUs{batch}; expert parallel {t.ep_for(r)}")
    out.append(f"tokens a scheduler step: {t.max_num_tokens()} ({origin('prefill_chunk')})")
    fr = ", ".join(sorted({f'{t.mem_fraction(r):g}' for r in roles}))
    out.append(f"memory share: {fr} ({origin('mem_fraction')}: {t.preset.sources.get('mem_fraction', '')})")
    out.append(f"weights: {rec['dtype']} (the plan)" if "dtype" in rec else
               "weights: not recorded in the plan; the checkpoint runs in its own format (no quantization option)")
    kv = t.kv_dtype()
    out.append(f"KV cache: {kv} ({'the plan' if 'kv_dtype' in rec else 'the engine rule on the plan weights'})"
               if kv else "KV cache: not recorded in the plan; the engine's default (the model's dtype)")
    if "ep" not in rec:
        out.append("expert parallel: not recorded in the plan; 1 (MoE experts split by tensor parallelism)")
    if "attention_dp" not in rec:
        out.append("attention data parallel: not recorded in the plan; 1")
    if lay.mtp:
        src = f"draft model {t.draft_path}" if t.draft_path else "the model's MTP layers"
        out.append(f"speculative decoding: {lay.mtp} draft tokens a step from {src} (the plan)")
    elif "mtp" not in rec:
        out.append("speculative decoding: not recorded in the plan; none")
    return out


def _readme(t: Target, files: dict, local: Site, k8s: Site, image: str) -> str:
    lay = t.layout
    plan = t.plan
    opts = table(t.engine)
    m = lay.metrics
    out = [f"perfmodel deploy: {t.preset.name} launch files", ""]
    out.append(f"Plan: {one_line(plan.path, 300)}, rank {lay.rank} of {len(plan.candidates)}: {lay.mode}, "
               f"{one_line(lay.describe, 120)} ({lay.gpus} GPUs)")
    on = " and ".join(dict.fromkeys(p[1] for p in lay.parts.values())) or plan.arch_name or plan.arch_key or "?"
    out.append(f"Model: {one_line(plan.model_name or plan.model_key, 80)} ({one_line(plan.model_key, 80)}) on "
               f"{one_line(on, 120)}")
    if lay.mixed:
        out.append("Mixed parts: " + "; ".join(f"{role} on {one_line(p[1], 60)} ({one_line(p[0], 40)})"
                                               for role, p in lay.parts.items())
                   + ". Run prefill.sh on a host of the prefill part and decode.sh on a host of the decode part "
                     "(each numbers its GPUs from 0); the router's addresses of the other host's instances say "
                     "localhost: put that host's address there. In k8s.yaml, schedule each role's pods on its "
                     "part's nodes (a nodeSelector for your cluster's node labels). The KV cache moves over the "
                     "network between them (the plan priced it).")
    slo = ", ".join(f"{k.split('_')[0].upper()} <= {_num(v)} ms" for k, v in plan.slo.items())
    att = f" for {100 * plan.attainment:.0f}% of requests" if plan.attainment else ""
    out.append(f"Predicted by perfmodel plan for engine {one_line(lay.plan_engine or '?', 20)}: TTFT p90 "
               f"{_num(m.get('ttft_p90_ms'), ' ms')}, TPOT p90 {_num(m.get('tpot_p90_ms'), ' ms')}, throughput "
               f"{_num(m.get('throughput_tok_s'), ' output tok/s')}, goodput {_num(m.get('goodput_req_s'), ' req/s')} "
               f"({_num(m.get('goodput_tok_s_per_gpu'), ' output tok/s per GPU')}) at "
               f"{_num(m.get('rate_req_s'), ' req/s')} offered" + (f"; SLOs {slo}{att}" if slo else ""))
    w = plan.workload
    if w:
        out.append(f"Workload: isl {one_line(w.get('isl_dist', w.get('mean_isl', '?')), 40)}, osl "
                   f"{one_line(w.get('osl_dist', w.get('mean_osl', '?')), 40)}")
    out.append(f"Options follow {t.preset.name} {opts['version']}: perfmodel/deploy/options/{t.engine}.yaml, read "
               f"from {' '.join(opts['read_from'].split())}")
    out.append(f"Engine preset the plan's figures assume: {t.preset.version}")
    out.append(f"Model path: {t.model_path}, from {t.model_origin}")
    if t.model_path == PLACEHOLDER_MODEL:
        out.append(f"  PLACEHOLDER: {PLACEHOLDER_MODEL} stands where the model's Hugging Face id or local path goes")
    out += ["", "Files:"]
    desc = {
        "serve.sh": "starts every instance on this host (each its own GPUs and port; a load balancer spreads "
                    "requests over several)",
        "prefill.sh": "starts the prefill instances on this host (the first GPUs)",
        "decode.sh": "starts the decode instances on this host (the GPUs after the prefill ones)",
        "router.sh": f"starts the router that clients call, on port {local.port('router')}",
        "extra-llm-api-options.yaml": "TensorRT-LLM's extra LLM-API options (--extra_llm_api_options)",
        "extra-llm-api-options-prefill.yaml": "the context (prefill) servers' extra LLM-API options",
        "extra-llm-api-options-decode.yaml": "the generation (decode) servers' extra LLM-API options",
        "disagg-config.yaml": "trtllm-serve disaggregated's table of context and generation servers",
        "k8s.yaml": (f"Kubernetes objects running the same commands, one pod per instance, image {image} "
                     f"(object names {k8s.name}-*; kubectl apply -f k8s.yaml)"),
        "README.txt": "this file",
    }
    if lay.mixed:
        for role, script in (("prefill", "prefill.sh"), ("decode", "decode.sh")):
            desc[script] = f"starts the {role} instances on a host of {one_line(lay.parts[role][1], 60)}"
    for name in (*files, "README.txt"):
        out.append(f"  {name}: {desc.get(name, '')}")
    for role in t.roles():
        addrs = ", ".join(local.address(role.name, i) for i in range(role.count))
        out.append(f"  {role.name} instances on this host: {addrs}")
    out += ["", "Settings and where each comes from:"]
    out += [f"  {s}" for s in _settings(t)]
    out.append("  every instance listens on 0.0.0.0")
    if t.notes:
        out += ["", "Notes:"]
        out += [f"  - {n}" for n in t.notes]
    out += ["", "Run the scripts from any folder (each changes to its own); check the engine is the version above: "
            "an option another version renamed stops it at start-up."]
    return "\n".join(out) + "\n"
