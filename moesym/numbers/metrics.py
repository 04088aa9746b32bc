"""Every user-facing number from a step model's outputs: the one metrics layer.

A compiled step model (:mod:`moesym.numeric.compiled`, built by :mod:`moesym.model.predictor`) gives the
values of :func:`moesym.model.report.report_expressions` at bound numbers. This module turns them
into what a user reads, and is the only place that does: step time, tokens per GPU per second
(output and input), TPOT, TTFT, memory fit, what bounds the step (bound, bound term, each key's
regime), the micro-batch clamp (an engine splits B requests into at most B micro-batches), the
averaging over a length distribution, and the steady state of aggregated serving. ``predict``,
``StepModel.predict`` and ``evaluate``, ``sweep``, ``optimize``, ``derive``, the HTML report and
the serving simulation call these functions.

Every function works on numbers and on NumPy arrays (sweep and optimize evaluate grids); the
few that need a branch or a rounding take it as an argument (``minimum``, ``maximum``, ``ceil``,
``exp``: the math functions by default, NumPy's on arrays, ``smin`` / ``smax`` on SymPy
expressions where derive keeps a metric symbolic).

It imports no SymPy and nothing of the step model's construction: it sits after the specs and
before the modules that build, evaluate or search (:mod:`moesym.numbers.bindings` binds a serve
workload's steady state through it).

Rates of one step (per GPU: a rank's tokens over its TP x PP GPUs, x CP in prefill):

>>> r = step_rates("decode", 64, 0.02, tp=1, pp=1)
>>> r["tokens_per_gpu_s"], r["tpot_s"]
(3200.0, 0.02)
>>> step_rates("prefill", 8192, 0.5, tp=2, pp=1, context=16384, chunk=8192)["ttft_s"]
1.0
>>> micro_batches_run(2, 1), micro_batches_run(2, 64)
(1, 2)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np

from ..engines import host_overlapped, load_engine
from ..specs.deployment import Phase, serve_kv_tokens
from ..symbolic.symtab import N
from .economics import busy_share

__all__ = ["accepted_tokens", "micro_batches_run", "warn_micro_batches", "clamp_micro_batches",
           "step_rates",
           "tokens_per_user_s", "fits", "prefill_memory_values", "routed_expert_roofline",
           "key_bounds", "bound_shares", "report_from_numbers", "length_values",
           "evaluate_at_lengths", "at_lengths", "averaged", "CHUNK_BY_MEMORY",
           "default_chunk_tokens", "engine_chunk", "serve_chunk", "serve_kv_tokens", "serve_point", "serve_rates",
           "serve_memory_values", "serve_steps", "serve_step_times", "serve_report",
           "expert_cache_report", "length_symbol"]


# ------------------------------------------------------------------------- one step's rates

def accepted_tokens(deployment) -> float:
    """Tokens one decode step emits per request: 1, or speculative decoding's expected accepted
    length (:func:`moesym.specs.speculative.accepted_length`)."""
    if not deployment.mtp:
        return 1.0
    from ..specs.speculative import accepted_length

    return accepted_length(deployment.mtp, deployment.acceptance)


def micro_batches_run(micro_batches, work):
    """Micro-batches an engine runs: ``micro_batches``, but never more than the requests
    (decode) or prompt tokens (prefill) it splits, ``work`` (SGLang's two-batch overlap falls
    back to one batch below two requests). Numbers give a number; an array ``work`` gives the
    number where every point has enough work (one compiled schedule), else an array."""
    if np.ndim(micro_batches) == 0 and np.ndim(work) == 0:
        return min(micro_batches, work)
    if np.ndim(micro_batches) == 0 and micro_batches <= np.min(work):
        return micro_batches
    return np.minimum(micro_batches, work)


def warn_micro_batches(asked, work, phase, stacklevel: int = 3) -> bool:
    """Warn (and say True) where ``work`` (requests in decode, prompt tokens in prefill;
    numbers or arrays) is smaller than the ``asked`` micro-batch count: those points are timed
    at :func:`micro_batches_run`'s count."""
    if not np.any(np.asarray(work) < np.asarray(asked)):
        return False
    what = "--batch" if Phase(phase) is Phase.DECODE else "--tokens"
    if np.ndim(work) == 0 and np.ndim(asked) == 0:
        warnings.warn(f"--micro-batches {asked} has no effect beyond {what} {work} (an engine "
                      f"cannot split it further): timed as {work} micro-batch(es)",
                      stacklevel=stacklevel)
    else:
        warnings.warn(f"--micro-batches has no effect beyond {what} where {what} is smaller "
                      f"(an engine cannot split it further): those points are timed as "
                      f"{what} micro-batch(es)", stacklevel=stacklevel)
    return True


def clamp_micro_batches(dep, wl, stacklevel: int = 4):
    """``dep`` with :func:`micro_batches_run`'s count for workload ``wl`` (a warning says so
    when it is fewer than asked); a serve workload's steps are mixed: unchanged."""
    if wl.phase is Phase.SERVE:
        return dep
    work = wl.batch if wl.phase is Phase.DECODE else wl.tokens
    if not warn_micro_batches(dep.micro_batches, work, wl.phase, stacklevel):
        return dep
    return replace(dep, micro_batches=micro_batches_run(dep.micro_batches, work))


def step_rates(phase, work, step_s, tp, pp, cp=1, accepted=1, context=None, chunk=None,
               maximum=max, minimum=min) -> dict:
    """Tokens per GPU per second and the latency of one decode or prefill step of ``step_s``
    seconds on one attention DP rank holding ``work`` requests (decode) or prompt tokens
    (prefill), spread over its ``tp x pp`` GPUs (x ``cp`` in prefill).

    Decode: a step emits ``accepted`` tokens per request (speculative decoding; 1 without), so
    TPOT is ``step_s / accepted``. Prefill: a step advances each prompt of ``context`` tokens
    by one chunk of ``min(chunk, tokens)``, so TTFT is ``step_s x max(1, context / chunk)``.
    Numbers, arrays or SymPy expressions (derive; pass ``smax`` / ``smin``)."""
    if Phase(phase) is Phase.DECODE:
        emitted = work if accepted == 1 else work * accepted
        tpot = step_s if accepted == 1 else step_s / accepted
        return {"tokens_per_gpu_s": emitted / (tp * pp) / step_s, "tpot_s": tpot}
    if Phase(phase) is Phase.PREFILL:
        out = {"tokens_per_gpu_s": work / (tp * pp * cp) / step_s}
        if context is not None:
            out["ttft_s"] = step_s * maximum(1.0, context / minimum(chunk, work))
        return out
    raise ValueError("a serve step's rates are the steady state's: serve_rates")


def tokens_per_user_s(phase, latency_s, tokens=None):
    """Speed one request sees: 1 / TPOT in decode and serve, its prompt tokens over TTFT in
    prefill."""
    return tokens / latency_s if Phase(phase) is Phase.PREFILL else 1.0 / latency_s


def fits(memory_bytes, capacity_bytes):
    """Whether per-GPU memory fits the GPU's (numbers or arrays)."""
    return memory_bytes <= capacity_bytes


def prefill_memory_values(tokens, context, cp=1, ceil=math.ceil, maximum=max) -> dict:
    """What a prefill step holds in memory, by printed name: the KV of the
    ``max(1, ceil(tokens / context))`` prompts it advances (``B``) and its ``tokens`` of
    activations, each split over the ``cp`` GPUs of a context-parallel group."""
    return {N.batch: maximum(1, ceil(tokens / context)) / cp, N.tokens: tokens / cp}


# --------------------------------------------------------------- what bounds the step

# contract keys of per_layer_s (issue 2 / CONTRACT.md) are moesym.model.report.BREAKDOWN_KEYS
_RESOURCES = ("compute", "memory", "communication", "overhead")
_COMM_KEYS = ("dispatch", "combine")  # their time counts where it is exposed (bound_shares)


def _kernels(nums) -> dict:
    """``{key: [{field: seconds}, ...]}`` from the ``part/...`` outputs."""
    out: dict = {}
    for name, v in nums.items():
        if name.startswith("part/"):
            _, key, i, f = name.split("/")
            parts = out.setdefault(key, [])
            while len(parts) <= int(i):
                parts.append({})
            parts[int(i)][f] = float(v)
    return out


def routed_expert_roofline(routed, load, maximum=max) -> tuple:
    """(compute, memory) seconds that decide whether the routed experts are compute- or
    memory-bound: compute = the tensor time of their GEMMs; memory = the larger of the GEMMs'
    own memory time and the expert-weight read (the weight-load floor). ``routed`` and ``load``
    are ``(compute_s, memory_s)`` pairs of the kernels under ``moe_routed`` and
    ``moe_weight_load``; ``maximum`` is ``max`` on numbers and ``smax`` on expressions, so the
    report and ``moesym derive crossover`` apply this one rule."""
    compute = sum(c for c, _ in routed)
    memory = maximum(sum(m for _, m in load), sum(m for _, m in routed))
    return compute, memory


def _key_rooflines(nums) -> dict:
    """``{key: (compute_s, memory_s, shares)}`` per micro-batch and layer: the roofline sides
    and the seconds per resource of each breakdown key (``routed_experts`` for ``moe_routed``
    with ``moe_weight_load``), by the rule of :func:`key_bounds`."""
    kernels = _kernels(nums)
    out = {}
    for key, parts in kernels.items():
        if key == "moe_routed":
            continue
        shares = dict.fromkeys(_RESOURCES, 0.0)
        if key == "moe_weight_load":
            routed = kernels.get("moe_routed", [])
            c, m = routed_expert_roofline([(q["compute_s"], q["memory_s"]) for q in routed],
                                          [(q["compute_s"], q["memory_s"]) for q in parts])
            shares["compute" if c >= m else "memory"] += max(c, m)
            parts = routed + parts
        else:
            c = m = 0.0
            for p in parts:
                shares["compute" if p["compute_s"] >= p["memory_s"] else "memory"] += \
                    max(p["compute_s"], p["memory_s"])
                c, m = c + p["compute_s"], m + p["memory_s"]
        for p in parts:
            shares["communication"] += p["comm_s"]
            shares["overhead"] += p["overhead_s"]
        out["routed_experts" if key == "moe_weight_load" else key] = (c, m, shares)
    return out


def _layers(model) -> int:
    return model.moe_layers if model.is_moe else model.dense_layers


def key_bounds(nums, model, deployment) -> dict:
    """Per breakdown key, over one step (all micro-batches and layers): its roofline sides
    (``compute_s``, ``memory_s``), ``overhead_s`` (launch latencies), ``communication_s``,
    ``roofline`` (compute or memory) and ``bound`` (the resource with the most seconds).

    Rule (the one ``derive`` solves for its crossovers): a kernel is compute-bound when its
    tensor time is at least its memory time, else memory-bound, and counts max(compute, memory)
    toward that resource; launch latencies count as overhead and transfers as communication.
    The routed experts (``moe_routed`` with ``moe_weight_load``) are one roofline,
    :func:`routed_expert_roofline`: their ``roofline`` flips from memory to compute exactly at
    ``moesym derive crossover``'s batch.
    """
    scale = deployment.micro_batches * _layers(model)
    out = {}
    for key, (c, m, shares) in _key_rooflines(nums).items():
        entry = {"compute_s": c * scale, "memory_s": m * scale,
                 "communication_s": shares["communication"] * scale,
                 "overhead_s": shares["overhead"] * scale,
                 "bound": max(_RESOURCES, key=shares.get) if any(shares.values()) else "none"}
        if c or m:
            entry["roofline"] = "compute" if c >= m else "memory"
        out[key] = entry
    return out


def bound_shares(nums, values, model, deployment) -> dict:
    """Seconds of one step attributed to compute, memory, communication and fixed overhead:
    each key's resources (:func:`key_bounds`' rule; dispatch and combine excepted), the
    communication not hidden behind compute (overlapped layer time minus compute-only time), the
    per-step and per-layer fixed latencies, and what the serving engine loses against the
    modeled kernels (eta_sv < 1) as overhead.
    """
    n = deployment.micro_batches
    layers = _layers(model)
    shares = dict.fromkeys(_RESOURCES, 0.0)
    for key, (_, _, s) in _key_rooflines(nums).items():
        if key not in _COMM_KEYS:
            for r in _RESOURCES:
                shares[r] += s[r] * n * layers
    exposed = float(nums["layer_s"]) - float(nums["layer_compute_s"])
    shares["communication"] += max(exposed, 0.0) * layers
    host = values.get(N.t_step, 0.0)
    overlapped = host_overlapped(deployment)
    shares["overhead"] += (0.0 if overlapped else host) + values.get(N.t_layer, 0.0) * layers
    serving = values.get(N.eff_serve, 1.0)
    shares["overhead"] += sum(shares.values()) * (1 / serving - 1)
    if overlapped:  # the host time shows only where the GPU step is shorter
        shares["overhead"] += max(float(nums["step_time_s"]) - sum(shares.values()), 0.0)
    return shares


def _bound_term(bound: str, nums, values, model, deployment) -> str:
    """The breakdown key (or ``exposed_communication`` / ``fixed_latency``) that contributes
    most to the step's bound resource."""
    n = deployment.micro_batches
    layers = _layers(model)
    parts = {k: s[bound] * n * layers for k, (_, _, s) in _key_rooflines(nums).items()
             if k not in _COMM_KEYS}
    parts["exposed_communication"] = max(float(nums["layer_s"]) - float(nums["layer_compute_s"]),
                                         0.0) * layers if bound == "communication" else 0.0
    parts["fixed_latency"] = (values.get(N.t_step, 0.0) + values.get(N.t_layer, 0.0) * layers
                              if bound == "overhead" else 0.0)
    return max(parts, key=parts.get)


def report_from_numbers(nums, values, model, deployment, workload) -> dict:
    """The ``predict`` report from the values of
    :func:`moesym.model.report.report_expressions` (``nums``) and the numbers bound to the step
    model's symbols (``values``, by printed name); ``deployment`` runs the micro-batches it
    names (:func:`clamp_micro_batches` applied)."""
    t = float(nums["step_time_s"])
    out: dict = {"step_time_s": t}
    dep, wl = deployment, workload
    if wl.phase is Phase.DECODE:
        a = accepted_tokens(dep)  # tokens a step emits per request (speculative: > 1)
        out.update(step_rates(wl.phase, wl.batch, t, dep.tp, dep.pp, accepted=a))
        if dep.mtp:
            out["accepted_tokens_per_step"] = a
    elif wl.phase is Phase.PREFILL:
        out.update(step_rates(wl.phase, wl.tokens, t, dep.tp, dep.pp, dep.cp,
                              context=wl.context, chunk=wl.chunk))
    # a mixed serving step: its rates are the steady state's (serve_rates), not its own
    shares = bound_shares(nums, values, model, dep)
    out["bound"] = max(shares, key=shares.get)
    out["bound_shares_s"] = shares
    out["bound_term"] = _bound_term(out["bound"], nums, values, model, dep)
    out["bounds"] = key_bounds(nums, model, dep)
    out["per_layer_s"] = {k[len("per_layer_s/"):]: float(v) for k, v in nums.items()
                          if k.startswith("per_layer_s/")}
    work: dict = {}
    for name, v in nums.items():
        if name.startswith("work/"):
            _, key, f = name.split("/")
            work.setdefault(key, {})[f] = float(v)
    if work:  # per GPU, one layer, every micro-batch; the time model does not change these
        out["work_per_layer"] = work
    kernels: dict = {}
    for name, v in nums.items():
        if name.startswith("kernel/"):
            kernels[name.split("/", 3)[3]] = kernels.get(name.split("/", 3)[3], 0.0) + float(v)
    if kernels:  # each kernel's time in one layer (all micro-batches), by kernel name
        out["per_kernel_s"] = kernels
    out["layer_s"] = float(nums["layer_s"])
    out["layer_compute_s"] = float(nums["layer_compute_s"])
    out["serving_frac"] = float(values.get(N.eff_serve, 1.0))
    return out


def expert_cache_report(model, dep, wl) -> dict:
    """Hit rate and cold experts per MoE layer of ``--expert-cache`` at this workload's tokens
    per micro-batch (:mod:`moesym.routing.cache`)."""
    from ..routing.cache import hit_rate, misses_per_step

    tokens = (wl.batch * (1 + dep.mtp) if wl.phase is not Phase.PREFILL else wl.tokens)
    T = tokens * dep.stage_gpus / dep.tp / dep.micro_batches / dep.pp  # through a layer per pass
    s = dep.routing.skew
    args = (model.num_experts, model.experts_per_token, dep.expert_cache, s, dep.cache_policy, T)
    return {"expert_cache_hit_rate": hit_rate(*args),
            "expert_cache": {"resident_experts_per_layer": min(dep.expert_cache, model.num_experts),
                             "cold_experts_per_pass": misses_per_step(*args),
                             "policy": dep.cache_policy, "placement": dep.expert_placement,
                             "prefetch": dep.prefetch}}


# --------------------------------------------------------------- length distributions

def length_symbol(phase) -> str:
    """The symbol a length distribution's lengths bind: the prompt length (serve's ISL) or the
    decode KV / prefill prompt length (context)."""
    return N.isl if Phase(phase) is Phase.SERVE else N.context


def length_values(wl) -> dict:
    """A length distribution's representative values bound to its symbol (the model is
    evaluated at each and averaged: a step's per-request costs add over its requests)."""
    if not wl.lengths:
        return {}
    return {length_symbol(wl.phase): np.asarray(wl.lengths, dtype=float)}


def at_lengths(evaluate, env: dict, symbol: str, lengths):
    """``evaluate(env)`` (a dict of outputs, or one array) at each of a distribution's
    representative ``lengths`` bound to ``symbol``, averaged: the lengths take a new last axis,
    every array of ``env`` one more length-1 axis (so the others keep their alignment), and each
    output is averaged over that axis. No lengths: ``evaluate(env)`` as is."""
    if not lengths:
        return evaluate(env)
    env = {k: (np.asarray(v)[..., None] if np.ndim(v) else v) for k, v in env.items()}
    env[symbol] = np.asarray(lengths, dtype=float)
    out = evaluate(env)
    mean = lambda v: np.asarray(v, dtype=float).mean(axis=-1) if np.ndim(v) else v  # noqa: E731
    return {k: mean(v) for k, v in out.items()} if isinstance(out, dict) else mean(out)


def evaluate_at_lengths(cm, i: int, env: dict, symbol: str, lengths) -> dict:
    """``cm.evaluate(i, env)`` at each of a distribution's representative ``lengths`` bound to
    ``symbol``, averaged (:func:`at_lengths`), for numbers and arrays broadcast against each
    other (``predict``, ``sweep``, ``optimize``). No lengths: ``cm.evaluate`` as is."""
    return at_lengths(lambda e: cm.evaluate(i, e), env, symbol, lengths)


def averaged(nums: dict) -> dict:
    """Each output as one number (a mean where it is still an array)."""
    return {k: float(np.mean(v)) for k, v in nums.items()}


# ------------------------------------------------------------------ aggregated serving
# Aggregated serving: the steady state of in-flight batching on one attention DP rank.
#
# ``B`` requests are in flight, each with ``ISL`` prompt tokens and ``OSL`` output tokens. A
# step emits one token per decoding request (``b`` of them); requests finish at ``b / OSL`` per
# step and are replaced by new ones whose prompts must be prefilled, ``P = b ISL / OSL`` prompt
# tokens per step on average. The engine prefills them in chunks of at most ``C`` tokens
# (chunked prefill), each chunk riding in a *mixed step* beside the decode requests (SGLang's
# mixed chunk, vLLM's and TensorRT-LLM's in-flight batching):
#
# - prompts arrive at ``a = b / OSL`` per step from desynchronised requests, so the finishes of
#   one step are close to Poisson: when prompts fit in a chunk, a step carries prefill with
#   probability ``1 - exp(-a)`` and packs the prompts that arrived; when they do not, the
#   prefill queue is busy a share ``P / C`` of the steps. The share of mixed steps is
#   ``f = max(P / C, 1 - exp(-a))`` (the larger of the two; at most 1) and a mixed step carries
#   ``m = P / f`` prompt tokens;
# - a request spends ``max(1, ISL / C)`` steps in prefill and ``OSL`` decoding, so
#   ``b = B OSL / (OSL + max(1, ISL / C))`` of the ``B`` decode;
# - when ``P`` would exceed ``C``, prefill is the bottleneck: every step is mixed with ``C``
#   tokens, and only ``b = C OSL / ISL`` requests decode while the rest wait for their prompt.
#
# The mean step time is ``T = f T_mix(b, m) + (1 - f) T_dec(b)``, with the decode requests at
# their mean KV length ``ISL + OSL / 2``. TPOT is ``T`` (a request's tokens are spaced by the
# steps it shares with prefill chunks); output tokens per rank per second ``b / T``, input
# ``P / T``; TTFT ``ceil(ISL / C) T_mix``, the prompt's own chunks, with queueing ignored.

#: SGLang's default chunked-prefill size by GPU memory (GiB below which it applies, tokens),
#: divided by the attention-DP size when attention is data-parallel. Source: SGLang 0.5.23
#: ``srt/arg_groups/memory_hook.py`` (``_handle_gpu_memory_settings``: 2k below 20 GiB, 4k
#: below 60, 8k below 160, 16k above) and ``parallel_hook.py`` (``// attn_dp_size``).
CHUNK_BY_MEMORY = ((20, 2048), (60, 4096), (160, 8192), (math.inf, 16384))


def default_chunk_tokens(hbm_capacity_bytes: float, dp: int) -> int:
    """The chunked-prefill budget per attention DP rank an engine uses by default."""
    gib = hbm_capacity_bytes / 2**30
    chunk = next(c for limit, c in CHUNK_BY_MEMORY if gib < limit)
    return max(1, chunk // dp)


def engine_chunk(engine, hbm_capacity_bytes: float, dp: int) -> int:
    """Prompt tokens an engine prefills per step per attention DP rank by default: its
    profile's chunk (:mod:`moesym.engines`), SGLang's by-memory rule
    (:func:`default_chunk_tokens`), or, for an engine that does not chunk, its step budget;
    never more than its cap on a prefill batch. ``engine``: a name, profile file or profile."""
    p = load_engine(engine) if isinstance(engine, str) else engine
    c = p.chunk_tokens
    chunk = (default_chunk_tokens(hbm_capacity_bytes, dp) if c == "by-memory" else
             int(p.step_token_budget) if c == "off" else int(c))
    return min(chunk, p.max_prefill_tokens) if p.max_prefill_tokens else chunk


def serve_chunk(chunk, hbm_capacity_bytes: float, dp, engine="sglang"):
    """The prefill chunk a serve step runs: ``chunk`` where given (> 0), else the engine's
    default for the attention DP size ``dp`` (:func:`engine_chunk`). Numbers give an int;
    arrays (``dp`` at least 1) a float array."""
    if np.ndim(chunk) == 0 and np.ndim(dp) == 0:
        return int(chunk) if chunk else engine_chunk(engine, hbm_capacity_bytes, int(dp))
    default = np.vectorize(lambda d: engine_chunk(engine, hbm_capacity_bytes, int(d)))(dp)
    return np.where(np.asarray(chunk) > 0, chunk, default).astype(float)


def serve_point(batch, isl, osl, chunk, accepted=1, minimum=min, maximum=max,
                exp=math.exp, hit=0) -> dict:
    """The steady state's decode requests, prompt tokens per step, share of mixed steps and
    prompt tokens in a mixed step (the serving section above). ``accepted``: tokens a decode
    step emits per request (speculative decoding), so a request lasts ``OSL / accepted`` steps.
    ``minimum`` / ``maximum`` / ``exp``: the math functions on numbers, NumPy's on arrays,
    ``smin`` / ``smax`` / ``sp.exp`` on expressions. ``hit``: share of each prompt found in
    the prefix cache: only the rest (at least one token) is prefilled, while the input rate
    counts whole prompts (``prompt_per_step``).

    >>> p = serve_point(batch=64, isl=1000, osl=1000, chunk=8192)
    >>> p["decoding"], p["prefill_per_step"], round(p["mixed_share"], 4), round(p["mixed_tokens"])
    (63.93606393606394, 63.93606393606394, 0.0619, 1032)
    >>> serve_point(batch=64, isl=8000, osl=50, chunk=8192)["decoding"]  # prefill-bound
    51.2
    """
    steps = osl / accepted
    new = maximum(isl * (1 - hit), 1)  # computed prompt tokens: a prefix-cache hit skips the rest
    decoding = minimum(batch * steps / (steps + maximum(1, new / chunk)), chunk * steps / new)
    prefill = decoding * new / steps
    share = maximum(prefill / chunk, 1 - exp(-decoding / steps))
    return {"decoding": decoding, "prefill_per_step": prefill, "mixed_share": share,
            "mixed_tokens": prefill / share, "prompt_per_step": decoding * isl / steps,
            "computed_per_prompt": new}


def serve_rates(point: dict, mixed_step_s, decode_step_s, chunk, tp, accepted=1,
                ceil=math.ceil) -> dict:
    """Throughput and latency of the steady state from the two step times (per rank; per GPU
    divides by the attention TP degree). ``accepted``: tokens each decode step emits per
    request (speculative decoding's expected accepted length; 1 without)."""
    f = point["mixed_share"]
    step = f * mixed_step_s + (1 - f) * decode_step_s
    return {"step_time_s": step,
            "output_tokens_per_gpu_s": point["decoding"] * accepted / tp / step,
            "input_tokens_per_gpu_s": point["prompt_per_step"] / tp / step,
            "tpot_s": step / accepted,
            "ttft_s": ceil(point["computed_per_prompt"] / chunk) * mixed_step_s}


def serve_memory_values(batch, isl, osl, chunk) -> dict:
    """What the decode model's memory holds in the steady state, by printed name: the KV of
    every request in flight (``batch``) at the mean KV length :func:`serve_kv_tokens`, beside
    the activations of one prefill ``chunk``."""
    return {N.batch: batch, N.context: serve_kv_tokens(isl, osl), N.prefill_tokens: chunk}


def serve_steps(cms, env: dict, point: dict, isl, osl, chunk, lengths=()) -> tuple:
    """(mixed-step outputs, decode-step outputs) at the steady state ``point`` of
    :func:`serve_point` (numbers or arrays, as ``env`` binds the rest), from
    :func:`moesym.model.predictor.serve_models`' two compiled models: the decode requests at
    their mean KV :func:`serve_kv_tokens` and the mixed step's prompt tokens beside them.
    ``lengths``: an ISL distribution's representative lengths (``isl`` their mean): the mixed
    step's prompts are drawn from it, its outputs averaged over them."""
    cm_mix, cm_dec = cms
    dec = {**env, N.batch: point["decoding"], N.context: serve_kv_tokens(isl, osl)}
    mix = {**dec, N.tokens: point["mixed_tokens"], N.isl: isl, N.chunk: chunk}
    return evaluate_at_lengths(cm_mix, 0, mix, N.isl, lengths), cm_dec.evaluate(0, dec)


def serve_step_times(cms, env: dict, point: dict, isl, osl, chunk, lengths=()) -> tuple:
    """(mixed-step, decode-step) times of :func:`serve_steps`: ``predict``, ``sweep`` and
    ``optimize`` evaluate the serve phase through it."""
    mixed, decode = serve_steps(cms, env, point, isl, osl, chunk, lengths)
    return mixed["step_time_s"], decode["step_time_s"]


def serve_report(point: dict, rates: dict, chunk, kv_tokens, mixed: dict, decode: dict) -> dict:
    """``moesym predict --phase serve``'s report from the steady state (``point``, ``rates``)
    and the mixed and decode steps' reports (:func:`report_from_numbers`). ``per_layer_s`` and
    the bounds are the mixed step's; the bound is that of the step that takes most of the
    time."""
    mixed_busy = point["mixed_share"] * mixed["step_time_s"]
    main = mixed if mixed_busy >= rates["step_time_s"] - mixed_busy else decode
    return {**rates, "tokens_per_gpu_s": rates["output_tokens_per_gpu_s"],
            "bound": main["bound"], "bound_term": main["bound_term"],
            "per_layer_s": mixed["per_layer_s"], "layer_s": mixed["layer_s"],
            "layer_compute_s": mixed["layer_compute_s"], "bounds": mixed["bounds"],
            "work_per_layer": mixed.get("work_per_layer", {}),
            "serving_frac": mixed["serving_frac"],
            "serve": {"chunk_tokens": chunk, "kv_mean_tokens": kv_tokens,
                      "decoding_requests": point["decoding"],
                      "prefill_tokens_per_step": point["prefill_per_step"],
                      "mixed_step_tokens": point["mixed_tokens"],
                      "mixed_step_share": point["mixed_share"],
                      "queueing": "ignored: TTFT is the prompt's own chunks"},
            "mixed_step": {**{k: mixed[k] for k in ("step_time_s", "bound", "bound_term")},
                           "busy_share": busy_share(mixed)},
            "decode_step": {**{k: decode[k] for k in ("step_time_s", "bound", "bound_term",
                                                      "per_layer_s")},
                            "busy_share": busy_share(decode)}}
