"""The best deployment under a service-level objective on percentiles (``moesym optimize
--phase serve --percentile P``).

The steady-state search (:func:`moesym.search.optimize.optimize`, ``--phase serve``: every TP, EP,
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

from ..engines import load_engine
from ..errors import MoesymError
from ..io.progress import progress_bar
from ..search.optimize import optimize, pareto_front
from ..specs.deployment import A2AMode, serve_kv_tokens
from . import DisaggregatedSimulation, Simulation
from .clients import Client
from .engine import Launch
from .stats import per_request, report

__all__ = ["optimize_sla", "optimize_sla_disaggregated", "percentile_latencies"]

#: requests each simulation sends per request in flight (the closed loop's rounds)
ROUNDS = 3


def percentile_latencies(run, q: float, warmup: int = 0) -> dict:
    """TTFT and TPOT (s) at percentile ``q`` of a simulated run's requests after ``warmup``."""
    pr = per_request(run, warmup)
    out = {"ttft_s": float(np.percentile(pr["ttft"], q))}
    out["tpot_s"] = float(np.percentile(pr["tpot"], q)) if len(pr["tpot"]) else 0.0
    return out


def _largest_meeting(trial, start: int, cap: int) -> tuple[int, int | None]:
    """Grow the per-rank batch from ``start`` (doubling, up to four times it or ``cap``) while
    ``trial(b)[0]`` holds, then bisect to within 1/16: (the largest that meets, 0 for none;
    the smallest that fails, None if none did)."""
    b_ok, b_bad = 0, None
    b = max(1, start)
    while True:
        if trial(b)[0]:
            b_ok = b
            if b >= 4 * max(1, start) or b >= cap:
                break
            b *= 2
        else:
            b_bad = b
            break
    lo, hi = b_ok, b_bad
    while hi is not None and hi - lo > max(1, lo // 16):  # bisect between the last that met
        mid = (lo + hi) // 2                              # and the first that failed
        if trial(mid)[0]:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _deployment(base, gpus: int, row: dict):
    """``base`` on ``gpus`` GPUs with the parallel layout of an optimizer row."""
    dep = replace(base, gpus=gpus, tp=row["tp"], ep=row["ep"],
                  micro_batches=row["micro_batches"], a2a=A2AMode(row["a2a"]),
                  pp=row.get("pp", base.pp))
    return replace(dep, expert_cache=row["expert_cache"]) if "expert_cache" in row else dep


def _check_limits(ttft_s, tpot_s, percentile) -> None:
    if ttft_s is None and tpot_s is None:
        raise MoesymError("--percentile needs a limit: --ttft-ms and/or --tpot-ms")
    if not 0 < percentile <= 100:
        raise MoesymError(f"--percentile {percentile}: must be in (0, 100], e.g. 90 or 99")


def _key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ("tp", "ep", "micro_batches", "a2a", "pp", "expert_cache"))


def optimize_sla(model, hw, gpus: int, base, isl: int, osl: int, *, ttft_s=None, tpot_s=None,
                 percentile: float = 90.0, engine=None, shortlist: int = 4, seed: int = 0,
                 progress: bool = False, **search) -> dict:
    """Best deployment and concurrency under ``ttft_s`` / ``tpot_s`` at ``percentile``
    (module docstring). ``search``: more arguments of :func:`moesym.search.optimize.optimize`
    (``tps``, ``eps``, ``micro_batches``, ``a2a_modes``, ``chunk``, ``max_size``)."""

    _check_limits(ttft_s, tpot_s, percentile)
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
        dep = _deployment(base, gpus, row)
        sim = Simulation(model, hw, dep, profile,
                         launch=Launch(chunk=search.get("chunk") or None))
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

        trial(max(1, int(row["batch"])))  # configures the simulation (its request cap)
        lo, hi = _largest_meeting(trial, int(row["batch"]), sim.cfg.max_running)
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


def _powers_of_two(upto: int):
    g = 1
    while g <= upto:
        yield g
        g *= 2


def _replicas(gpus: int, g_p: int, g_d: int, p_rate: float, d_rate: float) -> tuple[int, int]:
    """Prefill and decode replicas (P, D) of ``g_p`` and ``g_d`` GPUs within ``gpus`` that serve
    the most requests per second per GPU used in the steady state (``p_rate`` / ``d_rate``:
    requests per second one replica sustains); ties go to more GPUs."""
    best, key = (1, 1), (-1.0, 0)
    for d in range(1, (gpus - g_p) // g_d + 1):
        for p in range(1, (gpus - d * g_d) // g_p + 1):
            used = p * g_p + d * g_d
            k = (round(min(p * p_rate, d * d_rate) / used, 12), used)
            if k > key:
                best, key = (p, d), k
    return best


def optimize_sla_disaggregated(model, hw, gpus: int, base, isl: int, osl: int, *, ttft_s=None,
                               tpot_s=None, percentile: float = 90.0, engine=None,
                               shortlist: int = 2, seed: int = 0, progress: bool = False,
                               **search) -> dict:
    """Prefill and decode pools on ``gpus`` GPUs under ``ttft_s`` / ``tpot_s`` at
    ``percentile``: a prefill replica of the fewest GPUs (powers of two) whose best steady-state
    prefill deployment fits and meets the TTFT, the ``shortlist`` decode replica sizes with the
    most steady-state decode tokens per GPU under the TPOT, for each the replica counts whose
    steady-state request rates balance best; each pair of pools simulated
    (:class:`moesym.serving.DisaggregatedSimulation`, KV sent over the scale-out link) at a
    growing, then bisected, concurrency as :func:`optimize_sla` does. The answer: the most
    output tokens per GPU of the pools."""

    _check_limits(ttft_s, tpot_s, percentile)
    if gpus < 2:
        raise MoesymError(f"--gpus {gpus}: disaggregated serving needs a prefill and a decode "
                          "replica (at least 2 GPUs)")
    engine = base.engine if engine is None else engine
    pre = None
    for g in _powers_of_two(gpus // 2):
        try:
            pre = (g, optimize(model, hw, g, "prefill", isl, ttft_s=ttft_s, base=base,
                               **search).best)
            break
        except MoesymError:
            continue
    if pre is None:
        raise MoesymError(f"no prefill replica of at most {gpus // 2} GPUs fits {model.name} and "
                          "meets the TTFT in the steady state; add GPUs or relax --ttft-ms")
    g_p, p_row = pre
    decs = []
    for g in _powers_of_two(gpus - g_p):
        try:
            decs.append((g, optimize(model, hw, g, "decode", serve_kv_tokens(isl, osl),
                                     tpot_s=tpot_s, base=base, **search).best))
        except MoesymError:
            continue
    if not decs:
        raise MoesymError(f"no decode replica of at most {gpus - g_p} GPUs fits {model.name} "
                          "and meets the TPOT in the steady state; add GPUs or relax --tpot-ms")
    decs = sorted(decs, key=lambda x: -x[1]["tokens_per_gpu_s"])[:shortlist]
    dep_p = _deployment(base, g_p, p_row)
    limits = {"ttft_s": ttft_s, "tpot_s": tpot_s}
    out = []
    for g_d, d_row in progress_bar(decs, "optimize: simulate pools", progress):
        dep_d = _deployment(base, g_d, d_row)
        reps = _replicas(gpus, g_p, g_d, p_row["tokens_per_gpu_s"] * g_p / isl,
                         d_row["tokens_per_gpu_s"] * g_d / osl)
        sim = DisaggregatedSimulation(model, hw, dep_p, dep_d, reps, engine,
                                      launch=Launch(chunk=search.get("chunk") or None))
        ranks = reps[1] * dep_d.dp  # decode ranks: the concurrency is a multiple of them
        seen: dict = {}

        def trial(b: int):
            if b not in seen:
                c = b * ranks
                run, info = sim.run(Client(concurrency=c, num_prompts=ROUNDS * c), str(isl),
                                    str(osl), seed=seed)
                lat = percentile_latencies(run, percentile, warmup=c)
                fail = [k[:-2] for k, lim in limits.items() if lim is not None and lat[k] > lim]
                seen[b] = (not fail, fail, lat, run, info)
            return seen[b]

        start = max(1, int(d_row["batch"]))
        lo, hi = _largest_meeting(trial, start, 4 * start)
        row = {"prefill": {**_dep_row(dep_p), "gpus": g_p}, "decode": {**_dep_row(dep_d),
               "gpus": g_d}, "prefill_replicas": reps[0], "decode_replicas": reps[1],
               "gpus_used": sim.gpus}
        if lo == 0:
            out.append({**row, "meets": False, "binding": trial(1)[1],
                        "at_concurrency_1": trial(1)[2]})
            continue
        _, _, lat, run, info = trial(lo)
        rep = report(run, sim.gpus, warmup=lo * ranks)
        out.append({**row, "meets": True, "concurrency": lo * ranks,
                    "tokens_per_gpu_s": rep["output_tokens_per_gpu_s"],
                    "output_tokens_per_gpu_s": rep["output_tokens_per_gpu_s"],
                    f"ttft_p{percentile:g}_s": lat["ttft_s"],
                    f"tpot_p{percentile:g}_s": lat["tpot_s"],
                    "ttft_mean_s": rep["ttft_ms"]["mean"] / 1e3,
                    "tpot_mean_s": rep["tpot_ms"]["mean"] / 1e3,
                    "binding": trial(hi)[1] if hi is not None else
                    ["none up to 4x the steady state"],
                    "fails_at_concurrency": hi * ranks if hi is not None else None,
                    "kv_transfer_ms": info["kv_transfer_ms"],
                    "steady_state": {"prefill_tokens_per_gpu_s": p_row["tokens_per_gpu_s"],
                                     "decode_tokens_per_gpu_s": d_row["tokens_per_gpu_s"],
                                     "decode_batch": d_row["batch"]}})
    met = [r for r in out if r["meets"]]
    if not met:
        raise MoesymError(f"no short-listed pair of pools meets the p{percentile:g} limits even "
                          "at one request per decode rank; relax --ttft-ms / --tpot-ms or add "
                          "GPUs")
    return {"best": max(met, key=lambda r: r["tokens_per_gpu_s"]), "candidates": out,
            "percentile": percentile, "engine": sim.pre.profile.name, "limits": limits,
            "disaggregated": True}
