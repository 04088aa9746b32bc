"""The dask backend of the grid sweep: the same chunks, rows and files as the local backend."""

import sys

import pandas as pd
import pytest

distributed = pytest.importorskip("dask.distributed")

import moesym as ms
from moesym.cli import main
from moesym.errors import MoesymError
from moesym.search.sweep import _QUIET, sweep_chunks, sweep_dask, sweep_frame

# qwen3-8b compiles in about a second; an MoE model takes 15-30 s per worker process on a small
# machine, which would make this file slow without testing anything more of the backend
MODEL = "qwen3-8b"
AXES = {"batch": list(range(1, 513)), "context": [1024, 4096], "gpus": [4], "ep": [1, 2, 4]}
CHUNK = 500  # 3072 points in blocks of 83 batch values: 7 partitions
ARGV = ["sweep", MODEL, "--hardware", "h20", "--phase", "decode", "--batch", "1:512:1",
        "--context", "1024,4096", "--ep", "1,2,4", "--gpus", "4", "--chunk-points", str(CHUNK)]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  **_QUIET) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def local():
    return sweep_frame(ms.load_model(MODEL), "h20", "decode", AXES)


@pytest.mark.slow
def test_partitions_are_the_local_chunks(client, local):
    model = ms.load_model(MODEL)
    ddf = sweep_dask(model, "h20", "decode", AXES, chunk_points=CHUNK, client=client)
    chunks = list(sweep_chunks(model, "h20", "decode", AXES, chunk_points=CHUNK))
    assert ddf.npartitions == len(chunks) > 1
    pd.testing.assert_series_equal(ddf.dtypes, local.dtypes)  # meta, without computing
    parts = client.gather(client.compute(ddf.to_delayed()))
    for part, chunk in zip(parts, chunks):
        pd.testing.assert_frame_equal(part, chunk, check_exact=True)
    pd.testing.assert_frame_equal(ddf.compute().reset_index(drop=True), local, check_exact=True)
    # every worker process that ran a partition built and compiled the model once
    misses = client.run(lambda: __import__("moesym.search.sweep", fromlist=["_"])._setup.cache_info()
                        .misses)
    assert set(misses.values()) <= {0, 1} and sum(misses.values()) >= 1


def test_invalid_blocks_are_dropped_like_local():
    model = ms.load_model(MODEL)
    axes = {"tp": [1, 3, 2], "batch": [1, 8, 64], "gpus": [4]}  # tp 3 divides nothing
    ddf = sweep_dask(model, "h20", "decode", axes, chunk_points=3)
    chunks = list(sweep_chunks(model, "h20", "decode", axes, chunk_points=3))
    assert ddf.npartitions == len(chunks) == 2
    pd.testing.assert_frame_equal(ddf.compute(scheduler="sync"), pd.concat(chunks),
                                  check_exact=True)


@pytest.mark.slow
def test_cli_dask_csv_equals_local(client, tmp_path, capsys):
    out_local, out_dask = tmp_path / "local.csv", tmp_path / "dask.csv"
    assert main(ARGV + ["--out", str(out_local)]) == 0
    assert main(ARGV + ["--out", str(out_dask), "--backend", "dask",
                        "--scheduler", client.scheduler.address]) == 0
    assert f"wrote 3072 rows to {out_dask}" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_csv(out_dask), pd.read_csv(out_local))
    assert out_dask.read_bytes() == out_local.read_bytes()


@pytest.mark.slow
def test_cli_dask_parquet_in_process_cluster(tmp_path, capsys, local):
    out = tmp_path / "sweep.parquet"
    assert main(ARGV + ["--out", str(out), "--backend", "dask"]) == 0
    assert f"wrote 3072 rows to {out}" in capsys.readouterr().out
    assert out.is_dir() and len(list(out.glob("*.parquet"))) == 7
    pd.testing.assert_frame_equal(pd.read_parquet(out).reset_index(drop=True), local,
                                  check_exact=True)


def test_missing_dask_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(MoesymError, match=r"pip install 'moesym\[dask\]'"):
        sweep_dask(ms.load_model(MODEL), "h20", "decode", AXES)
    out = tmp_path / "x.csv"
    assert main(ARGV + ["--out", str(out), "--backend", "dask"]) == 2
    err = capsys.readouterr().err
    assert err == ("moesym: error: the dask backend needs the optional extra: "
                   "pip install 'moesym[dask]'\n")
    assert not out.exists()


def test_scheduler_needs_dask_backend(tmp_path, capsys):
    assert main(ARGV + ["--out", str(tmp_path / "x.csv"), "--scheduler", "tcp://h:1"]) == 2
    assert capsys.readouterr().err.strip() == "moesym: error: --scheduler needs --backend dask"
