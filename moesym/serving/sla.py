"""The best deployment under a service-level objective on percentiles (``moesym optimize
--phase serve --percentile P``).

The steady-state search (:func:`moesym.optimize.optimize`, ``--phase serve``: every TP, EP,
micro-batch and all-to-all choice, queueing ignored) proposes a short list: the best few
deployments by output tokens per GPU per second that meet the limits in the steady state. Each
is then simulated (:class:`moesym.serving.Simulation`, a closed-loop benchmark as the engines'
tools run it: all requests start at once, each finished one is replaced) at a growing, then
bisected, concurrency (a multiple of the attention DP ranks), each run sending three rounds of
requests and measuring the last two (an SLA holds a service in steady operation, so the
initial burst of the first round is warm-up): the largest concurrency whose P-th percentile
TTFT and TPOT meet the limits is kept, assuming both grow with concurrency
to within 1/16 (the search says which limit failed at the concurrency above: the binding
constraint). The
answer is the short-listed deployment with the most simulated output tokens per GPU per second.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import MoesymError

__all__ = ["optimize_sla", "percentile_latencies"]

#: requests each simulation sends per request in flight (the closed loop's rounds)
ROUNDS = 3


def percentile_latencies(run, q: float, warmup: int = 0) -> dict:
    """TTFT and TPOT (s) at percentile ``q`` of a simulated run's requests after ``warmup``."""
    from .stats import per_request

    pr = per_request(run, warmup)
    out = {"ttft_s": float(np.percentile(pr["ttft"], q))}
    out["tpot_s"] = float(np.percentile(pr["tpot"], q)) if len(pr["tpot"]) else 0.0
    return out


def _key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ("tp", "ep", "micro_batches", "a2a", "pp", "expert_cache"))


def optimize_sla(model, hw, gpus: int, base, isl: int, osl: int, *, ttft_s=None, tpot_s=None,
                 percentile: float = 90.0, engine=None, shortlist: int = 4, seed: int = 0,
                 progress: bool = False, **search) -> dict:
    """Best deployment and concurrency under ``ttft_s`` / ``tpot_s`` at ``percentile``
    (module docstring). ``search``: more arguments of :func:`moesym.optimize.optimize`
    (``tps``, ``eps``, ``micro_batches``, ``a2a_modes``, ``chunk``, ``max_size``)."""
    from ..engines import load_engine
    from ..optimize import optimize, pareto_front
    from ..progress import progress_bar
    from . import Simulation
    from .clients import Client
    from .stats import report

    if ttft_s is None and tpot_s is None:
        raise MoesymError("--percentile needs a limit: --ttft-ms and/or --tpot-ms")
    if not 0 < percentile <= 100:
        raise MoesymError(f"--percentile {percentile}: must be in (0, 100], e.g. 90 or 99")
    engine = base.engine if engine is None else engine
    profile = load_engine(engine) if isinstance(engine, str) else engine
    steady = optimize(model, hw, gpus, "serve", 0, tpot_s=tpot_s, ttft_s=ttft_s, base=base,
                      isl=isl, osl=osl, progress=progress, **search)
    best_rows: dict = {}
    for r in steady.rows:
        k = _key(r)
        if k not in best_rows or r["tokens_per_gpu_s"] > best_rows[k]["tokens_per_gpu_s"]:
            best_rows[k] = r
    short = sorted(best_rows.values(), key=lambda r: -r["tokens_per_gpu_s"])[:shortlist]
    limits = {"ttft_s": ttft_s, "tpot_s": tpot_s}
    out = []
    for row in progress_bar(short, "optimize: simulate", progress):
        from ..specs.deployment import A2AMode

        dep = replace(base, gpus=gpus, tp=row["tp"], ep=row["ep"],
                      micro_batches=row["micro_batches"], a2a=A2AMode(row["a2a"]),
                      pp=row.get("pp", base.pp))
        if "expert_cache" in row:
            dep = replace(dep, expert_cache=row["expert_cache"])
        sim = Simulation(model, hw, dep, profile, chunk=search.get("chunk") or None)
        seen: dict = {}

        def trial(b: int):
            if b not in seen:
                c = b * dep.dp
                run = sim.run(Client(concurrency=c, num_prompts=ROUNDS * c), str(isl), str(osl),
                              seed=seed)
                lat = percentile_latencies(run, percentile, warmup=c)
                fail = [k[:-2] for k, lim in limits.items() if lim is not None and lat[k] > lim]
                seen[b] = (not fail, fail, lat, run)
            return seen[b]

        b_ok, b_bad = 0, None
        b = max(1, int(row["batch"]))
        while True:  # grow from the steady state's batch until a limit fails
            if trial(b)[0]:
                b_ok = b
                if b >= 4 * max(1, int(row["batch"])) or b >= sim.cfg.max_running:
                    break
                b *= 2
            else:
                b_bad = b
                break
        lo, hi = b_ok, b_bad
        while hi is not None and hi - lo > max(1, lo // 16):  # bisect between the last that
            mid = (lo + hi) // 2                                # met and the first that failed
            if trial(mid)[0]:
                lo = mid
            else:
                hi = mid
        if lo == 0:
            out.append({**_dep_row(dep), "meets": False, "binding": trial(1)[1],
                        "at_concurrency_1": trial(1)[2]})
            continue
        ok, _, lat, run = trial(lo)
        rep = report(run, gpus, warmup=lo * dep.dp)
        binding = trial(hi)[1] if hi is not None else ["none up to 4x the steady state"]
        out.append({**_dep_row(dep), "meets": True, "concurrency": lo * dep.dp, "batch": lo,
                    "tokens_per_gpu_s": rep["output_tokens_per_gpu_s"],
                    "output_tokens_per_gpu_s": rep["output_tokens_per_gpu_s"],
                    "input_tokens_per_gpu_s": rep["input_tokens_per_gpu_s"],
                    "step_time_s": float(np.mean(run.step_s)),
                    f"ttft_p{percentile:g}_s": lat["ttft_s"], f"tpot_p{percentile:g}_s": lat["tpot_s"],
                    "ttft_mean_s": rep["ttft_ms"]["mean"] / 1e3,
                    "tpot_mean_s": rep["tpot_ms"]["mean"] / 1e3,
                    "tokens_per_user_s": 1e3 / rep["tpot_ms"]["mean"],
                    "binding": binding,
                    "fails_at_concurrency": hi * dep.dp if hi is not None else None,
                    "steady_state": {"batch": row["batch"],
                                     "tokens_per_gpu_s": row["tokens_per_gpu_s"]}})
    met = [r for r in out if r["meets"]]
    if not met:
        c1 = out[0]["at_concurrency_1"] if out else {}
        raise MoesymError(f"no short-listed deployment meets the p{percentile:g} limits even at "
                          f"one request per rank (best: TTFT {c1.get('ttft_s', 0) * 1e3:.1f} ms, "
                          f"TPOT {c1.get('tpot_s', 0) * 1e3:.2f} ms); relax --ttft-ms / --tpot-ms "
                          "or add GPUs")
    best = max(met, key=lambda r: r["tokens_per_gpu_s"])
    front = pareto_front(met, "tokens_per_gpu_s", "tokens_per_user_s")
    return {"best": best, "candidates": out, "pareto": front, "percentile": percentile,
            "engine": profile.name, "limits": limits}


def _dep_row(dep) -> dict:
    return {"tp": dep.tp, "ep": dep.ep, "micro_batches": dep.micro_batches,
            "a2a": dep.a2a.value, **({"pp": dep.pp} if dep.pp > 1 else {})}
