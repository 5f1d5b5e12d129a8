"""The one place a projection's inputs are resolved: names and paths -> loaded objects (hardware specs, models,
calibration profiles), and a scenario -> the scenario for a part (its engine chosen for the vendor, every engine
field filled from the preset: :func:`resolve_scenario`, the only caller of :meth:`Scenario.for_hardware`).

Every command obtains its inputs through :func:`setup`; the model layer (graph, projection, capacity, serve,
sweep...) checks that it was handed a resolved scenario (:func:`perfmodel.scenario.require_resolved`) instead of
resolving it again. Where a layout changes inside a loop (plan's layouts, sweep's grid points) the new scenario
is resolved by :func:`resolve_scenario` too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .engines import Engine, engine_for
from .host_costs import HOST_COSTS_ENV
from .memo import Bounded, value_key
from .models import Model
from .profile import DEFAULTS, Profile, load_profile
from .scenario import Scenario
from .spec import HardwareSpec


def resolve_scenario(sc: Scenario, hw: HardwareSpec | None, model: Model | None) -> Scenario:
    """``sc`` resolved for ``hw`` (None: no particular part, as a training or trace graph is built): the engine
    chosen for the part's vendor (``auto``: TensorRT-LLM on NVIDIA parts, vLLM elsewhere) and every engine field
    the user left unset filled from its preset (:mod:`perfmodel.engines`), with the engine's defaults for
    ``model``'s architecture (None: a layer or collective without a model); a resolved scenario is returned as
    it is. The only call of :meth:`Scenario.for_hardware` (tests/test_architecture.py)."""
    return sc.for_hardware(hw, model)


@dataclass(frozen=True)
class Setup:
    """A projection's inputs, resolved: the part, the model (None for a command without one: predict, tune,
    trace), the scenario resolved for the part (None without a model, or for training, whose scenario is its
    own), the calibration profile composed for the part and engine, and the engine preset.

    ``asked`` is the scenario as given (validated, engine fields as the user set them): a workflow that changes
    the layout or the engine (plan's layouts, a sweep's grid, a simulation's disaggregated sides) starts each
    new layout from it and resolves it with :func:`resolve_scenario`, because a resolved scenario keeps the
    preset it was resolved with (SGLang's memory share per TP degree, another engine's kernels)."""

    hardware: HardwareSpec
    model: Model | None
    scenario: Scenario | None
    profile: Profile
    engine: Engine
    asked: Scenario | None = None


def setup(arch, model=None, scenario: Scenario | dict | None = None, calibration=None, engine: str | None = None,
          release: str | None = None, release_families: frozenset[str] | None = None) -> Setup:
    """Resolve a projection's inputs once (module doc). ``arch``, ``model``: names, paths or loaded objects;
    ``scenario``: a :class:`Scenario` or its fields (validated, then resolved for the part); ``calibration``: None
    (each family from its best evidence under calibration/), ``"none"`` (the documented defaults), a profile
    path, or a loaded :class:`Profile` for this part (used as given); ``engine``: the preset whose evidence the profile is composed for (default
    the scenario's engine, ``auto`` without one; :data:`STANDALONE_ENGINE` for a standalone operator price);
    ``release``: the engine release whose measured tables price it (default the scenario's ``engine_release``), in
    the table families ``release_families`` (None: every family that release measured)."""
    hw = resolve_hardware(arch)
    mdl = resolve_model(model) if model is not None else None
    sc = asked = None
    if scenario is not None:
        asked = (scenario if isinstance(scenario, Scenario) else Scenario(**scenario)).validated()
        sc = resolve_scenario(asked, hw, mdl)
    key = engine or (sc.engine if sc is not None else None) or "auto"
    release = release or (asked.engine_release if asked is not None else None)
    if release:
        from .releases import collective_families

        release_families = collective_families(release_families, mdl, sc)
    # a loaded profile is taken as given (composed for this part already: carrying it again would carry twice)
    prof = (calibration if isinstance(calibration, Profile)
            else resolve_profile(calibration, hw, key, release, release_families))
    return Setup(hw, mdl, sc, prof, engine_for(key, hw.vendor), asked)


def resolve_hardware(hw) -> HardwareSpec:
    if isinstance(hw, HardwareSpec):
        return hw
    from .io import check_input_path
    from .spec import load_spec

    check_input_path(str(hw), what="a hardware name or spec file", field="--arch")
    return calibration_view(load_spec(hw))  # every consumer sees the lineage calibration sees


def resolve_model(model) -> Model:
    if isinstance(model, Model):
        return model
    from .io import check_input_path
    from .models import load_model

    check_input_path(str(model), what="a model name or model file", field="--model")
    return load_model(model)


_PROFILES: dict = {}

# The engine whose kernels a standalone operator price stands for (``perfmodel predict``, ``step``, ``tune``):
# plain PyTorch, timed as a microbenchmark times it, the way this project's calibration suite measures a part
# (calibration/h200 for the H200). A serving engine's tables price its own modules, in a stream of kernels.
STANDALONE_ENGINE = "torch"


def available_profiles() -> list[tuple[Path, Profile]]:
    """Every readable profile under calibration/. One that does not load is skipped with a one-line warning:
    a broken profile for one part must not stop projections on every other part. Read once per process and
    folder state (a profile rewritten by ``perfmodel fit`` is read again)."""
    from .paths import calibration_dir

    root = calibration_dir()
    stamp = _profiles_stamp(root)
    if _PROFILES.get("stamp") != stamp:
        _PROFILES["stamp"], _PROFILES["list"] = stamp, _load_profiles(root)
    return list(_PROFILES["list"])


def _profiles_stamp(root: Path) -> tuple:
    """The folder and each ``*/profile.json`` under it with its modification time (one directory listing and a
    stat a profile: a projection asks several times)."""
    found = []
    try:
        entries = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        entries = []
    for name in entries:
        p = os.path.join(root, name, "profile.json")
        try:
            found.append((p, os.stat(p).st_mtime_ns))
        except OSError:
            continue
    return (str(root), tuple(found))


def _library_stamp() -> tuple:
    """What a composed profile depends on besides the spec and the engine: the profiles under calibration/, the
    library's spec files (the profiles' own parts, a what-if's parent) and the folder names are resolved from."""
    from .paths import calibration_dir, hardware_dir

    hdir = hardware_dir()
    try:
        specs = tuple(sorted((e.name, st.st_mtime_ns, st.st_size) for e in os.scandir(hdir) for st in (e.stat(),)))
    except OSError:
        specs = ()
    return _profiles_stamp(calibration_dir()), str(hdir), specs, os.getcwd()


# composed profiles by (library stamp, the spec's whole value, engine): composing takes milliseconds and a command
# asks for the same few again and again (a plan's layouts, a report's parts)
_COMPOSED = Bounded(64)


def _load_profiles(root: Path) -> list[tuple[Path, Profile]]:
    import sys

    from .errors import InputError

    out = []
    if root.is_dir():
        for p in sorted(root.glob("*/profile.json")):
            try:
                out.append((p.parent, load_profile(p)))
            except InputError as e:
                print(f"perfmodel: warning: skipping calibration profile {e}", file=sys.stderr)
    return out


def resolve_profile(arg, hw: HardwareSpec, engine: str | None = None, release: str | None = None,
                    release_families: frozenset[str] | None = None) -> Profile:
    """:func:`compose_profile`, with the host costs of the measurement folder ``$PERFMODEL_HOST_COSTS`` names
    where it is set (your own host, measured by ``perfmodel calibrate --only hf``; any calibration, ``none``
    included: the host is not the GPU, and the variable asks for it by name)."""
    prof = compose_profile(arg, hw, engine, release, release_families)
    folder = os.environ.get(HOST_COSTS_ENV, "").strip()
    if not folder:
        return prof
    from .host_costs import as_fields, folder_host_costs

    host = folder_host_costs(folder)
    return prof.with_(host=as_fields(host), provenance={**prof.provenance, "host": {
        "source": f"${HOST_COSTS_ENV}: {host.source}"}})


def compose_profile(arg, hw: HardwareSpec, engine: str | None = None, release: str | None = None,
                    release_families: frozenset[str] | None = None) -> Profile:
    """The profile a projection on ``hw`` with ``engine`` (a preset key; None or ``auto``: the part's default
    serving engine; a standalone price passes :data:`STANDALONE_ENGINE`) uses.

    ``arg`` None: each family of the cost model from the best profile under ``calibration/`` that measured it:
    on the part itself for that engine, else on the nearest part, carried by the transfer rules
    (:mod:`perfmodel.evidence`), else the documented defaults; ``release``: the engine release whose measured
    tables price it where another release's were imported beside the engine's folder (:mod:`perfmodel.releases`), in
    the table families ``release_families`` (None: every one it measured).
    ``"none"``: the defaults. A path: that profile alone, carried to ``hw`` if it was measured on another part.
    """
    from .transfer import carry

    hw = calibration_view(hw)
    if isinstance(arg, Profile):
        prof = arg
    elif arg is None:
        from .engines import engine_for
        from .evidence import compose

        key = engine_for(engine or "auto", hw.vendor).key
        spec = value_key(hw)
        families = None if release_families is None else frozenset(release_families)
        cache_key = None if spec is None else (_library_stamp(), spec, key, release or None, families)
        hit = None if cache_key is None else _COMPOSED.get(cache_key)
        if hit is None:
            from .releases import with_release_tables

            hit = compose(hw, key, [(p, source_spec(p)) for _, p in available_profiles()])
            hit = with_release_tables(hit, release, release_families)
            if cache_key is not None:
                _COMPOSED.put(cache_key, hit)
        return hit
    elif str(arg).lower() == "none":
        return DEFAULTS
    else:
        from .io import check_input_path

        check_input_path(str(arg), what="a calibration profile", field="--calibration")
        prof = load_profile(arg)
    prof = carry(prof, source_spec(prof), hw)
    if release:
        from .releases import with_release_tables

        prof = with_release_tables(prof, release, release_families)
    return prof


def calibration_view(hw: HardwareSpec) -> HardwareSpec:
    """``hw`` as calibration sees it: a spec with measurements of its own is a part of its own, whatever it
    extends (the GB200's spec extends the B200's, but its own tables show it sustains 6% more: the B200's
    measurements reach it carried by the transfer rules); a spec with none (a what-if, a renamed copy) is the part
    it extends with the figures it changes (:func:`perfmodel.spec.lineage_rank`, docs/what-if.md)."""
    from dataclasses import replace

    if not hw.lineage:
        return hw
    names = {hw.key, *getattr(hw, "aliases", ())}
    if any(p.spec_key in names for _, p in available_profiles()):
        return replace(hw, lineage=())
    return hw


def source_spec(prof: Profile) -> HardwareSpec | None:
    if not prof.spec_key:
        return None
    try:
        return resolve_hardware(prof.spec_key)
    except Exception:  # the part it was measured on may not be in this library
        return None


def _vendor_of(prof: Profile) -> str:
    src = source_spec(prof)
    return src.vendor if src is not None else ""
