"""Grid sweeps time every point as ``moesym predict`` does: one model per (GPUs, EP), the
prefill chunk of each point, and the KV of every prompt in the memory fit."""

import pytest

import moesym as ms
from moesym.search.sweep import sweep_frame


def _predict(model, hw, phase, gpus, ep, size, context):
    from moesym.memory import memory_model
    from moesym.symbolic.symbols import S

    wl = (ms.Workload("decode", batch=size, context=context) if phase == "decode"
          else ms.Workload("prefill", tokens=size, context=context))
    m, h, dep = ms.load_model(model), ms.load_hardware(hw), ms.Deployment(gpus=gpus, ep=ep)
    r = ms.build_step(m, h, dep, wl).predict()
    mm = memory_model(m, h, dep, wl)
    r["memory_bytes"] = mm.number(mm.used_expr())
    r["fits"] = r["memory_bytes"] <= mm.values[S.hbm_capacity]
    return r


@pytest.mark.parametrize("phase,sizes", [("decode", [8, 64]),
                                         pytest.param("prefill", [1024, 4096, 16384],
                                                      marks=pytest.mark.slow)])
def test_sweep_points_equal_predict_across_ep_and_chunks(phase, sizes):
    size_axis = "batch" if phase == "decode" else "tokens"
    df = sweep_frame(ms.load_model("qwen3-30b-a3b"), "h20", phase,
                     {size_axis: sizes, "context": [4096], "gpus": [4], "ep": [1, 4]})
    assert len(df) == 2 * len(sizes)
    for row in df.itertuples():
        r = _predict("qwen3-30b-a3b", "h20", phase, 4, row.ep, getattr(row, size_axis), 4096)
        assert row.step_time_s == pytest.approx(r["step_time_s"], rel=1e-9)
        assert row.memory_bytes == pytest.approx(r["memory_bytes"], rel=1e-9)
        assert row.fits == r["fits"]


@pytest.mark.parametrize("phase", ["decode", pytest.param("prefill", marks=pytest.mark.slow)])
def test_parquet_output_equals_the_csv(tmp_path, phase):
    """The Parquet writer (Arrow columns built from their buffers, many small chunks written on
    a second thread while the next is evaluated) holds exactly the CSV's rows, in order: same
    columns, numbers bit for bit, text columns dictionary-encoded."""
    pq = pytest.importorskip("pyarrow.parquet")
    import csv
    import io

    from moesym.cli import main

    size = ["--batch", "1,7,64,300"] if phase == "decode" else ["--tokens", "1024,8192"]
    argv = (["sweep", "qwen3-30b-a3b", "--hardware", "h20,h800", "--phase", phase, *size,
             "--context", "2048,4096", "--gpus", "4", "--ep", "1,2,4", "--micro-batches", "1,2"])
    assert main(argv + ["--out", str(tmp_path / "s.csv")]) == 0
    assert main(argv + ["--out", str(tmp_path / "s.parquet"), "--chunk-points", "7"]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())))
    table = pq.read_table(tmp_path / "s.parquet").to_pydict()
    assert list(table) == list(rows[0])
    assert len(table["hardware"]) == len(rows)
    for name, col in table.items():
        for i, got in enumerate(col):
            want = rows[i][name]
            if isinstance(got, bool):
                assert str(got) == want, (name, i)
            elif isinstance(got, str):
                assert got == want, (name, i)
            else:
                assert got == type(got)(want), (name, i)


@pytest.mark.parametrize("chunk", ["0", "-1"])
def test_chunk_points_must_be_positive(tmp_path, capsys, chunk):
    from moesym.cli import main

    argv = ["sweep", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode", "--batch", "8",
            "--context", "4096", "--out", str(tmp_path / "s.csv"), "--chunk-points", chunk]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chunk-points" in err[0]
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("flags", [["--gpus", "72", "--ep", "72", "--redundant-experts", "32"],
                                   ["--gpus", "64", "--ep", "64", "--routing", "zipf:1.0"]])
def test_numeric_routing_follows_the_batch_in_sweeps(tmp_path, flags):
    """Redundant experts and Zipf routing have numeric load-imbalance estimators; the step model
    tabulates them against the token count, so each swept batch is timed as predict times it
    (they had been frozen at the first batch's token count: 6.8% off at batch 256)."""
    import csv
    import json
    from contextlib import redirect_stdout
    from io import StringIO

    from moesym.cli import main

    common = ["deepseek-v3", "--hardware", "h100", "--phase", "decode", "--context", "2048",
              "--a2a", "deepep-ll", "--weights", "fp8", *flags]
    out = tmp_path / "s.csv"
    with redirect_stdout(StringIO()):
        assert main(["sweep", *common, "--batch", "8,64,256", "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for row in rows:
        buf = StringIO()
        with redirect_stdout(buf):
            assert main(["predict", *common, "--batch", row["batch"], "--json"]) == 0
        assert float(row["step_time_s"]) == pytest.approx(json.loads(buf.getvalue())["step_time_s"],
                                                         rel=1e-9)
