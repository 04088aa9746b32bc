"""What a serving benchmark reports, from a simulated run (:class:`moesym.serving.simulator.Run`).

Per request, as SGLang's ``bench_serving`` and vLLM's ``benchmark_serving`` define them:
TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1) (requests of
one output token have none); ITL = the gaps between a request's consecutive tokens, pooled over
requests; E2E = finish - arrival. Each as mean, p50, p90, p99 (linear interpolation, NumPy's
default, as the tools use). The run's duration is from the first arrival to the last finish;
throughputs divide the tokens by it and by the deployment's GPUs. Goodput: requests per second
that meet every given limit.

>>> summary(np.array([1.0, 2.0, 3.0, 4.0]))["p50"]
2.5
"""

from __future__ import annotations

import numpy as np

from ..errors import MoesymError

__all__ = ["summary", "report", "ttft_components", "PERCENTILES"]

PERCENTILES = (50, 90, 99)


def summary(x: np.ndarray, scale: float = 1.0) -> dict:
    """Mean and percentiles of ``x`` times ``scale`` (NaN for no samples)."""
    x = np.asarray(x, dtype=float) * scale
    if not len(x):
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    q = np.percentile(x, PERCENTILES)
    return {"mean": float(x.mean()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, q)}}


def per_request(run, warmup: int = 0) -> dict:
    """TTFT, TPOT, E2E (s) per request and the pooled ITL gaps (s), of the requests after the
    first ``warmup`` sent (all by default, as the benchmark tools measure)."""
    sl = slice(warmup, None)
    arrival, first, finish, osl = run.arrival_s[sl], run.first_token_s[sl], run.finish_s[sl], \
        run.osl[sl]
    many = osl > 1
    tpot = (finish[many] - first[many]) / (osl[many] - 1)
    times = run.token_times[sl]
    if times:  # every request's gaps at once: the differences within each request's times
        flat = np.concatenate(times)
        starts = np.cumsum([0] + [len(t) for t in times[:-1]])
        keep = np.ones(len(flat), dtype=bool)
        keep[starts] = False
        itl = np.diff(flat, prepend=0.0)[keep]
    else:
        itl = np.zeros(0)
    return {"ttft": first - arrival, "tpot": tpot, "itl": itl, "e2e": finish - arrival, "tpot_mask": many, "arrival": arrival,
            "finish": finish, "isl": run.isl[sl], "osl": osl}


def ttft_components(run, warmup: int = 0) -> dict:
    """What the requests' TTFT is made of, each a mean over the measured requests (ms): the
    wait until the engine takes the request into a queue (its receive interval, the step
    already running or formed under an overlap scheduler), the queue until its prefill starts
    (earlier prompts, the request cap, KV, a DP balance), the prefill (from its first piece's
    step to the end of its last), and for disaggregated serving the KV transfer and the wait
    for the decode replica to take it; the engine's one-time first prefill (first use of its
    prefill kernels, ``first_use``) is taken out of the queue or prefill it fell in. They add
    up to the mean TTFT."""
    if run.received_s is None and run.prefilled_s is None:
        return {}
    sl = slice(warmup, None)
    arrival, first = run.arrival_s[sl], run.first_token_s[sl]
    mean = lambda a: float(np.mean(a)) * 1e3 if len(a) else float("nan")  # noqa: E731
    received, started = run.received_s[sl], run.started_s[sl]
    done = first if run.prefilled_s is None else run.prefilled_s[sl]
    parts = {"receive": (arrival, received), "queue": (received, started),
             "prefill": (started, done)}
    out = {k: mean(b - a) for k, (a, b) in parts.items()}
    if run.cold_window_s is not None and np.isfinite(run.cold_window_s[sl]).any():
        lo, hi = run.cold_window_s[sl].T
        total = 0.0
        for k, (a, b) in parts.items():
            inside = mean(np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None))
            out[k] -= inside
            total += inside
        out["first_use"] = total
    if run.prefilled_s is not None:
        at_decode = run.at_decode_s[sl]
        out.update({"kv_transfer": mean(at_decode - done),
                    "decode_admission": mean(first - at_decode)})
    return out


def report(run, gpus: int, limits: dict | None = None, warmup: int = 0) -> dict:
    """The benchmark's numbers (ms for latencies, per GPU per second for throughputs) over the
    requests after the first ``warmup``; the duration runs from the first of them to arrive to
    the last to finish. ``limits``: ``{"ttft_s": x, "tpot_s": y}`` for goodput."""
    if not 0 <= warmup < len(run.osl):
        raise MoesymError(f"--warmup-requests {warmup}: must be below the {len(run.osl)} "
                          "requests sent")
    pr = per_request(run, warmup)
    duration = float(pr["finish"].max() - pr["arrival"].min())
    out = {f"{k}_ms": summary(pr[k], 1e3) for k in ("ttft", "tpot", "itl", "e2e")}
    n = len(pr["osl"])
    out.update({
        "requests": n, "warmup_requests": warmup, "duration_s": duration,
        "requests_per_s": n / duration if duration else float("nan"),
        "output_tokens_per_gpu_s": float(pr["osl"].sum()) / duration / gpus if duration else 0.0,
        "input_tokens_per_gpu_s": float(pr["isl"].sum()) / duration / gpus if duration else 0.0,
        "steps": len(run.step_s), "preemptions": run.preemptions,
        "ttft_components_ms": ttft_components(run, warmup),
    })
    if limits:
        ok = np.ones(n, dtype=bool)
        if limits.get("ttft_s") is not None:
            ok &= pr["ttft"] <= limits["ttft_s"]
        if limits.get("tpot_s") is not None:
            tp = np.zeros(n)
            tp[pr["tpot_mask"]] = pr["tpot"]
            ok &= tp <= limits["tpot_s"]
        out["goodput"] = {"share_meeting_slo": float(ok.mean()) if n else 0.0,
                          "requests_per_s": float(ok.sum()) / duration if duration else 0.0,
                          **{k: v for k, v in limits.items() if v is not None}}
    return out


def timeline(run, points: int = 500) -> dict:
    """Per-step running requests, queue, KV tokens in use and prefill tokens (sums over ranks),
    thinned to at most ``points`` steps (evenly spaced)."""
    s = len(run.step_s)
    idx = np.unique(np.linspace(0, s - 1, min(points, s)).astype(int)) if s else np.zeros(0, int)
    return {"time_s": run.step_start_s[idx].tolist(), "step_s": run.step_s[idx].tolist(),
            "running": run.running[idx].tolist(), "waiting": run.waiting[idx].tolist(),
            "kv_used_tokens": run.kv_used[idx].tolist(),
            "prefill_tokens": run.contents["tokens"].sum(axis=1)[idx].tolist() if s else [],
            "decode_batch": run.contents["batch"].sum(axis=1)[idx].tolist() if s else []}
