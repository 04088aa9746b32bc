"""Kernel models: monotonicity, roofline bound, tables, fitting, KernelTiming, CLI, benchmark."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesym.cli import main
from moesym.errors import SpecError
from moesym.kernels.analytical import (
    attention_decode_time,
    attention_prefill_time,
    elementwise_time,
    gemm_bytes,
    gemm_tiles,
    gemm_time,
)
from moesym.specs.kernel_calib import DEFAULTS, KernelCalib, kernel_calib, parse_kernel_calib
from moesym.kernels.fit import fit_gemm, predict_rows, write_kernel_table
from moesym.kernels.tables import KernelTables, interp_log, read_attention_table, read_gemm_table
from moesym.kernels.timing import KernelTiming
from moesym.specs.hardware import load_hardware
from moesym.symbolic.symbols import S
from moesym.terms.attention import gemm
from moesym.terms.cost import Cost, KernelClass

H800 = {"sms": 132, "peak_flops": 1979e12, "hbm_bw_Bps": 3.35e12}
H20 = {"sms": 78, "peak_flops": 296e12, "hbm_bw_Bps": 4.0e12}
CALIBS = [DEFAULTS, KernelCalib(tile_m_rows=128, tile_n_max_cols=128, tile_overhead_s=0.0,
                                sm_bandwidth_Bps=30e9, launch_s=2e-6)]
GRID = np.unique(np.round(np.geomspace(1, 40000, 60)))


@pytest.mark.parametrize("calib", CALIBS)
@pytest.mark.parametrize("hw", [H800, H20])
@pytest.mark.parametrize("layout,groups", [("dense", 1), ("contiguous", 32), ("masked", 8)])
def test_time_never_falls_when_m_n_or_k_grows(calib, hw, layout, groups):
    for axis in range(3):
        for a in (16, 576, 2048, 7168):
            for b in (64, 1536, 24576):
                args = [None, None, None]
                args[axis] = GRID
                others = [i for i in range(3) if i != axis]
                args[others[0]], args[others[1]] = a, b
                t = gemm_time(*args, calib=calib, groups=groups, layout=layout, **hw).total_s
                assert np.all(np.diff(t) >= -1e-15), (axis, a, b)


@pytest.mark.parametrize("calib", CALIBS)
def test_time_never_beats_the_roofline(calib):
    m, n, k = np.meshgrid(GRID, [16, 100, 576, 4096, 30000], [64, 512, 7168], indexing="ij")
    for g in (1, 3, 64):
        for ob in (1, 2):
            t = gemm_time(m, n, k, calib=calib, groups=g, op_bytes=ob, **H800).total_s
            roof = np.maximum(2 * m * n * k * g / H800["peak_flops"],
                              g * ((m * k + n * k) * ob + 2 * m * n) / H800["hbm_bw_Bps"])
            assert np.all(t >= roof)
    b, L = np.meshgrid([1, 8, 64], [128, 1024, 16384], indexing="ij")
    dec = attention_decode_time(b, L, 32, 8, 128, 128, **H800).total_s
    assert np.all(dec >= b * L * 8 * 256 * 2 / H800["hbm_bw_Bps"])
    assert np.all(dec >= 2 * b * 32 * L * 256 / 989e12)
    pre = attention_prefill_time(b, L, 32, 8, 128, 128, **{**H800, "peak_flops": 989e12}).total_s
    assert np.all(pre >= 2 * b * 32 * L * (L + 1) / 2 * 256 / 989e12)


def test_golden_tiles_and_times_by_hand():
    c = KernelCalib(tile_m_rows=128, tile_n_max_cols=128, tile_n_min_cols=16, gemm_tensor_frac=0.5,
                    tile_overhead_s=0.0, sm_bandwidth_Bps=1e15, gemm_hbm_frac=1.0, launch_s=1e-6)
    # 4096^2 output: 32 M tiles, floor(132/32) = 4 N tiles each -> 1024-wide, clipped to 128:
    # 32 x 32 = 1024 tiles in ceil(1024/132) = 8 waves.
    tiles, waves, tn = gemm_tiles(4096, 4096, 1, 132, c)
    assert (float(tiles), float(waves), float(tn)) == (1024, 8, 128)
    # compute = 8 waves x 2*128*128*4096 / (0.5 * 1979e12 / 132)
    want = 8 * 2 * 128 * 128 * 4096 / (0.5 * 1979e12 / 132)
    t = gemm_time(4096, 4096, 4096, calib=c, **H800)
    assert float(t.compute_s) == pytest.approx(want)
    assert float(t.total_s) == pytest.approx(want + 1e-6)
    # M = 16: one M tile of 128 rows; 132 N tiles allowed -> 16-wide tiles; N = 1536 -> 96 tiles
    tiles, waves, tn = gemm_tiles(16, 1536, 1, 132, c)
    assert (float(tiles), float(waves), float(tn)) == (96, 1, 16)
    assert gemm_bytes(2, 3, 4, op_bytes=1, out_bytes=2) == 2 * 4 + 3 * 4 + 2 * 2 * 3
    assert elementwise_time(8e9, hbm_bw_Bps=1e12, calib=c).memory_s == pytest.approx(8e9 / 0.8e12)


def test_symbolic_shape_matches_numeric():
    m = S.batch * S.topk / S.tp
    ts = gemm_time(m, 4096, 7168, groups=8, layout="contiguous", **H800)
    assert ts.total_s.has(sp.ceiling)
    f = sp.lambdify([S.batch, S.topk, S.tp], ts.total_s, "numpy")
    for b in (1, 7, 64, 1000):
        num = gemm_time(b * 8 / 2, 4096, 7168, groups=8, layout="contiguous", **H800).total_s
        assert float(f(b, 8, 2)) == pytest.approx(float(num))


def test_interpolation_in_log_m_is_monotone_between_rows_and_none_outside():
    xs = np.array([16.0, 64.0, 256.0])
    ys = np.array([10e-6, 30e-6, 20e-6])
    # log-midpoint of 16 and 64 is 32: halfway in latency
    assert interp_log(xs, ys, 32.0) == pytest.approx(20e-6)
    assert interp_log(xs, ys, 64.0) == pytest.approx(30e-6)
    assert interp_log(xs, ys, 8.0) is None and interp_log(xs, ys, 512.0) is None
    grid = np.geomspace(16, 64, 50)
    vals = [interp_log(xs, ys, x) for x in grid]
    assert np.all(np.diff(vals) >= 0)
    grid = np.geomspace(64, 256, 50)
    vals = [interp_log(xs, ys, x) for x in grid]
    assert np.all(np.diff(vals) <= 0)


def _write_tables(root: Path) -> None:
    (root / "gemm" / "gpu1").mkdir(parents=True)
    rows = "m,k,n,latency_us,mfu\n16,512,256,10,0.1\n64,512,256,30,0.1\n"
    (root / "gemm" / "gpu1" / "data.csv").write_text(rows + "16,512,256,10,0.1\n")  # repeated row
    d = root / "mha" / "decode" / "gpu1"
    d.mkdir(parents=True)
    (d / "8-2-64.csv").write_text("bf16,bf16,1,1024,5.0,0.1\nbf16,bf16,1,4096,9.0,0.1\n")


def test_loader_handles_headerless_file_and_repeated_rows(tmp_path):
    _write_tables(tmp_path)
    df = read_attention_table(tmp_path / "mha" / "decode" / "gpu1" / "8-2-64.csv", "decode")
    assert list(df.columns[:4]) == ["dtype", "kv_dtype", "batch_size", "kv_len"]
    assert len(df) == 2 and df.latency_us.tolist() == [5.0, 9.0]
    assert len(read_gemm_table(tmp_path / "gemm" / "gpu1" / "data.csv")) == 2
    t = KernelTables.load(tmp_path, "gpu1")
    assert t.gemm_latency_s(32, 256, 512) == pytest.approx(20e-6)
    assert t.gemm_latency_s(32, 256, 1024) is None  # shape not measured
    assert t.attention_latency_s("mha", "decode", "8-2-64", batch=1, length=2048) == pytest.approx(7e-6)


def test_fit_recovers_known_parameters_from_noisy_synthetic_data():
    true = replace(DEFAULTS, gemm_tensor_frac=0.62, grouped_contiguous_tensor_frac=0.5,
                   sm_bandwidth_Bps=300e9, gemm_hbm_frac=0.7, launch_s=5e-6, tile_overhead_s=0.4e-6)
    recs = []
    for n, k in ((1536, 7168), (4096, 2048), (576, 7168), (24576, 1536)):
        for m in (16, 64, 256, 1024, 4096, 16384):
            recs.append({"m": m, "n": n, "k": k, "groups": 1, "layout": "dense"})
    for g, m in ((32, 8), (32, 64), (8, 512), (8, 2048), (64, 128)):
        recs.append({"m": m, "n": 4096, "k": 7168, "groups": g, "layout": "contiguous"})
        recs.append({"m": m, "n": 7168, "k": 2048, "groups": g, "layout": "contiguous"})
    rows = pd.DataFrame(recs)
    rng = np.random.default_rng(0)
    t = predict_rows(rows, true, infersim_masked=False, op_bytes=1, **H800)
    rows["latency_s"] = t * np.exp(rng.normal(0, 0.02, len(t)))
    r = fit_gemm(rows, base=DEFAULTS, tile_m=(DEFAULTS.tile_m_rows,),
                 tile_n_max=(DEFAULTS.tile_n_max_cols,), **H800)
    c = r.calib
    assert c.gemm_tensor_frac == pytest.approx(0.62, rel=0.05)
    assert c.grouped_contiguous_tensor_frac == pytest.approx(0.5, rel=0.05)
    assert c.gemm_hbm_frac == pytest.approx(0.7, rel=0.1)
    assert c.launch_s == pytest.approx(5e-6, rel=0.25)
    assert r.test_median < 0.03


def test_calib_parsing_errors_and_default_warning(tmp_path):
    with pytest.raises(SpecError, match=r"f\.toml \[kernel\]: unknown key 'tile_rows'"):
        parse_kernel_calib({"tile_rows": 1}, "f.toml")
    with pytest.raises(SpecError, match="gemm_tensor_frac"):
        parse_kernel_calib({"gemm_tensor_frac": 1.5}, "f.toml")
    c = parse_kernel_calib({"sm_bandwidth_GBps": 50, "launch_us": 2}, "f.toml")
    assert c.sm_bandwidth_Bps == 50e9 and c.launch_s == pytest.approx(2e-6)
    hw = replace(load_hardware("h800"), kernel={})
    with pytest.warns(UserWarning, match="default kernel calibration"):
        assert kernel_calib(hw) == DEFAULTS
    assert kernel_calib(load_hardware("h20")).tile_m_rows >= 1  # shipped table parses


def test_write_kernel_table_keeps_the_rest_of_the_file(tmp_path):
    p = tmp_path / "g.toml"
    head = 'name = "g"\n\n[latency_us]\nkernel = 5.0\n'
    p.write_text(head + "\n# old fit\n[kernel]\nlaunch_us = 1\n\n[other]\nx = 1\n")
    write_kernel_table(p, replace(DEFAULTS, launch_s=3e-6), ["residuals: none"], date="2000-01-01")
    text = p.read_text()
    assert text.startswith(head) and "[other]\nx = 1" in text and "# old fit" not in text
    assert text.count("[kernel]") == 1 and "launch_us = 3" in text and "2000-01-01" in text


def test_kernel_timing_symbolic_gemm_and_classes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kt = KernelTiming(DEFAULTS)
    c = gemm("g", S.batch * S.topk / S.tp, 4096, 7168, S.w_bytes, S.act_bytes,
             KernelClass.GROUPED_GEMM, groups=8, layout="contiguous")
    tt = kt.time(c)
    vals = {S.topk: 8, S.tp: 1, S.sms: 132, S.flops_gemm: 1979e12, S.hbm_bw: 3.35e12,
            S.w_bytes: 1, S.act_bytes: 2}
    f = sp.lambdify([S.batch], tt.total_s.subs(vals), "numpy")
    direct = gemm_time(64 * 8, 4096, 7168, groups=8, layout="contiguous", op_bytes=1,
                       hbm_bytes=8 * (4096 * 7168 * 1 + 64 * 8 * (7168 + 4096) * 2), **H800)
    assert float(f(64)) == pytest.approx(float(direct.total_s))
    # elementwise: bytes / (0.8 W) + one launch, by hand
    e = kt.time(Cost("e", KernelClass.ELEMENTWISE, hbm_bytes=8e9, launches=1))
    assert float(e.total_s.subs(S.hbm_bw, 1e12)) == pytest.approx(8e9 / 0.8e12 + 3e-6)
    comm = Cost("c", KernelClass.COMM, net_bytes=100, net_bw=10, launches=1)
    assert kt.time(comm).comm_s == 10


def test_cli_gemm_json_and_bad_inputs(capsys):
    assert main(["kernel", "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--hardware", "h800",
                 "--dtype", "fp8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {"time_s", "flops", "bytes", "tflops", "source"} <= set(r)
    assert r["flops"] == 2 * 4096 ** 3 and r["source"] == "analytical"
    assert r["tflops"] == pytest.approx(r["flops"] / r["time_s"] / 1e12)
    assert main(["kernel", "grouped-gemm", "--groups", "8", "--m-per-group", "64", "--n", "4096",
                 "--k", "7168", "--layout", "masked", "--hardware", "h20", "--dtype", "fp8",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] > 0
    for argv, flag in ((["kernel", "gemm", "--m", "0", "--n", "1", "--k", "1", "--hardware", "h800"],
                        "--m"),
                       (["kernel", "grouped-gemm", "--groups", "2", "--m-per-group", "4", "--n", "8",
                         "--k", "8", "--layout", "zig", "--hardware", "h800"], "--layout"),
                       (["kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--hardware", "a100",
                         "--dtype", "fp8"], "--dtype"),
                       (["kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--hardware", "h800",
                         "--timing", "tables:/nonexistent/dir"], "--timing")):
        assert main(argv) != 0
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and flag in err


def test_cli_uses_table_when_it_covers_the_shape(tmp_path, capsys):
    (tmp_path / "gemm" / "h800").mkdir(parents=True)
    (tmp_path / "gemm" / "h800" / "data.csv").write_text(
        "m,k,n,latency_us,mfu\n16,512,256,10,0.1\n64,512,256,30,0.1\n")
    base = ["kernel", "gemm", "--n", "256", "--k", "512", "--hardware", "h800", "--dtype", "fp8",
            "--json", "--timing", f"tables:{tmp_path}"]
    assert main(base + ["--m", "32"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["source"] == "table" and r["time_s"] == pytest.approx(20e-6)
    assert main(base + ["--m", "128"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "analytical"


def test_benchmark_script_cpu_tiny_writes_tables_the_loader_reads(tmp_path):
    pytest.importorskip("torch")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "kernels" / "bench_kernels.py"
    subprocess.run([sys.executable, str(script), "--device", "cpu", "--tiny", "--out", str(tmp_path),
                    "--gpu", "cpu", "--repeats", "1"], check=True, timeout=120)
    t = KernelTables.load(tmp_path, "cpu")
    assert len(t.gemm) and len(t.grouped) and t.attention
    row = t.gemm.iloc[0]
    assert t.gemm_latency_s(row.m, row.n, row.k) == pytest.approx(row.latency_s)
    assert set(t.grouped.layout) == {"masked", "contiguous"}
    assert all(math.isfinite(x) and x > 0 for x in t.all_gemm_rows().latency_s)


def test_kernel_attention_dtype_reaches_the_kernel_model(cli_json):
    """`kernel attention --dtype fp8` runs on the FP8 tensor-core peak (twice BF16's on H800):
    a compute-bound causal prefill takes about half the time (it was ignored by the kernel
    model and honoured only by --timing roofline)."""
    base = ["kernel", "attention", "--phase", "prefill", "--context", "16384", "--heads", "32",
            "--kv-heads", "8", "--batch", "2", "--hardware", "h800"]
    bf16, fp8 = (cli_json(base + ["--dtype", d])["time_s"] for d in ("bf16", "fp8"))
    assert 0.45 < fp8 / bf16 < 0.55


def test_transferred_calibration_keeps_the_fitted_gpus_share_of_peak():
    """A GPU that carries the H800 fit per SM has its faster SMs fed in proportion
    (moesym.specs.kernel_calib.transferred), so a large BF16 GEMM reaches the same share of its
    own peak as on H800 (it sat at about half, behind H800's per-SM load rate). B200 and
    GB200 now have fits of their own; their datasheet figures serve as the faster GPUs here."""
    from moesym.specs.kernel_calib import transferred
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h800 = load_hardware("h800")
        c800 = kernel_calib(h800)

    def share(hw, c):
        t = gemm_time(8192, 8192, 8192, sms=hw.sms, peak_flops=hw.peak_flops("bf16"),
                      hbm_bw_Bps=hw.hbm_bw_Bps, calib=c, op_bytes=2).total_s
        return 2 * 8192 ** 3 / t / hw.peak_flops("bf16")

    for name in ("b200", "gb200"):
        hw = load_hardware(name)
        assert share(hw, transferred(c800, h800, hw, "t")) == pytest.approx(share(h800, c800),
                                                                             rel=0.05)


# --- AIConfigurator-layout fit (issue 32): physics bounds of every fitted GPU, the exclusion rule

def _fitted_gpus():
    from moesym.cli.listing import calibration_state
    from moesym.specs.hardware import builtin_hardware
    out = []
    for name in builtin_hardware():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hw = load_hardware(name)
        if calibration_state(hw) == "fitted":
            out.append(hw)
    return out


FITTED = _fitted_gpus()


def test_fitted_gpus_include_the_aic_fits():
    names = {hw.name for hw in FITTED}
    assert {"h100", "h200", "b200", "b300", "gb200", "gb300", "a100", "h800", "h20"} <= names


@pytest.mark.parametrize("hw", FITTED, ids=lambda hw: hw.name)
def test_fitted_kernels_never_beat_physics(hw):
    """Over random shapes, no kernel of a fitted GPU is faster than its FLOPs at the datasheet
    peak or its bytes at the datasheet HBM bandwidth (the bounds written out here, not taken
    from the model)."""
    c = kernel_calib(hw)
    rng = np.random.default_rng(32)
    n = 4000
    W = hw.hbm_bw_Bps
    for dtype in hw.peaks_flops:
        if dtype not in ("bf16", "fp8"):
            continue
        P, ob = hw.peak_flops(dtype), (2 if dtype == "bf16" else 1)
        m, nn, k = (np.round(np.exp(rng.uniform(0, np.log(65536), n))) for _ in range(3))
        g = np.round(np.exp(rng.uniform(0, np.log(256), n)))
        for layout in ("dense", "contiguous", "masked"):
            groups = 1 if layout == "dense" else g
            t = gemm_time(m, nn, k, sms=hw.sms, peak_flops=P, hbm_bw_Bps=W, calib=c,
                          op_bytes=ob, groups=groups, layout=layout).total_s
            floor = np.maximum(2 * m * nn * k * groups / P,
                               groups * ((m * k + nn * k) * ob + 2 * m * nn) / W)
            assert np.all(t >= floor * (1 - 1e-12)), (hw.name, dtype, layout)
    P = hw.peak_flops("bf16")
    b, L = (np.round(np.exp(rng.uniform(0, np.log(x), n))) for x in (1024, 131072))
    kvh = rng.choice([1, 2, 4, 8, 16], n)
    hq = kvh * rng.choice([1, 2, 4, 8, 16], n)
    d = rng.choice([64, 128, 256], n).astype(float)
    kvb = rng.choice([1.0, 2.0], n)
    t = attention_decode_time(b, L, hq, kvh, d, d, sms=hw.sms, peak_flops=P, hbm_bw_Bps=W,
                              calib=c, kv_bytes=kvb).total_s
    assert np.all(t >= np.maximum(b * L * kvh * 2 * d * kvb / W, 2 * b * hq * L * 2 * d / P))
    t = attention_decode_time(b, L, hq, 1, 576.0, 512.0, sms=hw.sms, peak_flops=P,
                              hbm_bw_Bps=W, calib=c, kv_bytes=kvb, shared_kv=True).total_s
    assert np.all(t >= np.maximum(b * L * 576 * kvb / W, 2 * b * hq * L * 1088 / P))
    Lp = np.round(np.exp(rng.uniform(0, np.log(32768), n)))
    bp = np.round(np.exp(rng.uniform(0, np.log(64), n)))
    t = attention_prefill_time(bp, Lp, hq, kvh, d, d, sms=hw.sms, peak_flops=P, hbm_bw_Bps=W,
                               calib=c).total_s
    causal_flops = bp * hq * Lp * (Lp + 1) * 2 * d  # 2 (d_qk + d_v) per (query, key <= query)
    assert np.all(t >= np.maximum(causal_flops / P, 2 * bp * Lp * (hq + kvh) * 2 * d / W))
    nbytes = rng.uniform(1, 1e10, n)
    assert np.all(elementwise_time(nbytes, hbm_bw_Bps=W, calib=c).total_s >= nbytes / W)


def _engine_calibs(hw):
    """The GPU's [kernel] and, for each fused-MoE backend it has fitted ([moe_kernels]), the
    calibration an engine running that backend times with (its grouped-GEMM fields)."""
    c = kernel_calib(hw)
    return [c] + [replace(c, **f) for f in hw.moe_kernels.values()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu=st.sampled_from([hw.name for hw in FITTED]), which=st.integers(0, 8),
       m=st.integers(1, 65536), n=st.integers(1, 65536), k=st.integers(1, 65536),
       groups=st.integers(1, 384), layout=st.sampled_from(["dense", "contiguous", "masked"]),
       dtype=st.sampled_from(["bf16", "fp8"]))
def test_fitted_gemms_and_moe_backends_never_beat_physics(gpu, which, m, n, k, groups, layout,
                                                          dtype):
    """Hypothesis over shapes, layouts and every fitted GPU's calibrations (its [kernel] and each
    engine's fused-MoE fraction from [moe_kernels]): no GEMM beats 2 M N K g FLOPs at the
    datasheet peak nor its operand and output bytes at the datasheet HBM bandwidth."""
    hw = next(h for h in FITTED if h.name == gpu)
    calibs = _engine_calibs(hw)
    c = calibs[which % len(calibs)]
    if dtype not in hw.peaks_flops:
        dtype = "bf16"
    P, ob, W = hw.peak_flops(dtype), (2 if dtype == "bf16" else 1), hw.hbm_bw_Bps
    g = 1 if layout == "dense" else groups
    t = gemm_time(float(m), float(n), float(k), sms=hw.sms, peak_flops=P, hbm_bw_Bps=W, calib=c,
                  op_bytes=ob, groups=g, layout=layout).total_s
    floor = max(2.0 * m * n * k * g / P, g * ((m * k + n * k) * ob + 2.0 * m * n) / W)
    assert float(t) >= floor * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(fit=st.sampled_from([(hw.name, k) for hw in FITTED if hw.allreduce is not None
                             for k in ("", *hw.allreduce_kernels)]),
       tokens=st.integers(1, 65536), hidden=st.sampled_from([2048, 4096, 5120, 7168, 8192]),
       p=st.integers(2, 8))
def test_fitted_custom_allreduce_never_beats_the_link(fit, tokens, hidden, p):
    """No all-reduce of M bytes over p GPUs beats 2 (p - 1) / p M bytes through one GPU's
    scale-up link at its datasheet rate (each GPU must receive the others' share of the sum
    and send its own share of the result): every engine's fit ([allreduce], [allreduce.NAME])."""
    from moesym.terms import comm
    from moesym.terms.dims import symbolic_dims

    gpu, name = fit
    hw = load_hardware(gpu)
    car = hw.allreduce_kernels[name] if name else hw.allreduce
    D = symbolic_dims()
    c = comm.tp_allreduce_custom(D, tokens, car, hw.scale_up_Bps, 3e-6, group=p)
    t = float(sp.sympify(c.net_bytes / c.net_bw + c.fixed_s).subs({D.hidden: hidden,
                                                                   D.act_bytes: 2}))
    M = tokens * hidden * 2
    assert t >= 2 * (p - 1) / p * M / hw.scale_up_Bps


def test_physical_floor_rule_excludes_rows_faster_than_physics():
    """The fit's exclusion rule, on hand-made rows: a 4096^3 BF16 GEMM at 989 TFLOP/s needs
    2 * 4096^3 / 989e12 = 139 us; a row at 100 us is impossible, one at 150 us is kept."""
    from moesym.kernels.fit import physical_floor_s
    rows = pd.DataFrame({"m": [4096.0] * 2, "n": 4096.0, "k": 4096.0, "op_bytes": 2.0,
                         "peak_flops": 989e12, "latency_s": [100e-6, 150e-6]})
    floor = physical_floor_s(rows, "gemm", 3.35e12)
    assert floor == pytest.approx(2 * 4096 ** 3 / 989e12)
    assert (rows.latency_s >= floor).tolist() == [False, True]
    # a balanced fused-MoE row: 256 experts of 7168 x 2048 FP8 at EP 1, 64 tokens top-8 -> every
    # expert touched: 256 * 3 * 7168 * 2048 B = 11.27 GB, at 4.8 TB/s 2.35 ms
    moe = pd.DataFrame({"tokens": [64.0], "topk": 8.0, "ep": 1.0, "local_experts": 256.0,
                        "hidden": 7168.0, "inter": 2048.0, "op_bytes": 1.0, "peak_flops": 1979e12})
    assert physical_floor_s(moe, "moe", 4.8e12)[0] == pytest.approx(256 * 3 * 7168 * 2048 / 4.8e12)


def test_aic_reader_reads_the_layout(tmp_path):
    """A folder in AIConfigurator's layout (written here): the newest version is read, latency
    in ms becomes seconds, GQA decode KV length is isl + step, unknown dtypes are dropped."""
    from moesym.kernels import aic
    for v, lat in (("1.0.0", 9.0), ("1.3.0rc20", 0.5)):
        d = tmp_path / "h200_sxm" / "gemm" / "trtllm" / v
        d.mkdir(parents=True)
        pd.DataFrame({"gemm_dtype": ["fp8_block", "int4_wo"], "m": [16, 16], "n": [4096, 4096],
                      "k": [7168, 7168], "latency": [lat, lat]}).to_parquet(d / "gemm_perf.parquet")
    df, v = aic.read_table(tmp_path, "h200", "gemm", "gemm_perf")
    rows = aic.gemm_rows(df)
    assert v == "1.3.0rc20" and len(rows) == 1 and rows.latency_s[0] == pytest.approx(0.5e-3)
    d = tmp_path / "h200_sxm" / "attention" / "trtllm" / "1.3.0rc20"
    d.mkdir(parents=True)
    pd.DataFrame({"batch_size": [8], "isl": [1], "step": [1023], "num_heads": [32],
                  "num_key_value_heads": [8], "head_dim": [128], "window_size": [0],
                  "attn_dtype": ["bfloat16"], "kv_cache_dtype": ["fp8"], "latency": [0.05]}
                 ).to_parquet(d / "generation_attention_perf.parquet")
    att, _ = aic.attention_rows(tmp_path, "h200")
    assert att.m.tolist() == [1024.0] and att.kv_bytes.tolist() == [1.0]
    with pytest.raises(Exception, match="no folder for GPU 'b300'"):
        aic.read_table(tmp_path, "b300", "gemm", "gemm_perf")


# ---------------------------------------------------------------- decode attention kernels
_DEC = dict(sms=132, peak_flops=989e12, hbm_bw_Bps=4.8e12)


def test_mla_decode_takes_its_own_floor_and_latent_bandwidth():
    """Batch 1, 2 KV tokens: nothing but the launch floor, MLA's where it is set; a long latent
    read at the MLA fraction: 1024 x 65536 x 576 B / (0.5 x 4.8 TB/s) = 16.1 ms."""
    c = replace(DEFAULTS, attention_launch_s=6e-6, attention_mla_launch_s=12e-6,
                attention_mla_hbm_frac=0.5, attention_hbm_frac=0.9)
    mla = dict(shared_kv=True, calib=c, kv_bytes=1, **_DEC)
    assert attention_decode_time(1, 2, 128, 1, 576, 512, **mla).launch_s == 12e-6
    assert attention_decode_time(1, 2, 8, 8, 128, 128, calib=c, **_DEC).launch_s == 6e-6
    t = attention_decode_time(1024, 65536, 16, 1, 576, 512, **mla)
    assert float(t.memory_s) >= 1024 * 65536 * 576 / (0.5 * 4.8e12)
    assert float(t.memory_s) == pytest.approx((1024 * 65536 * 576 + 1024 * 16 * 1088 * 2)
                                              / (0.5 * 4.8e12))


def test_gqa_bf16_unit_time_only_for_grouped_heads_with_a_16_bit_cache():
    """2048 requests x 8 KV heads at 2 KV tokens: 16384 units, 125 waves of 132 SMs; each wave
    costs the unit time (the MMA work of 2 tokens is 2 x 16 x 2 x 256 FLOPs, negligible):
    GQA with a BF16 cache 5 us per wave, FP8 or MHA the decode unit time 1 us."""
    c = replace(DEFAULTS, attention_decode_unit_overhead_s=1e-6, attention_gqa_bf16_unit_s=5e-6,
                attention_tensor_frac=1.0)
    waves = math.ceil(2048 * 8 / 132)
    mma = 2 * 16 * 2 * 256 / (989e12 / 132)
    for heads, kvb, unit in ((32, 2, 5e-6), (32, 1, 1e-6), (8, 2, 1e-6)):
        t = attention_decode_time(2048, 2, heads, 8, 128, 128, calib=c, kv_bytes=kvb, **_DEC)
        assert float(t.compute_s) == pytest.approx(waves * (mma + unit)), (heads, kvb)


def test_mha_decode_cuda_core_rate_binds_only_one_head_per_kv_head():
    """MHA (heads = KV heads) at a 5 TFLOP/s CUDA-core rate: one wave of 64 x 8 units x 1 split,
    each 2 x 512 x 256 FLOPs at 5e12 / 132 per SM; GQA keeps the tensor cores."""
    c = replace(DEFAULTS, attention_mha_decode_flops_per_s=5e12, attention_unit_overhead_s=0.0)
    mha = attention_decode_time(64, 512, 8, 8, 128, 128, calib=c, **_DEC)
    waves = math.ceil(64 * 8 / 132)
    assert float(mha.compute_s) == pytest.approx(waves * 2 * 512 * 256 / (5e12 / 132))
    gqa = attention_decode_time(64, 512, 16, 8, 128, 128, calib=c, **_DEC)
    plain = attention_decode_time(64, 512, 16, 8, 128, 128, calib=DEFAULTS, **_DEC)
    assert float(gqa.compute_s) == pytest.approx(float(plain.compute_s))


def test_split_merge_only_when_a_sequence_spans_several_kv_units():
    c = replace(DEFAULTS, attention_launch_s=6e-6, attention_split_merge_s=4e-6)
    at = attention_decode_time(4, 512, 16, 8, 128, 128, calib=c, **_DEC)  # one 512-token unit
    past = attention_decode_time(4, 513, 16, 8, 128, 128, calib=c, **_DEC)
    assert at.launch_s == 6e-6 and past.launch_s == pytest.approx(10e-6)


def test_decode_kernel_fields_agree_symbolic_and_numeric():
    """The new branches (head grouping, KV dtype, split count) as SymPy give the NumPy numbers."""
    c = replace(DEFAULTS, attention_gqa_bf16_unit_s=5e-6, attention_mha_decode_flops_per_s=5e12,
                attention_split_merge_s=4e-6, attention_mla_launch_s=12e-6)
    B, L = sp.symbols("B L", positive=True)
    for heads, kvh, kvb in ((32, 8, 2), (8, 8, 1), (32, 8, 1)):
        sym = attention_decode_time(B, L, heads, kvh, 128, 128, calib=c, kv_bytes=kvb, **_DEC)
        f = sp.lambdify((B, L), sym.total_s)
        for b, l in ((1, 100), (64, 4096), (2048, 2)):
            num = attention_decode_time(b, l, heads, kvh, 128, 128, calib=c, kv_bytes=kvb, **_DEC)
            assert float(f(b, l)) == pytest.approx(float(num.total_s), rel=1e-12)


# ------------------------------------------------------------ fused-MoE backend mechanisms
def _moe_row(**kw):
    row = {"tokens": 16.0, "hidden": 7168.0, "inter": 2048.0, "topk": 8.0, "experts": 256.0,
           "ep": 4.0, "tp": 1.0, "op_bytes": 1.0, "peak_flops": 1e15}
    row.update(kw)
    row["local_experts"] = row["experts"] / row["ep"]
    return pd.DataFrame([row])


def test_moe_rows_count_other_ranks_assignments_by_hand():
    """16 tokens x top-8 over 256 experts at EP 4: 128 assignments, a quarter (32) on this
    rank's 64 experts, one row each on 32 of them; the other 96 go to other ranks' experts."""
    from moesym.kernels.fit import moe_gemm_rows

    g = moe_gemm_rows(_moe_row())
    assert g.m.tolist() == [1.0, 1.0] and g.groups.tolist() == [32.0, 32.0]
    assert g.masked_rows.tolist() == [96.0, 96.0]
    assert moe_gemm_rows(_moe_row(ep=1.0)).masked_rows.tolist() == [0.0, 0.0]


def test_backend_terms_add_their_hand_derived_time():
    """A backend's fixed time, per-expert time and masked-row passes add, per GEMM, exactly:
    2 x 3 us + 2 x 32 experts x 0.1 us + 96 rows x (2 x 2048 + 7168) columns x 2 B x 2 passes
    / (0.8 x 4.8 TB/s) = 6 + 6.4 + 1.1264 us (the tiles' time unchanged)."""
    from moesym.kernels.fit import predict_moe

    base = replace(DEFAULTS, elementwise_hbm_frac=0.8)
    c = replace(base, grouped_fixed_s=3e-6, grouped_expert_s=0.1e-6, grouped_masked_passes=2.0)
    rows = _moe_row()
    d = predict_moe(rows, c, sms=132, hbm_bw_Bps=4.8e12) - predict_moe(rows, base, sms=132,
                                                                        hbm_bw_Bps=4.8e12)
    assert d[0] * 1e6 == pytest.approx(6 + 6.4 + 96 * 11264 * 2 * 2 / (0.8 * 4.8e12) * 1e6)


def test_backend_kernel_count_and_launch_time_by_hand():
    """One token on a fused backend that runs its two GEMMs and 4 memory-bound kernels, each
    at its own time per kernel (moe_launch_us): 6 kernels, so moving that time from 1.5 to
    2.5 us adds 6 x 1 = 6 us; one memory-bound kernel fewer takes 1.5 us off. At 5 us the
    memory-bound ones stop at elementwise_launch_us (3 us): 2 x 3.5 + 4 x 1.5 = 13 us more.
    Unset (0), the GEMMs pay launch_us and the memory-bound kernels elementwise_launch_us,
    the fit's 4 of them."""
    from moesym.kernels.fit import predict_moe

    rows = _moe_row(tokens=1.0, ep=1.0)
    kw = dict(sms=148, hbm_bw_Bps=8e12)
    a = replace(DEFAULTS, moe_launch_s=1.5e-6, moe_elementwise_launches=4)
    assert DEFAULTS.elementwise_launch_s == 3e-6
    t = {name: predict_moe(rows, c, **kw)[0] for name, c in (
        ("a", a), ("slower", replace(a, moe_launch_s=2.5e-6)),
        ("capped", replace(a, moe_launch_s=5e-6)),
        ("fewer", replace(a, moe_elementwise_launches=3)),
        ("unset", replace(a, moe_launch_s=0.0, moe_elementwise_launches=0)))}
    assert (t["slower"] - t["a"]) * 1e6 == pytest.approx(6 * 1)
    assert (t["capped"] - t["a"]) * 1e6 == pytest.approx(2 * 3.5 + 4 * 1.5)
    assert (t["fewer"] - t["a"]) * 1e6 == pytest.approx(-1.5)
    want = 2 * (DEFAULTS.launch_s - 1.5e-6) + 4 * (3e-6 - 1.5e-6)
    assert (t["unset"] - t["a"]) * 1e6 == pytest.approx(want * 1e6)


def test_step_runs_the_fused_backends_kernels_at_its_launch_time():
    """A decode step whose engine runs a backend with its own kernel count: the MoE layer's
    memory-bound kernels are one moe_elementwise cost of that many launches (the down GEMM's
    input cast gone: the backend's activation writes it), and the kernel model times each
    launch, and each routed-expert GEMM's, at the backend's moe_launch_us (its fixed time per
    GEMM beside it); other kernels keep elementwise_launch_us and launch_us."""
    from moesym.model.layer_costs import _fused_moe_elementwise
    from moesym.terms import elementwise as ew
    from moesym.terms.dims import symbolic_dims

    D = symbolic_dims()
    costs = [ew.norm_residual(D, S.batch), *ew.moe_dispatch_combine(D, S.batch, 8 * S.batch),
             ew.swiglu_activation("experts_act", 8 * S.batch, 256, 2),
             ew.fp8_input_cast("experts_in_cast", S.batch, 7168, 2),
             ew.fp8_input_cast("experts_down_cast", 8 * S.batch, 256, 2)]
    got = _fused_moe_elementwise(costs, 4)
    assert [c.name for c in got] == ["norm_residual", "moe_elementwise"]
    fused = got[1]
    assert fused.launches == 4 and fused.component == "moe"
    kept = sum(c.hbm_bytes for c in costs[1:5])  # all but the norm and the down cast
    assert sp.simplify(fused.hbm_bytes - kept) == 0
    k = KernelTiming(replace(DEFAULTS, moe_launch_s=2.5e-6, grouped_fixed_s=1e-6))
    assert float(k.time(fused).overhead_s) == pytest.approx(4 * 2.5e-6)
    assert float(k.time(costs[0]).overhead_s) == pytest.approx(DEFAULTS.elementwise_launch_s)
    grouped = replace(gemm("experts_up", 4, 512, 7168, S.w_bytes, S.act_bytes,
                           kind=KernelClass.GROUPED_GEMM, groups=32, layout="contiguous"),
                      component="moe")
    assert float(k.time(grouped).overhead_s) == pytest.approx(2.5e-6 + 1e-6)  # fixed time kept
    assert float(k.time(replace(grouped, component="")).overhead_s) == pytest.approx(
        DEFAULTS.launch_s + 1e-6)


def test_backend_m_block_pads_each_expert_by_hand():
    """32 experts of 3 rows, N 4096, K 7168 on 132 SMs: one M tile per expert (32), 4 N tiles
    of 256 per M tile (132 // 32 = 4 -> 1024 wide, capped at 256: 16 tiles each), 512 tiles in
    4 waves; each tile's rows padded to the backend's 16-row block instead of 64."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_min_rows=16)
    per_sm = 1e15 / 132 * 0.5
    for calib, tm in ((c, 16), (replace(c, grouped_tile_m_min_rows=0), 64)):
        t = gemm_time(3.0, 4096.0, 7168.0, sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12,
                      calib=calib, groups=32, layout="contiguous")
        assert float(t.compute_s) == pytest.approx(4 * 2 * tm * 256 * 7168 / per_sm)
    dense = gemm_time(3.0, 4096.0, 7168.0, sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12,
                      calib=c, groups=1, layout="dense")  # the backend's block is grouped-only
    assert float(dense.launch_s) == c.launch_s


def test_backend_fixed_m_block_by_the_kernels_tokens_by_hand():
    """SGLang's Triton default config (no tuned file): 64-row blocks, 16 where the kernel's
    tokens are at most its local experts. 32 experts of 3 rows, N 4096, K 7168 on 132 SMs: 32 M
    tiles, 4 N tiles of 256 columns each (1024 wide, capped at 256: 16 tiles each), 512 tiles in
    4 waves of 2 x block x 256 x 7168 FLOPs. The rows per expert (3) and the smallest block (8)
    do not change the block: at 12 tokens and 32 experts it is 16, at 33 tokens 64, with no
    token count given 64; 96 rows per expert take two 64-row blocks each (64 M tiles)."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_min_rows=8, grouped_tile_m_rows=64,
                grouped_few_tokens_tile_m_rows=16)
    per_sm = 1e15 / 132 * 0.5
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12, calib=c, groups=32,
              layout="contiguous")
    for tokens, block in ((12.0, 16), (32.0, 16), (33.0, 64), (None, 64)):
        t = gemm_time(3.0, 4096.0, 7168.0, kernel_tokens=tokens, local_experts=32.0, **kw)
        assert float(t.compute_s) == pytest.approx(4 * 2 * block * 256 * 7168 / per_sm)
    # 64 M tiles, 132 // 64 = 2 N tiles each -> 2048 wide, capped at 256: 1024 tiles, 8 waves
    t = gemm_time(96.0, 4096.0, 7168.0, kernel_tokens=384.0, local_experts=32.0, **kw)
    assert float(t.compute_s) == pytest.approx(8 * 2 * 64 * 256 * 7168 / per_sm)
    # symbolic tokens: the block is a Piecewise that lambdifies to the same numbers
    T = sp.Symbol("T", positive=True)
    sym = gemm_time(3.0, 4096.0, 7168.0, kernel_tokens=T, local_experts=32, **kw)
    f = sp.lambdify(T, sym.compute_s)
    assert [float(f(x)) for x in (12.0, 33.0)] == pytest.approx(
        [4 * 2 * b * 256 * 7168 / per_sm for b in (16, 64)])



def test_launch_following_m_block_by_hand():
    """FlashInfer's TRT-LLM-gen MoE without a tuned tactic: of its tiles 8, 16, 32, 64, 128 the
    one below the first holding the launch's tokens x top-k over its local experts
    (csrc/trtllm_fused_moe_kernel_launcher.cu:1061-1099). A rank of 32 local experts with 3
    rows each (96 rows), N 4096, K 7168 on 132 SMs: 32 M tiles, 4 N tiles of 256 each capped
    at 256 (16 per M tile), 512 tiles in 4 waves of 2 x block x 256 x 7168 FLOPs. EP 1: 3 rows
    per expert -> first tile holding 3 is 8, none below: 8. EP 8 (672 rows to other ranks'
    experts): 768 / 32 = 24 -> first holding it 32, below it 16. EP 64: 6144 / 32 = 192 -> none
    holds it, the last (128) and the one below: 64. The rank's own rows (3) are the same in
    all three."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_min_rows=8, grouped_launch_tile_max_rows=64)
    per_sm = 1e15 / 132 * 0.5
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12, calib=c, groups=32,
              layout="contiguous")
    for ep, block in ((1, 8), (8, 16), (64, 64)):
        t = gemm_time(3.0, 4096.0, 7168.0, masked_rows=96.0 * (ep - 1), local_experts=32.0, **kw)
        assert float(t.compute_s) == pytest.approx(4 * 2 * block * 256 * 7168 / per_sm)
    # symbolic masked rows: the block lambdifies to the same numbers
    X = sp.Symbol("X", nonnegative=True)
    f = sp.lambdify(X, gemm_time(3.0, 4096.0, 7168.0, masked_rows=X, local_experts=32, **kw)
                    .compute_s)
    assert [float(f(96.0 * (ep - 1))) for ep in (1, 8, 64)] == pytest.approx(
        [4 * 2 * b * 256 * 7168 / per_sm for b in (8, 16, 64)])


def test_unaligned_k_loads_at_the_fitted_rate_by_hand():
    """Triton specializes an integer argument only where it is divisible by 16: a grouped GEMM
    whose K (the row stride of both operands) is 168 loads at grouped_unaligned_load_frac of the
    rate one of K 176 does. 32 experts of 3 rows, N 4096, BF16: HBM bytes 32 ((3 K + 4096 K) 2 +
    3 x 4096 x 2) at 0.8 of 2 TB/s (the per-SM load rate set high so HBM binds), over 0.25 at
    K 168; K 176 and a calibration without the field keep the aligned time."""
    c = replace(DEFAULTS, sm_bandwidth_Bps=1e15, grouped_hbm_frac=0.8,
                grouped_unaligned_load_frac=0.25)
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=2e12, op_bytes=2, out_bytes=2, groups=32,
              layout="contiguous")

    def hbm_s(k):
        return 32 * ((3 * k + 4096 * k) * 2 + 3 * 4096 * 2) / (2e12 * 0.8)

    assert float(gemm_time(3.0, 4096.0, 168.0, calib=c, **kw).memory_s) == pytest.approx(
        hbm_s(168) / 0.25)
    assert float(gemm_time(3.0, 4096.0, 176.0, calib=c, **kw).memory_s) == pytest.approx(
        hbm_s(176))
    off = replace(c, grouped_unaligned_load_frac=0.0)
    assert float(gemm_time(3.0, 4096.0, 168.0, calib=off, **kw).memory_s) == pytest.approx(
        hbm_s(168))
    # per-row K (fit rows) and a SymPy M with a numeric K (the step model) agree
    rows = gemm_time(np.array([3.0, 3.0]), 4096.0, np.array([168.0, 176.0]), calib=c, **kw)
    assert rows.memory_s.tolist() == pytest.approx([hbm_s(168) / 0.25, hbm_s(176)])
    M = sp.Symbol("M", positive=True)
    sym = gemm_time(M, 4096, sp.Integer(168), calib=c, **kw)
    assert float(sym.memory_s.subs(M, 3)) == pytest.approx(hbm_s(168) / 0.25)


def test_k_loop_steps_add_their_time_per_wave_by_hand():
    """SGLang's Triton K loop (BLOCK_SIZE_K 32, 64 where the kernel's tokens are at most its
    local experts) at 0.1 us a step: 32 experts of 3 rows, N 4096, K 7168 on 132 SMs, fixed
    64-row block (16 at few tokens): 4 waves of 2 x block x 256 x 7168 FLOPs, each wave plus
    7168 / 32 = 224 steps (at 33 tokens) or 7168 / 64 = 112 (at 12 tokens) of 0.1 us; without
    the step time the waves keep only their FLOPs."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_rows=64, grouped_few_tokens_tile_m_rows=16,
                grouped_k_step_s=0.1e-6, grouped_k_step_cols=32,
                grouped_few_tokens_k_step_cols=64)
    per_sm = 1e15 / 132 * 0.5
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12, groups=32, layout="contiguous",
              local_experts=32.0)
    for tokens, block, steps in ((12.0, 16, 112), (33.0, 64, 224)):
        t = gemm_time(3.0, 4096.0, 7168.0, kernel_tokens=tokens, calib=c, **kw)
        assert float(t.compute_s) == pytest.approx(
            4 * (2 * block * 256 * 7168 / per_sm + steps * 0.1e-6))
    off = replace(c, grouped_k_step_s=0.0)
    t = gemm_time(3.0, 4096.0, 7168.0, kernel_tokens=33.0, calib=off, **kw)
    assert float(t.compute_s) == pytest.approx(4 * 2 * 64 * 256 * 7168 / per_sm)
    # a K that is not a multiple of the step rounds up: 58 columns are 2 steps of 32
    t = gemm_time(3.0, 4096.0, 58.0, kernel_tokens=33.0, calib=c, **kw)
    assert float(t.compute_s) == pytest.approx(4 * (2 * 64 * 256 * 58 / per_sm + 2 * 0.1e-6))

def test_computed_masked_rows_add_their_own_tiles_by_hand():
    """A grid that computes other ranks' rows (SGLang 0.5.10's Triton kernel with filter_expert
    off): 200 masked rows at the 64-row block are ceiling(200 / 64) = 4 more M tiles beside the
    32 experts' 32, 576 tiles of 256 columns (132 // 36 = 3 -> 1376 wide, capped at 256) in 5
    waves where the skipped rows leave 512 in 4; the HBM bytes stay the local experts'."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_rows=64)
    per_sm = 1e15 / 132 * 0.5
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=4.8e12, calib=c, groups=32,
              layout="contiguous", masked_rows=200.0)
    skipped = gemm_time(3.0, 4096.0, 7168.0, **kw)
    computed = gemm_time(3.0, 4096.0, 7168.0, masked_computed=1, **kw)
    assert float(skipped.compute_s) == pytest.approx(4 * 2 * 64 * 256 * 7168 / per_sm)
    assert float(computed.compute_s) == pytest.approx(5 * 2 * 64 * 256 * 7168 / per_sm)
    per_row = gemm_time(np.array([3.0, 3.0]), 4096.0, 7168.0,
                        masked_computed=np.array([0.0, 1.0]), **kw)
    assert per_row.compute_s.tolist() == pytest.approx(
        [float(skipped.compute_s), float(computed.compute_s)])


def test_sglang_0510_ep_rows_read_as_a_dispatched_ranks_input_by_hand():
    """SGLang 0.5.10's EP rows (benchmarks/kernel_fit_aic.py dispatched_ep_rows): 16 tokens x
    top-8 over 256 experts at EP 4 and EP 16. EP 4: every token has an expert on the rank
    (min(1, 8 / 4) = 1): 16 tokens launched, 32 local assignments, the other 96 of their 128
    computed as expert -1's rows. EP 16: 16 x 8 / 16 = 8 tokens launched with 8 assignments
    on the rank and 8 x 8 - 8 = 56 other rows. The fit's GEMM rows carry them; EP 1 none."""
    import importlib.util
    from pathlib import Path

    from moesym.kernels.fit import moe_gemm_rows

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_fit_aic.py"
    spec = importlib.util.spec_from_file_location("kernel_fit_aic", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    for ep, launched, local, other in ((4.0, 16.0, 32.0, 96.0), (16.0, 8.0, 8.0, 56.0)):
        g = moe_gemm_rows(fit.dispatched_ep_rows(_moe_row(ep=ep)))
        assert g.kernel_tokens.tolist() == [launched] * 2
        assert (g.m * g.groups).tolist() == [local] * 2
        assert g.masked_rows.tolist() == [other] * 2 and g.masked_computed.tolist() == [1.0] * 2
    g = moe_gemm_rows(fit.dispatched_ep_rows(_moe_row(ep=1.0)))
    assert g.masked_rows.tolist() == [0.0] * 2 and g.masked_computed.tolist() == [0.0] * 2


def test_fused_moe_rows_and_step_model_carry_the_kernels_tokens():
    """The fit's rows launch the kernel with the table's tokens over the rank's experts (16
    tokens, 256 / 4 = 64 experts); the step model's with the rank's assignments x EP / top-k:
    T / tp x k x etp x EP / k = T / tp x etp x EP, the rank's local experts beside them."""
    from moesym.kernels.fit import moe_gemm_rows
    from moesym.terms.dims import symbolic_dims
    from moesym.terms.ffn import routed_expert_compute

    g = moe_gemm_rows(_moe_row())
    assert g.kernel_tokens.tolist() == [16.0, 16.0] and g.local_experts.tolist() == [64.0, 64.0]
    D = symbolic_dims()
    T = sp.Symbol("T", positive=True)
    for c in routed_expert_compute(D, T, imbalance=1.5):
        assert sp.simplify(c.shape.kernel_tokens - T / D.tp * D.expert_tp * D.ep) == 0
        assert sp.simplify(c.shape.local_experts - D.local_experts) == 0


def test_backend_row_passes_add_a_pass_per_computed_row_by_hand():
    """32 experts of 12 rows, N 7168, 1-byte operands, 2-byte outputs: 3 row passes add
    384 rows x 7168 columns x 2 B x 3 / (0.8 x 4e12 B/s) = 5.16 us to the kernel's fixed time,
    independent of K; masked rows keep their own passes."""
    c = replace(DEFAULTS, elementwise_hbm_frac=0.8)
    kw = dict(sms=132, peak_flops=1e15, hbm_bw_Bps=4e12, groups=32, layout="contiguous")
    for k in (128.0, 7168.0):
        base = gemm_time(12.0, 7168.0, k, calib=c, **kw)
        t = gemm_time(12.0, 7168.0, k, calib=replace(c, grouped_row_passes=3.0), **kw)
        assert (float(t.launch_s) - float(base.launch_s)) * 1e6 == pytest.approx(
            384 * 7168 * 2 * 3 / (0.8 * 4e12) * 1e6)
        assert float(t.compute_s) == float(base.compute_s)


def test_backend_n_and_k_blocks_pad_each_experts_tiles_by_hand():
    """64 experts of 8 rows on 148 SMs, gate+up of 16 intermediate columns (N 32, K 2048): 64
    M tiles of 8 rows, 148 // 64 = 2 N tiles each. Unpadded: 16-column tiles, 128 tiles in one
    wave of 2 x 8 x 16 x 2048 FLOPs. N padded to the 256 block: 128-column tiles (256 / 2), the
    same 128 tiles, 8x the FLOPs per tile. Down (N 2048, K 16): K padded to the 128 block, 8x
    the tile FLOPs again. The HBM bytes stay the unpadded ones."""
    c = replace(DEFAULTS, tile_overhead_s=0.0, grouped_contiguous_tensor_frac=0.5,
                grouped_tile_m_min_rows=8, tile_n_max_cols=256)
    per_sm = 1e15 / 148 * 0.5
    kw = dict(sms=148, peak_flops=1e15, hbm_bw_Bps=8e12, groups=64, layout="contiguous")
    padded = replace(c, grouped_n_block_cols=256, grouped_k_block_cols=128)
    up = [gemm_time(8.0, 32.0, 2048.0, calib=x, **kw) for x in (c, padded)]
    assert float(up[0].compute_s) == pytest.approx(2 * 8 * 16 * 2048 / per_sm)
    assert float(up[1].compute_s) == pytest.approx(2 * 8 * 128 * 2048 / per_sm)
    # m_tiles 64, n_alloc 2 -> 1024-wide, capped at 256: 8 N tiles each, 512 tiles in 4 waves
    down = [gemm_time(8.0, 2048.0, 16.0, calib=x, **kw) for x in (c, padded)]
    assert float(down[0].compute_s) == pytest.approx(4 * 2 * 8 * 256 * 16 / per_sm)
    assert float(down[1].compute_s) == pytest.approx(4 * 2 * 8 * 256 * 128 / per_sm)
    hbm = 64 * ((8 * 2048 + 32 * 2048) * 1 + 8 * 32 * 2) / (8e12 * c.gemm_hbm_frac)
    for t in up:
        assert float(t.memory_s) >= hbm * (1 - 1e-12)
    dense = gemm_time(8.0, 32.0, 2048.0, sms=148, peak_flops=1e15, hbm_bw_Bps=8e12,
                      calib=padded)  # the blocks are the grouped kernels' only
    assert float(dense.compute_s) == pytest.approx(float(gemm_time(
        8.0, 32.0, 2048.0, sms=148, peak_flops=1e15, hbm_bw_Bps=8e12, calib=c).compute_s))


def test_step_model_masks_other_ranks_rows_and_runs_the_backend_fields():
    """The routed-expert GEMMs carry the mean rank's rows x (EP - 1) as the grid's masked
    rows, and an engine's backend replaces [kernel]'s fields with its [moe_kernels] entry."""
    from moesym.kernels.timing import KernelTiming
    from moesym.specs.hardware import load_hardware
    from moesym.terms.dims import symbolic_dims
    from moesym.terms.ffn import routed_expert_compute

    D = symbolic_dims()
    T = sp.Symbol("T", positive=True)
    for c in routed_expert_compute(D, T, imbalance=1.5):
        want = T / D.tp * D.topk * D.expert_tp * (D.ep - 1)
        assert sp.simplify(c.shape.masked_rows - want) == 0
    hw = load_hardware("h200")
    for name, fields in hw.moe_kernels.items():
        calib = KernelTiming.from_hardware(hw, name).calib
        assert all(getattr(calib, f) == v for f, v in fields.items())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu=st.sampled_from([hw.name for hw in FITTED]), which=st.integers(0, 8),
       tokens=st.integers(1, 16384), hidden=st.sampled_from([2048, 4096, 7168]),
       inter=st.sampled_from([128, 512, 1536, 2048]), topk=st.sampled_from([1, 2, 8]),
       experts=st.sampled_from([8, 64, 256]), ep=st.sampled_from([1, 2, 8]))
def test_fitted_moe_backends_never_beat_the_fused_moe_floor(gpu, which, tokens, hidden, inter,
                                                            topk, experts, ep):
    """Every fitted GPU's fused-MoE backends ([moe_kernels], their mechanisms included) time a
    balanced layer no faster than physical_floor_s: its FLOPs at the datasheet peak or the
    touched experts' weights at the datasheet HBM bandwidth."""
    from moesym.kernels.fit import physical_floor_s, predict_moe

    hw = next(h for h in FITTED if h.name == gpu)
    calibs = _engine_calibs(hw)
    c = calibs[which % len(calibs)]
    dtype = "fp8" if "fp8" in hw.peaks_flops else "bf16"
    rows = _moe_row(tokens=float(tokens), hidden=float(hidden), inter=float(inter),
                    topk=float(topk), experts=float(experts), ep=float(ep),
                    op_bytes=1.0 if dtype == "fp8" else 2.0, peak_flops=hw.peak_flops(dtype))
    t = predict_moe(rows, c, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps)
    assert t[0] >= physical_floor_s(rows, "moe", hw.hbm_bw_Bps)[0] * (1 - 1e-12)
def test_decode_kernel_launch_by_kernel_kind():
    """Batch 1 at 2 KV tokens: the launch floor of the kernel the shape runs. GQA with an FP8
    cache and head dim 128: attention_launch_us (4 us); with a BF16 cache, or FP8 at head dim
    64: the other GQA kernel's (8 us); one query head per KV head: the MHA kernel's (9 us);
    MLA keeps its own (12 us)."""
    c = replace(DEFAULTS, attention_launch_s=4e-6, attention_gqa_generic_launch_s=8e-6,
                attention_mha_decode_launch_s=9e-6, attention_mla_launch_s=12e-6)
    for heads, kvh, dim, kvb, launch in ((32, 8, 128, 1, 4e-6), (32, 8, 128, 2, 8e-6),
                                         (32, 8, 64, 1, 8e-6), (8, 8, 128, 1, 9e-6),
                                         (8, 8, 128, 2, 9e-6)):
        t = attention_decode_time(1, 2, heads, kvh, dim, dim, calib=c, kv_bytes=kvb, **_DEC)
        assert float(t.launch_s) == pytest.approx(launch), (heads, kvh, dim, kvb)
    mla = attention_decode_time(1, 2, 128, 1, 576, 512, calib=c, kv_bytes=1, shared_kv=True, **_DEC)
    assert float(mla.launch_s) == pytest.approx(12e-6)


def test_decode_fill_adds_to_the_kv_stream_only():
    """64 requests x 32768 KV tokens x 8 KV heads x 256 x 2 B = 8.59 GB (+ 64 x 32 x 256 x 2 B
    of queries and outputs) at 0.9 x 4.8 TB/s = 1988.7 us, plus a 3 us fill; the compute side
    is unchanged."""
    c0 = replace(DEFAULTS, attention_hbm_frac=0.9)
    c = replace(c0, attention_decode_fill_s=3e-6)
    t = attention_decode_time(64, 32768, 32, 8, 128, 128, calib=c, **_DEC)
    t0 = attention_decode_time(64, 32768, 32, 8, 128, 128, calib=c0, **_DEC)
    stream = (64 * 32768 * 8 * 256 * 2 + 64 * 32 * 256 * 2) / (0.9 * 4.8e12)
    assert stream == pytest.approx(1988.7e-6, rel=1e-4)
    assert float(t.memory_s) == pytest.approx(stream + 3e-6)
    assert float(t.compute_s) == pytest.approx(float(t0.compute_s))


def test_mla_without_kv_split_runs_one_unit_per_sequence():
    """One request of 65536 latent tokens, 16 heads (one 64-row query tile): with the 512-token
    split 128 units of 512 tokens (two waves of A100's 108 SMs); unsplit one unit of 65536 tokens,
    2 x 64 x 65536 x (576 + 512) FLOPs at 0.5 x 312 TFLOP/s / 108 SMs = 6.32 ms."""
    a100 = dict(sms=108, peak_flops=312e12, hbm_bw_Bps=2.039e12)
    c = replace(DEFAULTS, attention_tensor_frac=0.5, attention_unit_overhead_s=0.0)
    split = attention_decode_time(1, 65536, 16, 1, 576, 512, calib=c, kv_bytes=2,
                                  shared_kv=True, **a100)
    whole = attention_decode_time(1, 65536, 16, 1, 576, 512, kv_bytes=2, shared_kv=True,
                                  calib=replace(c, attention_mla_kv_split_tokens=1 << 20), **a100)
    assert float(split.compute_s) == pytest.approx(2 * 2 * 64 * 512 * 1088 / (0.5 * 312e12 / 108))
    assert float(whole.compute_s) == pytest.approx(2 * 64 * 65536 * 1088 / (0.5 * 312e12 / 108))
    assert float(whole.compute_s) == pytest.approx(6.32e-3, rel=1e-3)
    gqa = attention_decode_time(1, 65536, 16, 1, 128, 128, calib=replace(
        c, attention_mla_kv_split_tokens=1 << 20), kv_bytes=2, **a100)  # GQA keeps the split
    assert float(gqa.compute_s) == pytest.approx(float(attention_decode_time(
        1, 65536, 16, 1, 128, 128, calib=c, kv_bytes=2, **a100).compute_s))


def test_new_decode_fields_agree_symbolic_and_numeric():
    c = replace(DEFAULTS, attention_gqa_generic_launch_s=8e-6, attention_mha_decode_launch_s=9e-6,
                attention_decode_fill_s=3e-6, attention_mla_kv_split_tokens=1 << 20,
                attention_gqa_unit_dim_slope=0.4)
    B, L = sp.symbols("B L", positive=True)
    for heads, kvh, dim, kvb, shared in ((32, 8, 128, 2, False), (8, 8, 128, 1, False),
                                         (32, 8, 64, 1, False), (32, 8, 128, 1, False),
                                         (16, 1, 576, 1, True)):
        vd = 512 if shared else dim
        sym = attention_decode_time(B, L, heads, kvh, dim, vd, calib=c, kv_bytes=kvb,
                                    shared_kv=shared, **_DEC)
        f = sp.lambdify((B, L), sym.total_s)
        for b, l in ((1, 100), (64, 4096), (2048, 2)):
            num = attention_decode_time(b, l, heads, kvh, dim, vd, calib=c, kv_bytes=kvb,
                                        shared_kv=shared, **_DEC)
            assert float(f(b, l)) == pytest.approx(float(num.total_s), rel=1e-12)


def test_gemm_rows_with_their_input_cast_add_its_elementwise_time():
    """A table row timed with its FP8 input cast (TensorRT-LLM's block-FP8 linear): the GEMM plus
    4096 x 7168 x (2 + 1 + 4/128) B at 0.8 x 3.35 TB/s (33.2 us) plus one 3 us launch."""
    rows = pd.DataFrame({"m": [4096.0], "n": [2048.0], "k": [7168.0], "groups": [1.0],
                         "layout": ["dense"]})
    kw = dict(sms=132, peak_flops=1979e12, hbm_bw_Bps=3.35e12, infersim_masked=False)
    c = replace(DEFAULTS, elementwise_hbm_frac=0.8, elementwise_launch_s=3e-6)
    plain = predict_rows(rows, c, **kw)[0]
    cast = predict_rows(rows.assign(input_cast_bytes=4096 * 7168 * (3 + 4 / 128)), c, **kw)[0]
    assert cast - plain == pytest.approx(4096 * 7168 * (3 + 4 / 128) / (0.8 * 3.35e12) + 3e-6)
    assert cast - plain == pytest.approx(36.2e-6, rel=1e-3)


def test_gqa_unit_time_grows_with_the_head_dim():
    """2048 requests x 8 KV heads at 2 KV tokens: 125 waves of 132 SMs, each the unit time.
    With slope 0.4 a 2 us unit becomes 2 (1 + 0.4 (512/256 - 1)) = 2.8 us at head dim 256 and
    2 (1 - 0.4 / 2) = 1.6 us at head dim 64; MHA (8 heads on 8 KV heads) keeps 2 us."""
    c = replace(DEFAULTS, attention_decode_unit_overhead_s=2e-6, attention_tensor_frac=1.0,
                attention_gqa_unit_dim_slope=0.4)
    waves = math.ceil(2048 * 8 / 132)
    for heads, dim, unit in ((32, 256, 2.8e-6), (32, 128, 2e-6), (32, 64, 1.6e-6), (8, 256, 2e-6)):
        t = attention_decode_time(2048, 2, heads, 8, dim, dim, calib=c, kv_bytes=1, **_DEC)
        mma = 2 * 16 * 2 * 2 * dim / (989e12 / 132)  # 16 query rows, 2 tokens, d_qk + d_v
        assert float(t.compute_s) == pytest.approx(waves * (mma + unit)), (heads, dim)


# ------------------------------------------------- routed experts' loads under their tiles
def test_loads_overlap_adds_the_unhidden_share_to_both_expert_terms():
    """max(compute, load) + s min(compute, load), by hand: a backend whose fit leaves s of the
    shorter time exposed (grouped_serial_frac) adds s x min(routed tile time, weight-load time)
    to moe_routed and moe_weight_load alike, so the max of the two carries it; s = 0 (every
    [kernel] fit) leaves the terms as they are."""
    import sympy as sp

    from moesym.model.layer_time import loads_overlap
    from moesym.terms.cost import TermTime

    z = sp.Integer(0)
    terms = {"moe_routed": TermTime("moe_routed", sp.Float(200e-6), sp.Float(20e-6), z, sp.Float(5e-6)),
             "moe_weight_load": TermTime("moe_weight_load", z, sp.Float(300e-6), z, z)}
    assert loads_overlap(terms, 0.0) is terms
    out = loads_overlap(terms, 0.4)
    r, w = float(out["moe_routed"].total_s), float(out["moe_weight_load"].total_s)
    assert r == pytest.approx(205e-6 + 0.4 * 200e-6)
    assert w == pytest.approx(300e-6 + 0.4 * 200e-6)
    assert max(r, w) == pytest.approx(max(205e-6, 300e-6) + 0.4 * min(200e-6, 300e-6))


def test_the_step_takes_the_backends_serial_share():
    """A decode step on H200 under SGLang (the Triton backend, fitted with a serial share) is
    slower than the same step with that share set to 0, by s x min(compute, load) per MoE layer."""
    from dataclasses import replace as dc_replace

    from moesym.kernels.timing import KernelTiming
    from moesym.model.step import build_step
    from moesym.specs.deployment import Deployment, Phase, Workload
    from moesym.readers.model import load_model

    hw = load_hardware("h200")
    tri = KernelTiming.from_hardware(hw, "triton")
    assert tri.grouped_serial_share() > 0
    flat = KernelTiming(dc_replace(tri.calib, grouped_serial_frac=0.0))
    m = load_model("qwen3-30b-a3b")
    dep, wl = Deployment(gpus=1), Workload(Phase.DECODE, batch=32, context=1024)
    with_s, without = (build_step(m, hw, dep, wl, timing=t) for t in (tri, flat))
    assert with_s.predict()["step_time_s"] > without.predict()["step_time_s"]
