"""``moesym optimize``: best deployment and Pareto front under latency and memory limits."""

from __future__ import annotations

import math
from dataclasses import replace

from ..engines.emit import ENGINES, check_engine, launch_command
from ..errors import MoesymError
from ..model.predictor import predict
from ..numbers.economics import economics, serve_busy_share, text_line
from ..plan.rules import check_inputs, check_lengths, check_pipeline
from ..report.plots import pareto_plot
from ..search.optimize import disaggregate, optimize
from ..serving.sla import optimize_sla, optimize_sla_disaggregated
from ..specs.deployment import A2AMode, Phase, Workload
from ..specs.lengths import representative
from . import COMMANDS
from .common import (add_cost, add_deployment, add_json, add_model_hw, add_serve_lengths,
                     deployment_from, emit_json, fmt_s, model_hw_from, positive_float,
                     positive_int, pricing_from, print_launch, probability, stages)
from .report import write_report

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("optimize", help=COMMANDS["optimize"])
    add_model_hw(p)
    p.add_argument("--phase", choices=("prefill", "decode", "serve"), required=True)
    p.add_argument("--context", type=positive_int, default=None,
                   help="prompt length (prefill) or mean KV length (decode); serve takes "
                        "--isl and --osl")
    add_serve_lengths(p, "serve (")
    p.add_argument("--context-dist", default=None, metavar="DIST",
                   help="decode: KV lengths as a distribution (fixed:N, uniform:A:B, "
                        "lognormal:MEAN:SIGMA or a file of lengths) instead of one --context")
    p.add_argument("--isl-dist", default=None, metavar="DIST",
                   help="prefill, serve: prompt lengths as a distribution (as --context-dist) "
                        "instead of one --context (prefill) or --isl (serve)")
    p.add_argument("--prefix-hit", type=probability, default=0.0, metavar="F",
                   help="prefill, serve: share of each prompt found in the prefix cache (as "
                        "predict's)")
    p.add_argument("--tpot-ms", type=positive_float, default=None)
    p.add_argument("--ttft-ms", type=positive_float, default=None)
    p.add_argument("--percentile", type=positive_float, default=None, metavar="P",
                   help="serve: hold --ttft-ms / --tpot-ms at the P-th percentile of a "
                        "simulated benchmark (moesym simulate) and search the concurrency too")
    p.add_argument("--max-size", type=positive_int, default=1 << 15,
                   help="largest batch (decode) or tokens (prefill) per DP rank to consider")
    p.add_argument("--disaggregate", default=None, metavar="IN:OUT",
                   help="also size prefill/decode pools for prompts of IN and outputs of OUT tokens")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="write the Pareto front")
    p.add_argument("--emit", choices=ENGINES, default=None,
                   help="also print the engine's launch command for the best deployment")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write the report page of the best deployment, with the Pareto front")
    p.add_argument("--interactive", action="store_true",
                   help="with --report: write the what-if page of the best deployment instead "
                        "(as report --interactive)")
    add_deployment(p, search=True)
    p.add_argument("--max-points", type=positive_int, default=MAX_POINTS, metavar="N",
                   help=f"refuse a search of more points (candidate deployments x sizes up to "
                        f"--max-size) than N before it starts (default {MAX_POINTS:,})")
    add_cost(p)
    add_json(p)
    p.set_defaults(func=run)


MAX_POINTS = 200_000_000  # candidates x sizes a search starts without --max-points


def _bound(args, model) -> None:
    """Refuse a search of more (deployment, size) points than ``--max-points``, counted before
    it starts: every TP (EP) a divisor of --gpus and of the heads (experts) unless listed, each
    micro-batch count, A2A mode, pipeline and context degree and expert-cache size, each over
    sizes up to --max-size."""

    g = args.gpus
    divisors = {d for i in range(1, math.isqrt(g) + 1) if g % i == 0 for d in (i, g // i)}
    tps = [d for d in divisors if model.num_heads % d == 0]
    experts = model.num_experts + args.redundant_experts
    eps = [d for d in divisors if not model.is_moe or experts % d == 0]
    caches = args.expert_cache
    n_cache = (len(caches) if isinstance(caches, list) else 1 if caches is None else 64)
    candidates = (len(args.tp or tps) * len(args.ep or eps)
                  * len(args.micro_batches or (1, 2)) * len(args.a2a or list(A2AMode))
                  * len(args.pp or (1,)) * len(args.cp or (1,)) * n_cache)
    points = candidates * args.max_size
    if points > args.max_points:
        argv = getattr(args, "argv", ())
        said = lambda flag: flag if any(a == flag or a.startswith(flag + "=")  # noqa: E731
                                        for a in argv) else f"the default {flag}"
        raise MoesymError(f"--gpus {g} with {said('--max-size')} {args.max_size:,} gives up to "
                          f"{points:,} points ({candidates:,} candidate deployments x "
                          f"{args.max_size:,} sizes), beyond {said('--max-points')} "
                          f"{args.max_points:,}; list --tp / --ep, lower --max-size or raise "
                          "--max-points")


def _check(args, model, base) -> None:
    """The validation stage on the search's fixed parts: the base deployment (its sharding is
    checked per candidate), the deepest pipeline listed and the lengths."""

    check_inputs(model, None, base, sharding=False)
    check_pipeline(model, max(args.pp or (1,)))
    if args.phase == "serve":
        if args.isl and args.osl:
            check_lengths(model, Phase.SERVE, isl=args.isl, osl=args.osl)
    elif args.context:
        check_lengths(model, args.phase, context=args.context)


def run(args) -> int:
    if args.mesh is not None or any(m.value == "ring-mcast" for m in args.a2a or ()):
        raise MoesymError("--mesh / --a2a ring-mcast: optimize does not search mesh deployments "
                          "yet; compare them with moesym predict --mesh RxC")
    if args.phase == "prefill" and args.tpot_ms is not None:
        raise MoesymError("--tpot-ms limits decode steps; a prefill search takes --ttft-ms")
    if args.phase == "decode" and args.ttft_ms is not None and not args.disaggregate:
        raise MoesymError("--ttft-ms limits prefill; a decode search takes --tpot-ms (or add "
                          "--disaggregate IN:OUT to size both pools)")
    if args.context_dist is not None and args.phase != "decode":
        raise MoesymError(f"--context-dist describes decode KV lengths; a {args.phase} search "
                          "takes --isl-dist")
    if args.isl_dist is not None and args.phase == "decode":
        raise MoesymError("--isl-dist describes prompt lengths (prefill, serve); a decode search "
                          "takes --context-dist")
    if args.phase == "serve":
        if args.isl_dist is not None and args.isl is not None:
            raise MoesymError("--isl and --isl-dist both give the prompt lengths; keep one")
        missing = [f"--{f}" for f in ("isl", "osl") if getattr(args, f) is None
                   and not (f == "isl" and args.isl_dist is not None)]
        if missing:
            raise MoesymError(f"--phase serve needs {' and '.join(missing)}, e.g. --isl 1024 "
                              "--osl 2048 (or --isl-dist DIST)")
        if args.context is not None:
            raise MoesymError("--context has no effect on --phase serve (the mean KV length is "
                              "--isl + --osl / 2); drop it")
    else:
        dist = "--context-dist" if args.phase == "decode" else "--isl-dist"
        given = args.context_dist if args.phase == "decode" else args.isl_dist
        if given is not None and args.context is not None:
            what = "KV" if args.phase == "decode" else "prompt"
            raise MoesymError(f"--context and {dist} both give the {what} lengths; keep one")
        if args.context is None and given is None:
            raise MoesymError(f"--phase {args.phase} needs --context (prompt length or mean KV "
                              f"length) or {dist}")
        for flag in ("isl", "osl", "chunk"):
            if getattr(args, flag) is not None:
                raise MoesymError(f"--{flag} sets --phase serve; a {args.phase} search takes "
                                  "--context")
    pricing = pricing_from(args, applies=args.phase == "serve")
    if args.percentile is not None:
        return _run_sla(args, pricing)
    io = None
    if args.disaggregate:  # checked before the search, which takes seconds
        try:
            io = tuple(int(x) for x in args.disaggregate.split(":"))
            if len(io) != 2 or min(io) <= 0:
                raise ValueError
        except ValueError:
            raise MoesymError(f"--disaggregate {args.disaggregate!r}: use IN:OUT, two positive "
                              "token counts (prompt and output lengths), e.g. 4096:1024") from None
    model, hw = model_hw_from(args)
    _bound(args, model)
    base = deployment_from(args)
    _check(args, model, base)
    if args.emit:  # an engine that cannot run here is refused before the search
        check_engine(args.emit, hw, base, model)
    lengths = ()
    dist = args.context_dist if args.phase == "decode" else args.isl_dist
    if dist is not None:
        lengths = representative(dist, "--context-dist" if args.phase == "decode" else
                                 "--isl-dist")
        mean = max(1, int(round(sum(lengths) / len(lengths))))  # reports and --emit: the mean
        if args.phase == "serve":
            args.isl = mean
        else:
            args.context = mean
    r = optimize(model, hw, args.gpus, args.phase, args.context or 0,
                 tpot_s=args.tpot_ms / 1e3 if args.tpot_ms else None,
                 ttft_s=args.ttft_ms / 1e3 if args.ttft_ms else None, base=base,
                 max_size=args.max_size, micro_batches=tuple(args.micro_batches or (1, 2)),
                 a2a_modes=args.a2a, tps=args.tp, eps=args.ep, progress=not args.json,
                 isl=args.isl or 0, osl=args.osl or 0, chunk=args.chunk or 0,
                 expert_caches=args.expert_cache, prefix_hit=args.prefix_hit,
                 lengths=lengths, pps=args.pp, cps=args.cp)
    out = {"best": r.best, "pareto": r.pareto}
    if args.phase == "serve":
        _cost(out, args, model, hw, base, pricing)
    if args.plot:
        pareto_plot(r.table, r.pareto, args.plot)
    if io is not None:
        i, o = io
        out["disaggregation"] = disaggregate(model, hw, args.gpus, args.gpus, i, o,
                                             ttft_s=args.ttft_ms / 1e3 if args.ttft_ms else None,
                                             tpot_s=args.tpot_ms / 1e3 if args.tpot_ms else None,
                                             base=base)
    if args.emit:
        out["launch"] = _launch(args, model, hw, base, r.best)
    if args.report:
        dep, wl = _best_deployment(args, model, base, r.best)
        out["report"] = str(write_report(args.report, model, hw, dep, wl, args.argv, r,
                                         interactive=args.interactive))
    if args.json:
        emit_json(out)
        return 0
    b = r.best
    size = "batch" if "batch" in b else "tokens"
    what = "output tokens/GPU/s" if args.phase == "serve" else "tokens/GPU/s"
    cache = (f" pp={b['pp']}" if "pp" in b else "") + (f" cp={b['cp']}" if "cp" in b else "") + (
        f" expert-cache={b['expert_cache']}" if "expert_cache" in b else "")
    print(f"best: tp={b['tp']} ep={b['ep']}{stages(b)} micro-batches={b['micro_batches']} a2a={b['a2a']}{cache} "
          f"{size}={b[size]}  {b['tokens_per_gpu_s']:.1f} {what}  step {fmt_s(b['step_time_s'])}")
    if args.phase == "serve":
        print(f"      input {b['input_tokens_per_gpu_s']:.1f} tokens/GPU/s  TPOT "
              f"{fmt_s(b['tpot_s'])}  TTFT {fmt_s(b['ttft_s'])} (queueing ignored)  chunk "
              f"{b['chunk_tokens']}")
        print(f"      {text_line(b)}")
    print("pareto front (tokens/GPU/s vs tokens/user/s):")
    for p in r.pareto:
        cache = (f" pp={p['pp']}" if "pp" in p else "") + (f" cp={p['cp']}" if "cp" in p else "") + (
            f" cache={p['expert_cache']:<4}" if "expert_cache" in p else "")
        print(f"  tp={p['tp']:<3} ep={p['ep']:<4} mb={p['micro_batches']}{cache} {size}={p[size]:<6} "
              f"{p['tokens_per_gpu_s']:10.1f} {p['tokens_per_user_s']:10.2f}")
    if "report" in out:
        print(f"wrote {out['report']}")
    if "launch" in out:
        print_launch(out["launch"])
    if "disaggregation" in out:
        d = out["disaggregation"]
        print(f"prefill:decode GPU ratio {d['prefill_to_decode_gpu_ratio']:.3f}, "
              f"{d['requests_per_gpu_s']:.3f} requests/GPU/s disaggregated")
        if d.get("aggregated"):
            print(f"aggregated (--phase serve): {d['aggregated_requests_per_gpu_s']:.3f} "
                  f"requests/GPU/s; disaggregated / aggregated = "
                  f"{d['disaggregated_over_aggregated']:.2f}")
    return 0


#: the cost and power keys an optimize answer also gives at its top level (the best's)
_COST_KEYS = ("usd_per_million_output_tokens", "usd_per_million_tokens", "gpu_watts",
              "all_in_watts_per_gpu", "joules_per_output_token", "output_tokens_per_s_per_mw")


def _cost(out: dict, args, model, hw, base, pricing, power: bool = True) -> None:
    """Cost and power (moesym.numbers.economics) of the best serving deployment, from
    predict's steady state at its batch (``power`` False: cost only), into ``best`` and the
    answer's top level; each Pareto point's cost where the price per GPU-hour does not depend
    on its power (not --capex)."""
    b = out["best"]
    rate = lambda p, k: p.get(k, p["tokens_per_gpu_s"] if k.startswith("output") else 0.0)  # noqa: E731
    u = None
    if power:
        dep, wl = _best_deployment(args, model, base, b)
        u = serve_busy_share(predict(model, hw, dep, wl, memory=False))
    b.update(economics(hw, rate(b, "output_tokens_per_gpu_s"), rate(b, "input_tokens_per_gpu_s"),
                       u, pricing))
    out.update({k: b[k] for k in _COST_KEYS})
    if not pricing.owned:
        for p in out.get("pareto", ()):
            e = economics(hw, rate(p, "output_tokens_per_gpu_s"),
                          rate(p, "input_tokens_per_gpu_s"), None, pricing)
            p.update({k: e[k] for k in _COST_KEYS[:2]})


def _best_deployment(args, model, base, best: dict):
    """(deployment, workload) of the optimizer's best answer at its batch (or tokens)."""

    dep = replace(base, gpus=args.gpus, tp=best["tp"], ep=best["ep"], pp=best.get("pp", base.pp),
                  cp=best.get("cp", base.cp), micro_batches=best["micro_batches"],
                  a2a=A2AMode(best["a2a"]))
    if "expert_cache" in best:
        dep = replace(dep, expert_cache=best["expert_cache"])
    ph = Phase(args.phase)
    if ph is Phase.PREFILL:
        wl = Workload(ph, tokens=best["tokens"], context=args.context, prefix_hit=args.prefix_hit)
    elif ph is Phase.SERVE:
        wl = Workload(ph, batch=best["batch"], isl=args.isl, osl=args.osl, prefix_hit=args.prefix_hit,
                      chunk=best.get("chunk_tokens", 0))
    else:
        wl = Workload(ph, batch=best["batch"], context=args.context)
    return dep, wl


def _launch(args, model, hw, base, best: dict) -> dict:
    """The launch command of the optimizer's best deployment at its batch (or tokens)."""
    dep, wl = _best_deployment(args, model, base, best)
    return launch_command(args.emit, model, dep, wl, hw)


def _run_sla(args, pricing) -> int:
    """``--percentile``: the steady state's short list simulated (moesym.serving.sla)."""

    if args.phase != "serve":
        raise MoesymError("--percentile holds serving latencies: use --phase serve with --isl "
                          "and --osl")
    for flag in ("isl_dist", "expert_cache"):
        if getattr(args, flag, None) is not None:
            raise MoesymError(f"--{flag.replace('_', '-')} is not searched with --percentile; "
                              "drop one of them")
    if args.prefix_hit:
        raise MoesymError("--prefix-hit is not simulated; drop it or --percentile")
    if args.disaggregate is not None and args.disaggregate != f"{args.isl}:{args.osl}":
        raise MoesymError(f"--disaggregate {args.disaggregate}: with --percentile the pools "
                          f"serve --isl {args.isl} --osl {args.osl}; give --disaggregate "
                          f"{args.isl}:{args.osl}")
    model, hw = model_hw_from(args)
    _bound(args, model)
    base = deployment_from(args)
    _check(args, model, base)
    search = optimize_sla_disaggregated if args.disaggregate else optimize_sla
    r = search(model, hw, args.gpus, base, args.isl, args.osl,
               ttft_s=args.ttft_ms / 1e3 if args.ttft_ms else None,
               tpot_s=args.tpot_ms / 1e3 if args.tpot_ms else None,
               percentile=args.percentile, engine=base.engine, progress=not args.json,
               micro_batches=tuple(args.micro_batches or (1, 2)), a2a_modes=args.a2a,
               tps=args.tp, eps=args.ep, max_size=args.max_size, chunk=args.chunk or 0,
               pps=args.pp)
    # the disaggregated pools' power is not modeled here: their cost only
    _cost(r, args, model, hw, base, pricing, power=not args.disaggregate)
    if args.json:
        emit_json(r)
        return 0
    return _print_sla(r, _pools if args.disaggregate else _layout)


def _layout(c: dict) -> str:
    return f"tp={c['tp']:<3} ep={c['ep']:<4} mb={c['micro_batches']} a2a={c['a2a']:<13}"


def _pools(c: dict) -> str:
    p, d = c["prefill"], c["decode"]
    return (f"{c['prefill_replicas']} x prefill (tp={p['tp']} ep={p['ep']} mb={p['micro_batches']},"
            f" {p['gpus']} GPUs) + {c['decode_replicas']} x decode (tp={d['tp']} ep={d['ep']} "
            f"mb={d['micro_batches']}, {d['gpus']} GPUs) = {c['gpus_used']} GPUs:")


def _print_sla(r: dict, describe) -> int:
    """The SLA search's answer and short list, each deployment (or pair of pools) by
    ``describe``."""
    b, q = r["best"], f"p{r['percentile']:g}"
    kind = "pools, disaggregated" if r.get("disaggregated") else "deployment"
    xfer = f", KV transfer {b['kv_transfer_ms']['mean']:.2f} ms" if "kv_transfer_ms" in b else ""
    print(f"best {kind} under {q} limits ({r['engine']} scheduler simulated): {describe(b)} "
          f"concurrency={b['concurrency']}  {b['tokens_per_gpu_s']:.1f} output tokens/GPU/s")
    print(f"      TTFT {q} {fmt_s(b[f'ttft_{q}_s'])} (mean {fmt_s(b['ttft_mean_s'])}{xfer})  TPOT "
          f"{q} {fmt_s(b[f'tpot_{q}_s'])} (mean {fmt_s(b['tpot_mean_s'])})  binding: "
          f"{', '.join(b['binding'])}")
    print(f"      {text_line(b)}")
    print("short list (steady state, then simulated):")
    for c in r["candidates"]:
        if c["meets"]:
            print(f"  {describe(c)} concurrency {c['concurrency']:<6} "
                  f"{c['tokens_per_gpu_s']:10.1f} tokens/GPU/s  binding: {', '.join(c['binding'])}")
        else:
            print(f"  {describe(c)} misses {', '.join(c['binding'])} even at one request per rank")
    return 0
