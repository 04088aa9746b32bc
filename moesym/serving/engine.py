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
import warnings
from dataclasses import dataclass

from ..errors import MoesymError
from ..memory import memory_model
from ..numbers.metrics import accepted_tokens, engine_chunk
from ..specs.deployment import Phase, Workload
from .scheduler import SchedulerConfig

__all__ = ["Launch", "scheduler_config", "kv_capacity_tokens"]


@dataclass(frozen=True)
class Launch:
    """The server's launch flags that override its engine profile's defaults (None: the
    profile's): prompt tokens per step (``chunk``: SGLang --chunked-prefill-size / vLLM and
    TensorRT-LLM chunked prefill), requests held (``max_running``: --max-running-requests,
    --max-num-seqs, max_batch_size), tokens per step (``step_tokens``: vLLM
    --max-num-batched-tokens, TensorRT-LLM max_num_tokens), the receive interval (SGLang
    --scheduler-recv-interval), the memory share of the KV pool (``kv_fraction``: SGLang
    --mem-fraction-static, vLLM --gpu-memory-utilization, TensorRT-LLM
    free_gpu_memory_fraction, each of what the profile's kv_memory_basis names) and the largest
    decode batch captured as a CUDA graph (``cuda_graph_max_bs``), the attention-DP balance
    (``dp_balance_steps``: TensorRT-LLM's attention_dp_config enable_balance, its
    timeout_iters; 0 off), the one-time extra seconds of the engine's first prefill
    (``cold_prefill_s``; 0: a server warmed up at the benchmark's shapes) and, disaggregated,
    the seconds of a request's hand-off from prefill to decode beyond its KV transfer
    (``pd_handoff_s``)."""

    chunk: int | None = None
    max_running: int | None = None
    step_tokens: int | None = None
    recv_interval: int | None = None
    kv_fraction: float | None = None
    cuda_graph_max_bs: int | None = None
    dp_balance_steps: int = 0
    cold_prefill_s: float | None = None
    pd_handoff_s: float | None = None

    def __post_init__(self):
        for name in ("chunk", "max_running", "step_tokens", "recv_interval", "cuda_graph_max_bs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or int(v) != v or v < 1):
                raise MoesymError(f"engine launch setting {name} = {v!r}: must be a whole "
                                  "number >= 1")
        if isinstance(self.dp_balance_steps, bool) or int(self.dp_balance_steps) != \
                self.dp_balance_steps or self.dp_balance_steps < 0:
            raise MoesymError(f"engine launch setting dp_balance_steps = "
                              f"{self.dp_balance_steps!r}: must be a whole number >= 0")
        for name in ("cold_prefill_s", "pd_handoff_s"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < math.inf:
                raise MoesymError(f"engine launch setting {name} = {v!r}: must be a number of "
                                  "seconds >= 0")
        if self.kv_fraction is not None and not 0 < self.kv_fraction <= 1:
            raise MoesymError(f"engine launch setting kv_fraction = {self.kv_fraction!r}: the "
                              "memory share must be in (0, 1]")


def graph_sizes(profile, dep, launch: Launch = Launch()) -> tuple:
    """The decode batch sizes the engine captures on this deployment (none without graphs),
    cut at the launch's largest captured batch."""
    if not dep.cuda_graphs:
        return ()
    sizes = tuple(profile.graph_batch_sizes(dep.tp))
    if launch.cuda_graph_max_bs is not None:
        sizes = tuple(b for b in sizes if b <= launch.cuda_graph_max_bs)
    return sizes


def kv_capacity_tokens(model, hw, dep, context: int, profile=None, chunk: int = 0,
                       launch: Launch = Launch()) -> float:
    """KV tokens one attention DP rank holds (each GPU of the rank holding its share): the
    engine's own pool (its share of memory, less what that share must also hold) where an
    engine ``profile`` is given, else moesym's memory model's."""

    p = memory_model(model, hw, dep, Workload(Phase.DECODE, batch=1, context=max(1, context))).parts()
    per_token = p["kv_per_token"]
    if per_token <= 0:
        return math.inf
    pool = p["kv_pool"]
    if profile is not None:
        hbm = hw.hbm_capacity_bytes
        sizes = graph_sizes(profile, dep, launch)
        frac = launch.kv_fraction or profile.memory_fraction(
            hbm, chunk_tokens=chunk * dep.dp, tp=dep.tp, pp=dep.pp, attn_dp=dep.dp,
            mla=bool(model.kv_lora_rank), deepep=dep.ep > 1 and dep.ep >= dep.stage_gpus,
            decode_graph_max_batch=sizes[-1] if sizes else 0)
        weights = sum(p["weights"].values())
        used = weights + sum(p["activation"].values()) + sum(p["workspace"].values())
        engine_pool = {"weights-kv": frac * hbm - weights,
                       "weights-kv-activations": frac * hbm - used,
                       "free-after-weights": frac * (hbm - used - sum(p["comm"].values()))
                       }[profile.kv_memory_basis]
        if engine_pool < per_token * max(1, context) and launch.kv_fraction is None \
                and pool >= per_token * max(1, context):
            # the engine's default share leaves no room for one request: a server that runs
            # this deployment was launched with a larger share than the default
            warnings.warn(f"{profile.name}: its default memory share ({frac:.3f} of "
                          f"{hbm / 1e9:.0f} GB) leaves no KV room beside "
                          f"{weights / 1e9:.1f} GB of weights on {dep.gpus} x {hw.name}, so a "
                          "server running this deployment sets a larger one; moesym's memory "
                          "model's KV pool used (pass --mem-fraction F for the launch's)",
                          stacklevel=2)
        else:
            pool = engine_pool
    return max(0.0, pool) / per_token


def scheduler_config(profile, model, hw, dep, *, mean_len: float, max_len: int,
                     launch: Launch = Launch()) -> SchedulerConfig:
    """The scheduling numbers of ``profile`` on this deployment, the ``launch`` flags over
    the profile's defaults. ``mean_len``: the run's mean KV length of a request; ``max_len``:
    its longest prompt."""
    chunk, max_running, step_tokens = launch.chunk, launch.max_running, launch.step_tokens
    budget = step_tokens or profile.step_token_budget
    if chunk is None:
        chunk = engine_chunk(profile, hw.hbm_capacity_bytes, dep.dp)
        if profile.chunk_tokens == "off" and max_len > chunk:  # whole prompts, in the budget
            raise MoesymError(f"{profile.name} does not chunk prompts by default and a "
                              f"{max_len}-token prompt exceeds its {chunk}-token step; pass "
                              "--chunk N (the engine's chunked prefill)")
    budget = budget or chunk
    cap = kv_capacity_tokens(model, hw, dep, int(mean_len), profile, chunk, launch)
    if cap < max_len + 1:
        raise MoesymError(f"{model.name} on {dep.gpus} x {hw.name}: the KV of one "
                          f"{max_len}-token prompt does not fit beside the weights "
                          f"({cap:.0f} tokens per rank; see moesym memory): add GPUs, "
                          "use --kv fp8 or lower --weights")
    held = max_running or (profile.max_running_requests_speculative if dep.mtp else None) \
        or profile.running_requests(int(cap), int(max(1, mean_len)))
    interval = launch.recv_interval or profile.recv_interval
    if interval > 1 and dep.dp > 1:
        raise MoesymError(f"a receive interval of {interval} steps with {dep.dp} attention "
                          "data-parallel ranks: SGLang receives every step under DP attention "
                          "(its recv skipper asserts no DP attention); drop "
                          "--scheduler-recv-interval or use --tp = --gpus")
    if profile.kv_full == "hold":
        reserve = 1.0
    elif profile.kv_full == "retract":
        reserve = 1.0 if profile.ignore_eos_full_reserve else float(profile.new_token_ratio_init)
    else:
        reserve = 0.0
    sizes = graph_sizes(profile, dep, launch)
    return SchedulerConfig(policy=profile.policy, mixed_chunk=bool(profile.mixed_chunk),
                           chunk_tokens=int(chunk), step_tokens=int(max(budget, 1)),
                           max_running=int(held), kv_capacity_tokens=cap, kv_reserve=reserve,
                           accepted=accepted_tokens(dep),
                           graph_sizes=sizes if profile.cuda_graph_padding else (),
                           dp_routing=profile.dp_routing,
                           recv_lag=int(profile.overlapped(bool(dep.mtp))),
                           recv_interval=interval,
                           dp_balance_steps=int(launch.dp_balance_steps),
                           cold_prefill_s=profile.cold_prefill(hw.vendor)
                           if launch.cold_prefill_s is None else float(launch.cold_prefill_s))
