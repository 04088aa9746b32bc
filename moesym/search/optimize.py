"""Deployment optimization: the best TP x EP x micro-batch x A2A choice and batch under limits
(and, when asked, the pipeline depth and the prefill's context-parallel degree).

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

from ..errors import MoesymError
from ..io.progress import progress_bar
from ..memory.capacity import host_expert_bytes, host_fits
from ..model.predictor import compiled_predict_model, ep_class, serve_models
from ..numbers.metrics import (accepted_tokens, fits, micro_batches_run, prefill_memory_values,
                               serve_chunk, serve_memory_values, serve_point, serve_rates,
                               serve_step_times, step_rates, tokens_per_user_s)
from ..schedules import load
from ..specs.deployment import A2AMode, Deployment, Phase, Workload, prefill_chunk, valid_mask
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.symtab import N

__all__ = ["OptimizeResult", "optimize", "measure", "choices", "pareto_front", "disaggregate"]

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


def _measure_fn(cms, capacity, ph, context, limits, tp, ep, mb, gpus, dep, serve=None, hit=0.0,
                lengths=(), pp=1, cp=1):
    """A function giving, at an array of sizes (batch or tokens per attention DP rank), the
    step time, latency, tokens per GPU per second and feasibility (fits in memory, meets every
    latency limit) of one (tp, ep, mb). ``cms``: the compiled predict model (step and memory)
    of this (A2A mode, EP); for serve (``serve``: ISL, OSL, chunk) the mixed step's and the
    decode step's with memory (:func:`moesym.model.predictor.serve_models`). ``gpus``: one
    pipeline stage's; ``pp`` stages share the tokens per GPU, and in prefill the ``cp`` GPUs
    of a context-parallel group. ``lengths``: a distribution's representative lengths (decode
    KV, prefill prompt, serve ISL; ``context`` or the ISL is their mean), averaged as predict
    averages."""
    fixed = {**cms[0].ep_values(ep), N.tp: float(tp), N.ep: float(ep),
             N.micro_batches: float(mb), N.gpus: float(gpus)}
    if hit:  # prompt tokens found in the prefix cache (prefill, serve)
        fixed[N.prefix_hit] = float(hit)
    if serve is None:  # the context is this search's, not the one the cached model was built at
        fixed[N.context] = float(context)
    if lengths and serve is None:  # every size at every length (last axis), then averaged
        fixed[N.context] = np.asarray(lengths, dtype=float)[None, :]

    def subset(env, keep):
        return {k: (v[keep] if isinstance(v, np.ndarray) else v) for k, v in env.items()}

    def feasible(fits, t, out):
        ok = fits & np.isfinite(t)
        for key, lim in limits.items():
            if lim is not None:
                ok &= out[key] <= lim
        out["ok"] = ok
        return out

    accepted = accepted_tokens(dep)
    if ph is Phase.SERVE:
        cm_dec = cms[1]
        isl, osl, chunk = serve
        chunk = serve_chunk(chunk, capacity, gpus // tp, dep.engine)

        def measure(sizes):
            p = serve_point(sizes, isl, osl, chunk, accepted, minimum=np.minimum,
                            maximum=np.maximum, exp=np.exp, hit=hit)
            mem = cm_dec.evaluate(1, {**fixed, **serve_memory_values(sizes, isl, osl, chunk)}
                                  )["memory_bytes"]
            ok = fits(np.broadcast_to(mem, sizes.shape), capacity)
            t_mix, t_dec = (np.full(sizes.shape, np.inf) for _ in range(2))
            if ok.any():  # time only what fits
                q = {k: np.broadcast_to(v, sizes.shape)[ok] for k, v in p.items()}
                tm, td = serve_step_times(cms, fixed, q, isl, osl, chunk, lengths)
                t_mix[ok] = np.broadcast_to(tm, q["decoding"].shape)
                t_dec[ok] = np.broadcast_to(td, q["decoding"].shape)
            with np.errstate(invalid="ignore"):  # inf x 0 where nothing fits: dropped below
                r = serve_rates(p, t_mix, t_dec, chunk, tp * pp, accepted, ceil=np.ceil)
            out = {"step_time_s": r["step_time_s"], "tpot_s": r["tpot_s"], "ttft_s": r["ttft_s"],
                   "tokens_per_gpu_s": np.where(ok, r["output_tokens_per_gpu_s"], 0.0),
                   "output_tokens_per_gpu_s": r["output_tokens_per_gpu_s"],
                   "input_tokens_per_gpu_s": r["input_tokens_per_gpu_s"],
                   "chunk_tokens": np.full(sizes.shape, float(chunk))}
            return feasible(ok, r["step_time_s"], out)

        return measure

    cm = cms[0]
    size_sym = N.batch if ph is Phase.DECODE else N.tokens

    def spread(x):  # a size array against the lengths' axis (lengths given), else as is
        return x[:, None] if lengths else x

    def mean(v, n):  # one value per size: averaged over the lengths' axis
        v = np.asarray(v, dtype=float)
        return (np.broadcast_to(v, (n, len(lengths))).mean(axis=1) if lengths
                else np.broadcast_to(v, (n,)))

    def measure(sizes):
        env = dict(fixed)
        env[size_sym] = spread(sizes)
        # no more micro-batches than requests (tokens): as predict times them (the search's
        # sizes are multiples of mb; a pinned measure's need not be)
        split = micro_batches_run(float(mb), sizes)  # a number where every size has enough
        env[N.micro_batches] = spread(split) if np.ndim(split) else split
        if ph is Phase.PREFILL:  # the chunk at the prompt length (a distribution's mean)
            env[N.chunk] = spread(prefill_chunk(sizes, context, np.minimum))
        mem_env = dict(env)
        if ph is Phase.PREFILL:  # prompts held in memory; 1 / cp of each, and of its tokens
            held = prefill_memory_values(sizes, context, cp, np.ceil, np.maximum)
            mem_env.update({k: spread(v) for k, v in held.items()})
        ok = fits(mean(cm.evaluate(1, mem_env)["memory_bytes"], sizes.size), capacity)
        t = np.full(sizes.shape, np.inf)
        if ok.any():  # time only what fits (decode: memory binds long before max_size)
            sub_env = subset(env, ok) if not lengths else {
                k: (v[ok] if isinstance(v, np.ndarray) and v.shape[:1] == sizes.shape else v)
                for k, v in env.items()}
            t[ok] = mean(cm.evaluate(0, sub_env)["step_time_s"], int(ok.sum()))
        # per GPU: a DP rank's tokens over its TP x PP GPUs (x CP in prefill); predict's rates
        r = step_rates(ph, sizes, t, tp, pp, cp, accepted, context,
                       prefill_chunk(sizes, context, np.minimum),
                       np.maximum, np.minimum)
        lat = "tpot_s" if ph is Phase.DECODE else "ttft_s"
        out = {"step_time_s": t, lat: r[lat], "tokens_per_gpu_s": r["tokens_per_gpu_s"]}
        return feasible(ok, t, out)

    return measure


def _mean_length(ph: Phase, lengths: tuple, context: int, isl: int) -> tuple:
    """(context, ISL) of a search: a distribution's mean stands for the one length (serve's
    ISL, else the context), as in predict's workload."""
    if not lengths:
        return context, isl
    mean = max(1, int(round(sum(lengths) / len(lengths))))
    return (context, mean) if ph is Phase.SERVE else (mean, isl)


def _workload(ph: Phase, context, isl, osl, chunk, prefix_hit) -> Workload:
    """The workload a search's compiled models are built for (its sizes are bound per point)."""
    if ph is Phase.SERVE:
        return Workload(ph, batch=1, isl=isl, osl=osl, chunk=chunk, prefix_hit=prefix_hit)
    if ph is Phase.DECODE:
        return Workload(ph, batch=1, context=context)
    return Workload(ph, tokens=context, context=context, prefix_hit=prefix_hit)


def _compiled(model: ModelSpec, hw: HardwareSpec, rep: Deployment, wl0: Workload) -> tuple:
    """The compiled models predict builds for this structure (TP, micro-batches, size, GPUs and
    EP bound per candidate): serve's mixed and decode steps, else the step with its memory."""
    if wl0.phase is Phase.SERVE:
        return serve_models(model, hw, rep, replace(wl0, chunk=wl0.chunk or 1))[1:]
    return (compiled_predict_model(model, hw, rep, wl0),)


def measure(model: ModelSpec, hw: HardwareSpec, dep: Deployment, phase: str, sizes,
            context: int = 0, isl: int = 0, osl: int = 0, chunk: int = 0,
            prefix_hit: float = 0.0, lengths=()) -> dict:
    """What the search measures for one pinned deployment ``dep`` (its TP, EP, micro-batches,
    A2A mode, PP and CP) at ``sizes`` (batch or tokens per attention DP rank): step time,
    latency, tokens per GPU per second and ``ok`` (fits, no limit), one array each, from the
    same compiled model and metrics as :func:`optimize`."""
    ph = Phase(phase)
    lengths = tuple(lengths)
    context, isl = _mean_length(ph, lengths, context, isl)
    wl0 = _workload(ph, context, isl, osl, chunk, prefix_hit)
    rep = replace(dep, tp=1, micro_batches=1)
    fn = _measure_fn(_compiled(model, hw, rep, wl0), device_capacity(model, hw, dep), ph,
                     context, {},
                     dep.tp, dep.ep, dep.micro_batches, dep.stage_gpus, dep,
                     (isl, osl, chunk) if ph is Phase.SERVE else None, prefix_hit, lengths,
                     dep.pp, dep.cp)
    return fn(np.asarray(sizes, dtype=float))


def device_capacity(model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> float:
    """Bytes a GPU of ``dep`` may fill: its memory, less what an ``--expert-cache`` host tier
    takes of a unified DRAM (one pool); 0 where the host tier does not fit its host memory."""
    host = host_expert_bytes(model, hw, dep)
    if not host:
        return hw.hbm_capacity_bytes
    if hw.host_unified:
        return min(hw.hbm_capacity_bytes, hw.host_capacity_bytes - host)
    return hw.hbm_capacity_bytes if host_fits(hw, dep, 0.0, host) else 0.0


def _search(measure, tp, mb, max_size):
    """Exhaustive search of one (tp, ep, mb): the size (a multiple of ``mb``) with the most
    tokens per GPU per second among the feasible ones, as (size, {quantity: value}), or None."""
    best = None
    for start in range(mb, max_size + 1, _BLOCK * mb):
        sizes = np.arange(start, min(max_size, start + (_BLOCK - 1) * mb) + 1, mb, dtype=float)
        out = measure(sizes)
        if not out["ok"].any():
            continue
        thr = np.where(out["ok"], out["tokens_per_gpu_s"], -np.inf)
        i = int(np.argmax(thr))
        if best is None or thr[i] > best[1]["tokens_per_gpu_s"]:
            best = (sizes[i], {k: v[i] for k, v in out.items()})
    return best


def optimize(model: ModelSpec, hw: HardwareSpec, gpus: int, phase: str, context: int = 0,
             tpot_s: float | None = None, ttft_s: float | None = None,
             base: Deployment | None = None, micro_batches=(1, 2), max_size: int = 1 << 15,
             a2a_modes=None, tps=None, eps=None, progress: bool = False,
             isl: int = 0, osl: int = 0, chunk: int = 0, expert_caches=None,
             prefix_hit: float = 0.0, lengths=(), pps=None, cps=None) -> OptimizeResult:
    """Best deployment of ``model`` on ``gpus`` GPUs for ``phase`` at ``context``.

    ``max_size``: largest batch (decode, serve) or tokens (prefill) per attention DP rank
    searched. ``micro_batches``, ``a2a_modes``, ``tps``, ``eps``: the values each choice may
    take (None: every valid one); a pinned value that no valid deployment has is an error.
    Serve (aggregated serving, :mod:`moesym.numbers.metrics`) takes ``isl``, ``osl`` and ``chunk``
    (0: the engine's default for each TP) instead of ``context``; its throughput is output
    tokens per GPU per second, limited by TPOT (with prefill interference) and TTFT.
    ``progress``: a progress bar on stderr over the (A2A mode, EP) models.
    ``prefix_hit``: share of each prompt found in the prefix cache (prefill and serve, as
    ``predict``'s ``--prefix-hit``).
    ``pps``: pipeline-parallel depths to search (None: the base deployment's): each stage holds
    gpus / pp GPUs and 1 / pp of the layers, the batch (or tokens) a multiple of pp x the
    micro-batches, each depth its own model (every phase).
    ``cps``: context-parallel degrees to search (prefill; None: the base deployment's): the
    GPUs of an attention DP rank sharing each prompt (each must divide gpus / pp / tp), each
    degree its own model; tokens per GPU divide by TP x PP x CP.
    ``lengths``: a distribution's representative lengths (see :mod:`moesym.specs.lengths`):
    decode KV lengths (``--context-dist``), prefill prompt lengths or serve ISLs
    (``--isl-dist``). Each size is evaluated at every length and averaged, as ``predict`` does
    (per-request costs add): decode and prefill memory included, so the largest batch is where
    the distribution's KV fills memory; serve averages the mixed step over the ISLs and holds
    the mean's KV, as predict's serve. ``context`` (``isl`` for serve) is then their mean.
    ``expert_caches``: expert-cache sizes to search (experts per MoE layer resident on the
    device, the rest in host memory; one device), a list or ``"auto"`` (0, powers of two, the
    quarters of E and E); each is its own model, and a larger cache leaves less memory for the
    batch, so the search weighs the cache against the batch it displaces.
    """
    ph = Phase(phase)
    base = base or Deployment()
    serve = ph is Phase.SERVE
    if base.overlap not in ("auto", "ideal"):  # a pinned schedule runs its own micro-batches
        runs = load(base.overlap).layout(ph.engine).micro_batches
        if runs not in micro_batches:
            raise MoesymError(f"--overlap {base.overlap} runs {runs} micro-batch(es) in {ph.value}; "
                              f"the search allows --micro-batches "
                              f"{','.join(map(str, micro_batches))}: add {runs} or drop --overlap")
    if a2a_modes is None:  # DeepEP where EP spans every GPU, the all-gather everywhere
        if serve:  # mixed steps run DeepEP normal, decode steps low-latency: auto picks both
            a2a_modes = [A2AMode.AUTO, A2AMode.ALLGATHER]
        else:
            a2a_modes = [A2AMode.DEEPEP_LL, A2AMode.DEEPEP_NORMAL] if ph is Phase.DECODE \
                else [A2AMode.DEEPEP_NORMAL]
            a2a_modes += [A2AMode.ALLGATHER]
        if not (model.is_moe and gpus > 1):
            a2a_modes = [A2AMode.AUTO]
    decode = ph is not Phase.PREFILL
    size_key = "batch" if decode else "tokens"
    limits = {"tpot_s": tpot_s, "ttft_s": ttft_s} if serve else \
        ({"tpot_s": tpot_s} if decode else {"ttft_s": ttft_s})
    lat_key = "ttft_s" if ph is Phase.PREFILL else "tpot_s"
    lengths = tuple(lengths)
    context, isl = _mean_length(ph, lengths, context, isl)
    if prefix_hit and ph is Phase.DECODE:
        raise MoesymError("--prefix-hit skips prompt tokens: a decode search has none (use "
                          "--phase prefill or serve)")
    wl0 = _workload(ph, context, isl, osl, chunk, prefix_hit)
    searched_pp = pps is not None
    pps = sorted(set(pps)) if searched_pp else [base.pp]
    bad = [p for p in pps if gpus % p]
    if bad:
        raise MoesymError(f"--pp {bad[0]} does not divide --gpus {gpus}")
    searched_cp = cps is not None
    cps = sorted(set(cps)) if searched_cp else [base.cp]
    if ph is not Phase.PREFILL and cps != [1]:
        raise MoesymError(f"--cp {max(cps)} splits prompts across GPUs in prefill; a {ph.value} "
                          "search takes --cp 1 (predict refuses it too)")
    cands, models, any_pp = {}, [], False
    for pp in pps:  # valid (tp, ep, mb) of one stage of gpus / pp GPUs, and its models
        stage = gpus // pp
        of_pp = [c for c in choices(model, stage, micro_batches, base.redundant_experts,
                                    base.gpus_per_node)
                 if (tps is None or c[0] in tps) and (eps is None or c[1] in eps)]
        any_pp = any_pp or bool(of_pp)
        for cp in cps:  # CP divides the attention DP ranks of a stage (gpus / pp / tp)
            cands[pp, cp] = [c for c in of_pp if (stage // c[0]) % cp == 0]
            models += [(pp, cp, mode, ep) for mode in a2a_modes
                       for ep in sorted({c[1] for c in cands[pp, cp]})
                       if not (mode.is_deepep and ep != stage)]  # DeepEP: no expert TP
    no_cp = [cp for cp in cps if not any(cands[pp, cp] for pp in pps)]
    if no_cp and any_pp:
        raise MoesymError(f"--cp {no_cp[0]} does not divide the attention data-parallel ranks "
                          f"(gpus / pp / tp) of any deployment searched on {gpus} GPUs; choose a "
                          "divisor of them")
    if not any(cands.values()):
        raise MoesymError(f"no valid deployment of {model.name} on {gpus} GPUs has --tp in "
                          f"{sorted(tps) if tps else 'any'} and --ep in "
                          f"{sorted(eps) if eps else 'any'}: each must divide --gpus, TP the "
                          f"{model.num_heads} heads and EP the {model.num_experts} experts")
    if not models:
        raise MoesymError("DeepEP --a2a modes need --ep equal to --gpus; pin --ep "
                          f"{gpus} or add --a2a allgather")
    caches = _cache_sizes(model, gpus, expert_caches)
    rows = []

    def row(tp, ep, mb, mode, size, out, front_only=False, cache=None, pp=1, cp=1):
        r = {"tp": tp, "ep": ep, "micro_batches": mb, "a2a": mode.value, size_key: int(size)}
        if searched_pp:
            r["pp"] = int(pp)
        if searched_cp:
            r["cp"] = int(cp)
        if cache is not None:
            r["expert_cache"] = int(cache)
        r.update({k: float(v) for k, v in out.items() if k != "ok"})
        if "chunk_tokens" in r:
            r["chunk_tokens"] = int(r["chunk_tokens"])
        r.update({"fits": True, "_front_only": front_only})
        return r

    built: dict = {}  # compiled models per (PP, CP, A2A mode, EP structure class, expert cache)
    for pp, cp, mode, ep, cache in progress_bar([(p, q, m, e, c) for p, q, m, e in models
                                                 for c in caches], "optimize: models", progress):
        # the model predict builds for this mode and EP's class (TP, micro-batches, size, GPUs,
        # EP and the numbers that depend on EP are bound per candidate)
        dep_c = base if cache is None else replace(base, expert_cache=cache)
        rep = replace(dep_c, gpus=gpus, pp=pp, cp=cp, ep=ep, tp=1, micro_batches=1, a2a=mode)
        stage = gpus // pp
        if (mode is A2AMode.AUTO and rep.resolved_a2a(ph) is A2AMode.ALLGATHER
                and A2AMode.ALLGATHER in a2a_modes):
            continue  # auto is the all-gather here: searched under its own name
        key = (pp, cp, mode, ep_class(rep), cache)
        if key not in built:
            built[key] = _compiled(model, hw, rep, wl0)
        for tp, _, mb in (c for c in cands[pp, cp] if c[1] == ep):
            measure = _measure_fn(built[key], device_capacity(model, hw, dep_c), ph, context,
                                  limits,
                                  tp, ep, mb, stage, dep_c, (isl, osl, chunk) if serve else None,
                                  prefix_hit, lengths, pp, cp)
            step = mb * pp  # a slot of each of the pp stages holds size / pp
            best = _search(measure, tp, step, max_size)
            if best is None:
                continue
            size, out = best
            rows.append(row(tp, ep, mb, mode, size, out, cache=cache, pp=pp, cp=cp))
            # smaller feasible sizes (step x powers of two) for the Pareto front
            front = step * 2.0 ** np.arange(0, max(0, int(math.log2(size / step))) + 1)
            front = front[front < size]
            if len(front):
                fo = measure(front)
                rows += [row(tp, ep, mb, mode, s, {k: v[i] for k, v in fo.items()}, True, cache,
                             pp, cp) for i, s in enumerate(front) if fo["ok"][i]]
    if not rows:
        given = [f"--{k.removesuffix('_s')}-ms {v * 1e3:g}" for k, v in limits.items()
                 if v is not None]
        if given:
            raise MoesymError(f"no deployment of {model.name} on {gpus} x {hw.name} meets "
                              f"{' and '.join(given)} and fits in memory; relax "
                              f"{' / '.join(g.split()[0] for g in given)} or add GPUs (--gpus)")
        raise MoesymError(f"no deployment of {model.name} on {gpus} x {hw.name} fits in "
                          "memory at any size (see moesym memory for the numbers): add GPUs "
                          "(--gpus), lower --weights or --kv, or shorten --context")
    for r in rows:
        r["tokens_per_user_s"] = tokens_per_user_s(ph, r[lat_key], r.get("tokens"))
    best = max((r for r in rows if not r["_front_only"]), key=lambda r: r["tokens_per_gpu_s"])
    clean = lambda r: {k: v for k, v in r.items() if not k.startswith("_")}  # noqa: E731
    table = [clean(r) for r in rows]
    return OptimizeResult(clean(best), [clean(r) for r in pareto_front(rows, "tokens_per_gpu_s",
                                                                      "tokens_per_user_s")], table)


def _cache_sizes(model: ModelSpec, gpus: int, expert_caches) -> list:
    """The expert-cache sizes an optimize searches ([None]: the base deployment's own)."""
    if expert_caches is None:
        return [None]
    if not model.is_moe or gpus != 1:
        raise MoesymError("--expert-cache searches the experts kept on one device: it takes "
                          "--gpus 1 and an MoE model")
    E = model.num_experts
    if expert_caches == "auto":
        pow2 = [1 << i for i in range(E.bit_length()) if 1 << i <= E]
        return sorted({0, E, *pow2, *(E * q // 4 for q in (1, 2, 3))})
    bad = [c for c in expert_caches if c > E]
    if bad:
        raise MoesymError(f"--expert-cache {bad[0]}: {model.name} has {E} experts per layer")
    return sorted(set(expert_caches))


def disaggregate(model: ModelSpec, hw: HardwareSpec, prefill_gpus: int, decode_gpus: int,
                 input_len: int, output_len: int, ttft_s: float | None = None,
                 tpot_s: float | None = None, base: Deployment | None = None) -> dict:
    """Prefill/decode disaggregation: instances of each kind needed to balance a request mix,
    and the same request mix served aggregated (``--phase serve``) for comparison.

    With prefill throughput P (tokens/GPU/s) and decode throughput D, a stream of requests of
    ``input_len`` prompt and ``output_len`` output tokens keeps both pools busy when
    n_prefill_gpus / n_decode_gpus = (input_len / P) / (output_len / D).
    """
    p = optimize(model, hw, prefill_gpus, "prefill", input_len, ttft_s=ttft_s, base=base)
    d = optimize(model, hw, decode_gpus, "decode", input_len + output_len // 2, tpot_s=tpot_s,
                 base=base)
    P, Dv = p.best["tokens_per_gpu_s"], d.best["tokens_per_gpu_s"]
    ratio = (input_len / P) / (output_len / Dv)
    out = {"prefill": p.best, "decode": d.best, "prefill_to_decode_gpu_ratio": ratio,
           "requests_per_gpu_s": 1.0 / (input_len / P + output_len / Dv)}
    # against aggregated serving on the decode pool's GPUs, under the same TPOT and TTFT
    try:
        a = optimize(model, hw, decode_gpus, "serve", tpot_s=tpot_s, ttft_s=ttft_s, base=base,
                     isl=input_len, osl=output_len)
    except MoesymError as exc:
        out["aggregated"] = None
        out["aggregated_note"] = str(exc)
        return out
    out["aggregated"] = a.best
    out["aggregated_requests_per_gpu_s"] = a.best["output_tokens_per_gpu_s"] / output_len
    out["disaggregated_over_aggregated"] = (out["requests_per_gpu_s"]
                                            / out["aggregated_requests_per_gpu_s"])
    return out
