"""``perfmodel serve`` (request-level serving simulation) and ``perfmodel plan`` (SLA planning).

Only argparse at import time; numpy and the model load inside the commands, for start-up time. Numeric flags
are read as text and checked here, so that every bad value is one line naming the flag (exit 2).
"""
from __future__ import annotations

import json
import math

from ..errors import InputError
from .common import emit, scenario_flags, scenario_from_args

DIST_HELP = ("N | fixed:N | uniform:A:B | normal:MU:SIGMA | lognormal:MEDIAN:SIGMA | exponential:MEAN "
             "(tokens; docs/serving.md)")


def register(sub) -> None:
    from ..scenario import SCHEDULES

    p = sub.add_parser("serve", help="simulate serving under load: TTFT/TPOT/ITL/E2E percentiles, goodput, energy")
    p.add_argument("--arch", required=True, help="hardware spec name or path")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    scenario_flags(p)
    p.set_defaults(batch="max")
    _workload_flags(p)
    g = p.add_argument_group("serving layout")
    g.add_argument("--replicas", default="1", help="identical instances (data parallel), requests dealt round-robin")
    g.add_argument("--disagg", default=None, metavar="XpYd",
                   help="disaggregated prefill/decode: X prefill and Y decode instances (e.g. 1p2d)")
    g.add_argument("--prefill-tp", default=None, help="TP of a prefill instance (default --tp)")
    g.add_argument("--decode-tp", default=None, help="TP of a decode instance (default --tp)")
    g.add_argument("--kv-link", choices=("auto", "scaleup", "scaleout"), default="auto",
                   help="link the KV cache moves over (auto: scale-up when every instance fits one domain)")
    g.add_argument("--block-size", default="16", help="KV-cache block in tokens (vLLM's default 16)")
    g.add_argument("--prefix-cache", action="store_true", help="reuse resident shared-prefix KV blocks")
    g.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="how steps meet prompts and decoding sequences: mixed (prompt chunks ride in the decode "
                        "steps: vLLM, TensorRT-LLM) or prefill_first (prompts run in steps of their own while the "
                        "decoding sequences wait: SGLang without --enable-mixed-chunk); default: the engine's")
    _slo_flags(p)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (default) or json (the fields docs/serving.md lists)")
    p.add_argument("--out", help="write to this file (atomically) instead of stdout")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("plan", help="rank layouts of --gpus GPUs by goodput per GPU; without --gpus, the fewest GPUs "
                                     "and lowest $/h that serve --rate within the SLOs, across parts (docs/capacity.md)")
    p.add_argument("--arch", required=True, action="append",
                   help="hardware spec name or path; without --gpus several parts: --arch h200-sxm,b200 or repeated")
    p.add_argument("--model", required=True, help="model name, descriptor YAML or config.json")
    p.add_argument("--gpus", default=None, help="GPUs available (rank layouts of them); leave out to plan capacity")
    scenario_flags(p)
    p.set_defaults(batch="max")
    _workload_flags(p, plan=True)
    g = p.add_argument_group("capacity planning (without --gpus)")
    g.add_argument("--rate", default=None, help="requests per second to serve (with a trace: its own rate by default)")
    g.add_argument("--arrival", nargs="+", default=None, metavar="KIND",
                   help="poisson (default) | trace FILE (CSV or JSONL: arrival_s, isl, osl): the workload to plan for")
    g.add_argument("--gpu-hour-usd", action="append", default=None, metavar="[PART=]USD",
                   help="price of one GPU-hour of a part (user input: perfmodel ships no prices); repeat or "
                        "comma-separate, e.g. h200-sxm=3.5,b200=5.0; ranks by $/h when every part has one")
    g.add_argument("--max-gpus", default="4096", help="largest plan considered (default 4096)")
    g.add_argument("--no-mixed", action="store_true",
                   help="no mixed-part disaggregation (prefill on one part, decode on another)")
    g.add_argument("--finalists", default="3",
                   help="candidates simulated per part, engine and layout kind, best estimate first (default 3)")
    g = p.add_argument_group("search space")
    g.add_argument("--tp-options", default="1,2,4,8", help="TP degrees to try (default 1,2,4,8)")
    g.add_argument("--pp-options", default="1", help="PP degrees to try (default 1)")
    g.add_argument("--batch-options", default="16,32,64,128,256,max",
                   help="running-sequence caps to try (default 16,32,64,128,256,max)")
    g.add_argument("--engines", default=None, help="engines to compare, e.g. trtllm,vllm (default: --engine)")
    g.add_argument("--no-disagg", action="store_true", help="aggregated layouts only")
    g.add_argument("--attainment", default="0.9", help="share of requests that must meet the SLOs (default 0.9)")
    g.add_argument("--kv-link", choices=("auto", "scaleup", "scaleout"), default="auto",
                   help="link the KV cache moves over in disaggregated layouts (auto: scale-up when every instance "
                        "fits one domain; between two parts always the scale-out network)")
    g.add_argument("--top", default="15", help="rows to show (default 15)")
    _slo_flags(p)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (default: the --top layouts) or json (every layout tried, ranked)")
    p.add_argument("--out", help="write to this file (atomically) instead of stdout")
    p.set_defaults(func=cmd_plan)


def _workload_flags(p, plan: bool = False) -> None:
    from ..scenario import CLOSED_LOOP_STARTS

    g = p.add_argument_group("workload")
    if not plan:
        g.add_argument("--rate", default=None, help="requests per second (poisson or constant arrivals)")
        g.add_argument("--arrival", nargs="+", default=None, metavar="KIND",
                       help="poisson (default) | constant | trace FILE (CSV or JSONL: arrival_s, isl, osl)")
        g.add_argument("--concurrency", default=None, metavar="C",
                       help="closed loop instead of a rate: C requests in flight, each finished one replaced at once "
                            "(benchmark_serving --max-concurrency C at an infinite rate; aiperf --concurrency C); "
                            "latencies over the steady state (docs/serving.md)")
        g.add_argument("--closed-loop-start", choices=CLOSED_LOOP_STARTS, default=None,
                       help="with --concurrency, how the first C requests start: burst (default; all at once, and "
                            "requests of fixed lengths stay in lock-step waves) or spread (the first wave's outputs "
                            "cut to 1/C .. C/C of their lengths: the measured requests run in the desynchronized "
                            "steady state a long real run drifts to; docs/serving.md)")
    g.add_argument("--requests", default=None,
                   help="requests to simulate (default 1000, the whole trace, or with --concurrency C "
                        "2C + max(200, 2C) + C; plan: 400 per trial); at most 10^6 (plan: 10^5 per layout): "
                        "about 2 KB of memory each")
    g.add_argument("--isl-dist", default=None, help=f"prompt lengths: {DIST_HELP}; default --isl")
    g.add_argument("--osl-dist", default=None, help=f"output lengths: {DIST_HELP}; default --osl")
    g.add_argument("--prefix-len", default="0", help="tokens of a shared prefix (system prompt) per request")
    g.add_argument("--prefix-groups", default="0", help="distinct shared prefixes, picked uniformly")
    g.add_argument("--seed", default="0", help="random seed of arrivals and lengths")


def _slo_flags(p) -> None:
    g = p.add_argument_group("service-level objectives and cost")
    g.add_argument("--slo-ttft-ms", default=None, help="TTFT objective, ms")
    g.add_argument("--slo-tpot-ms", default=None, help="TPOT objective, ms")
    g.add_argument("--slo-e2e-ms", default=None, help="end-to-end latency objective, ms")
    if "--gpu-hour-usd" not in p._option_string_actions:
        g.add_argument("--gpu-hour-usd", default=None, help="price of one GPU-hour, for $ per million tokens")


# --- checked values ------------------------------------------------------------------------------------

def _int(text, flag: str, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (``1e6`` is one; at most perfmodel.inputs.MAX_WHOLE)."""
    from ..inputs import number

    return number(text, flag, lo=minimum, integer=True)


def _float(text, flag: str, *, positive: bool = True) -> float | None:
    from ..inputs import number

    return None if text is None else number(text, flag, lo=0.0, lo_open=positive)


def _price(text) -> float | None:
    from .project import MAX_GPU_HOUR_USD

    v = _float(text, "--gpu-hour-usd", positive=False)
    if v is not None and v > MAX_GPU_HOUR_USD:
        raise InputError(f"expected a price per GPU-hour up to {MAX_GPU_HOUR_USD:g} US dollars, got {text}",
                         field="--gpu-hour-usd")
    return v


def _ms(text, flag: str) -> float | None:
    v = _float(text, flag)
    return None if v is None else v / 1e3


def _int_list(text: str, flag: str, allow_max: bool = False) -> tuple:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if allow_max and part == "max":
            out.append("max")
            continue
        out.append(_int(part, flag))
    if not out:
        raise InputError("expected a comma-separated list", field=flag)
    return tuple(out)


def arch_list(values) -> list[str]:
    """--arch given once, repeated or comma-separated: the names in order, each once."""
    out: list[str] = []
    for v in values if isinstance(values, list) else [values]:
        for name in str(v).split(","):
            name = name.strip()
            if not name:
                raise InputError(f"expected a hardware spec name, got {str(v)[:60]!r}", field="--arch")
            if name not in out:
                out.append(name)
    return out


def _resolve(args):
    from ..resolve import resolve_hardware, resolve_model, setup

    hw = resolve_hardware(args.arch)
    model = resolve_model(args.model)
    s = setup(hw, model, scenario_from_args(args), args.calibration)
    # the simulation and the planner resolve each layout they build (perfmodel.resolve.Setup.asked)
    return s.hardware, s.model, s.profile, s.asked


def _lengths(args, sc):
    from ..serve.workload import parse_dist

    isl = parse_dist(args.isl_dist if args.isl_dist is not None else str(sc.isl), field="--isl-dist")
    osl = parse_dist(args.osl_dist if args.osl_dist is not None else str(sc.osl), field="--osl-dist")
    return isl, osl


def _options(args, **kw):
    from ..serve.simulate import ServeOptions

    return ServeOptions(slo_ttft_s=_ms(args.slo_ttft_ms, "--slo-ttft-ms"),
                        slo_tpot_s=_ms(args.slo_tpot_ms, "--slo-tpot-ms"),
                        slo_e2e_s=_ms(args.slo_e2e_ms, "--slo-e2e-ms"),
                        gpu_hour_usd=_price(getattr(args, "gpu_hour_usd", None)),
                        kv_link=args.kv_link, seed=_int(args.seed, "--seed", 0), **kw)


CLOSED = "closed-loop"  # the workload's arrival kind under --concurrency


def _requests(args, sc):
    """The workload of ``serve``: synthetic (rate, distributions), closed loop (concurrency) or a trace."""
    from ..serve.workload import check_request_count, synthetic_requests

    n = check_request_count(_int(args.requests, "--requests")) if args.requests is not None else None
    if args.concurrency is not None:
        return _closed_loop(args, sc, n)
    if args.closed_loop_start is not None:
        raise InputError("applies to a closed loop only: give --concurrency C with it",
                         field="--closed-loop-start")
    arrival = args.arrival or ["poisson"]
    kind = arrival[0].lower()
    if kind == "trace":
        if len(arrival) != 2:
            raise InputError("expected 'trace FILE'", field="--arrival")
        from ..serve.trace import read_trace

        return read_trace(arrival[1], limit=n), {"arrival": "trace", "trace": arrival[1]}
    if len(arrival) != 1:
        raise InputError(f"expected poisson, constant or trace FILE, got {' '.join(arrival)!r}", field="--arrival")
    if args.rate is None:
        raise InputError("a request rate is needed (requests/s) unless --arrival trace FILE", field="--rate")
    rate = _float(args.rate, "--rate")
    isl, osl = _lengths(args, sc)
    reqs = synthetic_requests(n or 1000, rate, isl, osl, arrival=kind, seed=_int(args.seed, "--seed", 0),
                              prefix_len=_int(args.prefix_len, "--prefix-len", 0),
                              prefix_groups=_int(args.prefix_groups, "--prefix-groups", 0))
    return reqs, {"arrival": kind, "rate_req_s": rate, "isl_dist": isl.text, "osl_dist": osl.text}


def _closed_loop(args, sc, n: int | None):
    """The closed-loop workload of ``serve --concurrency C``."""
    from ..serve.workload import (check_request_count, closed_loop_default_requests, closed_loop_requests,
                                  closed_loop_window)

    c = _int(args.concurrency, "--concurrency")
    if args.rate is not None:
        raise InputError("a closed loop has no request rate: give --concurrency or --rate, not both", field="--rate")
    if args.arrival is not None:
        raise InputError("a closed loop sends a request when one finishes: --arrival does not apply",
                         field="--arrival")
    if n is None:  # the default (warm-up 2C, measured, drain C) grows with C
        n = check_request_count(closed_loop_default_requests(c), field="--concurrency",
                                what=f"--concurrency {c:,} needs {closed_loop_default_requests(c):,} requests")
    isl, osl = _lengths(args, sc)
    reqs = closed_loop_requests(n, c, isl, osl, seed=_int(args.seed, "--seed", 0),
                                prefix_len=_int(args.prefix_len, "--prefix-len", 0),
                                prefix_groups=_int(args.prefix_groups, "--prefix-groups", 0),
                                start=args.closed_loop_start or "burst")
    lo, hi = closed_loop_window(n, c)
    return reqs, {"arrival": CLOSED, "concurrency": c, "rate_req_s": None, "isl_dist": isl.text,
                  "osl_dist": osl.text, "measured": [lo, hi], "start": args.closed_loop_start or "burst"}


def _check_context(model, reqs) -> None:
    """No request longer than the model's context (prompt plus output, when the model states one)."""
    ctx = int(getattr(model, "max_position", 0) or 0)
    if ctx <= 0 or not len(reqs):
        return
    total = reqs.isl.astype("int64") + reqs.osl.astype("int64")
    k = int(total.argmax())
    if int(total[k]) > ctx:
        field = "--isl-dist" if int(reqs.isl[k]) > ctx else "--osl-dist"
        raise InputError(f"a request of {int(reqs.isl[k]):,} prompt + {int(reqs.osl[k]):,} output tokens exceeds "
                         f"the context of {model.name} ({ctx:,} tokens)", field=field)


def _bad_number(x, path: str = "") -> str | None:
    """The first number in ``x`` (nested dicts and lists) that is not finite or is negative, as 'path = value'."""
    if isinstance(x, dict):
        for k, v in x.items():
            bad = _bad_number(v, f"{path}.{k}" if path else str(k))
            if bad:
                return bad
        return None
    if isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            bad = _bad_number(v, f"{path}[{i}]")
            if bad:
                return bad
        return None
    if hasattr(x, "item") and getattr(x, "size", 1) == 1 and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, (int, float)) and not isinstance(x, bool) and not (math.isfinite(x) and x >= 0):
        return f"{path} = {x:g}"
    return None


def _check_result(result: dict, model, hw) -> None:
    """Every number the simulation gives is finite and non-negative, or the command stops with one line."""
    bad = _bad_number(result)
    if bad:
        raise InputError(f"the simulation of {model.name} on {hw.name} gave {bad}: the workload or a spec figure "
                         "is out of the range the simulation models", field="serve")


def cmd_serve(args) -> int:
    from ..serve.report import serve_document, serve_table
    from ..serve.simulate import parse_disagg, simulate

    hw, model, prof, sc = _resolve(args)
    reqs, workload = _requests(args, sc)
    _check_context(model, reqs)
    opts = _options(args, block_size=_int(args.block_size, "--block-size"), prefix_caching=args.prefix_cache,
                    replicas=_int(args.replicas, "--replicas"), disagg=parse_disagg(args.disagg),
                    prefill_tp=_int(args.prefill_tp, "--prefill-tp") if args.prefill_tp else None,
                    decode_tp=_int(args.decode_tp, "--decode-tp") if args.decode_tp else None)
    from .common import progress

    with progress(None, f"serve: simulating {len(reqs):,} requests"):
        result = simulate(hw, model, sc, prof, reqs, opts)
    _check_result(result, model, hw)
    doc = serve_document(hw, model, sc, prof, reqs, workload, result)
    if args.format == "json":
        emit(json.dumps(doc, indent=2, allow_nan=False) + "\n", args.out)
    else:
        text = serve_table(doc)
        if workload["arrival"] == CLOSED:  # the report's workload line is written for a rate
            lo, hi = workload["measured"]
            start = " from a spread start" if workload["start"] == "spread" else ""
            text = text.replace(f"{CLOSED} - req/s", f"closed loop at concurrency {workload['concurrency']}{start} "
                                f"(steady state: requests {lo + 1}-{hi} measured)")
        emit(text + "\n", args.out)
    return 0


def _search_options(args) -> tuple:
    """What both plans (``--gpus`` and capacity) search with: requests a layout, the attainment, the engines and
    the TP, PP and batch lists."""
    from ..serve.workload import MAX_PLAN_REQUESTS, check_request_count

    n = _int(args.requests, "--requests") if args.requests is not None else 400
    check_request_count(n, cap=MAX_PLAN_REQUESTS, what=f"{n:,} requests a layout (plan simulates every layout "
                        "it tries on them)")
    attainment = _float(args.attainment, "--attainment")
    if attainment > 1:
        raise InputError(f"expected a share in (0, 1], got {args.attainment!r}", field="--attainment")
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip()) if args.engines else None
    lists = {"tps": _int_list(args.tp_options, "--tp-options"), "pps": _int_list(args.pp_options, "--pp-options"),
             "batches": _int_list(args.batch_options, "--batch-options", allow_max=True)}
    return n, attainment, engines, lists


def cmd_plan(args) -> int:
    if args.spec_topk != 1 or args.spec_verify is not None:  # a plan's deploy launches a chain (perfmodel/deploy)
        raise InputError("perfmodel plan sizes a chain of draft tokens, not a token tree (project and serve price "
                         "both)", field="--spec-topk" if args.spec_topk != 1 else "--spec-verify")
    if args.gpus is None:
        return cmd_capacity(args)
    for flag, value in (("--rate", args.rate), ("--arrival", args.arrival), ("--max-gpus", None if args.max_gpus == "4096"
                        else args.max_gpus)):
        if value is not None:
            raise InputError(f"{flag} plans capacity: leave out --gpus", field=flag)
    if len(arch_list(args.arch)) != 1:
        raise InputError("--gpus ranks the layouts of one part: give one --arch, or leave out --gpus to plan "
                         "capacity across parts", field="--arch")
    args.arch = arch_list(args.arch)[0]
    prices = args.gpu_hour_usd or []
    if len(prices) > 1 or any("=" in x for x in prices):
        raise InputError("expected one price per GPU-hour with --gpus", field="--gpu-hour-usd")
    args.gpu_hour_usd = prices[0] if prices else None
    from ..serve.plan import PlanSpace, plan
    from ..serve.report import plan_document, plan_table
    from ..serve.workload import synthetic_requests

    n, attainment, engines, lists = _search_options(args)
    hw, model, prof, sc = _resolve(args)
    isl, osl = _lengths(args, sc)
    base = synthetic_requests(n, 1.0, isl, osl, seed=_int(args.seed, "--seed", 0),
                              prefix_len=_int(args.prefix_len, "--prefix-len", 0),
                              prefix_groups=_int(args.prefix_groups, "--prefix-groups", 0))
    space = PlanSpace(gpus=_int(args.gpus, "--gpus"), **lists, disagg=not args.no_disagg, attainment=attainment,
                      engines=engines)
    opts = _options(args)
    if opts.slo_ttft_s is None and opts.slo_tpot_s is None:
        raise InputError("planning needs --slo-ttft-ms and/or --slo-tpot-ms", field="--slo-ttft-ms")
    from .common import progress

    with progress(None, "plan: simulating the layouts"):
        rows = plan(hw, model, sc, prof, base, space, opts)
    doc = plan_document(hw, model, sc, prof, base, space, opts, rows, {"isl_dist": isl.text, "osl_dist": osl.text})
    if args.format == "json":
        emit(json.dumps(doc, indent=2, allow_nan=False) + "\n", args.out)
    else:
        emit(plan_table(doc, top=_int(args.top, "--top")) + "\n", args.out)
    return 0


def _prices(values, keys: list[str], names: list[str] | None = None) -> dict[str, float]:
    """--gpu-hour-usd PART=USD (repeated or comma-separated; a bare USD when one part is planned): {part: USD}. A
    PART is a planned part's spec key or the name it was given to --arch (``h200`` for ``h200-sxm``)."""
    alias = dict(zip(names or [], keys))
    out: dict[str, float] = {}
    for v in values or []:
        for item in str(v).split(","):
            item = item.strip()
            if "=" in item:
                name, _, price = item.partition("=")
                name = name.strip()
            elif len(keys) == 1:
                name, price = keys[0], item
            else:
                raise InputError(f"expected PART=USD for each of {', '.join(keys)}, got {item[:40]!r}",
                                 field="--gpu-hour-usd")
            name = alias.get(name, name)
            if name not in keys:
                raise InputError(f"{name[:40]!r} is not one of the parts planned ({', '.join(keys)})",
                                 field="--gpu-hour-usd")
            out[name] = _price(price)
    return out


def _capacity_workload(args, sc, n: int):
    """(requests at 1 request/s for the instance searches, a maker of n requests at a rate for the end-to-end
    check, the rate to plan for, what the document says of the workload)."""
    from ..serve.workload import synthetic_requests

    arrival = args.arrival or ["poisson"]
    kind = arrival[0].lower()
    if kind == "trace":
        if len(arrival) != 2:
            raise InputError("expected 'trace FILE'", field="--arrival")
        import numpy as np

        from ..serve.trace import read_trace

        trace = read_trace(arrival[1])
        span = float(trace.arrival[-1] - trace.arrival[0])
        if len(trace) < 2 or span <= 0:
            raise InputError("a trace to plan for needs at least two requests at different times", file=arrival[1],
                             field="arrival_s")
        own = (len(trace) - 1) / span
        rate = _float(args.rate, "--rate") if args.rate is not None else own
        unit = trace.with_arrival((trace.arrival - trace.arrival[0]) * own)  # its own shape at 1 request/s

        def workload(k, r):
            return unit.subset(np.arange(min(k, len(unit)))).with_arrival(unit.arrival[:min(k, len(unit))] / r)

        base = unit.subset(np.arange(min(n, len(unit))))
        return base, workload, rate, {"arrival": "trace", "trace": arrival[1], "trace_rate_req_s": own,
                                      "isl_dist": f"trace (mean {float(trace.isl.mean()):.0f})",
                                      "osl_dist": f"trace (mean {float(trace.osl.mean()):.0f})"}
    if len(arrival) != 1 or kind != "poisson":
        raise InputError(f"expected poisson or trace FILE, got {' '.join(arrival)[:60]!r}", field="--arrival")
    if args.rate is None:
        raise InputError("capacity planning needs the request rate to serve (--rate R) or a trace "
                         "(--arrival trace FILE); --gpus N ranks the layouts of N GPUs instead", field="--rate")
    rate = _float(args.rate, "--rate")
    isl, osl = _lengths(args, sc)
    seed = _int(args.seed, "--seed", 0)
    kw = dict(prefix_len=_int(args.prefix_len, "--prefix-len", 0),
              prefix_groups=_int(args.prefix_groups, "--prefix-groups", 0))
    base = synthetic_requests(n, 1.0, isl, osl, seed=seed, **kw)

    def workload(k, r):
        return synthetic_requests(k, r, isl, osl, seed=seed + 1, **kw)  # other requests than the searches'

    return base, workload, rate, {"arrival": "poisson", "isl_dist": isl.text, "osl_dist": osl.text}


def cmd_capacity(args) -> int:
    """``perfmodel plan`` without ``--gpus``: capacity across parts and engines (docs/capacity.md)."""
    from ..resolve import resolve_hardware, resolve_model, resolve_profile
    from ..serve.capacity_plan import CapacitySpace, Part, capacity_plan
    from ..serve.capacity_report import capacity_document, capacity_table
    from ..serve.simulate import ServeOptions

    n, attainment, engines, lists = _search_options(args)
    names = arch_list(args.arch)
    hws = [resolve_hardware(a) for a in names]
    keys = [getattr(h, "key", None) or a for h, a in zip(hws, names)]
    if len(set(keys)) != len(keys):
        raise InputError(f"a part is named twice ({', '.join(names)})", field="--arch")
    prices = _prices(args.gpu_hour_usd, keys, names)
    parts = [Part(k, h, prices.get(k)) for k, h in zip(keys, hws)]
    model = resolve_model(args.model)
    sc = scenario_from_args(args)
    base, workload, rate, wdoc = _capacity_workload(args, sc, n)
    _check_context(model, base)
    space = CapacitySpace(rate=rate, attainment=attainment, **lists, engines=engines, disagg=not args.no_disagg,
                          mixed=not args.no_mixed,
                          max_gpus=_int(args.max_gpus, "--max-gpus"), finalists=_int(args.finalists, "--finalists"))
    opts = ServeOptions(slo_ttft_s=_ms(args.slo_ttft_ms, "--slo-ttft-ms"),
                        slo_tpot_s=_ms(args.slo_tpot_ms, "--slo-tpot-ms"),
                        slo_e2e_s=_ms(args.slo_e2e_ms, "--slo-e2e-ms"), kv_link=args.kv_link)
    if opts.slo_ttft_s is None and opts.slo_tpot_s is None and opts.slo_e2e_s is None:
        raise InputError("capacity planning needs --slo-ttft-ms, --slo-tpot-ms and/or --slo-e2e-ms",
                         field="--slo-ttft-ms")
    profiles: dict = {}
    by_hw = {id(h): k for h, k in zip(hws, keys)}

    def profile_for(hw, engine):
        key = (by_hw[id(hw)], engine)
        if key not in profiles:  # a release names one engine's: the other engines' tables stay their own
            release = sc.engine_release if engine == sc.engine else None
            profiles[key] = resolve_profile(args.calibration, hw, engine, release)
        return profiles[key]

    from .common import progress

    with progress(None, "plan: sizing the fleets"):
        result = capacity_plan(parts, model, sc, profile_for, base, space, opts, workload)
    doc = capacity_document(parts, model, sc, profiles, base, space, opts, result, wdoc)
    if args.format == "json":
        emit(json.dumps(doc, indent=2, allow_nan=False) + "\n", args.out)
    else:
        emit(capacity_table(doc, top=_int(args.top, "--top")) + "\n", args.out)
    return 0
