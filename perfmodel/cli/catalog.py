"""``perfmodel list`` and ``perfmodel show``: the hardware and model libraries. Only argparse at import time."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("list", help="list hardware specs or models")
    p.add_argument("what", choices=("hardware", "models"),
                   help="hardware: the spec library (hardware/); models: the model library (workloads/models/)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show one hardware spec or model with every figure's source")
    p.add_argument("name", help="hardware spec or model: a name, an alias, or a path (spec YAML, model "
                                "descriptor YAML or config.json)")
    p.set_defaults(func=cmd_show)


def cmd_list(args) -> int:
    from ..errors import InputError
    from ..paths import hardware_dir, workloads_dir
    from ..text import table

    def models_dir():
        return workloads_dir() / "models"

    if args.what == "hardware":
        from ..spec import list_specs
        from ..units import format_si

        specs = list_specs()
        if not specs:
            raise InputError(f"no hardware specs found in {hardware_dir()} (an install without its data: "
                             "reinstall perfmodel, or set PERFMODEL_ROOT to a checkout)", field="list hardware")
        rows = [["spec", "name", "SMs", "bf16 dense", "HBM (visible)", "bandwidth"]]
        for s in specs:
            rows.append([s.key, s.name, str(s.sm_count), format_si(s.tensor_flops.get("bf16", 0.0), "FLOP/s"),
                         f"{format_si(s.hbm_bytes, 'B')} ({s.hbm_visible_bytes / 2**30:.1f} GiB)",
                         format_si(s.hbm_bandwidth, "B/s")])
        print("\n".join(table(rows, "llrrrr", indent="")))
    else:
        from ..models import list_models

        models = list_models()
        if not models:
            raise InputError(f"no models found in {models_dir()} (an install without its data: reinstall "
                             "perfmodel, or set PERFMODEL_ROOT to a checkout)", field="list models")
        rows = [["model", "name", "params", "aliases"]]
        for m in models:
            rows.append([m.key, m.name, f"{m.param_count() / 1e9:.1f}B", ", ".join(m.aliases[:4])])
        print("\n".join(table(rows, "llrl", indent="")))
    return 0


def cmd_show(args) -> int:
    from ..text import show_thing

    print(show_thing(args.name))
    return 0
