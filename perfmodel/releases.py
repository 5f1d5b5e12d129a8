"""An engine release's own measured kernel and collective tables, where the release a projection names was measured.

An engine changes its kernels between releases: aiconfigurator-core times vLLM 0.19's block-fp8 MoE layer on the B200
through its Triton ``fused_moe`` kernel and 0.24's through FlashInfer's TensorRT-LLM kernel, 0.6x the time at 256
tokens (docs/engines.md). An engine folder (``calibration/<part>-<engine>/``) holds the
tables of one release, the package's current one (``provenance.import.engine_version``); tables of other releases
sit beside it in ``releases/<version>/``, each an import of its own (``perfmodel import aiconfigurator --version V
--out calibration/<part>-<engine>/releases/V --fit``).

A release folder holds the MoE tables of its release, its engine's own all-reduce (the comm family: SGLang's custom
all-reduce on 8 B200s got 1.5x faster at 32 KiB and 3x at 256 KiB from 0.5.10 to 0.5.14), or both. A projection that names its engine's release
(``Scenario.engine_release``, ``--engine-release``; the validation tables' ``engine_version`` column, by default in
the families whose kernels match: :func:`kernel_matched_families`) prices each table family a release folder holds
with the nearest measured release: the newest not newer than the one asked, else the oldest measured (a release
older than every table is nearest the oldest). A row whose release is no numbered release (``nightly-dev``) or none:
the folder's own tables. Only the values of the families the release timed change (for MoE, of the formats it timed:
:func:`perfmodel.fit.directory.release_base`).

    releases.nearest("0.17.0", ["0.19.0", "0.22.0", "0.24.0"])  -> "0.19.0"
"""
from __future__ import annotations

import os
from pathlib import Path

from .engines import release_key
from .paths import RELEASES_DIR


def nearest(asked: str, measured: list[str]) -> str | None:
    """The measured release that stands for ``asked`` (module doc), or None where ``asked`` is not a release."""
    key = release_key(asked)
    known = {release_key(v): v for v in measured if release_key(v) is not None}
    if key is None or not known:
        return None
    older = [k for k in known if k <= key]
    return known[max(older)] if older else known[min(known)]


def own_release(folder: Path) -> str | None:
    """The engine release whose tables ``folder`` holds itself (its import's ``engine_version``)."""
    from .cost.table_store import FILE, read_header

    path = Path(folder) / FILE
    if not path.is_file():
        return None
    try:
        prov = read_header(path).get("provenance") or {}
    except ValueError:
        return None
    version = prov.get("engine_version")
    return str(version) if version else None


# the aiconfigurator table each family's rows come from (the comm family: the engine's own all-reduce; NCCL's rows
# beside it are NCCL's release, not the engine's)
TABLE_OF = {"moe": "moe_perf", "gemm": "gemm_perf", "attention": "generation_attention_perf",
            "comm": "custom_allreduce_perf"}


def _table_versions(folder: Path) -> dict[str, str]:
    """The release the import took each table from (``provenance.import.tables``), per table; {} if not recorded."""
    import json

    try:
        tables = json.loads((folder / "profile.json").read_text())["provenance"]["import"]["tables"]
        return {name: str(t["engine_version"]) for name, t in tables.items() if isinstance(t, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


_LISTED: dict[str, tuple] = {}  # folder -> (its releases/ folder's modification time, {version: (path, families)})


def release_folders(folder: Path) -> dict[str, tuple[Path, frozenset[str]]]:
    """The other releases measured beside ``folder``: version -> (its folder, the table families it holds)."""
    from .cost.table_store import FILE, read_header

    root = Path(folder) / RELEASES_DIR
    try:
        stamp = os.stat(root).st_mtime_ns
    except OSError:
        return {}
    hit = _LISTED.get(str(root))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    out = {}
    for sub in sorted(root.iterdir()):
        if not (sub / "profile.json").is_file():
            continue
        families = set()
        if (sub / FILE).is_file():
            try:
                header = read_header(sub / FILE)
            except ValueError:
                continue
            families = {c["key"][0] if isinstance(c["key"], tuple) else c["key"] for c in header["classes"]}
        versions = _table_versions(sub)
        if "custom_allreduce_perf" in versions:  # the engine's all-reduce: rows, not classes (cost.comm_tables)
            families.add("comm")
        # a table the import took from another release (the newest not newer, where this one has none) is not this
        # release's: its family is left out
        families = frozenset(f for f in families if versions.get(TABLE_OF.get(f, ""), sub.name) == sub.name)
        if families:
            out[sub.name] = (sub, families)
    _LISTED[str(root)] = (stamp, out)
    return out


def release_table(folder: Path, family: str, asked: str) -> tuple[str, Path] | None:
    """(release, folder) whose ``family`` table stands for release ``asked`` of the engine ``folder`` measured,
    where that is another release than the folder's own; None where the folder's own stands (or ``asked`` is no
    release, or no other release of that family was measured)."""
    others = {v: path for v, (path, families) in release_folders(folder).items() if family in families}
    own = own_release(folder)
    if not others or own is None:
        return None
    pick = nearest(asked, [own, *others])
    if pick is None or pick == own:
        return None
    return pick, others[pick]


def same_kernels(folder: Path, release: Path, family: str | None = None) -> bool:
    """Whether the release folder ``release`` times, in ``family`` (None: every family it holds), the kernels the
    engine folder ``folder``'s own tables run: its rows are then the same kernels timed under that release's build.
    A table family is compared class by class (the engine's kernel of each class, :func:`perfmodel.cost.tables.
    engine_kernel`; both folders as :func:`perfmodel.cost.tables.load_folder` reads them, cached, the release's with
    the engine folder's classes it did not time, which match themselves): SGLang 0.5.10's and TensorRT-LLM
    1.3.0rc10's Hopper MoE tables are (Triton's fused MoE, TensorRT-LLM's CUTLASS module); vLLM 0.19's B200 MoE tables
    time its Triton fused_moe where 0.24's time FlashInfer's kernels, which 0.19 itself runs for some routers
    (docs/engines.md): not. The comm family compares the engine's own all-reduce kernels
    (:func:`perfmodel.cost.comm_tables.engine_kernels`): SGLang 0.5.9's and 0.5.14's are both its custom all-reduce
    replayed from CUDA graphs; the table aiconfigurator-core ships as SGLang 0.5.6.post2's on Hopper times
    TensorRT-LLM's kernel."""
    from .cost.comm_tables import engine_kernels
    from .cost.tables import load_folder
    from .profile import TABLE_FIELDS

    held = next((fams for path, fams in release_folders(folder).values() if Path(path) == Path(release)), frozenset())
    # (a folder not imported as a release of ``folder``: its tables' classes, every family they hold)
    families = [family] if family else sorted(held) or [f for f in TABLE_FIELDS if f != "comm"]
    if "comm" in families and engine_kernels(folder) != engine_kernels(release):
        return False
    tabled = [f for f in families if f != "comm"]
    if not tabled:
        return True
    own, other = load_folder(folder), load_folder(release)
    if own is None or other is None:
        return False
    return all(own.kernel_for(key[0], key) == other.kernel_for(key[0], key) for key in other.rows
               if key in own.rows and key[0] in tabled)


def kernel_matched_families(prof, release: str | None) -> frozenset[str]:
    """The table families of ``prof`` that another release's tables stand for at ``release`` (:func:`release_table`)
    and that time there the kernels the engine folder's own do (:func:`same_kernels`): what ``perfmodel validate``
    prices each row with unless told otherwise (docs/engines.md); the others keep the engine folder's tables (which
    kernel that release ran by default is a question of its source). Empty where none does."""
    if not release:
        return frozenset()
    return frozenset(family for family, _, path, hit in standing_tables(prof, release)
                     if same_kernels(path, hit[1], family))


def standing_tables(prof, release: str):
    """(family, profile field, engine folder, (release, its folder)) for each table family of ``prof`` that another
    release's tables stand for at ``release`` (:func:`release_table`), where the engine folder is the projected
    engine's: a release names one engine's build, and a family whose evidence is another engine's tables (a part an
    engine's own tables did not measure for that family: SGLang's collectives on the GB200 from TensorRT-LLM's
    folder) takes none of that engine's releases."""
    from .cost.tables import load_folder, projected_engine
    from .profile import TABLE_FIELDS

    for family, field in TABLE_FIELDS.items():
        path = getattr(prof, field, "")
        hit = release_table(Path(path), family, release) if path else None
        folder = load_folder(path) if hit is not None else None  # (cached: validate asks for every row)
        if folder is not None and folder.engine == projected_engine(prof, family):
            yield family, field, Path(path), hit


def collective_families(families: frozenset[str] | None, model, sc) -> frozenset[str] | None:
    """``families`` (None: every family) less the comm family where the resolved scenario ``sc`` runs its TP
    all-reduces fused with the norm after them (:func:`perfmodel.graph.allreduce_norm_layout`: SGLang's FlashInfer
    all-reduce fusion for DeepSeek-V3, Kimi, Qwen3 MoE, GLM-4.5 and gpt-oss on Hopper and Blackwell). That kernel is
    FlashInfer's, not the engine's custom all-reduce any release's table times: the engine folder's own table keeps
    standing in for it (docs/engines.md, "The all-reduce by release")."""
    from .graph import allreduce_norm_layout
    from .profile import TABLE_FIELDS

    if model is None or sc is None or not allreduce_norm_layout(model, sc):
        return families
    return frozenset(TABLE_FIELDS if families is None else families) - {"comm"}


def with_release_tables(prof, release: str | None, families: frozenset[str] | None = None):
    """``prof`` with each table family (of ``families``; None: every one) priced by the tables of the engine release
    nearest ``release`` (module doc); unchanged where no other release stands for it. The choice is written to
    ``provenance.release_tables``."""
    if not release:
        return prof
    from .evidence import FAMILY_FIELDS
    from .profile import load_profile

    changes, chosen = {}, {}
    for family, field, _, hit in standing_tables(prof, release):
        if families is not None and family not in families:
            continue
        # the family's fitted values with its table: the table's residuals were taken against them
        # (perfmodel.fit.directory.release_base)
        fitted = load_profile(hit[1])
        changes.update({f: getattr(fitted, f) for f in FAMILY_FIELDS[family]})
        changes[field] = str(hit[1])
        chosen[family] = f"{hit[0]} ({hit[1].parent.parent.name}/{RELEASES_DIR}/{hit[1].name})"
    if not changes:
        return prof
    return prof.with_(**changes, provenance={**prof.provenance, "release_tables": {"asked": release, **chosen}})
