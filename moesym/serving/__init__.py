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

import numpy as np

__all__ = ["simulate"]


def simulate(model, hw, dep, client, isl="1024", osl="1024", *, engine="sglang", seed: int = 0,
             pairs: str | None = None, chunk: int | None = None, max_running: int | None = None,
             limits: dict | None = None, timer=None, timeline_points: int = 500) -> dict:
    """Simulate ``client`` (:class:`moesym.serving.clients.Client`) against one replica of
    ``dep`` running ``engine`` (a name or profile); lengths as :func:`.clients.lengths`.
    Returns the benchmark report of :func:`.stats.report` plus ``timeline`` and ``engine``."""
    from .clients import lengths
    from .engine import scheduler_config
    from .simulator import run
    from .stats import report, timeline
    from .timer import ModelTimer

    if isinstance(engine, str):
        from ..engines import load_engine

        profile = load_engine(engine)
    else:
        profile = engine
    rng = np.random.default_rng(seed)
    n = client.count(rng)
    arrivals = None
    if not client.closed:
        arrivals = client.arrival_times(rng, n)
        n = len(arrivals)
    if n == 0:
        from ..errors import MoesymError

        raise MoesymError("--request-rate x --duration sends no request; raise either")
    isl_a, osl_a = lengths(n, isl, osl, seed=seed, pairs=pairs)
    mean_len = float(np.mean(isl_a) + np.mean(osl_a) / 2)
    cfg = scheduler_config(profile, model, hw, dep, mean_len=mean_len,
                           max_len=int(np.max(isl_a)), chunk=chunk, max_running=max_running)
    if timer is None:
        timer = ModelTimer(model, hw, dep, cfg.chunk_tokens)
        timer.prepare()
    r = run(cfg, dep.dp, client, isl_a, osl_a, timer.times, arrivals)
    out = report(r, dep.gpus, limits)
    out["timeline"] = timeline(r, timeline_points)
    out["engine"] = {"name": profile.name, "version": profile.version, "policy": cfg.policy,
                     "mixed_chunk": cfg.mixed_chunk, "chunk_tokens": cfg.chunk_tokens,
                     "step_tokens": cfg.step_tokens, "max_running_requests": cfg.max_running,
                     "kv_capacity_tokens_per_rank": cfg.kv_capacity_tokens,
                     "kv_reserve": cfg.kv_reserve, "cuda_graph_max_batch":
                         cfg.graph_sizes[-1] if cfg.graph_sizes else 0,
                     "dp_ranks": dep.dp}
    return out
