"""Deployment optimization: the best TP x EP x micro-batch x A2A choice and batch under limits.

Every discrete choice (TP, EP, micro-batches, A2A mode) is searched exhaustively, and so is the
size: the batch (decode requests) or tokens (prefill) per attention DP rank, over every multiple
of the micro-batch count from one per micro-batch up to ``max_size`` (the step model times n
equal micro-batches of size / n, exact when n divides the size). For each choice the compiled
step and memory models are broadcast over that integer axis in one call: points that do not fit
in memory or miss the latency limit (TPOT for decode; TTFT = step time x max(1, context /
tokens) for prefill) are dropped and the best remaining size by tokens per GPU per second is
kept. No monotonicity is assumed, so ceilings in the step model (tile padding, expert counts)
cannot hide a better size. The step model is built per A2A mode and EP degree: both change its
structure (DeepEP low-latency's masked expert layout and fused permute need EP > 1; group-limited
routing scales the load variance at the deployment's EP), so each candidate is timed by the same
model ``moesym predict`` builds for it. The result is the best deployment by tokens per GPU per
second and the Pareto front of throughput per GPU against speed per user.

>>> import moesym as ms
>>> r = optimize(ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"), gpus=4, phase="decode",
...              context=4096, tpot_s=0.05)
>>> r.best["tpot_s"] <= 0.05 and r.best["fits"]
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import MoesymError
from .progress import progress_bar
from .specs.deployment import A2AMode, Deployment, Phase, Workload, valid_mask
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec
from .symtab import N

__all__ = ["OptimizeResult", "optimize", "choices", "pareto_front", "disaggregate"]

# sizes evaluated per broadcast call (bounds the memory of one call whatever max_size is)
_BLOCK = 1 << 16


@dataclass(frozen=True)
class OptimizeResult:
    """``best`` and the ``pareto`` front as dicts; ``rows``: every candidate evaluated (the best
    size of each choice and the smaller sizes kept for the front), ``table`` the same as a
    DataFrame (pandas is imported only when it is asked for)."""

    best: dict
    pareto: list[dict]
    rows: list[dict] = field(repr=False)

    @property
    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choices(model: ModelSpec, gpus: int, micro_batches=(1, 2), redundant_experts: int = 0,
            gpus_per_node: int = 8) -> list[tuple[int, int, int]]:
    """Valid (tp, ep, micro_batches) for ``gpus`` GPUs (:func:`moesym.specs.deployment.valid_mask`,
    the rules ``Deployment.check_model`` applies; DeepEP's own rule is applied per A2A mode)."""
    divs = np.array(_divisors(gpus))
    tp, ep = np.meshgrid(divs, divs if model.is_moe else np.array([gpus]), indexing="ij")
    ok = valid_mask(model, gpus, ep, tp, redundant_experts, gpus_per_node=gpus_per_node)
    return [(int(t), int(e), mb) for t, e in zip(tp[ok], ep[ok]) for mb in micro_batches]


def pareto_front(rows: list[dict], x: str, y: str) -> list[dict]:
    """Rows not dominated in (maximise ``x``, maximise ``y``), by decreasing ``x``."""
    keep, best_y = [], -math.inf
    for r in sorted(rows, key=lambda r: (-r[x], -r[y])):
        if r[y] > best_y:
            keep.append(r)
            best_y = r[y]
    return keep


def _search(cm, capacity, ph, size_sym, context, limit, tp, ep, mb, gpus, max_size):
    """Exhaustive search of one (tp, ep, mb): the size (a multiple of ``mb``) with the most
    tokens per GPU per second that fits and meets ``limit``, or None; and a function giving
    (step time, latency, feasible) at any sizes. ``cm``: the compiled predict model (step and
    memory) of this (A2A mode, EP)."""
    fixed = {**cm.ep_values(ep), N.tp: float(tp), N.ep: float(ep), N.micro_batches: float(mb),
             N.gpus: float(gpus)}

    def measure(sizes):
        env = dict(fixed)
        env[size_sym] = sizes
        if ph is Phase.PREFILL:
            env[N.chunk] = np.minimum(sizes, context)
        mem_env = dict(env)
        if ph is Phase.PREFILL:
            mem_env[N.batch] = np.maximum(1.0, np.ceil(sizes / context))  # prompts held in memory
        fits = np.broadcast_to(cm.evaluate(1, mem_env)["memory_bytes"], sizes.shape) <= capacity
        t = np.full(sizes.shape, np.inf)
        if fits.any():  # time only what fits (decode: memory binds long before max_size)
            env = {k: (v[fits] if isinstance(v, np.ndarray) else v) for k, v in env.items()}
            t[fits] = np.broadcast_to(cm.evaluate(0, env)["step_time_s"], (int(fits.sum()),))
        lat = t if ph is Phase.DECODE else t * np.maximum(1.0, context / sizes)
        ok = fits & np.isfinite(t) & ((lat <= limit) if limit is not None else True)
        return t, lat, ok

    best = None
    for start in range(mb, max_size + 1, _BLOCK * mb):
        sizes = np.arange(start, min(max_size, start + (_BLOCK - 1) * mb) + 1, mb, dtype=float)
        t, lat, ok = measure(sizes)
        if not ok.any():
            continue
        thr = np.where(ok, sizes / tp / np.where(ok, t, 1.0), -np.inf)
        i = int(np.argmax(thr))
        if best is None or thr[i] > best[3]:
            best = (sizes[i], t[i], lat[i], thr[i])
    return best, measure


def optimize(model: ModelSpec, hw: HardwareSpec, gpus: int, phase: str, context: int,
             tpot_s: float | None = None, ttft_s: float | None = None,
             base: Deployment | None = None, micro_batches=(1, 2), max_size: int = 1 << 15,
             a2a_modes=None, tps=None, eps=None, progress: bool = False) -> OptimizeResult:
    """Best deployment of ``model`` on ``gpus`` GPUs for ``phase`` at ``context``.

    ``max_size``: largest batch (decode) or tokens (prefill) per attention DP rank searched.
    ``micro_batches``, ``a2a_modes``, ``tps``, ``eps``: the values each choice may take (None:
    every valid one); a pinned value that no valid deployment has is an error.
    ``progress``: a progress bar on stderr over the (A2A mode, EP) models.
    """
    from .model.predictor import compiled_predict_model, ep_class

    ph = Phase(phase)
    base = base or Deployment()
    if a2a_modes is None:  # DeepEP where EP spans every GPU, the all-gather everywhere
        a2a_modes = ([A2AMode.DEEPEP_LL, A2AMode.DEEPEP_NORMAL] if ph is Phase.DECODE
                     else [A2AMode.DEEPEP_NORMAL]) + [A2AMode.ALLGATHER] \
            if model.is_moe and gpus > 1 else [A2AMode.AUTO]
    decode = ph is Phase.DECODE
    size_sym, size_key = (N.batch, "batch") if decode else (N.tokens, "tokens")
    lat_key, limit = ("tpot_s", tpot_s) if decode else ("ttft_s", ttft_s)
    wl0 = (Workload(ph, batch=1, context=context) if decode
           else Workload(ph, tokens=context, context=context))
    cands = [c for c in choices(model, gpus, micro_batches, base.redundant_experts,
                                base.gpus_per_node)
             if (tps is None or c[0] in tps) and (eps is None or c[1] in eps)]
    if not cands:
        raise MoesymError(f"no valid deployment of {model.name} on {gpus} GPUs has --tp in "
                          f"{sorted(tps) if tps else 'any'} and --ep in "
                          f"{sorted(eps) if eps else 'any'}: each must divide --gpus, TP the "
                          f"{model.num_heads} heads and EP the {model.num_experts} experts")
    models = [(mode, ep) for mode in a2a_modes for ep in sorted({c[1] for c in cands})
              if not (mode.is_deepep and ep != gpus)]  # DeepEP has no expert tensor parallelism
    if not models:
        raise MoesymError("DeepEP --a2a modes need --ep equal to --gpus; pin --ep "
                          f"{gpus} or add --a2a allgather")
    rows = []

    def row(tp, ep, mb, mode, size, t, lat, front_only=False):
        return {"tp": tp, "ep": ep, "micro_batches": mb, "a2a": mode.value, size_key: int(size),
                "step_time_s": float(t), "tokens_per_gpu_s": float(size / tp / t),
                lat_key: float(lat), "fits": True, "_front_only": front_only}

    built: dict = {}  # one compiled model per (A2A mode, EP structure class)
    for mode, ep in progress_bar(models, "optimize: models", progress):
        # the model predict builds for this mode and EP's class (TP, micro-batches, size, GPUs,
        # EP and the numbers that depend on EP are bound per candidate)
        rep = replace(base, gpus=gpus, ep=ep, tp=1, micro_batches=1, a2a=mode)
        key = (mode, ep_class(rep))
        if key not in built:
            built[key] = compiled_predict_model(model, hw, rep, wl0)
        cm = built[key]
        capacity = hw.hbm_capacity_bytes
        for tp, _, mb in (c for c in cands if c[1] == ep):
            best, measure = _search(cm, capacity, ph, size_sym, context, limit,
                                    tp, ep, mb, gpus, max_size)
            if best is None:
                continue
            size, t, lat, _ = best
            rows.append(row(tp, ep, mb, mode, size, t, lat))
            # smaller feasible sizes (mb x powers of two) for the Pareto front
            front = mb * 2.0 ** np.arange(0, max(0, int(math.log2(size / mb))) + 1)
            front = front[front < size]
            if len(front):
                ft, flat, fok = measure(front)
                rows += [row(tp, ep, mb, mode, s, a, b, True)
                         for s, a, b in zip(front[fok], ft[fok], flat[fok])]
    if not rows:
        raise MoesymError("no deployment meets the latency limit and fits in memory; relax "
                          "--tpot-ms / --ttft-ms or add GPUs")
    for r in rows:
        r["tokens_per_user_s"] = (1.0 / r[lat_key]) if decode else r["tokens"] / r[lat_key]
    best = max((r for r in rows if not r["_front_only"]), key=lambda r: r["tokens_per_gpu_s"])
    clean = lambda r: {k: v for k, v in r.items() if not k.startswith("_")}  # noqa: E731
    table = [clean(r) for r in rows]
    return OptimizeResult(clean(best), [clean(r) for r in pareto_front(rows, "tokens_per_gpu_s",
                                                                      "tokens_per_user_s")], table)


def disaggregate(model: ModelSpec, hw: HardwareSpec, prefill_gpus: int, decode_gpus: int,
                 input_len: int, output_len: int, ttft_s: float | None = None,
                 tpot_s: float | None = None, base: Deployment | None = None) -> dict:
    """Prefill/decode disaggregation: instances of each kind needed to balance a request mix.

    With prefill throughput P (tokens/GPU/s) and decode throughput D, a stream of requests of
    ``input_len`` prompt and ``output_len`` output tokens keeps both pools busy when
    n_prefill_gpus / n_decode_gpus = (input_len / P) / (output_len / D).
    """
    p = optimize(model, hw, prefill_gpus, "prefill", input_len, ttft_s=ttft_s, base=base)
    d = optimize(model, hw, decode_gpus, "decode", input_len + output_len // 2, tpot_s=tpot_s,
                 base=base)
    P, Dv = p.best["tokens_per_gpu_s"], d.best["tokens_per_gpu_s"]
    ratio = (input_len / P) / (output_len / Dv)
    return {"prefill": p.best, "decode": d.best, "prefill_to_decode_gpu_ratio": ratio,
            "requests_per_gpu_s": 1.0 / (input_len / P + output_len / Dv)}
