"""Deployment optimization: the best TP x EP x micro-batch x A2A choice and batch under limits.

Discrete choices are enumerated by broadcasting the compiled step model over (choice x batch)
arrays; for each choice the batch is refined with brentq on the binding constraint (TPOT or
TTFT limit) and capped by the largest batch that fits in memory. The result is the best
deployment by tokens per GPU per second and the Pareto front of throughput per GPU against
speed per user.

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
import pandas as pd
from scipy.optimize import brentq

from .compile import bind_and_compile
from .errors import MoesymError
from .model.step import build_step
from .specs.deployment import A2AMode, Deployment, Phase, Workload
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec
from .symbols import S

__all__ = ["OptimizeResult", "optimize", "choices", "pareto_front", "disaggregate"]


@dataclass(frozen=True)
class OptimizeResult:
    best: dict
    pareto: list[dict]
    table: pd.DataFrame = field(repr=False)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choices(model: ModelSpec, gpus: int, micro_batches=(1, 2)) -> list[tuple[int, int, int]]:
    """Valid (tp, ep, micro_batches) for ``gpus`` GPUs."""
    out = []
    for tp in _divisors(gpus):
        if model.num_heads % tp:
            continue
        eps = [e for e in _divisors(gpus) if not model.is_moe or model.num_experts % e == 0] \
            if model.is_moe else [gpus]
        for ep in eps:
            if model.is_moe and model.moe_intermediate_size % (gpus // ep):
                continue
            for mb in micro_batches:
                out.append((tp, ep, mb))
    return out


def pareto_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows not dominated in (maximise ``x``, maximise ``y``)."""
    d = df.sort_values([x, y], ascending=[False, False])
    keep, best_y = [], -math.inf
    for idx, v in zip(d.index, d[y]):
        if v > best_y:
            keep.append(idx)
            best_y = v
    return df.loc[keep].sort_values(x, ascending=False)


def _memory_fn(model, hw, dep, wl):
    """Compiled per-GPU memory use over (size, tp, ep, micro-batches), and the capacity."""
    from .memory import memory_model

    mm = memory_model(model, hw, dep, wl)
    expr = mm.used_expr()
    size_sym = S.batch if wl.phase is Phase.DECODE else S.tokens
    syms = (size_sym, S.tp, S.ep, S.micro_batches, S.gpus)
    fn, args = bind_and_compile(expr, mm.values, syms)
    return fn, args, mm.values[S.hbm_capacity]


def _memory_cap(mem, size_sym, tp, ep, mb, gpus, hi) -> float:
    """Largest size in [0, hi] whose memory fits (memory grows with size), or -1 if none."""
    fn, args, cap = mem
    env = {S.tp: tp, S.ep: ep, S.micro_batches: mb, S.gpus: gpus}

    def used(x):
        env[size_sym] = x
        return float(fn(*(float(env[a]) for a in args)))

    if used(1.0) > cap:
        return -1.0
    if used(hi) <= cap:
        return hi
    return brentq(lambda x: used(x) - cap, 1.0, hi, xtol=1e-6)


def optimize(model: ModelSpec, hw: HardwareSpec, gpus: int, phase: str, context: int,
             tpot_s: float | None = None, ttft_s: float | None = None,
             base: Deployment | None = None, micro_batches=(1, 2), max_size: int = 1 << 15,
             a2a_modes=None) -> OptimizeResult:
    """Best deployment of ``model`` on ``gpus`` GPUs for ``phase`` at ``context``."""
    ph = Phase(phase)
    base = base or Deployment()
    if a2a_modes is None:
        a2a_modes = ([A2AMode.DEEPEP_LL, A2AMode.DEEPEP_NORMAL] if ph is Phase.DECODE
                     else [A2AMode.DEEPEP_NORMAL]) if model.is_moe and gpus > 1 else [A2AMode.AUTO]
    size_sym = S.batch if ph is Phase.DECODE else S.tokens
    rows = []
    for mode in a2a_modes:
        wl0 = (Workload(ph, batch=1, context=context) if ph is Phase.DECODE
               else Workload(ph, tokens=context, context=context))
        rep = replace(base, gpus=gpus, ep=gpus, tp=1, micro_batches=1, a2a=mode)
        step = build_step(model, hw, rep, wl0)
        grid_syms = (size_sym, S.tp, S.ep, S.micro_batches) + ((S.chunk,) if ph is Phase.PREFILL else ())
        fn, args = bind_and_compile(step.expr, step.values, grid_syms)

        def t_of(size, tp, ep, mb):
            env = {size_sym: size, S.tp: tp, S.ep: ep, S.micro_batches: mb,
                   S.chunk: min(size, context)}
            return float(fn(*(float(env[a]) for a in args)))

        mem = _memory_fn(model, hw, rep, wl0)
        for tp, ep, mb in choices(model, gpus, micro_batches):
            cap = _memory_cap(mem, size_sym, tp, ep, mb, gpus, float(max_size))
            hi = float(min(max_size, cap))
            lo = float(mb)  # at least one request or token per micro-batch
            if hi < lo:
                continue

            def latency(size):
                t = t_of(size, tp, ep, mb)
                return t if ph is Phase.DECODE else t * max(1.0, context / size)

            limit = tpot_s if ph is Phase.DECODE else ttft_s
            if ph is Phase.DECODE:
                if limit is not None:
                    if latency(lo) > limit:
                        continue
                    if latency(hi) > limit:
                        hi = brentq(lambda b: latency(b) - limit, lo, hi, xtol=1e-6)
            else:  # TTFT is not monotone in tokens when prompts are chunked: scan candidates
                cands = sorted({float(x) for x in 2.0 ** np.arange(6, 17)} | {
                    float(context * j) for j in (1, 2, 4, 8)})
                cands = [c for c in cands if lo <= c <= hi
                         and (limit is None or latency(c) <= limit)]
                if not cands:
                    continue
                hi = max(cands, key=lambda c: c / t_of(c, tp, ep, mb))
            size = math.floor(hi / mb) * mb if hi >= mb else hi
            t = t_of(size, tp, ep, mb)
            rows.append({"tp": tp, "ep": ep, "micro_batches": mb, "a2a": mode.value,
                         ("batch" if ph is Phase.DECODE else "tokens"): int(size),
                         "step_time_s": t, "tokens_per_gpu_s": size / tp / t,
                         ("tpot_s" if ph is Phase.DECODE else "ttft_s"): latency(size),
                         "fits": size <= cap + 1e-9})
            # points along the batch axis for the Pareto front
            for s in 2 ** np.arange(0, int(math.log2(max(size, 1))) + 1):
                if s >= mb and s < size:
                    ts = t_of(float(s), tp, ep, mb)
                    rows.append({"tp": tp, "ep": ep, "micro_batches": mb, "a2a": mode.value,
                                 ("batch" if ph is Phase.DECODE else "tokens"): int(s),
                                 "step_time_s": ts, "tokens_per_gpu_s": s / tp / ts,
                                 ("tpot_s" if ph is Phase.DECODE else "ttft_s"): latency(float(s)),
                                 "fits": True, "_front_only": True})
    if not rows:
        raise MoesymError("no deployment meets the latency limit and fits in memory; relax "
                          "--tpot-ms / --ttft-ms or add GPUs")
    df = pd.DataFrame(rows)
    df["_front_only"] = df.get("_front_only", False)
    df["_front_only"] = df["_front_only"].fillna(False).astype(bool)
    lat = "tpot_s" if ph is Phase.DECODE else "ttft_s"
    df["tokens_per_user_s"] = (1.0 / df[lat]) if ph is Phase.DECODE else df["tokens"] / df[lat]
    finals = df[~df["_front_only"]]
    best = finals.loc[finals["tokens_per_gpu_s"].idxmax()]
    front = pareto_front(df, "tokens_per_gpu_s", "tokens_per_user_s")
    clean = lambda r: {k: (v.item() if hasattr(v, "item") else v)  # noqa: E731
                       for k, v in r.items() if not k.startswith("_")}
    return OptimizeResult(clean(best.to_dict()), [clean(r) for r in front.to_dict("records")],
                          df.drop(columns=["_front_only"]))


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
