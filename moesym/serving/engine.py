"""An engine profile (:mod:`moesym.engines`, its defaults as data) resolved to the numbers a
simulation schedules by, for one model, GPU and deployment.

* prompt tokens per step: :func:`moesym.numbers.metrics.engine_chunk` (the profile's chunk,
  SGLang's by-memory rule, or, where the engine does not chunk, the step budget: a prompt is
  prefilled whole and must fit it); per attention DP rank;
* the step's token budget (decode-first engines): the profile's, else the chunk;
* requests held at once: the profile's cap or its rule at the rank's KV capacity;
* KV capacity per rank in tokens: the smaller of moesym's memory model (weights, activations,
  buffers and reserve taken out) and the engine's own share of memory
  (``kv_memory_fraction`` of what ``kv_memory_basis`` names), over the KV bytes per token;
* the admission reserve: 1 for an engine that admits only what can finish without eviction
  (TensorRT-LLM) and for SGLang serving a benchmark (its requests set ignore_eos, and SGLang
  reserves such a request's whole remaining output), SGLang's initial new-token ratio
  otherwise, 0 for allocation on demand (vLLM);
* captured decode graph sizes at the deployment's TP, and whether other sizes pad to them.
"""

from __future__ import annotations

import math

from ..errors import MoesymError
from .scheduler import SchedulerConfig

__all__ = ["scheduler_config", "kv_capacity_tokens"]


def kv_capacity_tokens(model, hw, dep, context: int, profile=None, chunk: int = 0) -> float:
    """KV tokens one attention DP rank holds (each GPU of the rank holding its share)."""
    from ..memory import memory_model
    from ..specs.deployment import Phase, Workload

    p = memory_model(model, hw, dep, Workload(Phase.DECODE, batch=1, context=max(1, context))).parts()
    per_token = p["kv_per_token"]
    if per_token <= 0:
        return math.inf
    pool = p["kv_pool"]
    if profile is not None:
        hbm = hw.hbm_capacity_bytes
        frac = profile.memory_fraction(hbm, chunk_tokens=chunk * dep.dp, tp=dep.tp, pp=dep.pp,
                                       attn_dp=dep.dp, mla=bool(model.kv_lora_rank),
                                       deepep=dep.ep > 1 and dep.ep >= dep.stage_gpus)
        weights = sum(p["weights"].values())
        used = weights + sum(p["activation"].values()) + sum(p["workspace"].values())
        engine_pool = {"weights-kv": frac * hbm - weights,
                       "weights-kv-activations": frac * hbm - used,
                       "free-after-weights": frac * (hbm - used - sum(p["comm"].values()))
                       }[profile.kv_memory_basis]
        pool = min(pool, engine_pool)
    return max(0.0, pool) / per_token


def scheduler_config(profile, model, hw, dep, *, mean_len: float, max_len: int,
                     chunk: int | None = None, max_running: int | None = None,
                     step_tokens: int | None = None) -> SchedulerConfig:
    """The scheduling numbers of ``profile`` on this deployment; explicit ``chunk``,
    ``max_running`` and ``step_tokens`` (the user's flags) override the profile's.
    ``mean_len``: the run's mean KV length of a request; ``max_len``: its longest prompt."""
    from ..numbers.metrics import accepted_tokens, engine_chunk

    budget = step_tokens or profile.step_token_budget
    if chunk is None:
        chunk = engine_chunk(profile, hw.hbm_capacity_bytes, dep.dp)
        if profile.chunk_tokens == "off" and max_len > chunk:  # whole prompts, in the budget
            raise MoesymError(f"{profile.name} does not chunk prompts by default and a "
                              f"{max_len}-token prompt exceeds its {chunk}-token step; pass "
                              "--chunk N (the engine's chunked prefill)")
    budget = budget or chunk
    cap = kv_capacity_tokens(model, hw, dep, int(mean_len), profile, chunk)
    if cap < max_len + 1:
        raise MoesymError(f"{model.name} on {dep.gpus} x {hw.name}: the KV of one "
                          f"{max_len}-token prompt does not fit beside the weights "
                          f"({cap:.0f} tokens per rank; see moesym memory): add GPUs, "
                          "use --kv fp8 or lower --weights")
    held = max_running or profile.running_requests(int(cap), int(max(1, mean_len)))
    if profile.kv_full == "hold":
        reserve = 1.0
    elif profile.kv_full == "retract":
        reserve = 1.0 if profile.ignore_eos_full_reserve else float(profile.new_token_ratio_init)
    else:
        reserve = 0.0
    sizes = tuple(profile.graph_batch_sizes(dep.tp)) if dep.cuda_graphs else ()
    return SchedulerConfig(policy=profile.policy, mixed_chunk=bool(profile.mixed_chunk),
                           chunk_tokens=int(chunk), step_tokens=int(max(budget, 1)),
                           max_running=int(held), kv_capacity_tokens=cap, kv_reserve=reserve,
                           accepted=accepted_tokens(dep),
                           graph_sizes=sizes if profile.cuda_graph_padding else (),
                           dp_routing=profile.dp_routing)
