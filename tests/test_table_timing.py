"""Issue 17 item 0: measured kernel tables as a time model of the step model (``--timing
tables:DIR``). The tables here are written by the tests with latencies chosen so the expected
kernel time follows by hand: constants, and functions linear in log M (or log batch and log KV
length), which the log-linear interpolation reproduces exactly between rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import sympy as sp

import moesym as ms
from moesym.cli import main
from moesym.kernels.table_timing import piecewise_log_interp
from moesym.symbolic.symbols import S


def _write(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "\n".join(",".join(str(x) for x in r) for r in rows) + "\n")


def _part(step, key, name):
    """Seconds of one kernel of a breakdown term, at the step's bindings and workload."""
    term = step.terms[key]
    parts = getattr(term, "parts", (term,))
    (p,) = [p for p in parts if p.name == name]
    vals = {k: sp.Float(v) for k, v in step.values.items()}
    vals.update({S.batch: sp.Float(step.workload.batch), S.context: sp.Float(step.workload.context)})
    return float(p.total_s.xreplace(vals))


def _qwen8b(folder, weights="fp8", batch=64, context=4096):
    dep = ms.Deployment(weights=weights, timing=f"tables:{folder}")
    return ms.build_step(ms.load_model("qwen3-8b"), ms.load_hardware("h20"), dep,
                         ms.Workload("decode", batch=batch, context=context))


def test_log_interpolation_matches_a_direct_evaluation():
    rng = np.random.default_rng(0)
    xs = np.sort(rng.choice(np.arange(1, 5000), 9, replace=False)).astype(float)
    ys = rng.uniform(1e-6, 1e-3, xs.size)
    x = sp.Symbol("x", positive=True)
    value, ok = piecewise_log_interp(x, xs, ys)
    for q in rng.uniform(xs[0], xs[-1], 50):
        j = np.searchsorted(xs, q)
        w = (math.log(q) - math.log(xs[j - 1])) / (math.log(xs[j]) - math.log(xs[j - 1]))
        want = ys[j - 1] + w * (ys[j] - ys[j - 1])
        assert float(value.subs(x, q)) == pytest.approx(want, rel=1e-12)
        assert bool(ok.subs(x, q))
    assert not bool(ok.subs(x, xs[-1] * 1.01)) and not bool(ok.subs(x, xs[0] * 0.99))
    assert piecewise_log_interp(x, [4.0, 4.0], [1.0, 2.0]) is None  # one distinct row


def test_a_measured_gemm_replaces_the_kernel_model_inside_its_range(tmp_path):
    # Qwen3-8B qkv_proj per GPU: N = (32 + 2 x 8) x 128 = 6144, K = 4096, M = batch (tp 1)
    _write(tmp_path / "gemm" / "h20" / "data.csv", "m,k,n,latency_us,mfu",
           [(m, 4096, 6144, 100, 0) for m in (1, 16, 256, 1024)])
    st = _qwen8b(tmp_path)
    assert _part(st, "attention_proj", "qkv_proj") == pytest.approx(100e-6, rel=1e-12)
    ref = ms.build_step(ms.load_model("qwen3-8b"), ms.load_hardware("h20"),
                        ms.Deployment(weights="fp8"), ms.Workload("decode", batch=64, context=4096))
    # the other projection is untouched, and so is the whole model outside the measured rows
    assert _part(st, "attention_proj", "o_proj") == pytest.approx(_part(ref, "attention_proj", "o_proj"))
    big = _qwen8b(tmp_path, batch=2048)
    ref_big = ms.build_step(ms.load_model("qwen3-8b"), ms.load_hardware("h20"),
                            ms.Deployment(weights="fp8"), ms.Workload("decode", batch=2048, context=4096))
    assert big.predict()["step_time_s"] == pytest.approx(ref_big.predict()["step_time_s"], rel=1e-12)
    # the kernel model's split is kept: the measured total is spread in its compute/memory ratio
    p = [x for x in st.terms["attention_proj"].parts if x.name == "qkv_proj"][0]
    q = [x for x in ref.terms["attention_proj"].parts if x.name == "qkv_proj"][0]
    vals = {k: sp.Float(v) for k, v in {**st.values, S.batch: 64, S.context: 4096}.items()}
    rvals = {k: sp.Float(v) for k, v in {**ref.values, S.batch: 64, S.context: 4096}.items()}
    assert float((p.compute_s / p.memory_s).xreplace(vals)) == pytest.approx(
        float((q.compute_s / q.memory_s).xreplace(rvals)), rel=1e-9)


def test_gemm_tables_match_the_weight_dtype(tmp_path):
    # a table without a dtype column is FP8 (InferSim's DeepGEMM layout): BF16 weights skip it
    _write(tmp_path / "gemm" / "h20" / "data.csv", "m,k,n,latency_us,mfu",
           [(m, 4096, 6144, 100, 0) for m in (1, 1024)])
    assert _part(_qwen8b(tmp_path, "bf16"), "attention_proj", "qkv_proj") != pytest.approx(100e-6)
    _write(tmp_path / "gemm" / "h20" / "data.csv", "m,k,n,latency_us,mfu,dtype",
           [(m, 4096, 6144, 70, 0, "bf16") for m in (1, 1024)])
    assert _part(_qwen8b(tmp_path, "bf16"), "attention_proj", "qkv_proj") == pytest.approx(70e-6)
    # 4-bit weight-only GEMMs dequantise in the kernel: no plain GEMM table describes them
    assert _part(_qwen8b(tmp_path, "w4a16"), "attention_proj", "qkv_proj") != pytest.approx(70e-6)


def test_decode_attention_interpolates_in_batch_and_kv_length(tmp_path):
    # latency linear in log batch and log KV length: the bilinear log interpolation is exact
    def lat_us(b, kv):
        return 20 + 3 * math.log(b) + 5 * math.log(kv)

    rows = [("bf16", "bf16", b, kv, round(lat_us(b, kv), 9), 0)
            for b in (1, 16, 64, 256) for kv in (1024, 4096, 16384)]
    _write(tmp_path / "mha" / "decode" / "h20" / "32-8-128.csv",
           "dtype,kv_dtype,batch_size,kv_len,latency_us,mfu", rows)
    st = _qwen8b(tmp_path, batch=48, context=3000)
    assert _part(st, "attention_core", "attention_core") == pytest.approx(lat_us(48, 3000) * 1e-6, rel=1e-9)
    # an FP8 KV cache is another kernel: the BF16 rows do not answer for it
    dep = ms.Deployment(weights="fp8", kv="fp8", timing=f"tables:{tmp_path}")
    st8 = ms.build_step(ms.load_model("qwen3-8b"), ms.load_hardware("h20"), dep,
                        ms.Workload("decode", batch=48, context=3000))
    assert _part(st8, "attention_core", "attention_core") != pytest.approx(lat_us(48, 3000) * 1e-6)


@pytest.mark.slow  # 15-45 s: a tables-timed Qwen3 step built per batch
def test_grouped_gemm_rows_are_tokens_per_local_expert(tmp_path):
    # Qwen3-30B-A3B on one H20: 128 local experts, gate+up N = 1536, K = 2048; down N = 2048,
    # K = 768; tokens per expert = batch x 8 / 128. Constant latencies 40 us and 25 us.
    cols = ("num_experts,num_gpus,num_local_experts,topk,hidden_size,intermediate_size,"
            "seq_len_per_gpu,tokens_per_expert,up_proj_us,up_mfu,down_proj_us,down_mfu,dtype")
    rows = [(128, 1, 128, 8, 2048, 768, t * 16, t, 40, 0, 25, 0, "bf16") for t in (1, 8, 64, 512)]
    _write(tmp_path / "grouped_gemm" / "prefill" / "h20" / "data.csv", cols, rows)
    dep = ms.Deployment(timing=f"tables:{tmp_path}", layout="contiguous")
    st = ms.build_step(ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"), dep,
                       ms.Workload("decode", batch=128, context=2048))
    assert _part(st, "moe_routed", "experts_gate_up") == pytest.approx(40e-6, rel=1e-12)
    assert _part(st, "moe_routed", "experts_down") == pytest.approx(25e-6, rel=1e-12)


def test_cli_every_command_takes_tables_and_an_edited_table_is_not_served_from_cache(tmp_path, capsys):
    _write(tmp_path / "gemm" / "h20" / "data.csv", "m,k,n,latency_us,mfu",
           [(m, 4096, 6144, 100, 0) for m in (1, 1024)])
    argv = ["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--batch", "64",
            "--context", "4096", "--weights", "fp8", "--timing", f"tables:{tmp_path}", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    _write(tmp_path / "gemm" / "h20" / "data.csv", "m,k,n,latency_us,mfu",
           [(m, 4096, 6144, 200, 0) for m in (1, 1024)])
    assert main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    # 100 us more per layer, 36 layers, divided by the H20 serving factor
    extra = 36 * 100e-6 / ms.load_hardware("h20").efficiency.serving
    assert second["step_time_s"] - first["step_time_s"] == pytest.approx(extra, rel=1e-6)
    out = tmp_path / "s.csv"
    assert main(["sweep", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--batch", "8,64",
                 "--context", "4096", "--weights", "fp8", "--timing", f"tables:{tmp_path}",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["kernel", "gemm", "--m", "32", "--n", "6144", "--k", "4096", "--hardware", "h20",
                 "--dtype", "fp8", "--timing", f"tables:{tmp_path}", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["source"] == "table" and r["time_s"] == pytest.approx(200e-6)


@pytest.mark.parametrize("argv, field", [
    (["--timing", "tables:/no/such/folder"], "--timing"),
    (["--timing", "tables:"], "--timing"),
    (["--timing", "measured"], "--timing"),
])
def test_bad_timing_is_one_line_exit_2(argv, field, capsys):
    rc = main(["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--batch", "8",
               "--context", "1024", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and field in err


def test_a_folder_without_this_gpus_tables_is_refused(tmp_path, capsys):
    _write(tmp_path / "gemm" / "h800" / "data.csv", "m,k,n,latency_us,mfu", [(1, 1, 1, 1, 0)])
    rc = main(["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--batch", "8",
               "--context", "1024", "--timing", f"tables:{tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "no table for hardware h20" in err and "\n" not in err


def test_the_roofline_reads_the_kernel_tables_fractions():
    # one efficiency set per GPU: the roofline's symbols are bound to the [kernel] fractions
    from moesym.specs.kernel_calib import kernel_calib

    hw = ms.load_hardware("h20")
    k = kernel_calib(hw)
    st = ms.build_step(ms.load_model("qwen3-8b"), hw, ms.Deployment(timing="roofline"),
                       ms.Workload("decode", batch=8, context=1024))
    v = st.values
    assert (v[S.eff_gemm], v[S.eff_mem], v[S.eff_mem_attn], v[S.eff_attn]) == (
        k.gemm_tensor_frac, k.gemm_hbm_frac, k.attention_hbm_frac, k.attention_tensor_frac)
