"""``moesym fleet``: the replicas a period of traffic needs on each candidate hardware, hour by
hour, behind a router, and what they cost and draw (:mod:`moesym.serving.sizing`).

Exit status: 0 with an answer; 2 for bad input and when no candidate meets the limits (a
one-line error saying what each candidate reaches), so a script can tell the two apart from
an answer.
"""

from __future__ import annotations

import argparse
import copy
import math

from ..errors import MoesymError
from ..io.progress import status
from ..numbers.economics import Pricing
from ..plan.rules import check_inputs, check_lengths
from ..readers.model import load_model
from ..report.fleet_plots import fleet_plot
from ..serving.sizing import Limits, plan_candidate, plan_on_dask
from ..serving.traffic import poisson_traffic, read_trace
from ..specs.hardware import load_hardware
from . import COMMANDS
from .common import (add_cost, add_deployment, add_json, add_model_hw, deployment_from, emit_json,
                     fmt_s, positive_float, positive_int)
from .simulate import _LAUNCH_FLAGS, launch_from

__all__ = ["register", "run", "price_map"]

#: the engine launch flags a fleet's replicas take (moesym simulate's, those that shape a
#: replica's steady service)
_LAUNCH = ("chunk", "max_running", "kv_fraction", "cuda_graph_max_bs")


def price_map(text: str) -> dict:
    """``--price``: ``USD`` for every candidate, or ``HW=USD[,HW=USD...]`` per hardware (a
    bare number among them prices the others)."""
    out: dict = {}
    for item in text.split(","):
        name, eq, value = item.strip().rpartition("=")
        key = name.strip() if eq else None
        if eq and not key:
            raise argparse.ArgumentTypeError(f"expected HW=USD_PER_GPU_HOUR, got {item!r}")
        try:
            v = float(value)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"a price per GPU-hour must be a positive number, "
                                             f"got {item.strip()!r}")
        if key in out:
            raise argparse.ArgumentTypeError(f"{key or 'a bare price'} given twice in {text!r}")
        out[key] = v
    return out


def register(sub) -> None:
    p = sub.add_parser("fleet", help=COMMANDS["fleet"])
    add_model_hw(p)
    for a in p._actions:
        if "--hardware" in a.option_strings:
            a.metavar, a.help = "HW[,HW...]", ("the candidates: built-in GPU names or hardware "
                                               ".toml paths, comma-separated")
    t = p.add_argument_group("traffic (a rate, or a trace)")
    t.add_argument("--rate", type=positive_float, default=None, metavar="R",
                   help="mean requests per second (Poisson arrivals)")
    t.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="seconds of traffic at --rate (default 86400: a day)")
    t.add_argument("--isl", default=None, metavar="N|DIST",
                   help="prompt tokens per request: N, or lengths drawn from fixed:N, "
                        "uniform:A:B, lognormal:MEAN:SIGMA or a file of lengths (as simulate's "
                        "--isl-dist)")
    t.add_argument("--osl", default=None, metavar="N|DIST", help="output tokens, as --isl")
    t.add_argument("--diurnal", type=positive_float, default=None, metavar="P",
                   help="a day's shape: the peak rate P times the trough's, sinusoidal, --rate "
                        "its mean")
    t.add_argument("--peak-hour", type=float, default=14.0, metavar="H",
                   help="hour of the day the diurnal peak falls at (default 14)")
    t.add_argument("--trace", default=None, metavar="FILE",
                   help="CSV (header row) or JSON Lines: arrival_s, input_tokens, output_tokens"
                        "[, prefix_id, prefix_tokens], sorted by time")
    t.add_argument("--seed", type=int, default=0)
    s = p.add_argument_group("service level and sizing")
    s.add_argument("--ttft-ms", type=positive_float, default=None, help="TTFT limit")
    s.add_argument("--tpot-ms", type=positive_float, default=None, help="TPOT limit")
    s.add_argument("--percentile", type=positive_float, default=90.0, metavar="P",
                   help="the limits hold at the P-th percentile of each hour's requests "
                        "(default 90)")
    s.add_argument("--router", choices=("round-robin", "least-outstanding", "cache-aware",
                                        "random"), default="round-robin",
                   help="how requests are spread over the replicas (cache-aware: SGLang "
                        "router's policy and defaults; default round-robin)")
    s.add_argument("--fixed", action="store_true",
                   help="one replica count for the whole period (default: one per hour)")
    s.add_argument("--min-replicas", type=positive_int, default=1, metavar="N",
                   help="replicas in service in every hour, busy or not (default 1)")
    s.add_argument("--sample", type=positive_int, default=20_000, metavar="N",
                   help="requests a sizing trial simulates at most (default 20000); the "
                        "answer is verified on every request")
    add_deployment(p, search=True)
    p.add_argument("--gpus-per-replica", dest="gpus", type=positive_int, default=None,
                   help="GPUs of one replica (= --gpus; default: the hardware's node)")
    p.set_defaults(gpus=None)
    e = p.add_argument_group("engine launch flags (default: the engine profile's)")
    for flag, field, kind, meta, help_ in _LAUNCH_FLAGS:
        if field in _LAUNCH:
            e.add_argument(flag, dest=field, type=kind, default=None, metavar=meta, help=help_)
    add_cost(p)
    for a in p._actions:
        if "--price" in a.option_strings:
            a.type, a.metavar = price_map, "USD|HW=USD[,HW=USD...]"
            a.help = ("price per GPU-hour, for every candidate or per hardware (h200=3.5,"
                      "b200=5); default: each hardware file's list price, if any")
    d = p.add_argument_group("parallel")
    d.add_argument("--backend", choices=("local", "dask"), default="local",
                   help="local: the candidates one after another here; dask: each candidate "
                        "a task on a dask cluster (needs moesym[dask])")
    d.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --backend dask: the scheduler (default: an in-process cluster)")
    add_json(p)
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="replicas, cost and power over the period; cost per million tokens "
                        "against p90 TPOT")
    p.set_defaults(func=run)


def _traffic(args):
    rate_flags = [f for f in ("rate", "duration", "isl", "osl", "diurnal")
                  if getattr(args, f) is not None]
    if args.trace is not None:
        if rate_flags:
            raise MoesymError(f"--trace gives the requests: drop "
                              f"--{rate_flags[0].replace('_', '-')}")
        return read_trace(args.trace)
    if args.rate is None:
        raise MoesymError("fleet needs traffic: --rate R --isl N --osl N [--duration S] or "
                          "--trace FILE")
    missing = [f"--{f}" for f in ("isl", "osl") if getattr(args, f) is None]
    if missing:
        raise MoesymError(f"--rate needs {' and '.join(missing)} (N tokens, or a distribution "
                          "such as lognormal:2048:1)")
    return poisson_traffic(args.rate, args.duration or 86400.0, args.isl, args.osl,
                           diurnal=args.diurnal, peak_hour=args.peak_hour, seed=args.seed)


def _pinned(args) -> bool:
    """The deployment flags name one layout (--tp and --ep one value each, and at most one
    micro-batch count and all-to-all mode): it is used as given, not searched."""
    single = lambda v: v is not None and len(v) == 1  # noqa: E731
    return (single(args.tp) and single(args.ep)
            and (args.micro_batches is None or len(args.micro_batches) == 1)
            and (args.a2a is None or len(args.a2a) == 1)
            and (args.pp is None or len(args.pp) == 1))


def _candidate_args(args, name: str):
    """The flags as one candidate sees them: its hardware, its node's GPUs per replica."""
    hw = load_hardware(name)
    ns = copy.copy(args)
    ns.hardware = name
    ns.gpus = args.gpus or args.gpus_per_node or hw.gpus_per_node
    if _pinned(args):
        ns.tp, ns.ep = args.tp[0], args.ep[0]
        ns.micro_batches = (args.micro_batches or [1])[0]
        ns.a2a = args.a2a[0].value if args.a2a else "auto"
        ns.pp = (args.pp or [1])[0]
    return hw, ns


def _pricing(args, names):
    prices = args.price or {}
    stray = [k for k in prices if k is not None and k not in names]
    if stray:
        raise MoesymError(f"--price {stray[0]}=...: not a candidate (--hardware "
                          f"{','.join(names)})")
    return {n: Pricing(prices.get(n, prices.get(None)), args.capex, args.years,
                       args.power_price, args.pue) for n in names}


def _tasks(args, model, traffic, limits):

    names = [n.strip() for n in args.hardware.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise MoesymError(f"--hardware {args.hardware!r}: name each candidate once, "
                          "comma-separated")
    pricing = _pricing(args, names)
    launch = launch_from(_with_launch_defaults(args))
    tasks = []
    for name in names:
        hw, ns = _candidate_args(args, name)
        dep = deployment_from(ns)
        if dep.mesh is not None:
            raise MoesymError("fleet: a --mesh deployment has no engine scheduler profile; "
                              "use predict --phase serve")
        check_inputs(model, hw, dep, sharding=_pinned(args))
        search = None if _pinned(args) else {
            "tps": args.tp, "eps": args.ep, "micro_batches": tuple(args.micro_batches or (1, 2)),
            "a2a_modes": args.a2a, "pps": args.pp, "chunk": args.chunk or 0}
        tasks.append(dict(model=model, hw=hw, dep=dep, traffic=traffic, limits=limits,
                          router=args.router, pricing=pricing[name], launch=launch,
                          fixed=args.fixed, min_replicas=args.min_replicas,
                          sample=args.sample, seed=args.seed, search=search))
    return tasks


def _with_launch_defaults(args):
    """simulate's launch flags this command does not take, at their defaults."""
    ns = copy.copy(args)
    for _, field, *_ in _LAUNCH_FLAGS:
        if not hasattr(ns, field):
            setattr(ns, field, None)
    return ns


def run(args) -> int:

    if args.scheduler is not None and args.backend != "dask":
        raise MoesymError("--scheduler needs --backend dask")
    limits = Limits(args.ttft_ms / 1e3 if args.ttft_ms else None,
                    args.tpot_ms / 1e3 if args.tpot_ms else None, args.percentile)
    if args.price is not None:  # a price of 0 or below is refused before any work
        _pricing(args, [n.strip() for n in args.hardware.split(",")])
    model = load_model(args.model)
    traffic = _traffic(args)
    check_lengths(model, "serve", isl=int(traffic.isl.max()), osl=int(traffic.osl.max()))
    tasks = _tasks(args, model, traffic, limits)
    results = _run_tasks(tasks, args)
    out = _answer(model, traffic, limits, args, results)
    if args.plot:
        fleet_plot(out, args.plot)
    if out["best"] is None and not any(c["meets"] for c in results):
        raise MoesymError(_none_meets(limits, results))
    if args.json:
        emit_json(out)
        return 0
    _print(out)
    return 0


def _run_tasks(tasks, args) -> list[dict]:

    progress = not args.json
    if args.backend == "dask":
        return plan_on_dask(tasks, args.scheduler, progress)
    out = []
    for t in tasks:
        status(f"fleet: {t['hw'].name}: choose the deployment and size the fleet", progress)
        out.append(plan_candidate(**t, progress=progress))
    return out


def _answer(model, traffic, limits, args, results) -> dict:
    import numpy as np

    priced = [c for c in results if c["meets"] and c.get("usd_per_day") is not None]
    best = min(priced, key=lambda c: c["usd_per_day"]) if priced else None
    out = {"model": model.name,
           "traffic": {"source": traffic.source, "requests": len(traffic),
                       "duration_s": traffic.duration_s,
                       "requests_per_s": len(traffic) / traffic.duration_s,
                       "isl_mean": float(np.mean(traffic.isl)),
                       "osl_mean": float(np.mean(traffic.osl)),
                       "hours": len(results[0].get("replicas_by_hour") or [None])
                       if results else 0},
           "limits": {"ttft_ms": None if limits.ttft_s is None else limits.ttft_s * 1e3,
                      "tpot_ms": None if limits.tpot_s is None else limits.tpot_s * 1e3,
                      "percentile": limits.percentile},
           "router": args.router, "candidates": results,
           "best": best["name"] if best else None}
    if best is None and any(c["meets"] for c in results):
        out["best_note"] = ("the candidates that meet the limits have no price: pass --price "
                            "USD_PER_GPU_HOUR (or HW=USD per hardware)")
    return out


def _none_meets(limits, results) -> str:
    why = "; ".join(f"{c['name']}: {c.get('reason', 'misses')}" for c in results)
    return f"no candidate meets {limits.text()} ({why}); relax --ttft-ms / --tpot-ms"


def _print(out: dict) -> None:
    t, lim = out["traffic"], out["limits"]
    q = f"p{lim['percentile']:g}"
    limits = " and ".join(x for x in (
        f"TTFT {lim['ttft_ms']:g} ms" if lim["ttft_ms"] is not None else "",
        f"TPOT {lim['tpot_ms']:g} ms" if lim["tpot_ms"] is not None else "") if x)
    print(f"{out['model']} fleet: {t['source']}, {t['requests']:,} requests over "
          f"{t['duration_s']:g} s (ISL {t['isl_mean']:.0f}, OSL {t['osl_mean']:.0f} mean); "
          f"{q} {limits}; router {out['router']}")
    print(f"  {'candidate':<10} {'replica':<24} {'replicas':>9} {q + ' TTFT':>10} "
          f"{q + ' TPOT':>10} {'$/day':>10} {'$/M out':>8} {'avg MW':>8} {'peak MW':>8}")
    for c in out["candidates"]:
        if c.get("replicas") is None:
            print(f"  {c['name']:<10} misses: {c.get('reason', '')}")
            continue
        d = c["deployment"]
        rep = (f"{d['gpus']} GPU{'s' if d['gpus'] > 1 else ''} tp={d['tp']} ep={d['ep']} "
               f"mb={d['micro_batches']}")
        by_hour = c["replicas_by_hour"]
        n = (f"{c['replicas']}" if c["fixed"] or len(set(by_hour)) == 1
             else f"{min(by_hour)}-{c['replicas']}")
        money = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        mw = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        flag = "" if c["meets"] else "  (misses)"
        print(f"  {c['name']:<10} {rep:<24} {n:>9} {fmt_s(c['ttft_ms'][q] / 1e3):>10} "
              f"{fmt_s(c['tpot_ms'][q] / 1e3):>10} {money(c['usd_per_day'], ',.0f'):>10} "
              f"{money(c['usd_per_million_output_tokens'], '.3f'):>8} {mw(c['avg_mw']):>8} "
              f"{mw(c['peak_mw']):>8}{flag}")
    if out["best"] is not None:
        b = next(c for c in out["candidates"] if c["name"] == out["best"])
        g = b["deployment"]["gpus"]
        print(f"best: {b['name']}, {b['replicas']} x {g} GPU{'s' if g > 1 else ''} at peak, "
              f"${b['usd_per_day']:,.0f} per day, ${b['usd_per_million_output_tokens']:.3f} per "
              f"M output tokens (${b['usd_per_million_tokens']:.3f} per M tokens), "
              + (f"{b['avg_mw']:.3g} MW average, {b['peak_mw']:.3g} MW peak"
                 if b.get("avg_mw") is not None else "no power model"))
    else:
        print(f"best: none priced ({out.get('best_note', '')})")
