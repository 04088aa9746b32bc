"""Fleet sizing for a period of traffic, its cost and its power (``moesym fleet``).

For each candidate (a hardware file, an engine):

1. **The replica.** GPUs per replica: ``--gpus`` (default the node's). The deployment: the
   one the deployment flags pin (``--tp`` and ``--ep``, one value each), else the best that
   :func:`moesym.serving.sla.optimize_sla` finds at the limits on that many GPUs (the
   steady state's short list, each simulated at a growing concurrency). Its service is a
   :class:`moesym.serving.fleet.ReplicaModel` (request cap, KV, step-time tables).
2. **A start.** The replica's sustainable request rate at the TPOT limit, from its tables: at
   a decode batch ``B`` a replica serving ``lambda`` requests per second spends ``lambda p``
   of its time prefilling (``p``: the prefill seconds of a mean prompt, in full steps on
   every rank), so
   ``lambda = B / (osl d_B + B p)`` with ``d_B`` the decode step time, and each request sees
   ``TPOT = d_B / (1 - lambda p)``; ``mu`` is the largest ``lambda`` whose TPOT meets the
   limit. An hour of ``r`` requests per second starts at ``N0 = ceil(r / mu)`` replicas (after
   the first hour of 100 requests or more, ``mu`` is the rate per replica the last such hour
   was sized at).
3. **Per hour, the smallest count that meets the limits.** The hour's requests are simulated
   (:func:`moesym.serving.fleet.simulate_fleet`, the replicas empty at the start of the
   hour) on ``N`` replicas; the hour meets when its requests' P-th percentile TTFT and TPOT
   are within the limits. From ``N0`` the count steps down (1, 2, 4, ...) while it meets, or
   up while it fails, then bisects between the last count that failed and the first that
   met, assuming fewer replicas never serve an hour better. A trial simulates at most
   ``sample`` requests: under round robin (and random routing) the replicas are alike, so a
   few of them stand for all; under the routers that read the replicas' load, a contiguous
   window of the hour of that many requests, at its busier end.
4. **The whole period, verified.** The traffic is simulated once on the hour-by-hour counts
   (``--fixed``: their largest, all period), replicas added and removed at the hours'
   starts; an hour that misses its limits gets more replicas (5%, at least one) and the
   period is simulated again, up to eight times. The answer's percentiles are this run's.
5. **Cost and power.** Cost: the GPU-hours in service times the price per GPU-hour
   (:mod:`moesym.numbers.economics`), per day (scaled from the period to 24 hours), per
   million output tokens and per million tokens in and out. Power per hour: each GPU's
   utilization is its busy share (decode and prefill steps, each at the share of its
   time-weighted mean batch or tokens, as ``moesym simulate`` computes it) over the hour,
   the board's linear power at that utilization, plus the node's draw, times the PUE; summed
   over the GPUs in service: average and peak megawatts, megawatt-hours per day. Replicas
   draining after they leave service are not charged.
"""

from __future__ import annotations

import math
import pickle
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import MoesymError
from ..io.progress import progress_bar
from ..numbers.economics import Pricing, economics, gpu_watts
from ..search.sweep import _check_workers, _dumps, dask_client
from . import Simulation
from .fleet import HOUR_S, ReplicaModel, replica_model, simulate_fleet
from .scheduler import DECODE, PREFILL
from .sla import _deployment, optimize_sla
from .stats import summary
from .traffic import DAY_S, Traffic

__all__ = ["Limits", "sustainable_rate", "hour_latencies", "size_fleet", "fleet_economics",
           "plan_candidate", "SAMPLE"]

#: requests a sizing trial simulates at most
SAMPLE = 20_000
_ROUNDS = 8


@dataclass(frozen=True)
class Limits:
    """The service level: ``ttft_s`` and ``tpot_s`` (None: no limit) at ``percentile``."""

    ttft_s: float | None
    tpot_s: float | None
    percentile: float = 90.0

    def __post_init__(self):
        if self.ttft_s is None and self.tpot_s is None:
            raise MoesymError("fleet needs a limit: --ttft-ms and/or --tpot-ms")
        if not 0 < self.percentile <= 100:
            raise MoesymError(f"--percentile {self.percentile:g}: must be in (0, 100], e.g. 90")

    def text(self) -> str:
        parts = [f"TTFT {self.ttft_s * 1e3:g} ms" if self.ttft_s is not None else "",
                 f"TPOT {self.tpot_s * 1e3:g} ms" if self.tpot_s is not None else ""]
        return f"p{self.percentile:g} " + " and ".join(p for p in parts if p)


def sustainable_rate(m: ReplicaModel, isl: float, osl: float, tpot_s: float | None) -> float:
    """Requests per second one replica sustains with its TPOT within ``tpot_s`` (module
    docstring, step 2); 0 when even one request misses it."""
    per_token = m.prefill_s[m.chunk] / (m.chunk * m.dp)  # full steps, every rank prefilling
    p = per_token * isl  # a mean prompt's share of them
    b = np.arange(1, m.max_running + 1, dtype=float)
    d = m.decode_s[1:m.max_running + 1]
    lam = b / (max(osl - 1, 1) * d + b * p)
    tpot = d / np.maximum(1 - lam * p, 1e-9)
    ok = tpot <= tpot_s if tpot_s is not None else np.ones(len(b), bool)
    return float(lam[ok].max()) if ok.any() else 0.0


def hour_latencies(traffic: Traffic, run, q: float) -> list[dict]:
    """Per hour of the period: its requests, and their ``q``-th percentile TTFT and TPOT
    (s; None without a simulated request), over the requests the run simulated."""
    ttft = run.first_token_s - traffic.arrival_s
    many = traffic.osl > 1
    tpot = np.where(many, (run.finish_s - run.first_token_s) / np.maximum(traffic.osl - 1, 1),
                    np.nan)
    hours = len(run.schedule)
    h = np.minimum((traffic.arrival_s // HOUR_S).astype(np.int64), hours - 1)
    order = np.argsort(h, kind="stable")
    bounds = np.searchsorted(h[order], np.arange(hours + 1))
    out = []
    for k in range(hours):
        idx = order[bounds[k]:bounds[k + 1]]
        a, b = ttft[idx], tpot[idx]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        out.append({"requests": int(len(idx)),
                    "ttft_s": float(np.percentile(a, q)) if len(a) else None,
                    "tpot_s": float(np.percentile(b, q)) if len(b) else None})
    return out


def _meets(lat: dict, limits: Limits) -> bool:
    return all(lim is None or lat[k] is None or lat[k] <= lim
               for k, lim in (("ttft_s", limits.ttft_s), ("tpot_s", limits.tpot_s)))


def _hour(traffic: Traffic, h: int) -> Traffic:
    """Hour ``h``'s requests, their times from the hour's start."""
    lo, hi = np.searchsorted(traffic.arrival_s, [h * HOUR_S, (h + 1) * HOUR_S])
    sub = traffic.take(slice(lo, hi))
    return Traffic(sub.arrival_s - h * HOUR_S, sub.isl, sub.osl, HOUR_S, sub.prefix,
                   sub.prefix_tokens)


def _window(hour: Traffic, sample: int) -> Traffic:
    """At most ``sample`` consecutive requests of an hour, from its busier end."""
    n = len(hour)
    if n <= sample:
        return hour
    mid = hour.arrival_s[0] + (hour.arrival_s[-1] - hour.arrival_s[0]) / 2
    late = np.searchsorted(hour.arrival_s, mid) < n / 2  # more requests in the second half
    sub = hour.take(slice(n - sample, n) if late else slice(0, sample))
    t0 = float(sub.arrival_s[0])
    return Traffic(sub.arrival_s - t0, sub.isl, sub.osl, HOUR_S, sub.prefix, sub.prefix_tokens)


def _trial(m, hour: Traffic, n: int, router: str, limits: Limits, sample: int,
           seed: int) -> bool:
    """Whether ``n`` replicas meet the limits on one hour's requests (module docstring)."""
    if not len(hour):
        return True
    if router in ("round-robin", "random"):
        hour = _window(hour, sample * n)  # each replica gets at most about ``sample``
        per = len(hour) / n
        k = min(n, max(1, math.ceil(sample / max(per, 1.0))))
        run = simulate_fleet(m, hour, [n], router, seed=seed, replicas=k)
    else:
        hour = _window(hour, sample)
        run = simulate_fleet(m, hour, [n], router, seed=seed)
    return _meets(hour_latencies(hour, run, limits.percentile)[0], limits)


def _smallest(ok, start: int, cap: int) -> int | None:
    """The smallest count in [1, cap] for which ``ok`` holds (monotone), searched from
    ``start``: None when even ``cap`` fails."""
    start = min(max(1, start), cap)
    if ok(start):
        good, step = start, 1
        while good > 1:
            trial = max(1, good - step)
            if not ok(trial):
                bad = trial
                break
            good, step = trial, step * 2
        else:
            return 1
    else:
        bad, step = start, 1
        while True:
            trial = min(cap, bad + step)
            if ok(trial):
                good = trial
                break
            if trial == cap:
                return None
            bad, step = trial, step * 2
    while good - bad > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def _lone_latency(m: ReplicaModel, traffic: Traffic, q: float) -> dict:
    """The ``q``-th percentile TTFT and TPOT of the traffic's requests each alone on an idle
    replica: the least any fleet can give."""
    isl = np.asarray(traffic.isl)
    full, rest = isl // m.chunk, isl % m.chunk
    ttft = full * m.prefill_s[m.chunk] + m.prefill_s[rest]
    return {"ttft_s": float(np.percentile(ttft, q)), "tpot_s": float(m.decode_s[1])}


def size_fleet(m: ReplicaModel, traffic: Traffic, limits: Limits, router: str = "round-robin",
               *, fixed: bool = False, min_replicas: int = 1, sample: int = SAMPLE,
               seed: int = 0, progress: bool = False, label: str = "") -> dict:
    """The replica count per hour (module docstring, steps 2-4): ``schedule``, the verifying
    ``run``, its per-hour latencies (``hours``), ``meets`` and, when it does not,
    ``reason``."""
    hours = max(1, math.ceil(traffic.duration_s / HOUR_S - 1e-9))
    lone = _lone_latency(m, traffic, limits.percentile)
    if not _meets(lone, limits):
        return {"meets": False, "schedule": None, "lone": lone,
                "reason": f"each request alone on an idle replica: p{limits.percentile:g} TTFT "
                          f"{lone['ttft_s'] * 1e3:.1f} ms, TPOT {lone['tpot_s'] * 1e3:.2f} ms"}
    isl, osl = float(np.mean(traffic.isl)), float(np.mean(traffic.osl))
    mu = sustainable_rate(m, isl, osl, limits.tpot_s)
    counts = []
    for h in progress_bar(range(hours), f"fleet: size {label}".strip(), progress):
        sub = _hour(traffic, h)
        span = min(HOUR_S, traffic.duration_s - h * HOUR_S)
        if not len(sub):
            counts.append(min_replicas)
            continue
        rate = len(sub) / max(span, 1e-9)
        n0 = max(1, math.ceil(rate / mu)) if mu > 0 else 1
        cap = max(4 * n0, n0 + 64)
        seen: dict = {}

        def ok(n, sub=sub):
            if n not in seen:
                seen[n] = _trial(m, sub, n, router, limits, sample, seed)
            return seen[n]

        n = _smallest(ok, n0, cap)
        if n is None:
            return {"meets": False, "schedule": None, "lone": lone,
                    "reason": f"hour {h} misses {limits.text()} even on {cap} replicas"}
        counts.append(max(n, min_replicas))
        if len(sub) >= 100:  # the next hour starts from the rate per replica this one met
            mu = rate / n
    sched = [max(counts)] * hours if fixed else counts
    for _ in range(_ROUNDS):
        run = simulate_fleet(m, traffic, sched, router, seed=seed)
        lat = hour_latencies(traffic, run, limits.percentile)
        miss = [h for h, x in enumerate(lat) if not _meets(x, limits)]
        if not miss:
            break
        if fixed:
            sched = [sched[0] + max(1, math.ceil(0.05 * sched[0]))] * hours
        else:
            for h in miss:
                sched[h] += max(1, math.ceil(0.05 * sched[h]))
    out = {"schedule": sched, "run": run, "hours": lat, "meets": not miss, "lone": lone,
           "sustainable_requests_per_s": mu}
    if miss:
        out["reason"] = (f"hours {', '.join(map(str, miss))} still miss {limits.text()} after "
                         f"{_ROUNDS} rounds of added replicas")
    return out


def _busy(timer, kind: int, mean: float, m: ReplicaModel, memo: dict) -> float:
    """The busy share of a replica step of mean batch (decode) or prompt tokens (prefill)."""
    key = (kind, round(mean, 1))
    if key not in memo:
        per_rank = max(mean / m.dp, 1.0)
        if kind == DECODE:
            memo[key] = timer.busy_share(kind, per_rank, m.kv_mean, 0.0, m.prompt_len)
        else:
            memo[key] = timer.busy_share(kind, 0.0, 0.0, per_rank, m.prompt_len)
    return memo[key]


def fleet_economics(hw, m: ReplicaModel, timer, traffic: Traffic, run, schedule,
                    pricing=None) -> dict:
    """Cost and power of a verified fleet run (module docstring, step 5): per hour the
    utilization, GPU watts and fleet megawatts; for the period the economics keys of
    :func:`moesym.numbers.economics.economics` (per GPU, at the period's mean utilization)
    and ``usd``, ``usd_per_day``, ``avg_mw``, ``peak_mw``, ``peak_it_mw``, ``mwh_per_day``."""

    pricing = pricing or Pricing()
    hours = len(schedule)
    span = np.array([min(HOUR_S, traffic.duration_s - h * HOUR_S) for h in range(hours)])
    span = np.maximum(span, 1e-9)
    memo: dict = {}
    util = []
    for h in range(hours):
        busy = 0.0
        if run.decode_s[h] > 0:
            busy += run.decode_s[h] * _busy(timer, DECODE, run.decode_batch_s[h]
                                            / run.decode_s[h], m, memo)
        if run.prefill_s[h] > 0:
            busy += run.prefill_s[h] * _busy(timer, PREFILL, run.prefill_tokens_s[h]
                                             / run.prefill_s[h], m, memo)
        util.append(min(1.0, busy / (schedule[h] * span[h])))
    util = np.asarray(util)
    gpus = np.asarray(schedule, dtype=float) * m.gpus
    gpu_s = float((gpus * span).sum())
    out_tok, in_tok = float(np.sum(traffic.osl)), float(np.sum(traffic.isl))
    u_mean = float((util * gpus * span).sum() / gpu_s)
    power = getattr(hw, "power", None)
    e = economics(hw, out_tok / gpu_s, in_tok / gpu_s, u_mean if power else None, pricing)
    scale = DAY_S / traffic.duration_s
    out = {**e, "gpu_hours": gpu_s / 3600.0, "gpu_hours_per_day": gpu_s / 3600.0 * scale,
           "output_tokens": out_tok, "input_tokens": in_tok, "gpu_utilization_by_hour":
           util.tolist()}
    price = e.get("usd_per_gpu_hour")
    out["usd"] = price * gpu_s / 3600.0 if price is not None else None
    out["usd_per_day"] = out["usd"] * scale if price is not None else None
    if power is not None:
        pue = pricing.pue if pricing.pue is not None else power.pue
        per_gpu = np.array([gpu_watts(power, u) for u in util])
        it = gpus * (per_gpu + power.node_W)
        mw = it * pue / 1e6
        out.update({"mw_by_hour": mw.tolist(), "avg_mw": float((mw * span).sum() / span.sum()),
                    "peak_mw": float(mw.max()), "peak_it_mw": float(it.max() / 1e6),
                    "mwh_per_day": float((mw * span).sum() / 3600.0 * scale)})
    else:
        out.update(dict.fromkeys(("mw_by_hour", "avg_mw", "peak_mw", "peak_it_mw",
                                  "mwh_per_day"), None))
    return out


def _summary(x) -> dict:
    x = np.asarray(x, dtype=float)
    return summary(x[np.isfinite(x)], 1e3)


def plan_candidate(model, hw, dep, traffic: Traffic, limits: Limits, *, router="round-robin",
                   pricing=None, launch=None, fixed=False, min_replicas=1, sample=SAMPLE,
                   seed=0, search: dict | None = None, progress=False) -> dict:
    """One candidate's answer: its deployment (searched by
    :func:`moesym.serving.sla.optimize_sla` unless ``search`` is None, when ``dep`` is used as
    given), replica service, the sizing (:func:`size_fleet`), latencies, cost and power."""

    name = hw.name
    dep_note = "as given"
    if search is not None:
        try:
            r = optimize_sla(model, hw, dep.gpus, dep, int(round(np.mean(traffic.isl))),
                             max(1, int(round(np.mean(traffic.osl)))), ttft_s=limits.ttft_s,
                             tpot_s=limits.tpot_s, percentile=limits.percentile,
                             engine=dep.engine, seed=seed, **search)
        except MoesymError as exc:
            return {"name": name, "hardware": name, "meets": False,
                    "reason": f"deployment search: {exc}", "replicas": None}
        dep = _deployment(dep, dep.gpus, r["best"])
        dep_note = (f"optimize --percentile {limits.percentile:g}: concurrency "
                    f"{r['best']['concurrency']} per replica meets the limits")
    sim = Simulation(model, hw, dep, dep.engine, launch=launch)
    m, cfg, timer = replica_model(sim, traffic.isl, traffic.osl)
    sized = size_fleet(m, traffic, limits, router, fixed=fixed, min_replicas=min_replicas,
                       sample=sample, seed=seed, progress=progress, label=name)
    out = {"name": name, "hardware": name, "engine": sim.profile.name,
           "deployment": {"gpus": dep.gpus, "tp": dep.tp, "ep": dep.ep,
                          "micro_batches": dep.micro_batches, "a2a": dep.a2a.value,
                          "weights": str(dep.weights), "kv": dep.kv, "dp": dep.dp,
                          "chosen_by": dep_note},
           "replica": {"gpus": m.gpus, "max_running_requests": m.max_running,
                       "kv_tokens": m.kv_tokens, "chunk_tokens": m.chunk,
                       "decode_step_s_at_1": float(m.decode_s[1]),
                       "engine_policy": cfg.policy, "fleet_policy": "prefill-first"},
           "meets": sized["meets"]}
    if cfg.policy != "prefill-first":
        warnings.warn(f"{sim.profile.name} schedules {cfg.policy}; moesym fleet's replica model "
                      "is prefill-first (SGLang's default), so its latencies are that "
                      "policy's", stacklevel=2)
    if sized["schedule"] is None:
        out.update({"reason": sized["reason"], "replicas": None})
        return out
    run, sched = sized["run"], sized["schedule"]
    q = limits.percentile
    ttft = run.first_token_s - traffic.arrival_s
    many = traffic.osl > 1
    tpot = (run.finish_s[many] - run.first_token_s[many]) / (traffic.osl[many] - 1)
    worst = max(range(len(sized["hours"])),
                key=lambda h: max((sized["hours"][h][k] or 0.0) / lim
                                  for k, lim in (("ttft_s", limits.ttft_s),
                                                 ("tpot_s", limits.tpot_s)) if lim))
    w = sized["hours"][worst]
    out.update({"replicas": int(max(sched)), "replicas_by_hour": [int(x) for x in sched],
                "fixed": bool(fixed), "gpus_peak": int(max(sched)) * m.gpus,
                "sustainable_requests_per_s_per_replica": sized["sustainable_requests_per_s"],
                "ttft_ms": _summary(ttft), "tpot_ms": _summary(tpot),
                "worst_hour": {"hour": worst, "requests": w["requests"],
                               f"ttft_p{q:g}_ms": None if w["ttft_s"] is None
                               else w["ttft_s"] * 1e3,
                               f"tpot_p{q:g}_ms": None if w["tpot_s"] is None
                               else w["tpot_s"] * 1e3},
                "hours": [{"hour": h, "replicas": int(sched[h]), "requests": x["requests"],
                           f"ttft_p{q:g}_ms": None if x["ttft_s"] is None else x["ttft_s"] * 1e3,
                           f"tpot_p{q:g}_ms": None if x["tpot_s"] is None else x["tpot_s"] * 1e3}
                          for h, x in enumerate(sized["hours"])],
                "prefix_hit_tokens": int(np.sum(traffic.isl) - np.sum(run.prefill_tokens))})
    if not sized["meets"]:
        out["reason"] = sized["reason"]
    econ = fleet_economics(hw, m, timer, traffic, run, sched, pricing)
    for h, row in enumerate(out["hours"]):
        row["gpu_utilization"] = econ["gpu_utilization_by_hour"][h]
        row["mw"] = econ["mw_by_hour"][h] if econ["mw_by_hour"] is not None else None
    out.update({k: v for k, v in econ.items() if k not in ("gpu_utilization_by_hour",
                                                           "mw_by_hour")})
    return out



def _plan_blob(blob: bytes) -> dict:
    """:func:`plan_candidate` of a pickled task, on a dask worker."""
    return plan_candidate(**pickle.loads(blob))


def plan_on_dask(tasks: list[dict], scheduler: str | None = None,
                 progress: bool = False) -> list[dict]:
    """:func:`plan_candidate` of each task as one task of a dask cluster (``scheduler``: its
    address; None: an in-process cluster), the answers in the tasks' order."""

    client = dask_client(scheduler)
    try:
        _check_workers(client)
        futures = [client.submit(_plan_blob, _dumps(t), pure=False) for t in tasks]
        from distributed import as_completed

        for _ in progress_bar(as_completed(futures), "fleet: candidates", progress,
                              total=len(futures)):
            pass
        return client.gather(futures)
    finally:
        client.close()
