"""Aggregated serving: the steady state of in-flight batching on one attention DP rank.

``B`` requests are in flight, each with ``ISL`` prompt tokens and ``OSL`` output tokens. A step
emits one token per decoding request (``b`` of them); requests finish at ``b / OSL`` per step
and are replaced by new ones whose prompts must be prefilled, ``P = b ISL / OSL`` prompt tokens
per step on average. The engine prefills them in chunks of at most ``C`` tokens (chunked prefill),
each chunk riding in a *mixed step* beside the decode requests (SGLang's mixed chunk, vLLM's and
TensorRT-LLM's in-flight batching):

- prompts arrive at ``a = b / OSL`` per step from desynchronised requests, so the finishes of
  one step are close to Poisson: when prompts fit in a chunk, a step carries prefill with
  probability ``1 - exp(-a)`` and packs the prompts that arrived; when they do not, the
  prefill queue is busy a share ``P / C`` of the steps. The share of mixed steps is
  ``f = max(P / C, 1 - exp(-a))`` (the larger of the two; at most 1) and a mixed step carries
  ``m = P / f`` prompt tokens;
- a request spends ``max(1, ISL / C)`` steps in prefill and ``OSL`` decoding, so
  ``b = B OSL / (OSL + max(1, ISL / C))`` of the ``B`` decode;
- when ``P`` would exceed ``C``, prefill is the bottleneck: every step is mixed with ``C``
  tokens, and only ``b = C OSL / ISL`` requests decode while the rest wait for their prompt.

The mean step time is ``T = f T_mix(b, m) + (1 - f) T_dec(b)``, with the decode requests at
their mean KV length ``ISL + OSL / 2``. TPOT is ``T`` (a request's tokens are spaced by the
steps it shares with prefill chunks); output tokens per rank per second ``b / T``, input
``P / T``; TTFT ``ceil(ISL / C) T_mix``, the prompt's own chunks, with queueing ignored.

>>> p = serve_point(batch=64, isl=1000, osl=1000, chunk=8192)
>>> p["decoding"], p["prefill_per_step"], round(p["mixed_share"], 4), round(p["mixed_tokens"])
(63.93606393606394, 63.93606393606394, 0.0619, 1032)
>>> serve_point(batch=64, isl=8000, osl=50, chunk=8192)["decoding"]  # prefill-bound
51.2
"""

from __future__ import annotations

import math

__all__ = ["serve_point", "serve_rates", "default_chunk_tokens", "CHUNK_BY_MEMORY"]

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


def serve_point(batch, isl, osl, chunk, accepted=1, minimum=min, maximum=max,
                exp=math.exp, hit=0) -> dict:
    """The steady state's decode requests, prompt tokens per step, share of mixed steps and
    prompt tokens in a mixed step (module docstring). ``accepted``: tokens a decode step emits
    per request (speculative decoding), so a request lasts ``OSL / accepted`` steps.
    ``minimum`` / ``maximum`` / ``exp``: the math functions on numbers, NumPy's on arrays,
    ``smin`` / ``smax`` / ``sp.exp`` on expressions. ``hit``: share of each prompt found in
    the prefix cache: only the rest (at least one token) is prefilled, while the input rate
    counts whole prompts (``prompt_per_step``)."""
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
