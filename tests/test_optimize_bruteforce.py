"""Acceptance: ``moesym optimize`` returns a deployment no worse than a brute-force search over the
same space built from ``moesym sweep``, and that deployment fits in memory and meets the latency
limit when checked with ``moesym predict`` and ``moesym memory``.

The space, on both sides: every valid (TP, EP, micro-batches) for the GPU count with
micro-batches in (1, 2), every A2A mode optimize considers, and every size per attention DP rank
(decode batch, prefill tokens) that is a multiple of the micro-batch count, from one per
micro-batch up to ``max_size`` (the step model times n equal micro-batches of size / n).
Feasible: fits in memory and latency <= limit, with TPOT = step time (decode) and TTFT = step
time x max(1, context / tokens) (prefill, as ``moesym predict`` reports it). Best: the most
tokens per GPU per second.

The brute force is a plain grid: ``sweep_frame`` over every integer size, filtered and sorted
with pandas; no golden numbers are stored. ``moesym predict`` and ``moesym memory`` check the
answer in separate processes.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from moesym import load_hardware, load_model
from moesym.search.optimize import choices, optimize
from moesym.specs.deployment import A2AMode, Deployment
from moesym.search.sweep import sweep_frame

pytestmark = pytest.mark.slow  # brute force over whole spaces: the slow tier

MB = (1, 2)
DECODE_MODES = ("deepep-ll", "deepep-normal", "allgather")  # what optimize considers by default

CASES = {
    # TPOT binds for some choices, memory for others (asserted below)
    "decode-qwen3-30b-h20-4gpu": dict(model="qwen3-30b-a3b", hw="h20", gpus=4, phase="decode",
                                      context=4096, limit=0.035, max_size=1024,
                                      modes=DECODE_MODES, default_modes=True),
    "decode-qwen3-235b-h800-8gpu-ll": dict(model="qwen3-235b-a22b", hw="h800", gpus=8,
                                           phase="decode", context=8192, limit=0.045,
                                           max_size=768, modes=("deepep-ll", "allgather"),
                                           default_modes=False),
    "prefill-qwen3-30b-h20-4gpu": dict(model="qwen3-30b-a3b", hw="h20", gpus=4, phase="prefill",
                                       context=4096, limit=1.0, max_size=24576,
                                       modes=("deepep-normal", "allgather"), default_modes=True),
}
CLI_CASE = "prefill-qwen3-30b-h20-4gpu"  # the CLI's optimize defaults (A2A modes, micro-batches)


def _size(case):
    return "batch" if case["phase"] == "decode" else "tokens"


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@functools.cache
def _optimize(name):
    case = CASES[name]
    model, hw = load_model(case["model"]), load_hardware(case["hw"])
    lim = {"tpot_s" if case["phase"] == "decode" else "ttft_s": case["limit"]}
    modes = None if case["default_modes"] else [A2AMode(m) for m in case["modes"]]
    return optimize(model, hw, case["gpus"], case["phase"], case["context"], micro_batches=MB,
                    max_size=case["max_size"], a2a_modes=modes, **lim)


def _brute_force(case) -> pd.DataFrame:
    """Every grid point of the space, from sweep_frame, with its latency and feasibility."""
    model, hw = load_model(case["model"]), load_hardware(case["hw"])
    size, g, ctx = _size(case), case["gpus"], case["context"]
    frames = []
    for mode in case["modes"]:
        axes = {size: range(1, case["max_size"] + 1), "context": [ctx], "gpus": [g],
                "ep": _divisors(g), "tp": _divisors(g), "micro_batches": list(MB)}
        df = sweep_frame(model, hw, case["phase"], axes, Deployment(a2a=A2AMode(mode)))
        frames.append(df.assign(a2a=mode))
    df = pd.concat(frames, ignore_index=True)
    df = df[(df[size] >= df["micro_batches"]) & (df[size] % df["micro_batches"] == 0)]
    stretch = 1.0 if case["phase"] == "decode" else np.maximum(1.0, ctx / df[size])
    df = df.assign(latency_s=df["step_time_s"] * stretch)
    return df.assign(feasible=df["fits"] & (df["latency_s"] <= case["limit"]))


def _cli(*argv) -> subprocess.Popen:
    """``python -m moesym.cli ARGV`` started in the background (collect with :func:`_json`)."""
    return subprocess.Popen([sys.executable, "-m", "moesym.cli", *map(str, argv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _json(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out)


def _stop(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(scope="module", autouse=True)
def cli_optimize():
    """``moesym optimize --json`` of one case, run beside the in-process work."""
    case = CASES[CLI_CASE]
    proc = _cli("optimize", case["model"], "--hardware", case["hw"], "--gpus", case["gpus"],
                "--phase", case["phase"], "--context", case["context"],
                "--ttft-ms", case["limit"] * 1e3, "--max-size", case["max_size"], "--json")
    yield proc
    _stop([proc])


@pytest.fixture(scope="module", params=list(CASES))
def solved(request):
    case = CASES[request.param]
    r = _optimize(request.param)
    b, size = r.best, _size(case)
    argv = [case["model"], "--hardware", case["hw"], "--phase", case["phase"], f"--{size}",
            b[size], "--context", case["context"], "--gpus", case["gpus"], "--tp", b["tp"],
            "--ep", b["ep"], "--micro-batches", b["micro_batches"], "--a2a", b["a2a"], "--json"]
    checks = {"predict": _cli("predict", *argv), "memory": _cli("memory", *argv)}  # meanwhile:
    yield case, r, _brute_force(case), checks
    _stop(checks.values())


def _key(case, row):
    return (int(row["tp"]), int(row["ep"]), int(row["micro_batches"]), str(row["a2a"]),
            int(row[_size(case)]))


def test_same_space(solved):
    case, r, bf, _ = solved
    space = {(tp, ep, mb) for tp, ep, mb in choices(load_model(case["model"]), case["gpus"], MB)}
    assert set(zip(bf["tp"], bf["ep"], bf["micro_batches"])) == space
    assert set(r.table["a2a"]) <= set(case["modes"])


def test_no_worse_than_brute_force(solved):
    _, r, bf, _ = solved
    feasible = bf[bf["feasible"]]
    best = feasible.loc[feasible["tokens_per_gpu_s"].idxmax()]
    assert r.best["tokens_per_gpu_s"] >= best["tokens_per_gpu_s"] * (1 - 1e-9), (
        f"optimize {r.best} loses to brute force {best.to_dict()}")
    # and per choice: each final row is the best of its (tp, ep, mb, a2a) in the grid
    per_choice = feasible.groupby(["tp", "ep", "micro_batches", "a2a"])["tokens_per_gpu_s"].max()
    finals = r.table.set_index(["tp", "ep", "micro_batches", "a2a"])
    for k, v in per_choice.items():
        assert finals.loc[[k], "tokens_per_gpu_s"].max() >= v * (1 - 1e-9), k


def test_every_answer_is_a_brute_force_point(solved):
    """Optimize's best and its best per choice are grid points, timed as the sweep times them."""
    case, r, bf, _ = solved
    at = bf.set_index(["tp", "ep", "micro_batches", "a2a", _size(case)])
    assert at.loc[_key(case, r.best), "feasible"]
    for _, row in r.table.iterrows():
        point = at.loc[_key(case, row)]
        assert point["feasible"], row.to_dict()
        assert row["step_time_s"] == pytest.approx(point["step_time_s"], rel=1e-9)
        assert row["tokens_per_gpu_s"] == pytest.approx(point["tokens_per_gpu_s"], rel=1e-9)


def test_the_limits_bind(solved):
    """The cases exercise the search: some choices stop at the latency limit before memory
    runs out; decode choices run out of memory inside the size range."""
    case, _, bf, _ = solved
    size = _size(case)
    by = bf.groupby(["tp", "ep", "micro_batches", "a2a"])
    last_fit = by.apply(lambda d: d.loc[d["fits"], size].max())
    last_ok = by.apply(lambda d: d.loc[d["feasible"], size].max())
    assert (last_ok < last_fit).any()  # latency binds
    if case["phase"] == "decode":
        assert (last_fit < case["max_size"]).any()  # memory binds
    else:  # prefill memory (the KV of ceil(tokens / context) prompts) never binds here
        assert bf["fits"].all()


def test_best_checks_out_with_predict_and_memory(solved):
    case, r, _, checks = solved
    b = r.best
    p, m = _json(checks["predict"]), _json(checks["memory"])
    lat = "tpot_s" if case["phase"] == "decode" else "ttft_s"
    assert p[lat] <= case["limit"]
    assert p["fits"] and m["fits"]
    if case["phase"] == "decode":
        assert m["max_batch_per_dp_rank"] >= b["batch"]
    assert p["tokens_per_gpu_s"] == pytest.approx(b["tokens_per_gpu_s"], rel=1e-6)
    assert p["step_time_s"] == pytest.approx(b["step_time_s"], rel=1e-6)


def test_cli_optimize_matches_api(cli_optimize):
    out = _json(cli_optimize)
    api = _optimize(CLI_CASE).best
    assert out["pareto"]
    assert out["best"].keys() == api.keys()
    for k, v in api.items():
        assert out["best"][k] == (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v), k


def test_a_model_cached_at_another_context_answers_for_this_one():
    """Regression: the compiled-model cache keys on structure, not on the workload, so a model
    built for one context is reused at another; optimize must bind its own context (it did
    not: after a search at 1536 a search at 4096 answered with 1536's step times)."""
    from moesym import Deployment, Workload
    from moesym.model.predictor import predict

    m, h = load_model("qwen3-30b-a3b"), load_hardware("h20")
    optimize(m, h, 4, "decode", 1536, tpot_s=0.05)  # builds and caches the decode models
    for phase, ctx in (("decode", 4096), ("prefill", 2048)):
        lim = {"tpot_s": 0.035} if phase == "decode" else {"ttft_s": 1.0}
        b = optimize(m, h, 4, phase, ctx, micro_batches=(1,), **lim).best
        size = {"batch": b["batch"]} if phase == "decode" else {"tokens": b["tokens"], "chunk": min(b["tokens"], ctx)}
        p = predict(m, h, Deployment(gpus=4, tp=b["tp"], ep=b["ep"], a2a=b["a2a"]),
                    Workload(phase, context=ctx, **size))
        assert p["step_time_s"] == pytest.approx(b["step_time_s"], rel=1e-9)


def test_optimize_under_a_context_distribution_is_what_predict_says():
    """Issue 18 item 2 in optimize: --context-dist evaluates every batch at each representative
    length and averages (memory too), as predict does; the answer is checked with predict at
    the chosen batch, and the next batch of the same deployment misses a limit."""
    from moesym import Deployment, Workload
    from moesym.model.predictor import predict
    from moesym.specs.lengths import representative

    m, h = load_model("qwen3-30b-a3b"), load_hardware("h20")
    lengths = representative("lognormal:3000:0.9")
    r = optimize(m, h, 4, "decode", 0, tpot_s=0.04, micro_batches=(1,), lengths=lengths,
                 a2a_modes=[A2AMode.ALLGATHER])
    b = r.best
    dep = Deployment(gpus=4, tp=b["tp"], ep=b["ep"], a2a=b["a2a"])
    mean = round(sum(lengths) / len(lengths))

    def at(batch):
        return predict(m, h, dep, Workload("decode", batch=batch, context=mean, lengths=lengths))

    p = at(b["batch"])
    assert p["step_time_s"] == pytest.approx(b["step_time_s"], rel=1e-9)
    assert p["tpot_s"] <= 0.04 and p["fits"]
    nxt = at(b["batch"] + 1)
    assert nxt["tpot_s"] > 0.04 or not nxt["fits"]


def test_optimize_searches_pipeline_depths_as_predict_times_them():
    """Issue 18 item 5 in optimize: --pp 1,2 searches both depths (a stage of gpus / pp GPUs,
    sizes a multiple of pp x micro-batches); every row is what predict says of it."""
    from moesym import Deployment, Workload
    from moesym.model.predictor import predict

    m, h = load_model("qwen3-30b-a3b"), load_hardware("h20")
    r = optimize(m, h, 8, "decode", 2048, tpot_s=0.05, micro_batches=(1,), pps=[1, 2],
                 a2a_modes=[A2AMode.ALLGATHER], max_size=512)
    assert {row["pp"] for row in r.table.to_dict("records")} == {1, 2}
    for row in [x for x in r.table.to_dict("records") if x["pp"] == 2][:6] + [r.best]:
        assert row["batch"] % 2 == 0
        dep = Deployment(gpus=8, pp=row["pp"], tp=row["tp"], ep=row["ep"], a2a=row["a2a"])
        p = predict(m, h, dep, Workload("decode", batch=row["batch"], context=2048))
        assert p["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
        assert p["tokens_per_gpu_s"] == pytest.approx(row["tokens_per_gpu_s"], rel=1e-9)
        assert p["tpot_s"] <= 0.05 and p["fits"]
    with pytest.raises(Exception, match="--pp 3"):
        optimize(m, h, 8, "decode", 2048, tpot_s=0.05, pps=[3])
