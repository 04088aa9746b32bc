"""Serving under load: a benchmark client's requests simulated through an engine's scheduler,
each step timed by moesym's compiled step model (``moesym simulate``).

* :mod:`.clients` - closed-loop and Poisson clients, request lengths;
* :mod:`.scheduler` - the engine's scheduling in step space (prefill-first or decode-first,
  chunked prefill, KV admission and preemption, captured graph sizes);
* :mod:`.engine` - an engine profile resolved to those numbers for a deployment;
* :mod:`.timer` - rank step times from the compiled models, in bulk;
* :mod:`.simulator` - the run: epochs between timed arrivals, ranks in lock-step;
* :mod:`.stats` - TTFT, TPOT, ITL, E2E percentiles, throughput, goodput, the time series.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..engines import load_engine
from ..errors import MoesymError
from ..memory import memory_model
from ..numbers.economics import mix_busy_share
from ..specs.deployment import Phase, Workload
from .clients import lengths
from .disagg import run_disaggregated
from .engine import Launch, scheduler_config
from .scheduler import DECODE, MIXED, PREFILL
from .simulator import replicate, run
from .stats import report, timeline
from .timer import ModelTimer

__all__ = ["DisaggregatedSimulation", "Simulation", "kv_transfer_s", "simulate",
           "simulate_disaggregated", "run_busy_share"]


class Simulation:
    """One replica of ``dep`` running ``engine`` (a name, a profile file or an
    :class:`moesym.engines.EngineProfile`; default the deployment's): its compiled step models are built once and every
    :meth:`run` reuses them. ``launch``: the server's launch flags over the engine's defaults
    (:class:`moesym.serving.engine.Launch`)."""

    def __init__(self, model, hw, dep, engine=None, *, launch=None):
        engine = dep.engine if engine is None else engine
        if isinstance(engine, str):
            engine = load_engine(engine)
        self.model, self.hw, self.dep, self.profile = model, hw, dep, engine
        self.launch = launch or Launch()
        self._timers: dict = {}
        self.cfg = None

    def requests(self, client, isl, osl, seed: int = 0, pairs: str | None = None) -> tuple:
        """(prompt lengths, output lengths, open-loop arrival times or None) of a run."""

        rng = np.random.default_rng(seed)
        n = client.count(rng)
        arrivals = None
        if not client.closed:
            arrivals = client.arrival_times(rng, n)
            n = len(arrivals)
        if n == 0:
            raise MoesymError("--request-rate x --duration sends no request; raise either")
        isl_a, osl_a = lengths(n, isl, osl, seed=seed, pairs=pairs)
        return isl_a, osl_a, arrivals

    def configure(self, isl_a, osl_a, phases=None):
        """The scheduler numbers and the timer of a run of these lengths."""

        self.cfg = cfg = scheduler_config(
            self.profile, self.model, self.hw, self.dep,
            mean_len=float(np.mean(isl_a) + np.mean(osl_a) / 2), max_len=int(np.max(isl_a)),
            launch=self.launch)
        timer = self._timers.get(cfg.chunk_tokens)
        if timer is None:
            timer = self._timers[cfg.chunk_tokens] = ModelTimer(self.model, self.hw, self.dep,
                                                                 cfg.chunk_tokens)
            timer.prepare(phases or (Phase.DECODE, Phase.PREFILL, Phase.SERVE))
        return cfg, timer

    def run(self, client, isl="1024", osl="1024", *, seed: int = 0, pairs: str | None = None,
            fold: bool = True, itl: bool = True, progress: bool = False):
        """The :class:`moesym.serving.simulator.Run` of ``client`` sending requests of lengths
        ``isl`` / ``osl`` (as :func:`.clients.lengths`). ``fold``: where every attention DP
        rank runs the same load (a closed loop whose concurrency and prompts split evenly over
        the ranks, every request of the same lengths) one rank is simulated and stands for all
        (:func:`.simulator.replicate`; a test checks it against the unfolded run)."""
        isl_a, osl_a, arrivals = self.requests(client, isl, osl, seed, pairs)
        cfg, timer = self.configure(isl_a, osl_a)
        dp, n = self.dep.dp, len(isl_a)
        times = step_times(cfg, timer)
        if (fold and dp > 1 and client.closed and client.concurrency % dp == 0 and n % dp == 0
                and (isl_a == isl_a[0]).all() and (osl_a == osl_a[0]).all()):
            one = replace(client, concurrency=client.concurrency // dp, num_prompts=n // dp)
            return replicate(run(cfg, 1, one, isl_a[:n // dp], osl_a[:n // dp], times,
                                 itl=itl, progress=progress), dp)
        return run(cfg, dp, client, isl_a, osl_a, times, arrivals, itl, progress)

    def engine_summary(self) -> dict:
        """The engine's numbers as the last run resolved them."""
        cfg, p = self.cfg, self.profile
        return {"name": p.name, "version": p.version, "policy": cfg.policy,
                "mixed_chunk": cfg.mixed_chunk, "chunk_tokens": cfg.chunk_tokens,
                "step_tokens": cfg.step_tokens, "max_running_requests": cfg.max_running,
                "kv_capacity_tokens_per_rank": cfg.kv_capacity_tokens,
                "kv_reserve": cfg.kv_reserve,
                "cuda_graph_max_batch": cfg.graph_sizes[-1] if cfg.graph_sizes else 0,
                "dp_ranks": self.dep.dp}


def run_busy_share(run, timer, t0: float, t1: float, ranks: int | None = None) -> tuple:
    """(utilization, busy rank-seconds) of a run's ranks from ``t0`` to ``t1``
    (:mod:`moesym.numbers.economics`): the steps that start in the window, each kind (decode,
    prefill, mixed) at the busy share of its rank-steps' time-weighted mean contents, over
    ``ranks`` (default: the run's) x the window; idle rank-steps and the time between steps
    count as idle."""

    keep = (run.step_start_s >= t0) & (run.step_start_s < t1)
    kinds = run.contents["kind"][keep]
    ranks = ranks or kinds.shape[1]
    w = np.broadcast_to(run.step_s[keep][:, None], kinds.shape)
    parts = []
    for k in (DECODE, PREFILL, MIXED):
        sel = kinds == k
        t = float(w[sel].sum())
        if t > 0:
            mean = [float((run.contents[f][keep][sel] * w[sel]).sum()) / t
                    for f in ("graph_batch", "kv_mean", "tokens", "prompt_len")]
            parts.append((t, timer.busy_share(k, *mean)))
    busy = sum(t for t, _ in parts)
    parts.append((max((t1 - t0) * ranks - busy, 0.0), 0.0))
    return mix_busy_share(parts), sum(t * u for t, u in parts)


def _window(run, warmup: int) -> tuple:
    """The report's window: from the first measured request's arrival to the last finish."""
    return float(run.arrival_s[warmup:].min()), float(run.finish_s[warmup:].max())


def step_times(cfg, timer):
    """What times a run's steps: each step's GPU and host time under an overlap scheduler (the
    simulation runs each step's launches beside the previous step's GPU work), else its
    time."""
    return timer.gpu_host if cfg.recv_lag else timer.times


def kv_transfer_s(model, hw, dep_prefill, isl, gpus: int | None = None) -> np.ndarray:
    """Seconds to send each prompt's KV from a prefill rank to a decode rank: every GPU of the
    rank sends its share (``isl`` x its KV bytes per token) over its link at the link's
    efficiency, after the link's latency: the scale-up link where all ``gpus`` of the
    disaggregated deployment fit in one scale-up domain (a GB200 NVL72 rack: NVLink, as NIXL
    moves it there), else the scale-out link."""

    per_token = memory_model(model, hw, dep_prefill, Workload(Phase.DECODE, batch=1,
                                                               context=1)).parts()["kv_per_token"]
    if gpus is not None and gpus <= hw.scale_up_domain_gpus:
        rate, lat = hw.scale_up_Bps * hw.efficiency.scale_up, hw.latency.scale_up_s
    else:
        rate, lat = hw.scale_out_Bps * hw.efficiency.scale_out, hw.latency.scale_out_s
    return np.asarray(isl, dtype=float) * per_token / rate + lat


class DisaggregatedSimulation:
    """``replicas = (P, D)`` prefill replicas of ``dep_prefill`` and decode replicas of
    ``dep_decode`` (:mod:`.disagg`), their compiled step models built once; :meth:`run` simulates
    a client and gives the :class:`.simulator.Run` and the run's disaggregation numbers."""

    def __init__(self, model, hw, dep_prefill, dep_decode, replicas: tuple, engine=None, *,
                 launch=None, launch_prefill=None):
        launch = launch or Launch()
        # a prefill replica takes the prompt flags (chunk) and the hand-off, a decode replica
        # the rest
        launch_prefill = launch_prefill or Launch(chunk=launch.chunk,
                                                  pd_handoff_s=launch.pd_handoff_s)
        self.pre = Simulation(model, hw, dep_prefill, engine, launch=launch_prefill)
        self.dec = Simulation(model, hw, dep_decode, self.pre.profile,
                              launch=replace(launch, chunk=None))
        self.model, self.hw, self.replicas = model, hw, tuple(replicas)
        self.gpus = replicas[0] * dep_prefill.gpus + replicas[1] * dep_decode.gpus

    def run(self, client, isl="1024", osl="1024", *, seed: int = 0, pairs: str | None = None,
            itl: bool = True, progress: bool = False):

        pre, dec = self.pre, self.dec
        isl_a, osl_a, arrivals = pre.requests(client, isl, osl, seed, pairs)
        cfg_p, timer_p = pre.configure(isl_a, osl_a, (Phase.PREFILL,))
        cfg_p = replace(cfg_p, bootstrap_lag=int(pre.profile.pd_bootstrap_lag))
        cfg_d, timer_d = dec.configure(isl_a, osl_a, (Phase.DECODE,))
        handoff = pre.launch.pd_handoff_s if pre.launch.pd_handoff_s is not None \
            else pre.profile.pd_handoff(self.hw.vendor)
        xfer = kv_transfer_s(self.model, self.hw, pre.dep, isl_a, self.gpus) + handoff
        r, info = run_disaggregated((cfg_p, cfg_d), (pre.dep.dp, dec.dep.dp), self.replicas,
                                    client, isl_a, osl_a,
                                    (step_times(cfg_p, timer_p), step_times(cfg_d, timer_d)),
                                    xfer, arrivals, itl, progress)
        return r, {"prefill_replicas": self.replicas[0], "decode_replicas": self.replicas[1],
                   "prefill_gpus": pre.dep.gpus, "decode_gpus": dec.dep.gpus, "gpus": self.gpus,
                   "prefill_chunk_tokens": cfg_p.chunk_tokens, "pd_handoff_ms": handoff * 1e3,
                   **info}


def simulate_disaggregated(model, hw, dep_prefill, dep_decode, replicas: tuple, client,
                           isl="1024", osl="1024", *, engine=None, seed: int = 0,
                           pairs: str | None = None, launch=None, launch_prefill=None,
                           limits: dict | None = None,
                           timeline_points: int = 500, warmup: int = 0,
                           itl: bool = True, progress: bool = False) -> dict:
    """``replicas = (P, D)`` prefill replicas of ``dep_prefill`` and decode replicas of
    ``dep_decode`` (:class:`DisaggregatedSimulation`); the report as :func:`simulate`'s, per
    GPU of all P + D replicas, plus ``disaggregation``."""
    sim = DisaggregatedSimulation(model, hw, dep_prefill, dep_decode, replicas, engine,
                                  launch=launch, launch_prefill=launch_prefill)
    r, info = sim.run(client, isl, osl, seed=seed, pairs=pairs, itl=itl, progress=progress)
    out = report(r, sim.gpus, limits, warmup)
    out["timeline"] = timeline(r, timeline_points)
    out["engine"] = sim.dec.engine_summary()
    out["disaggregation"] = info
    out["gpu_utilization"] = _disaggregated_busy_share(sim, r, info, *_window(r, warmup))
    return out


def _disaggregated_busy_share(sim, r, info, t0: float, t1: float) -> float:
    """The utilization of a disaggregated run's GPUs: the decode replicas' from their steps
    (:func:`run_busy_share`), the prefill replicas' from their step counts, each step taken as
    a whole chunk of the mean prompt (an upper bound: a step may hold less)."""
    pre, dec = sim.pre, sim.dec
    p_reps, d_reps = sim.replicas
    span = max(t1 - t0, 1e-30)
    u_d, _ = run_busy_share(r, dec._timers[dec.cfg.chunk_tokens], t0, t1,
                            d_reps * dec.dep.dp)
    timer = pre._timers[pre.cfg.chunk_tokens]
    chunk, isl = float(pre.cfg.chunk_tokens), float(np.mean(r.isl))
    tokens = min(chunk, isl)
    t_step = float(np.ravel(timer.times(np.array([PREFILL]), np.array([0.0]), np.array([0.0]),
                                        np.array([tokens]), np.array([isl])))[0])
    busy_p = min(1.0, sum(info["prefill_steps"]) * t_step / (p_reps * span))
    u_p = busy_p * timer.busy_share(PREFILL, 0.0, 0.0, tokens, isl)
    g_p, g_d = p_reps * pre.dep.gpus, d_reps * dec.dep.gpus
    return (g_p * u_p + g_d * u_d) / (g_p + g_d)


def simulate(model, hw, dep, client, isl="1024", osl="1024", *, engine=None, seed: int = 0,
             pairs: str | None = None, launch=None,
             limits: dict | None = None, timeline_points: int = 500, warmup: int = 0,
             itl: bool = True, progress: bool = False) -> dict:
    """Simulate ``client`` (:class:`moesym.serving.clients.Client`) against one replica of
    ``dep`` running ``engine``; lengths as :func:`.clients.lengths`. Returns the benchmark
    report of :func:`.stats.report` (the first ``warmup`` requests not measured) plus
    ``timeline`` and ``engine``; ``itl`` False keeps no per-token times (no ITL); ``progress``:
    a bar of the requests finished on a terminal."""
    sim = Simulation(model, hw, dep, engine, launch=launch)
    r = sim.run(client, isl, osl, seed=seed, pairs=pairs, itl=itl, progress=progress)
    out = report(r, dep.gpus, limits, warmup)
    out["timeline"] = timeline(r, timeline_points)
    out["engine"] = sim.engine_summary()
    # the run's step mix, per GPU (every rank holds the same GPUs): cost and power
    # (moesym.numbers.economics, applied by the command line with the price flags)
    out["gpu_utilization"] = run_busy_share(r, sim._timers[sim.cfg.chunk_tokens],
                                            *_window(r, warmup), dep.dp)[0]
    return out
