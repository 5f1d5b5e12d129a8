"""``perfmodel fit DIR``: fit a profile to a folder of measurements (``measurements.jsonl``, written by
``perfmodel calibrate`` or ``perfmodel import``): the kernels' latency parameters, launch costs, collectives,
training kernels and power, each validated, and the held-out error of the measured tables beside the fit's
(:mod:`perfmodel.fit.tables`); writes ``profile.json``, ``validation.json`` and ``validation.md``."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..cost.tables import folder_classes
from ..errors import InputError
from ..io import write_text_atomic
from ..measure.store import ENVIRONMENT, MEASUREMENTS, read_rows
from ..profile import (DEFAULTS, IMPORT_TIMING, MEMORY_OP_KINDS, SUITE_TIMING, TABLE_FIELDS, Profile, load_profile,
                       save_profile)
from ..spec import HardwareSpec
from .clock import CLOCK_COURSE_DIR, fit_clock
from .clock import report_text as clock_text
from .collectives import fit_collectives
from ..evidence import DEEPEP_FAMILIES
from .deepep import fit_deepep
from .deepep import OLD_SECTIONS as OLD_DEEPEP_SECTIONS
from .deepep import SECTION as DEEPEP_SECTION
from .deepep import section as deepep_section
from .deltanet import DELTANET_DIR, fit_deltanet
from .deltanet import report_text as deltanet_text
from .latency import dispatch_defaults, fit_launch, fit_profile, load_cases, residual_quantiles, validate_cases
from .layers import validate_layers
from .host import fit_host
from .sampling import fit_sampling
from .skew import fit_skew
from .sampling import report_text as sampling_text
from .host import report_text as host_text
from .power import fit_power
from .power import report_text as power_text
from .training import fit_grouped_profile, fit_training, training_markdown
from .tables import markdown as tables_markdown
from .tables import validate_classes as validate_tables


GROUPED_DIR = "grouped-gemm"  # a calibration folder's MoE expert-product measurement (perfmodel.measure.grouped_gemm)


# --- the command ------------------------------------------------------------------------------------

def read_environment(path: Path) -> dict:
    """The device description of environment.json; empty when the file is missing or unreadable (a run
    killed while writing it): the rows carry the same description."""
    import sys

    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        print(f"perfmodel: warning: {path} is not readable JSON; using the rows' environment", file=sys.stderr)
        return {}
    if not isinstance(doc, dict):
        return {}
    env = doc.get("env", doc)  # the suite nests the device description under "env"
    return env if isinstance(env, dict) else {}


def _families_measured(cases, launches, comm_info, training, power) -> list[str]:
    """The cost-model families this folder's rows measured (perfmodel.evidence picks each family's source by
    them): a family fitted from defaults alone is not listed."""
    out = []
    if any(c.kind == "gemm" for c in cases):
        out.append("gemm")
    if any(c.kind == "attention" for c in cases):
        out.append("attention")
    # kernels that come with another family (the cache write with attention, input quantization with the GEMMs)
    # do not make a folder a source of the memory family
    if any(c.kind in MEMORY_OP_KINDS and c.kind not in ("kv_write", "quantize") for c in cases):
        out.append("memory")
    if any(c.kind == "moe" for c in cases):
        out.append("moe")
    if launches:
        out.append("launch")
    if comm_info.get("fits"):
        out.append("comm")
    if training.get("rows") or training.get("grouped_gemm"):
        out.append("training")
    if power is not None:
        out.append("power")
    return out


def _import_provenance(path: Path) -> dict:
    """Where imported measurements came from (``environment.json``'s ``import`` object), or nothing."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return {}
    imp = doc.get("import") if isinstance(doc, dict) else None
    return imp if isinstance(imp, dict) else {}


def match_spec(env: dict, arch: str | None) -> HardwareSpec:
    from ..spec import library_aliases, list_specs, load_spec

    if arch:
        return load_spec(arch)
    if isinstance(env.get("spec_key"), str) and env["spec_key"]:  # imported tables name their spec
        return load_spec(env["spec_key"])
    name = str(env.get("device_name", "")).lower()
    words = set(name.replace("nvidia", "").split())
    best, best_size = None, 0
    aliases = library_aliases()
    for s in list_specs():
        # the spec's name, or an alias spelling the name the driver reports ("h100-80gb-hbm3": nvidia-smi's
        # "NVIDIA H100 80GB HBM3" for the SXM part)
        for sw in [set(s.name.lower().replace("nvidia", "").split())] + [set(a.lower().split("-")) for a in aliases.get(s.key, ())]:
            if words and words <= sw and (best is None or len(sw) < best_size):
                best, best_size = s, len(sw)
    if best is None:
        raise InputError(f"no hardware spec matches device {env.get('device_name')!r}; pass --arch", field="--arch")
    return best


ACCUMULATION_DIR = "fp8-accumulation"  # a folder's fp8 fast-against-split products (perfmodel.measure.fp8_accumulation)


def _folder_rows(folder: Path) -> tuple[list[dict], HardwareSpec]:
    """A measurement folder's rows and the part they were measured on (its environment, else the rows')."""
    rows = read_rows(folder / MEASUREMENTS)
    env = read_environment(folder / ENVIRONMENT) or next(
        (r["env"] for r in rows if isinstance(r, dict) and isinstance(r.get("env"), dict)), {})
    return rows, match_spec(env, None)


def side_folders(d: Path, prefix: str, hw: HardwareSpec | None = None) -> list[tuple[Path, list[dict], HardwareSpec]]:
    """(folder, rows, part) of the side measurements named ``prefix*`` beside the suite in ``d``, and, given the
    suite's part ``hw``, where ``d`` is a suite of the project's calibration tree (``calibration/``), those beside
    another suite of that tree that were measured on ``hw``: a run is evidence for the part it ran on, wherever it
    was filed (the H100's expert products were measured before the H100 had a suite of its own and sit beside the
    H200's). An imported engine folder (``tables.npz``) takes only its own. ``d``'s own come first, each group in
    name order."""
    from ..paths import calibration_dir

    def measured(parent: Path) -> list[Path]:
        return sorted(p for p in parent.glob(prefix + "*") if (p / MEASUREMENTS).is_file())

    out = [(f, *_folder_rows(f)) for f in measured(d)]
    tree = calibration_dir().resolve()
    if hw is not None and d.resolve().parent == tree and not (d / "tables.npz").exists():
        for sibling in sorted(p for p in tree.iterdir() if p.is_dir() and p.resolve() != d.resolve()):
            for f in measured(sibling):
                rows, part = _folder_rows(f)
                if part.key == hw.key:
                    out.append((f, rows, part))
    return out


def fit_accumulation_folders(d: Path, prof, hw: HardwareSpec | None = None):
    """``fp8_split_over_fast`` into ``prof.training`` from the first ``fp8-accumulation*/`` folder (:func:`side_folders`)
    that measured a compute-bound pair (:func:`perfmodel.fit.training.fit_fp8_accumulation`, on the folder's own
    part: a ratio of two kernels on one part, carried unchanged). Returns (the profile, a summary or {})."""
    from .training import fit_fp8_accumulation

    for folder, rows, part in side_folders(d, ACCUMULATION_DIR, hw):
        entries, summary = fit_fp8_accumulation(rows, part)
        if entries:
            return prof.with_(training={**(prof.training or {}), **entries}), {**summary, "folder": folder.name}
    return prof, {}


def grouped_sources(d: Path, hw: HardwareSpec, prof) -> tuple[list[dict], tuple]:
    """The expert-product rows of a folder: ``grouped-gemm/`` and any ``grouped-gemm-<part>/`` beside it (a run on
    another part, e.g. where the lent machine was not the folder's part), and those measured on ``hw`` beside another
    suite (:func:`side_folders`). Returns (the rows measured on ``hw``, the other parts' rows as
    :class:`perfmodel.fit.training.GroupedSource`, each with ``prof`` carried to its part by the transfer rules)."""
    from ..transfer import carry
    from .training import GroupedSource

    own: list[dict] = []
    elsewhere = []
    for _, rows, part in side_folders(d, GROUPED_DIR, hw):
        if part.key == hw.key:
            own += rows
        else:
            elsewhere.append(GroupedSource(rows, part, carry(prof, hw, part)))
    return own, tuple(elsewhere)


def deltanet_sources(d: Path, hw: HardwareSpec) -> list[tuple[str, list[dict]]]:
    """(folder name, rows) of each ``deltanet*/`` measurement beside the suite that was measured on ``hw`` (a run on
    another part is evidence for the docs, not for this part's fit)."""
    return [(folder.name, rows) for folder, rows, part in side_folders(d, DELTANET_DIR, hw) if part.key == hw.key]


def measurements_path(d: Path) -> Path:
    """A folder's measured rows: ``measurements.jsonl``, else the compressed file imported tables ship (the
    plain name when neither exists)."""
    path = d / MEASUREMENTS
    if not path.is_file() and (d / (MEASUREMENTS + ".gz")).is_file():
        path = d / (MEASUREMENTS + ".gz")  # imported tables ship compressed
    return path


def release_base(d: Path):
    """For another release's tables imported beside an engine folder (``<folder>/releases/<version>/``,
    :mod:`perfmodel.releases`): that folder's fitted profile, its tables off, which the release's own families are
    fitted over (the rest kept: a projection naming the release prices those families with this profile's values,
    the others with the engine folder's, and its tables' residuals are taken against the same model). None
    elsewhere."""
    from ..cost.tables import without_tables
    from ..paths import RELEASES_DIR
    from ..profile import load_profile

    parent = d.resolve().parent
    if parent.name != RELEASES_DIR or not (parent.parent / "profile.json").is_file():
        return None
    return without_tables(load_profile(parent.parent))


def keep_shared_moe_values(prof, base):
    """A release's refit with the MoE values every format shares (the grouped kernel's fixed cost, the permutes)
    put back to the engine folder's: the formats the release did not time are then priced exactly as the engine
    folder prices them, and those it timed are anchored on its own tables (their residuals taken against this
    profile)."""
    return prof.with_(gemm_grouped_overhead_s=base.gemm_grouped_overhead_s,
                      mem_eta={**prof.mem_eta, **{k: v for k, v in base.mem_eta.items() if k == "moe_permute"}},
                      mem_alpha_s={**prof.mem_alpha_s,
                                   **{k: v for k, v in base.mem_alpha_s.items() if k == "moe_permute"}})


def fit_directory(directory, *, spec: str | None = None, holdout: float = 0.25, seed: int = 0) -> str:
    d = Path(directory)
    path = measurements_path(d)
    if not path.is_file():
        raise InputError(f"no {MEASUREMENTS} here; run `perfmodel calibrate --out {d}` (or `perfmodel import`) "
                         "first", file=str(d))
    if not (isinstance(holdout, (int, float)) and math.isfinite(holdout) and 0.0 <= holdout < 1.0):
        raise InputError(f"expected a share in [0, 1), got {holdout!r}", field="--holdout")
    rows = read_rows(path)
    imported = _import_provenance(d / ENVIRONMENT)
    env = read_environment(d / ENVIRONMENT)
    if not env:
        env = next((r["env"] for r in rows if isinstance(r, dict) and isinstance(r.get("env"), dict)), {})
    hw = match_spec(env, spec)
    started = time.time()
    cases, layers, launches, comms = load_cases(rows, holdout, seed)
    if not cases and not comms:
        raise InputError("no usable measurements to fit", file=str(path))
    attn_default, dispatch_seen = dispatch_defaults(rows, DEFAULTS)
    # the protocol the rows were timed by sets the clock each ran at (perfmodel.power_clock)
    timing = dict(IMPORT_TIMING if imported else SUITE_TIMING)
    release = release_base(d)
    base = (release or DEFAULTS).with_(attn_default=attn_default, gemm_timing=timing, attn_timing=timing)
    # the part's own clock courses first: every compute row is priced at the clock its timing ran at, so the GEMM and
    # attention constants are fitted under the clock model projections will price them with
    clock = fit_clock(d / CLOCK_COURSE_DIR, hw)
    if clock is not None:
        base = base.with_(power={"clock": clock[0].as_dict()})
    prof = fit_profile(cases, hw, base)
    if release is not None:
        prof = keep_shared_moe_values(prof, release)
    prof = fit_launch(prof, launches)
    prof, comm_info = fit_collectives(prof, rows, hw)
    summary, val_rows = validate_cases(cases, hw, prof)
    layer_summary, layer_rows = validate_layers(layers, hw, prof)
    prof, training = fit_training(prof, rows, hw)
    power = None
    if any(r.get("kind") == "power" for r in rows if isinstance(r, dict)):
        prof, power = fit_power(prof, rows, hw)
    prof, host = fit_host(prof, d)  # the machine's host costs, where the folder measured them (hf/)
    prof, sampling = fit_sampling(prof, d, hw)  # the samplers over the logits, where it measured them (sampling/)
    classes = folder_classes(d) or []  # an imported folder's whole tables (tables.npz)
    skew = fit_skew(classes)  # what a skewed router costs its MoE modules, where the tables time it
    if skew and release is None:  # (a release's few classes leave the engine folder's figures for the rest)
        prof = prof.with_(gemm_grouped_skew=skew)
    if clock is not None:  # fit_power replaced the power dict
        prof = prof.with_(power={**(prof.power or {}), "clock": clock[0].as_dict()})
    # the MoE expert products measured beside the suite (python -m perfmodel.measure.grouped_gemm --out
    # DIR/grouped-gemm): the grouped kernel's rate relative to the dense GEMM model, training factors fitted last,
    # against the dense model as projections price it (the power-limited clock sets the rate a row was timed at)
    # what split accumulation costs a per-tensor fp8 product (python -m perfmodel.measure.fp8_accumulation --out
    # DIR/fp8-accumulation[-<part>]), before the grouped fit, which prices its fp8 rows at their accumulation
    prof, accumulation = fit_accumulation_folders(d, prof, hw)
    if accumulation:
        training = {**training, "fp8_accumulation": accumulation}
    # Gated DeltaNet's chunked prefill: an engine's imported calls, or this project's (deltanet*/ on the part)
    prof, deltanet = fit_deltanet(prof, rows, hw, deltanet_sources(d, hw))
    # DeepEP's low-latency dispatch and combine, where an engine's tables time them (imported)
    prof, deepep = fit_deepep(prof, rows, hw)
    own, elsewhere = grouped_sources(d, hw, prof)
    if own or elsewhere:
        prof, grouped = fit_grouped_profile(prof, own, hw, elsewhere=elsewhere)
        if grouped:
            training = {**training, "grouped_gemm": grouped}
    formats = sorted({c.params["dtype"] for c in cases if c.kind == "gemm"})
    validation = {"ops": summary, "layers": layer_summary, "holdout_share": holdout, "seed": seed,
                  "training": {k: v for k, v in training.items() if k in ("rows", "train_step_summary")}}
    if training.get("grouped_gemm"):
        validation["training"]["grouped_gemm"] = {
            fmt: {k: g[k] for k in ("n", "dense_model", "fitted", "held_out_by_model")} for fmt, g in training["grouped_gemm"].items()}
    if power is not None:
        validation["power"] = prof.validation["power"]
    prof = prof.with_(
        name=d.name, fitted=True, device=str(env.get("device_name", "")), spec_key=hw.key,
        engine=str(env.get("engine") or "torch"),
        description=f"fitted to {len(cases)} measured shapes ({sum(c.held_out for c in cases)} held out) "
                    f"on {env.get('device_name', 'unknown device')}",
        residual_quantiles=residual_quantiles(val_rows, DEFAULTS),
        validation=validation,
        provenance={"environment": env, "measurements": str(path.name), "rows": len(rows),
                    "measured_formats": formats, "collectives": comm_info, "fit_seconds": round(time.time() - started, 2),
                    "attention_dispatch": dispatch_seen,
                    **({"sampling": sampling} if sampling else {}),
                    "measured_families": _families_measured(cases, launches, comm_info, training, power)
                    + (["deltanet"] if deltanet else []) + deepep_families(deepep),
                    **({"deltanet": {k: v for k, v in deltanet.items() if k != "scan"}} if deltanet else {}),
                    **({"deepep": deepep} if deepep else {}),
                    "module_kernels": sorted({"kv_write" for c in cases if c.params.get("includes") == "kv_write"}
                                             | {"quantize" for c in cases if c.kind == "quantize"}),
                    "attention_backends": sorted({c.backend for c in cases if c.kind == "attention"}),
                    "command": f"perfmodel fit {d}" + (f" --arch {spec}" if spec else ""),
                    **({"import": imported} if imported else {})},
    )
    save_profile(prof, d / "profile.json")
    # the measured tables' own held-out error beside the fit's, per class (perfmodel.fit.tables)
    tables = validate_tables(classes, prof, hw, holdout=holdout, seed=seed)
    per_row = json.dumps({"summary": validation, "ops": val_rows, "layers": layer_rows, "training": training,
                          "power": power, **({"tables": tables} if tables["classes"] else {})},
                         indent=1, allow_nan=False) + "\n"
    if path.suffix == ".gz":  # imported tables: thousands of rows, kept compressed like their measurements
        import gzip

        from ..io import write_bytes_atomic

        write_bytes_atomic(d / "validation.json.gz", gzip.compress(per_row.encode("utf-8"), mtime=0))
    else:
        write_text_atomic(d / "validation.json", per_row)
    text = validation_markdown(prof, hw) + "\n" + training_markdown(training)
    if power is not None:
        text += "\n## Power\n\n```\n" + power_text(power) + "\n```\n"
    if host is not None:
        text += "\n## Host costs (transformers' generate())\n\n```\n" + host_text(host) + "\n```\n"
    if sampling is not None:
        text += "\n## Sampling (python -m perfmodel.measure.sampling)\n\n" + sampling_text(sampling)
    if deltanet is not None:
        text += "\n## Gated DeltaNet (chunked prefill)\n\n" + deltanet_text(deltanet)
    if clock is not None:
        text += "\n## Power-limited clock\n\n```\n" + clock_text(clock[1]) + "\n```\n"
    if tables["classes"]:
        text += "\n" + tables_markdown(tables)
    if deepep is not None:
        text += deepep_section(deepep)
    write_text_atomic(d / "validation.md", text)
    return text


def validation_markdown(prof: Profile, hw: HardwareSpec) -> str:
    v = prof.validation
    lines = [f"# Calibration `{prof.name}` on {prof.device or hw.name}", "",
             f"{prof.description}. Spec: `{hw.key}`.", "",
             "| split | class | shapes | median abs error | P90 abs error |", "|---|---|---|---|---|"]
    for split in ("held_out", "train"):
        for cls, e in v.get("ops", {}).get(split, {}).items():
            lines.append(f"| {split} | {cls} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} |")
    for phase, e in v.get("layers", {}).items():
        lines.append(f"| whole layers | {phase} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} |")
    lines.append("")
    lines.append("Fitted parameters (`*_eta`: ratios to the datasheet's dense rate or to the bandwidth; a compute")
    lines.append("ratio may pass 1 because datasheet rates are quoted at a sustained clock below the maximum boost):")
    lines.append("")
    skip = {"validation", "provenance", "residual_quantiles", "description"}
    for k, val in asdict(prof).items():
        if k not in skip:
            lines.append(f"- `{k}`: {json.dumps(val)}")
    return "\n".join(lines) + "\n"


REFIT_FAMILIES = ("deepep",)  # families `perfmodel fit --only` refits into an existing profile


def deepep_families(report: dict | None) -> list[str]:
    """The evidence families a DeepEP fit's report measured: one node's calls (deepep), and the calls across nodes
    where it holds them (deepep_across, perfmodel.evidence)."""
    if not report:
        return []
    return ["deepep"] + (["deepep_across"] if report.get("across") else [])


def refit_family(d: str | Path, family: str) -> str:
    """Fit one family from folder ``d``'s rows into its existing ``profile.json`` and ``validation.md``, leaving
    every other fitted value as it is (``perfmodel fit`` fits them all, this family with them: a full refit
    reproduces the others only to the optimizer's precision); returns the family's report, or says there was
    nothing to fit. ``deepep``: DeepEP's kernels (:mod:`perfmodel.fit.deepep`)."""
    d = Path(d)
    if family not in REFIT_FAMILIES:
        raise InputError(f"expected one of {', '.join(REFIT_FAMILIES)}, got {family!r}", field="--only")
    path = measurements_path(d)
    if not path.is_file() or not (d / "profile.json").is_file():
        raise InputError(f"needs {MEASUREMENTS} and a fitted profile.json (run `perfmodel fit {d}` first)",
                         file=str(d))
    prof = load_profile(d / "profile.json")
    hw = match_spec(read_environment(d / ENVIRONMENT), None)
    prof, report = fit_deepep(prof, read_rows(path), hw)
    if report is None:
        return f"{d}: no DeepEP rows to fit; nothing written\n"
    prov = dict(prof.provenance)
    prov["measured_families"] = ([f for f in prov.get("measured_families", []) if f not in DEEPEP_FAMILIES]
                                 + deepep_families(report))
    prov["deepep"] = report
    imported = _import_provenance(d / ENVIRONMENT)
    if imported:  # the import that brought the rows, as a full fit records it
        prov["import"] = imported
    # the table fields name the folder when loaded (profile._with_tables); the file never holds a path
    save_profile(prof.with_(provenance=prov, **{f: "" for f in TABLE_FIELDS.values()}), d / "profile.json")
    md = d / "validation.md"
    text = md.read_text(encoding="utf-8") if md.is_file() else ""
    for title in (DEEPEP_SECTION,) + OLD_DEEPEP_SECTIONS:
        text = text.split(f"\n{title}\n")[0]
    text = text.rstrip("\n") + "\n"
    write_text_atomic(md, text + deepep_section(report))
    return deepep_section(report).strip() + "\n"
