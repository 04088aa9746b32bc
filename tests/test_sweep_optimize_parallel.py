"""Issue 18 in the grid commands: ``sweep --pp/--cp LIST``, ``sweep --context-dist/--isl-dist``,
``optimize --isl-dist``, ``optimize --cp LIST`` (prefill) and ``optimize --pp`` for serve.

Every number is checked against ``moesym predict`` at the same point (in-process, ``--json``);
the points a sweep drops are exactly those predict refuses. No golden numbers are stored.
"""

from __future__ import annotations

import csv
import io
import itertools
from contextlib import redirect_stderr, redirect_stdout

import pytest

from moesym.cli import main

Q = ["qwen3-30b-a3b", "--hardware", "h20"]
KEYS = ("step_time_s", "tokens_per_gpu_s", "memory_bytes")
SERVE_KEYS = KEYS + ("tpot_s", "ttft_s", "input_tokens_per_gpu_s")


def _sweep(tmp_path, argv) -> list[dict]:
    out = tmp_path / "s.csv"
    with redirect_stdout(io.StringIO()):
        assert main(["sweep", *Q, *argv, "--out", str(out)]) == 0
    with out.open() as f:
        return list(csv.DictReader(f))


def _predict(argv):
    """predict's JSON at this point, or None where predict refuses it (exit 2, one line)."""
    buf, err = io.StringIO(), io.StringIO()
    with redirect_stdout(buf), redirect_stderr(err):
        rc = main(["predict", *Q, *argv, "--json"])
    if rc == 2:
        assert len(err.getvalue().strip().splitlines()) == 1
        return None
    assert rc == 0
    import json

    return json.loads(buf.getvalue())


def _same(row, p, keys=KEYS):
    for k in keys:
        assert float(row[k]) == pytest.approx(p[k], rel=1e-9), k
    assert row["fits"] == str(p["fits"])


def _check_grid(rows, grid: dict, fixed: list[str], keys=KEYS):
    """Every combination of ``grid`` (flag -> values): a row equal to predict's numbers where
    predict answers, no row where it refuses."""
    by_point = {tuple(r[k.replace("-", "_")] for k in grid): r for r in rows}
    assert len(by_point) == len(rows)
    answered = 0
    for values in itertools.product(*grid.values()):
        argv = [*fixed, *(x for k, v in zip(grid, values) for x in (f"--{k}", str(v)))]
        p = _predict(argv)
        row = by_point.get(tuple(str(v) for v in values))
        if p is None:
            assert row is None, argv
            continue
        assert row is not None, argv
        _same(row, p, keys)
        answered += 1
    assert answered == len(rows)
    return answered


def test_sweep_pp_axis_equals_predict_and_drops_what_predict_refuses(tmp_path):
    """--pp 1,2,3 on 4 GPUs: pp 3 does not divide the GPUs, EP 4 does not divide a stage of
    2 GPUs; every other point is predict's (step, tokens per GPU over all stages, memory)."""
    grid = {"batch": [8, 64], "pp": [1, 2, 3], "ep": [1, 2, 4]}
    rows = _sweep(tmp_path, ["--phase", "decode", "--context", "2048", "--gpus", "4",
                             *(x for k, v in grid.items() for x in (f"--{k}", ",".join(map(str, v))))])
    assert {r["pp"] for r in rows} == {"1", "2"}
    assert "cp" not in rows[0]
    assert _check_grid(rows, grid, ["--phase", "decode", "--context", "2048", "--gpus", "4"]) == 10


def test_sweep_without_pp_or_cp_writes_no_such_columns(tmp_path):
    rows = _sweep(tmp_path, ["--phase", "decode", "--batch", "8", "--gpus", "4"])
    assert "pp" not in rows[0] and "cp" not in rows[0]


@pytest.mark.slow
def test_sweep_cp_and_pp_in_prefill_under_a_prompt_length_distribution(tmp_path):
    """--cp 1,2,4 x --tp 1,2 x --pp 1,2 on 4 GPUs with --isl-dist: CP must divide the stage's
    attention DP ranks (gpus / pp / tp); each point averaged over the representative prompt
    lengths, memory included, as predict averages; tokens per GPU divide by TP x PP x CP."""
    grid = {"tokens": [8192], "cp": [1, 2, 4], "tp": [1, 2], "pp": [1, 2]}
    dist = "uniform:1000:3000"
    rows = _sweep(tmp_path, ["--phase", "prefill", "--gpus", "4", "--isl-dist", dist,
                             *(x for k, v in grid.items() for x in (f"--{k}", ",".join(map(str, v))))])
    assert {r["isl_dist"] for r in rows} == {dist}
    assert {r["context"] for r in rows} == {"2000"}  # the distribution's mean, as predict's
    assert {r["cp"] for r in rows} == {"1", "2", "4"}
    n = _check_grid(rows, grid, ["--phase", "prefill", "--gpus", "4", "--isl-dist", dist])
    assert n == 8  # (pp, tp, cp): 1,1,{1,2,4}; 1,2,{1,2}; 2,1,{1,2}; 2,2,{1}


def test_sweep_decode_under_a_kv_length_distribution_equals_predict(tmp_path):
    dist = "lognormal:3000:0.9"
    grid = {"batch": [16, 128], "ep": [2, 4]}
    rows = _sweep(tmp_path, ["--phase", "decode", "--gpus", "4", "--context-dist", dist,
                             "--batch", "16,128", "--ep", "2,4"])
    assert {r["context_dist"] for r in rows} == {dist}
    assert _check_grid(rows, grid, ["--phase", "decode", "--gpus", "4", "--context-dist", dist]) == 4
    # the distribution is not its mean: the step at the mean length alone differs
    mean = rows[0]["context"]
    at_mean = _predict(["--phase", "decode", "--gpus", "4", "--ep", rows[0]["ep"], "--batch",
                        rows[0]["batch"], "--context", mean])
    assert abs(at_mean["step_time_s"] / float(rows[0]["step_time_s"]) - 1) > 1e-4


@pytest.mark.slow
def test_sweep_serve_with_pp_and_an_isl_distribution_equals_predict(tmp_path):
    grid = {"batch": [16, 64], "pp": [1, 2], "ep": [2, 4]}
    dist = "lognormal:1000:0.5"
    rows = _sweep(tmp_path, ["--phase", "serve", "--gpus", "4", "--osl", "512", "--isl-dist",
                             dist, "--batch", "16,64", "--pp", "1,2", "--ep", "2,4"])
    assert {r["isl_dist"] for r in rows} == {dist}
    n = _check_grid(rows, grid, ["--phase", "serve", "--gpus", "4", "--osl", "512",
                                 "--isl-dist", dist], SERVE_KEYS)
    assert n == 6  # EP 4 does not divide a stage of 2 GPUs


BAD = [
    (["sweep", *Q, "--phase", "decode", "--batch", "8", "--gpus", "4", "--cp", "2"], "--cp 2"),
    (["sweep", *Q, "--phase", "serve", "--isl", "9", "--osl", "9", "--gpus", "4", "--cp", "1,2"],
     "--cp 2"),
    (["sweep", *Q, "--phase", "decode", "--gpus", "4", "--pp", "3"], "--pp"),
    (["sweep", *Q, "--phase", "decode", "--context", "100", "--context-dist", "fixed:100"],
     "--context-dist"),
    (["sweep", *Q, "--phase", "prefill", "--context", "100", "--isl-dist", "fixed:100"],
     "--isl-dist"),
    (["sweep", *Q, "--phase", "serve", "--isl", "100", "--osl", "9", "--isl-dist", "fixed:100"],
     "--isl-dist"),
    (["sweep", *Q, "--phase", "decode", "--isl-dist", "fixed:100"], "--isl-dist"),
    (["sweep", *Q, "--phase", "prefill", "--context-dist", "fixed:100"], "--context-dist"),
    (["sweep", *Q, "--phase", "decode", "--context-dist", "uniform:9:1"], "--context-dist"),
    (["optimize", *Q, "--gpus", "4", "--phase", "decode", "--context", "100", "--cp", "2"],
     "--cp 2"),
    (["optimize", *Q, "--gpus", "4", "--phase", "prefill", "--context", "100", "--cp", "3"],
     "--cp 3"),
    (["optimize", *Q, "--gpus", "4", "--phase", "prefill", "--context", "100", "--isl-dist",
      "fixed:100"], "--isl-dist"),
    (["optimize", *Q, "--gpus", "4", "--phase", "serve", "--isl", "100", "--osl", "9",
      "--isl-dist", "fixed:100"], "--isl-dist"),
    (["optimize", *Q, "--gpus", "4", "--phase", "decode", "--isl-dist", "fixed:100"],
     "--isl-dist"),
    (["optimize", *Q, "--gpus", "4", "--phase", "serve", "--osl", "9", "--context-dist",
      "fixed:100"], "--context-dist"),
    (["predict", *Q, "--phase", "decode", "--gpus", "4", "--ep", "4", "--pp", "2"],
     "--ep 4 does not divide the 2 GPUs of a pipeline stage (--gpus 4 / --pp 2)"),
    (["predict", *Q, "--phase", "decode", "--gpus", "8", "--tp", "8", "--pp", "2"],
     "--tp 8 does not divide the 4 GPUs of a pipeline stage (--gpus 8 / --pp 2)"),
]


@pytest.mark.parametrize("argv,text", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_bad_combinations_are_one_line_errors(tmp_path, argv, text):
    if argv[0] == "sweep":
        argv = argv + ["--out", str(tmp_path / "s.csv")]
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        assert main(argv) == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and text in lines[0], lines
    assert not (tmp_path / "s.csv").exists()


def _predict_row(row, phase, fixed):
    """predict at an optimize row's deployment and size."""
    size = ["--batch", str(row["batch"])] if "batch" in row else ["--tokens", str(row["tokens"])]
    dep = ["--tp", str(row["tp"]), "--ep", str(row["ep"]), "--a2a", row["a2a"],
           "--micro-batches", str(row["micro_batches"]), "--pp", str(row.get("pp", 1)),
           "--cp", str(row.get("cp", 1))]
    return _predict(["--phase", phase, *fixed, *dep, *size])


@pytest.mark.slow
def test_optimize_prefill_searches_cp_under_an_isl_distribution(cli_json):
    """optimize --phase prefill --cp 1,2 --isl-dist: rows carry cp and are predict's numbers
    (TTFT at the distribution's mean prompt); the best meets the TTFT limit and fits."""
    fixed = ["--gpus", "4", "--isl-dist", "uniform:1000:3000"]
    out = cli_json(["optimize", *Q, "--phase", "prefill", *fixed, "--ttft-ms", "200",
                    "--cp", "1,2", "--micro-batches", "1", "--a2a", "allgather",
                    "--max-size", "4096"])
    rows = out["pareto"] + [out["best"]]
    assert {r["cp"] for r in rows} <= {1, 2} and all("cp" in r for r in rows)
    for r in rows:
        p = _predict_row(r, "prefill", fixed)
        for k in ("step_time_s", "ttft_s", "tokens_per_gpu_s"):
            assert p[k] == pytest.approx(r[k], rel=1e-9), k
        assert p["ttft_s"] <= 0.2 and p["fits"]
    # no larger token count of the best deployment meets the limit with more tokens per GPU
    b = out["best"]
    nxt = _predict_row({**b, "tokens": b["tokens"] + 1}, "prefill", fixed)
    assert nxt["ttft_s"] > 0.2 or not nxt["fits"] or nxt["tokens_per_gpu_s"] <= b["tokens_per_gpu_s"]


def test_optimize_cp_rows_at_cp_2_are_predicts(cli_json):
    """The cp = 2 candidates themselves (the best may be cp 1): pinned --cp 2."""
    fixed = ["--gpus", "4", "--context", "8192"]
    out = cli_json(["optimize", *Q, "--phase", "prefill", *fixed, "--ttft-ms", "400",
                    "--cp", "2", "--micro-batches", "1", "--a2a", "allgather", "--max-size",
                    "8192"])
    assert out["best"]["cp"] == 2
    for r in out["pareto"] + [out["best"]]:
        p = _predict_row(r, "prefill", fixed)
        for k in ("step_time_s", "ttft_s", "tokens_per_gpu_s"):
            assert p[k] == pytest.approx(r[k], rel=1e-9), k


@pytest.mark.slow
def test_optimize_serve_searches_pipeline_depths_as_predict_times_them(cli_json):
    """optimize --phase serve --pp 1,2 (refused before): batches a multiple of pp, output tokens
    per GPU over TP x PP GPUs, every row predict's."""
    fixed = ["--gpus", "4", "--isl", "1024", "--osl", "512"]
    out = cli_json(["optimize", *Q, "--phase", "serve", *fixed, "--tpot-ms", "40",
                    "--pp", "2", "--micro-batches", "1", "--a2a", "allgather", "--max-size",
                    "256"])
    rows = out["pareto"] + [out["best"]]
    assert {r["pp"] for r in rows} == {2}
    for r in rows:
        assert r["batch"] % 2 == 0
        p = _predict_row(r, "serve", fixed)
        for k in ("step_time_s", "tpot_s", "ttft_s", "output_tokens_per_gpu_s"):
            assert p[k] == pytest.approx(r[k], rel=1e-9), k
        assert p["tpot_s"] <= 0.04 and p["fits"]


def test_optimize_serve_under_an_isl_distribution_is_what_predict_says(cli_json):
    fixed = ["--gpus", "4", "--isl-dist", "lognormal:1000:0.5", "--osl", "512"]
    out = cli_json(["optimize", *Q, "--phase", "serve", *fixed, "--tpot-ms", "40",
                    "--micro-batches", "1", "--a2a", "allgather", "--max-size", "512"])
    b = out["best"]
    p = _predict_row(b, "serve", fixed)
    for k in ("step_time_s", "tpot_s", "ttft_s", "output_tokens_per_gpu_s", "input_tokens_per_gpu_s"):
        assert p[k] == pytest.approx(b[k], rel=1e-9), k
    assert p["tpot_s"] <= 0.04 and p["fits"]
    nxt = _predict_row({**b, "batch": b["batch"] + 1}, "serve", fixed)
    assert (nxt["tpot_s"] > 0.04 or not nxt["fits"]
            or nxt["output_tokens_per_gpu_s"] <= b["output_tokens_per_gpu_s"])


def test_the_dask_backend_gives_the_local_rows_with_pp_cp_and_a_distribution():
    pytest.importorskip("dask.distributed")
    import pandas as pd

    import moesym as ms
    from moesym.search.sweep import sweep_chunks, sweep_dask

    model = ms.load_model("qwen3-8b")  # dense: compiles fast
    axes = {"tokens": [1024, 4096], "gpus": [4], "pp": [1, 2], "cp": [1, 2, 4], "tp": [1, 2]}
    kw = dict(chunk_points=4, dist="uniform:500:1500")
    ddf = sweep_dask(model, "h20", "prefill", axes, **kw)
    local = pd.concat(list(sweep_chunks(model, "h20", "prefill", axes, **kw)))
    pd.testing.assert_series_equal(ddf.dtypes, local.dtypes)
    pd.testing.assert_frame_equal(ddf.compute(scheduler="sync"), local, check_exact=True)
    assert set(local["isl_dist"]) == {"uniform:500:1500"}
    assert len(local) == 2 * 8  # the (pp, tp, cp) combinations predict takes, per token count


@pytest.mark.slow
def test_sweep_pp_send_tier_follows_each_points_stage(tmp_path):
    """One compiled model serves every GPU count of a --pp sweep: the send between stages must
    switch from the scale-up link to RDMA at the point where a stage fills a node (8 H20s), not
    stay on the tier of the GPU count the model was first built at (a bug: 16, 32 at pp 2)."""
    grid = {"gpus": [4, 8, 16, 32], "pp": [1, 2]}
    rows = _sweep(tmp_path, ["--phase", "decode", "--context", "2048", "--batch", "8",
                             *(x for k, v in grid.items() for x in (f"--{k}", ",".join(map(str, v))))])
    assert _check_grid(rows, grid, ["--phase", "decode", "--context", "2048", "--batch", "8"]) == 8


def test_sweep_cp_ring_tier_follows_each_points_tp(tmp_path):
    """Ring attention's KV exchange spans cp x tp GPUs: inside a node of 8 at tp 1, across
    nodes at tp 2 (cp 8); TP is bound per point in one compiled model, so the tier must be too."""
    grid = {"tp": [1, 2]}
    fixed = ["--phase", "prefill", "--tokens", "8192", "--context", "32768", "--gpus", "16",
             "--cp", "8"]  # within Qwen3-30B-A3B's 40960 positions
    rows = _sweep(tmp_path, [*fixed, "--tp", "1,2"])
    assert _check_grid(rows, grid, fixed) == 2


def test_sweep_rows_with_more_micro_batches_than_requests_are_predicts(tmp_path):
    """Two micro-batches of one request: predict (and an engine) runs one; the sweep row at
    that point must be predict's, not a model of half a request per micro-batch."""
    grid = {"batch": [1, 2, 8], "micro-batches": [1, 2]}
    fixed = ["--phase", "decode", "--context", "2048", "--gpus", "4"]
    rows = _sweep(tmp_path, [*fixed, "--batch", "1,2,8", "--micro-batches", "1,2"])
    assert _check_grid(rows, grid, fixed) == 6
