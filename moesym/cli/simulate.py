"""``moesym simulate``: a serving benchmark (closed loop at a concurrency, or Poisson at a
rate) simulated request by request through an engine's scheduler, every step timed by the
compiled step model: TTFT, TPOT, ITL and E2E percentiles, throughput per GPU, goodput."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

from ..errors import MoesymError
from ..numbers.economics import economics, text_line
from ..plan.rules import check_inputs, check_lengths
from ..report.plots import serving_timeline
from ..serving import simulate, simulate_disaggregated
from ..serving.clients import Client, lengths, range_ratio
from ..serving.engine import Launch
from ..specs.deployment import eplb_slots
from . import COMMANDS
from .common import (add_cost, add_deployment, add_json, add_model_hw, deployment_from, emit_json,
                     engine_from, fmt_s, model_hw_from, ms_as_s, nonneg_int, positive_float,
                     positive_int, pricing_from, probability)

__all__ = ["register", "run"]

#: the bounds of one simulation on a workstation: refused beyond them before any work
_MAX_BYTES, _MAX_WALL_S, _SAY_WALL_S = 2e9, 600.0, 60.0
#: what one run costs, measured on this project's 2-core machine (closed loops of 100 to 65,536
#: requests, 1 to 256 in flight): bytes and seconds per output token a request emits (its
#: token times, the scheduler's lists), per simulated rank-step and per request
_TOKEN_B, _STEP_B, _REQUEST_B = 48.0, 250.0, 1000.0
_TOKEN_S, _STEP_S = 0.6e-6, 15e-6
#: arrivals spread over more simulated seconds than this leave a float clock too coarse for a
#: step (1e9 s: 1e-7 s resolution at the end; about 32 years of arrivals)
_MAX_SPAN_S = 1e9


#: the server's launch flags a simulation takes: (flag, moesym.serving.engine.Launch field, type,
#: metavar, help); each overrides the engine profile's default
_LAUNCH_FLAGS = (
    ("--chunk", "chunk", positive_int, "N",
     "prompt tokens per step per attention DP rank (SGLang --chunked-prefill-size / DP size)"),
    ("--max-running-requests", "max_running", positive_int, "N", "requests held at once per rank"),
    ("--max-num-tokens", "step_tokens", positive_int, "N",
     "tokens (prompt + decode) in one step per rank: vLLM --max-num-batched-tokens, "
     "TensorRT-LLM max_num_tokens"),
    ("--scheduler-recv-interval", "recv_interval", positive_int, "K",
     "SGLang --scheduler-recv-interval: new requests are received once every K decode steps"),
    ("--mem-fraction", "kv_fraction", probability, "F",
     "the engine's memory share for its KV pool (SGLang --mem-fraction-static, vLLM "
     "--gpu-memory-utilization, TensorRT-LLM free_gpu_memory_fraction; of what its profile "
     "says it covers)"),
    ("--cuda-graph-max-bs", "cuda_graph_max_bs", positive_int, "B",
     "the largest decode batch captured as a CUDA graph"),
    ("--attention-dp-balance", "dp_balance_steps", positive_int, "N",
     "hold new prompts until every attention-DP rank has one, for at most N steps "
     "(TensorRT-LLM attention_dp_config enable_balance, timeout_iters N; default off)"),
    ("--cold-prefill-ms", "cold_prefill_s", ms_as_s, "MS",
     "one-time extra time of the server's first prefill step (first use of its prefill kernels "
     "at the benchmark's shapes; default: the engine profile's fit, 0 for a server warmed up "
     "at those shapes)"),
    ("--pd-handoff-ms", "pd_handoff_s", ms_as_s, "MS",
     "disaggregated: a request's hand-off from prefill to decode beyond its KV transfer (the "
     "engine's transfer queues, their polling, the router's second hop; default: the engine "
     "profile's fit, 0 where none)"),
)


def launch_from(args):
    """The :class:`moesym.serving.engine.Launch` the flags give."""
    given = {field: getattr(args, field) for _, field, *_ in _LAUNCH_FLAGS
             if getattr(args, field) is not None}
    return Launch(**given)


def register(sub) -> None:
    p = sub.add_parser("simulate", help=COMMANDS["simulate"])
    add_model_hw(p)
    add_deployment(p)
    g = p.add_argument_group("benchmark client")
    g.add_argument("--concurrency", type=positive_int, default=None,
                   help="closed loop: requests in flight; all start at once, each finished "
                        "one is replaced (needs --num-prompts, default 10 x concurrency)")
    g.add_argument("--request-rate", type=positive_float, default=None, metavar="R",
                   help="open loop: Poisson arrivals, R requests per second (with --duration "
                        "or --num-prompts)")
    g.add_argument("--num-prompts", type=positive_int, default=None)
    g.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="open loop: seconds of arrivals")
    g.add_argument("--isl", type=positive_int, default=None, help="prompt tokens per request")
    g.add_argument("--osl", type=positive_int, default=None, help="output tokens per request")
    g.add_argument("--isl-dist", default=None, metavar="DIST",
                   help="prompt lengths drawn from fixed:N, uniform:A:B, lognormal:MEAN:SIGMA "
                        "or a file of lengths")
    g.add_argument("--osl-dist", default=None, metavar="DIST", help="output lengths, as --isl-dist")
    g.add_argument("--random-range-ratio", type=probability, default=None, metavar="R",
                   help="lengths as the engine's benchmark draws them around --isl/--osl "
                        "(SGLang: uniform in [R x N, N]; vLLM: [(1-R) N, (1+R) N])")
    g.add_argument("--lengths-file", default=None, metavar="CSV",
                   help="isl,osl pairs, one request per line (repeated in order)")
    g.add_argument("--warmup-requests", type=nonneg_int, default=0, metavar="N",
                   help="leave the first N requests sent out of the statistics (default 0: the "
                        "benchmark tools measure every request, the initial burst included)")
    g.add_argument("--seed", type=nonneg_int, default=0)
    e = p.add_argument_group("engine launch flags (default: the engine profile's)")
    for flag, field, kind, meta, help_ in _LAUNCH_FLAGS:
        e.add_argument(flag, dest=field, type=kind, default=None, metavar=meta, help=help_)
    d = p.add_argument_group("disaggregated serving (prefill and decode replicas)")
    d.add_argument("--disaggregate", default=None, metavar="P:D",
                   help="P prefill replicas and D decode replicas; the deployment flags above "
                        "are a decode replica's, --prefill-* a prefill replica's")
    d.add_argument("--prefill-gpus", type=positive_int, default=None,
                   help="GPUs of a prefill replica (default: --gpus)")
    d.add_argument("--prefill-tp", type=positive_int, default=None, help="default: --tp")
    d.add_argument("--prefill-ep", type=positive_int, default=None,
                   help="default: the prefill replica's GPUs")
    d.add_argument("--prefill-micro-batches", type=positive_int, default=None,
                   help="default: --micro-batches")
    s = p.add_argument_group("service level")
    s.add_argument("--ttft-ms", type=positive_float, default=None, help="goodput: TTFT limit")
    s.add_argument("--tpot-ms", type=positive_float, default=None, help="goodput: TPOT limit")
    add_cost(p)
    add_json(p)
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw the time series (running, queue, KV use, prefill tokens)")
    p.add_argument("--timeline-points", type=positive_int, default=500,
                   help="steps kept in the JSON time series (evenly spaced)")
    p.set_defaults(func=run)


def _lengths_args(args) -> tuple[str, str]:
    if args.lengths_file:
        given = [f for f in ("isl", "osl", "isl_dist", "osl_dist") if getattr(args, f)]
        if given:
            raise MoesymError(f"--lengths-file gives both lengths: drop --{given[0].replace('_', '-')}")
        return "", ""
    out = []
    for name in ("isl", "osl"):
        n, dist = getattr(args, name), getattr(args, f"{name}_dist")
        if n is not None and dist is not None:
            raise MoesymError(f"--{name} and --{name}-dist: give one")
        if n is None and dist is None:
            raise MoesymError(f"simulate needs --{name} N (or --{name}-dist, or --lengths-file)")
        if dist is None and args.random_range_ratio is not None:
            tool = "vllm" if engine_from(args) == "vllm" else "sglang"
            dist = range_ratio(n, args.random_range_ratio, tool)
        out.append(dist or str(n))
    return out[0], out[1]


def run(args) -> int:


    pricing = pricing_from(args)
    model, hw = model_hw_from(args)
    dep = eplb_slots(model, deployment_from(args))
    if dep.pp > 1 or dep.cp > 1:
        raise MoesymError("simulate: --pp and --cp are not simulated (one pipeline stage, no "
                          "context parallelism); use predict --phase serve for them")
    if dep.mesh is not None:
        raise MoesymError("simulate: a --mesh deployment has no engine scheduler profile here; "
                          "use predict --phase serve")
    client = Client(args.concurrency, args.request_rate, args.num_prompts, args.duration)
    isl, osl = _lengths_args(args)
    check_inputs(model, hw, dep)
    if args.isl is not None and args.osl is not None:  # fixed lengths (a distribution: sampled)
        check_lengths(model, "serve", isl=args.isl, osl=args.osl)
    _check_work(args, client, dep, isl, osl)
    limits = {"ttft_s": args.ttft_ms / 1e3 if args.ttft_ms else None,
              "tpot_s": args.tpot_ms / 1e3 if args.tpot_ms else None}
    kw = dict(engine=dep.engine, seed=args.seed, pairs=args.lengths_file,
              launch=launch_from(args),
              limits=limits if any(v is not None for v in limits.values()) else None,
              timeline_points=args.timeline_points, warmup=args.warmup_requests,
              progress=True)  # a bar of the requests finished, on a terminal only
    replicas = _replicas(args)
    if replicas is None:
        r = simulate(model, hw, dep, client, isl, osl, **kw)
    else:
        r = simulate_disaggregated(model, hw, _prefill_deployment(args, model, dep), dep,
                                   replicas, client, isl, osl, **kw)
    r.update(economics(hw, r["output_tokens_per_gpu_s"], r["input_tokens_per_gpu_s"],
                       r["gpu_utilization"], pricing))
    if args.plot:
        serving_timeline(r["timeline"], args.plot, f"{model.name} on {dep.gpus} x {hw.name}, "
                                                   f"{r['engine']['name']}")
    if args.json:
        emit_json(r)
        return 0
    _print(r, model, hw, dep, client)
    return 0


def _replicas(args):
    """(P, D) of --disaggregate, or None (aggregated; --prefill-* then refused)."""
    given = [f for f in ("prefill_gpus", "prefill_tp", "prefill_ep", "prefill_micro_batches")
             if getattr(args, f) is not None]
    if args.disaggregate is None:
        if given:
            raise MoesymError(f"--{given[0].replace('_', '-')} sizes a prefill replica: add "
                              "--disaggregate P:D")
        return None
    try:
        p, d = (int(x) for x in args.disaggregate.split(":"))
        if p <= 0 or d <= 0:
            raise ValueError
    except ValueError:
        raise MoesymError(f"--disaggregate {args.disaggregate!r}: use P:D, the numbers of "
                          "prefill and decode replicas, e.g. 1:2") from None
    return p, d


def _prefill_deployment(args, model, dep):
    """A prefill replica's deployment: the decode replica's with --prefill-* applied."""

    gpus = args.prefill_gpus or dep.gpus
    try:
        out = replace(dep, gpus=gpus, tp=args.prefill_tp or dep.tp,
                      ep=args.prefill_ep or (gpus if args.prefill_gpus else dep.ep),
                      micro_batches=args.prefill_micro_batches or dep.micro_batches,
                      redundant_experts=0)
        out = eplb_slots(model, out)
        out.check_model(model)
    except MoesymError as exc:
        raise MoesymError(f"prefill replica (--prefill-gpus/--prefill-tp/--prefill-ep): "
                          f"{exc}") from None
    return out


def _mean_lengths(args, isl: str, osl: str) -> tuple[float, float]:
    """Mean prompt and output lengths of the run (a sample of 1,000 of a distribution)."""
    a, b = lengths(1000, isl, osl, seed=args.seed, pairs=args.lengths_file)
    return float(a.mean()), float(b.mean())


def work_estimate(client, dp: int, isl_mean: float, osl_mean: float) -> dict:
    """The size of a simulation before it runs: ``requests``, output ``tokens`` (request-steps),
    ``steps`` (rank-steps), ``bytes`` and wall ``seconds`` (the measured costs above), and the
    simulated ``span_s`` of an open loop's arrivals. Steps: a closed loop's ranks each hold up to
    ``concurrency / dp`` requests (at most 1,024, an engine's usual cap); an open loop's hold
    about ``rate x osl x 20 ms`` (Little's law at a typical 20 ms decode step), at least one."""
    rate = client.request_rate
    if client.closed:
        n = float(client.num_prompts or 10 * client.concurrency)
        held = client.concurrency / dp
        span = 0.0
    else:
        n = float(client.num_prompts) if client.num_prompts else rate * client.duration_s
        held = rate * osl_mean * 0.02 / dp
        span = n / rate if client.num_prompts else client.duration_s
    tokens = n * osl_mean
    steps = tokens / max(1.0, min(held, 1024.0)) + n * isl_mean / 8192.0
    return {"requests": n, "tokens": tokens, "steps": steps, "span_s": span,
            "bytes": tokens * _TOKEN_B + steps * _STEP_B + n * _REQUEST_B,
            "seconds": tokens * _TOKEN_S + steps * _STEP_S}


def _check_work(args, client, dep, isl: str, osl: str) -> None:
    """Refuse, in one line with the estimate and the flag to change, a run that would not
    finish in :data:`_MAX_WALL_S` or fit in :data:`_MAX_BYTES` (or whose arrivals span more than
    :data:`_MAX_SPAN_S`); say up front one that takes over a minute."""
    isl_mean, osl_mean = _mean_lengths(args, isl, osl)
    w = work_estimate(client, dep.dp, isl_mean, osl_mean)
    if client.closed:
        fix = ("--num-prompts" if client.num_prompts else
               "--concurrency (--num-prompts defaults to 10 x --concurrency) or give --num-prompts")
    else:
        fix = "--num-prompts" if client.num_prompts else "--duration or --request-rate"
    if w["span_s"] > _MAX_SPAN_S:
        given = (f"--request-rate {client.request_rate:g} with --num-prompts "
                 f"{client.num_prompts}" if client.num_prompts else
                 f"--duration {client.duration_s:g}")
        raise MoesymError(f"{given}: arrivals would span {w['span_s']:.3g} s of simulated "
                          f"time, beyond {_MAX_SPAN_S:g} s (about 32 years), where the "
                          "simulation's clock no longer resolves a step; "
                          + ("raise --request-rate" if client.num_prompts else
                             "shorten --duration"))
    what = (f"about {w['requests']:.3g} requests x {osl_mean:.4g} output tokens "
            f"({w['tokens']:.3g} request-steps, {w['steps']:.3g} rank-steps): about "
            f"{_amount(w['bytes'], 'B')} of memory and {_duration(w['seconds'])}")
    if not (w["bytes"] <= _MAX_BYTES and w["seconds"] <= _MAX_WALL_S):
        raise MoesymError(f"simulate: {what}, beyond this command's bounds "
                          f"({_amount(_MAX_BYTES, 'B')}, {_duration(_MAX_WALL_S)}); lower {fix} "
                          "(a few thousand requests give stable percentiles)")
    if w["seconds"] > _SAY_WALL_S:
        warnings.warn(f"simulate: {what}; fewer requests ({fix}) give the same percentiles "
                      "sooner", stacklevel=2)


def _amount(x: float, unit: str) -> str:
    """``x`` with an SI prefix (2.1 GB); an infinite or NaN amount as 'unbounded'."""
    if not math.isfinite(x):
        return "unbounded " + unit
    for p, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def _duration(s: float) -> str:
    if not math.isfinite(s):
        return "unbounded time"
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    return f"{s / 60:.3g} min" if s >= 60 else f"{s:.3g} s"


def _print(r, model, hw, dep, client) -> None:
    e = r["engine"]
    how = (f"concurrency {client.concurrency}" if client.closed
           else f"{client.request_rate:g} requests/s")
    x = r.get("disaggregation")
    chunk = (f"prefill chunk {x['prefill_chunk_tokens']}" if x else f"chunk {e['chunk_tokens']}")
    print(f"{model.name} on {dep.gpus} x {hw.name}  tp={dep.tp} ep={dep.ep} "
          f"weights={dep.weights}  engine {e['name']}"
          f"{'' if e['version'] in e['name'] else ' ' + e['version']} ({e['policy']}, {chunk}, "
          f"{e['dp_ranks']} DP rank(s){' per decode replica' if x else ''})")
    skip = f" after {r['warmup_requests']} warm-up" if r["warmup_requests"] else ""
    print(f"  {r['requests']} requests{skip}, {how}, {r['duration_s']:.2f} s simulated "
          f"({r['steps']} steps, {r['preemptions']} preemptions)")
    print(f"  {'':<6} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}")
    for k in ("ttft", "tpot", "itl", "e2e"):
        s = r[f"{k}_ms"]
        print(f"  {k.upper():<6} " + " ".join(f"{fmt_s(s[p] / 1e3):>10}"
                                              for p in ("mean", "p50", "p90", "p99")))
    print(f"  output tok/GPU/s {r['output_tokens_per_gpu_s']:.1f}   input tok/GPU/s "
          f"{r['input_tokens_per_gpu_s']:.1f}   requests/s {r['requests_per_s']:.3g}")
    print(f"  cost, power      {text_line(r)}")
    parts = r.get("ttft_components_ms") or {}
    if parts:
        print("  TTFT mean made of  " + ", ".join(f"{k.replace('_', ' ')} {fmt_s(v / 1e3)}"
                                                  for k, v in parts.items()))
    if "disaggregation" in r:
        x = r["disaggregation"]
        print(f"  disaggregated    {x['prefill_replicas']} prefill x {x['prefill_gpus']} GPUs + "
              f"{x['decode_replicas']} decode x {x['decode_gpus']} GPUs ({x['gpus']} GPUs; per "
              f"GPU rates over all), KV transfer {x['kv_transfer_ms']['mean']:.2f} ms mean"
              + (f" (a {x['pd_handoff_ms']:.0f} ms hand-off in it)" if x["pd_handoff_ms"]
                 else ""))
    if "goodput" in r:
        g = r["goodput"]
        print(f"  goodput          {g['share_meeting_slo']:.1%} of requests meet the limits, "
              f"{g['requests_per_s']:.3g} requests/s")
