"""Names and paths -> loaded objects: hardware specs, models, calibration profiles."""
from __future__ import annotations

from pathlib import Path

from .models import Model
from .profile import DEFAULTS, Profile, load_profile
from .spec import HardwareSpec


def resolve_hardware(hw) -> HardwareSpec:
    if isinstance(hw, HardwareSpec):
        return hw
    from .spec import load_spec

    return load_spec(hw)


def resolve_model(model) -> Model:
    if isinstance(model, Model):
        return model
    from .models import load_model

    return load_model(model)


def available_profiles() -> list[tuple[Path, Profile]]:
    """Every readable profile under calibration/. One that does not load is skipped with a one-line warning:
    a broken profile for one part must not stop projections on every other part."""
    import sys

    from .errors import InputError
    from .paths import calibration_dir

    out = []
    root = calibration_dir()
    if root.is_dir():
        for p in sorted(root.glob("*/profile.json")):
            try:
                out.append((p.parent, load_profile(p)))
            except InputError as e:
                print(f"perfmodel: warning: skipping calibration profile {e}", file=sys.stderr)
    return out


def _own_profile(hw: HardwareSpec) -> Profile | None:
    names = {hw.key, *getattr(hw, "aliases", ())}
    for folder, prof in available_profiles():
        if prof.spec_key in names or folder.name in names:
            return prof
    return None


def resolve_profile(arg, hw: HardwareSpec) -> Profile:
    """The profile a projection on ``hw`` uses.

    ``arg`` None: the part's own profile from ``calibration/`` if there is one, else one measured on a
    part of the same vendor, carried by the transfer rules, else the documented defaults. ``"none"``:
    the defaults. A path: that profile, carried to ``hw`` if it was measured on another part.
    """
    from .transfer import carry

    if isinstance(arg, Profile):
        prof = arg
    elif arg is None:
        own = _own_profile(hw)
        if own is not None:
            return own
        prof = next((p for _, p in available_profiles() if _vendor_of(p) == hw.vendor), None)
        if prof is None:
            return DEFAULTS
    elif str(arg).lower() == "none":
        return DEFAULTS
    else:
        prof = load_profile(arg)
    return carry(prof, _source_spec(prof), hw)


def _source_spec(prof: Profile) -> HardwareSpec | None:
    if not prof.spec_key:
        return None
    try:
        return resolve_hardware(prof.spec_key)
    except Exception:  # the part it was measured on may not be in this library
        return None


def _vendor_of(prof: Profile) -> str:
    src = _source_spec(prof)
    return src.vendor if src is not None else ""
