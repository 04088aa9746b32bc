"""AMD Instinct (issue 48): hardware files, the switchless Infinity Fabric node, aiter's tables,
the kernel-model mechanisms AMD's tuned kernels need and per-format calibration.

Golden values come from data sheets (cited), hand derivations written here, or rows of aiter's
tuned tables (ROCm/aiter @ e404860, aiter/configs, MIT; file and line cited, the row copied
here): never from the code's own output. No test reads the tables themselves.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest
import sympy as sp

from moesym.cli import main
from moesym.errors import SpecError
from moesym.kernels import aiter
from moesym.kernels.analytical import gemm_time, split_k
from moesym.specs.kernel_calib import DEFAULTS, kernel_calib
from moesym.kernels.timing import KernelTiming
from moesym.specs.hardware import load_hardware
from moesym.symbolic.symbols import S
from moesym.terms import comm
from moesym.terms.cost import Cost, GemmShape, KernelClass
from moesym.terms.dims import symbolic_dims

AMD = ("mi300x", "mi325x", "mi355x", "mi350x")


def _hw(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_hardware(name)


# --------------------------------------------------------------------------- hardware files
# AMD data sheets (hardware/*.toml source fields): dense peaks in TFLOP/s, HBM, CUs
DATASHEET = {
    "mi300x": {"sms": 304, "bf16": 1307.4, "fp8": 2614.9, "hbm_TBps": 5.3, "hbm_GB": 192},
    "mi325x": {"sms": 304, "bf16": 1307.4, "fp8": 2614.9, "hbm_TBps": 6.0, "hbm_GB": 256},
    "mi355x": {"sms": 256, "bf16": 2516.6, "fp8": 5033.2, "hbm_TBps": 8.0, "hbm_GB": 288},
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_amd_hardware_files_hold_the_data_sheets(name):
    h, d = _hw(name), DATASHEET[name]
    assert h.vendor == "amd" and h.sms == d["sms"] and h.gpus_per_node == 8
    assert h.peak_flops("bf16") == d["bf16"] * 1e12 and h.peak_flops("fp8") == d["fp8"] * 1e12
    assert h.hbm_bw_Bps == d["hbm_TBps"] * 1e12 and h.hbm_capacity_bytes == d["hbm_GB"] * 1e9
    # seven Infinity Fabric links per GPU, one to each other GPU of the node, no switch
    assert h.scale_up_domain_gpus == 8 and h.scale_up_links == 7


def test_matrix_rates_follow_from_cus_and_clocks():
    """CDNA 4 (MI355X, MI350X): FP8 is 8192 FLOP per CU per clock, BF16 half and MXFP4 twice
    that (AMD CDNA 4 white paper); MI355X runs 2.4 GHz, MI350X 2.2 GHz. CDNA 3 (MI300X): BF16
    2048 FLOP per CU per clock at 2.1 GHz."""
    for name, ghz in (("mi355x", 2.4), ("mi350x", 2.2)):
        h = _hw(name)
        fp8 = 8192 * 256 * ghz * 1e9
        assert h.peak_flops("fp8") == pytest.approx(fp8, rel=1e-4)
        assert h.peak_flops("bf16") == pytest.approx(fp8 / 2, rel=1e-4)
        assert h.peak_flops("fp4") == pytest.approx(2 * fp8, rel=1e-4)
    assert _hw("mi300x").peak_flops("bf16") == pytest.approx(2048 * 304 * 2.1e9, rel=1e-3)
    assert "fp4" not in _hw("mi300x").peaks_flops  # MXFP4 matrix cores are CDNA 4's
    # the data sheets' link rates: 7 x 64 GB/s (MI300X, MI325X); 7 x 76.8 GB/s (MI355X)
    assert _hw("mi300x").scale_up_Bps == 7 * 64e9
    assert _hw("mi355x").scale_up_Bps == pytest.approx(7 * 76.8e9)


def test_scale_up_links_must_be_the_other_gpus_of_the_domain(tmp_path):
    text = _hw_text("mi300x").replace("scale_up_links = 7", "scale_up_links = 4")
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=r"scale_up_links = 4.*write 7"):
        load_hardware(p)


def _hw_text(name):
    from moesym.io.resources import data_dir

    return (data_dir("hardware") / f"{name}.toml").read_text()


# ----------------------------------------------------------------------- Infinity Fabric node
def test_link_share_is_the_links_among_the_group():
    """p GPUs of a switchless 8-GPU node exchange over their p - 1 links, 1/7 of a GPU's
    scale-up rate each: a pair 1/7, four GPUs 3/7, all eight 7/7."""
    assert [comm.link_share(p, 7) for p in (2, 4, 8)] == [sp.Rational(1, 7), sp.Rational(3, 7), 1]
    assert comm.link_share(2, 0) == 1  # a switch: every group reaches the whole rate
    # MI300X data sheet: 64 GB/s per link and direction, so TP2 all-reduces at 64 GB/s
    assert comm.group_bandwidth(2, 8, 448e9, 50e9, links=7) == pytest.approx(64e9)
    assert comm.group_bandwidth(8, 8, 448e9, 50e9, links=7) == pytest.approx(448e9)
    assert comm.group_bandwidth(16, 8, 448e9, 50e9, links=7) == pytest.approx(50e9)


def test_switched_domains_keep_their_expressions():
    """links = 0 (NVSwitch) leaves every term as it was: no new symbol, no Min."""
    D = replace(symbolic_dims(), experts=256, topk=8, hidden=7168, dispatch_bytes=1)
    old = comm.dispatch(D, S.batch, S.bw_up, S.bw_out, S.lat_up, S.lat_out, D.gpus_per_node)
    new = comm.dispatch(D, S.batch, S.bw_up, S.bw_out, S.lat_up, S.lat_out, D.gpus_per_node,
                        links=0)
    assert old == new
    assert comm.group_bandwidth(D.tp, D.gpus_per_node, S.bw_up, S.bw_out) == \
        comm.group_bandwidth(D.tp, D.gpus_per_node, S.bw_up, S.bw_out, links=0)


def test_all_to_all_among_four_gpus_uses_three_links():
    """DeepEP-style low-latency dispatch, EP 4 inside one 8-GPU node: each token sends its k
    copies to the k (g - 1) / ep that leave its GPU, T d b k (g - 1) / ep bytes per GPU, over the
    g - 1 = 3 links to the other three GPUs: rate 3 x 64 GB/s on MI300X."""
    T, d, k, ep = 128, 7168, 8, 4
    D = replace(symbolic_dims(), experts=256, topk=k, ep=ep, hidden=d, dispatch_bytes=1)
    c = comm.dispatch(D, T, 448e9, 50e9, 0, 0, 8, comm.A2AMode.DEEPEP_LL, links=7)
    nbytes = T * d * 1 * k * (ep - 1) / ep
    assert float(c.net_bytes) == pytest.approx(nbytes)
    assert float(c.net_bytes / c.net_bw) == pytest.approx(nbytes / (3 * 64e9))


# ------------------------------------------------------------------------- aiter's tables
GEMM_CSV = """gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio
gfx942,304,16,1280,4096,torch.float8_e4m3fnuz,ck,1,0,12.0,k1,1.0,1.0,0.0
gfx942,304,16,1280,4096,torch.int8,ck,1,0,9.0,k1,1.0,1.0,0.0
gfx950,256,16,1280,4096,torch.float8_e4m3fn,ck,1,0,8.0,k2,1.0,1.0,0.0
gfx950,256,32,1280,4096,torch.float8_e4m3fn,ck,1,0,0.0,k2,1.0,1.0,0.0
gfx950,256,64,1280,4096,torch.float8_e4m3fn,ck,1,0,9.0,k2,1.0,1.0,0.2
gfx1250,256,16,1280,4096,torch.float8_e4m3fn,ck,1,0,3.0,k3,1.0,1.0,0.0
gfx942,80,16,1280,4096,torch.float8_e4m3fnuz,ck,1,0,30.0,k4,1.0,1.0,0.0
"""
SHUFFLED_CSV = """gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio
gfx950,256,16,1280,4096,torch.float8_e4m3fn,asm,1,0,7.0,k5,1.0,1.0,0.0
"""
MOE_CSV = """cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw,_tag
256,64,7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,QuantType.per_1x128,1,0,32,0,50.0,a,0.0%,30.0,b,0.0%,80.0,0,1,1,
256,64,7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,QuantType.per_1x128,1,0,32,0,70.0,c,0.0%,0.0,,,70.0,1,1,1,
256,1,7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,QuantType.per_1x128,1,0,32,0,0.0,c,0.0%,0.0,,,0.0,1,1,1,
304,64,7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.bfloat16,torch.bfloat16,QuantType.No,1,0,32,0,60.0,a,0.0%,40.0,b,4.0%,100.0,0,1,1,
"""


@pytest.fixture
def tables(tmp_path):
    (tmp_path / "model_configs").mkdir()
    (tmp_path / "a8w8_tuned_gemm.csv").write_text(GEMM_CSV)
    (tmp_path / "model_configs" / "x_a8w8_bpreshuffle_tuned_gemm.csv").write_text(SHUFFLED_CSV)
    (tmp_path / "model_configs" / "a8w8_blockscale_tuned_fmoe_x.csv").write_text(MOE_CSV)
    return tmp_path


def test_aiter_gemm_rows_by_gpu(tables):
    """gfx942 with 304 CUs is MI300X (and MI325X), gfx950 with 256 MI355X; gfx1250 and the
    80-CU MI308X are other parts. INT8 weights, untimed rows and rows that failed the tuner's
    5% accuracy check are dropped; a shape tuned in two files keeps the faster row."""
    g, dropped = aiter.gemm_rows(tables, "mi355x", "fp8")
    assert g[["m", "latency_s"]].values.tolist() == [[16.0, 7.0e-6]]
    assert g.variant.tolist() == ["bpreshuffle"] and g.table_dtype.tolist() == ["modelopt-fp8"]
    assert dropped == {"untimed": 1, "inaccurate": 1, "int8": 0, "repeated": 1}
    g, dropped = aiter.gemm_rows(tables, "mi300x", "fp8")
    assert g.latency_s.tolist() == [12.0e-6] and dropped["int8"] == 1
    assert aiter.gemm_rows(tables, "mi325x", "fp8")[0].latency_s.tolist() == [12.0e-6]
    assert len(aiter.gemm_rows(tables, "mi355x", "bf16")[0]) == 0


def test_aiter_moe_rows(tables):
    """A two-stage row takes us1 + us2 (us); a one-stage row one kernel; an untimed row is
    dropped; the stages' accuracy columns stay in (a quantized MoE differs from its BF16
    reference by its quantization)."""
    m, dropped = aiter.moe_rows(tables, "mi355x")
    assert dropped["untimed"] == 1
    assert sorted(zip(m.stages, m.latency_s * 1e6)) == [(1, pytest.approx(70.0)),
                                                        (2, pytest.approx(80.0))]
    two = m[m.stages == 2].iloc[0]
    assert (two.stage1_s, two.stage2_s) == (pytest.approx(50e-6), pytest.approx(30e-6))
    assert (two["table_dtype"], two["dtype"], two["block_m"]) == ("fp8_block", "fp8", 32)
    bf = aiter.moe_rows(tables, "mi300x")[0]
    assert bf.table_dtype.tolist() == ["bf16"] and bf.op_bytes.tolist() == [2.0]


def test_active_experts_under_random_routing():
    """Each of T tokens picks k distinct experts of E at random: an expert is missed by a token
    with probability 1 - k / E, so E (1 - (1 - k / E)^T) have rows. One token: k; a token count
    far above E / k: all E; T k = E (32 tokens, top-8, 256 experts): 256 (1 - (31/32)^32)."""
    assert float(aiter.active_experts(1, 8, 256)) == pytest.approx(8)
    assert float(aiter.active_experts(10_000, 8, 256)) == pytest.approx(256)
    assert float(aiter.active_experts(32, 8, 256)) == pytest.approx(256 * (1 - (31 / 32) ** 32))


def test_bad_aiter_folder_is_one_line():
    from moesym.errors import MoesymError

    with pytest.raises(MoesymError, match="folder not found"):
        aiter.gemm_rows("/nonexistent/aiter", "mi355x", "bf16")
    with pytest.raises(MoesymError, match="use one of bf16, fp8, fp8_block, fp4"):
        aiter.gemm_rows("/nonexistent/aiter", "mi355x", "int8")


# -------------------------------------------------------------------- kernel-model mechanisms
def test_split_k_fills_idle_cus():
    """16 output tiles on 256 CUs leave 240 idle: split K 16 ways (at most split_k_max). Each
    split runs K / s of the tile's MMAs and writes an FP32 partial: a 64 x 64 tile of
    K = 8192 in BF16 at a per-CU rate R = P / N_SM x eta runs 2 x 64 x 64 x 8192 / (s R)."""
    c = replace(DEFAULTS, split_k_max=16, tile_m_rows=64, tile_n_max_cols=64,
                tile_n_min_cols=64, tile_overhead_s=0.0, gemm_tensor_frac=1.0, mv_max_rows=0)
    assert int(split_k(16, 256, c)) == 16 and int(split_k(64, 256, replace(c, split_k_max=3))) == 3
    peak, sms = 2516.6e12, 256
    m, n, k = 64, 1024, 8192  # 1 x 16 tiles of 64 x 64
    t = gemm_time(m, n, k, sms=sms, peak_flops=peak, hbm_bw_Bps=8e12, calib=c, op_bytes=2)
    assert float(t.compute_s) == pytest.approx(2 * 64 * 64 * 8192 / 16 / (peak / sms))
    no = gemm_time(m, n, k, sms=sms, peak_flops=peak, hbm_bw_Bps=8e12,
                   calib=replace(c, split_k_max=0), op_bytes=2)
    assert float(no.compute_s) == pytest.approx(16 * float(t.compute_s))
    # the partials: 15 further FP32 copies of the 64 x 1024 output, read with the operands
    nbytes = (m * k + n * k) * 2 + m * n * 2 + 15 * m * n * 4
    assert float(t.memory_s) >= nbytes / (8e12 * c.gemm_hbm_frac) * (1 - 1e-12)


def test_small_m_block_of_amd_gemms():
    """aiter's tuned GEMMs tile M by 16 at few rows (a8w8_blockscale_..._256x16x64x256_...): a
    16-row GEMM streams 16 + N-tile rows of K per CU, not 64 + N-tile."""
    base = replace(DEFAULTS, tile_overhead_s=0.0, mv_max_rows=0, sm_bandwidth_Bps=50e9,
                   tile_n_min_cols=64, tile_n_max_cols=64)
    kw = {"sms": 256, "peak_flops": 5033.2e12, "hbm_bw_Bps": 8e12, "op_bytes": 1}
    t64 = gemm_time(16, 2048, 7168, calib=base, **kw)
    t16 = gemm_time(16, 2048, 7168, calib=replace(base, tile_m_min_rows=16), **kw)
    # one wave of 32 tiles: (tile_m + 64) x 7168 B + tile_m x 64 x 2 B per CU at 50 GB/s
    per_cu = lambda tm: ((tm + 64) * 7168 + tm * 64 * 2) / 50e9  # noqa: E731
    assert float(t64.memory_s) == pytest.approx(per_cu(64))
    assert float(t16.memory_s) == pytest.approx(per_cu(16))


def test_grouped_tile_overhead_is_the_moe_kernels_own():
    c = replace(DEFAULTS, tile_overhead_s=2e-6, grouped_tile_overhead_s=0.5e-6, mv_max_rows=0)
    kw = {"sms": 256, "peak_flops": 1e30, "hbm_bw_Bps": 1e30, "calib": c}
    dense = gemm_time(64, 128, 256, **kw)
    grouped = gemm_time(64, 128, 256, groups=1, layout="contiguous", **kw)
    # one tile, compute time = its fixed time at an infinite rate
    assert float(dense.compute_s) == pytest.approx(2e-6)
    assert float(grouped.compute_s) == pytest.approx(0.5e-6)


# ---------------------------------------------------------------- per-format calibration
def _two_format_file(tmp_path):
    text = _hw_text("mi355x")
    head = text[:text.index("# kernel model calibration")]
    p = tmp_path / "amd.toml"
    p.write_text(head + """[kernel]
gemm_tensor_frac = 0.3
source = "test"

[kernel.dtypes.bf16]
gemm_tensor_frac = 0.6
""")
    return load_hardware(p)


def test_each_weight_class_takes_its_formats_calibration(tmp_path):
    """A GEMM weight class bound to the BF16 peak is timed by [kernel.dtypes.bf16], one bound
    to the FP8 peak by [kernel]."""
    hw = _two_format_file(tmp_path)
    assert kernel_calib(hw, "bf16").gemm_tensor_frac == 0.6
    assert kernel_calib(hw, "fp8").gemm_tensor_frac == kernel_calib(hw).gemm_tensor_frac == 0.3
    kt = KernelTiming.from_hardware(hw).bind(
        lambda: ({S.flops_gemm: hw.peak_flops("bf16"), S.flops_moe: hw.peak_flops("fp8"),
                  S.flops_dense: hw.peak_flops("fp8")}, {}))
    cost = Cost("g", KernelClass.GEMM, flops=2 * 8192 ** 3, shape=GemmShape(8192, 8192, 8192))
    assert kt.calib_of(cost).gemm_tensor_frac == 0.6
    assert kt.calib_of(cost.as_component("moe")).gemm_tensor_frac == 0.3
    # an NVIDIA file has no format tables: binding changes nothing
    h200 = KernelTiming.from_hardware(_hw("h200"))
    assert h200.formats == () and h200.bind(lambda: ({}, {})) is h200


def test_unknown_format_table_is_refused(tmp_path):
    text = _hw_text("mi355x") + "\n[kernel.dtypes.fp6]\ngemm_tensor_frac = 0.5\n"
    p = tmp_path / "x.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=r"\[kernel.dtypes.fp6\]: not a tensor-core format"):
        kernel_calib(load_hardware(p))


# ----------------------------------------------------------- committed fits and the commands
def test_list_hardware_names_each_amd_calibration(capsys):
    """CONTRACT item 24: mi300x, mi325x, mi355x listed, fitted on aiter's tables or transferred
    by a named rule."""
    assert main(["list", "hardware", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["hardware"]}
    for name in ("mi300x", "mi355x"):
        assert rows[name]["calibration"] == "fitted" and "aiter" in rows[name]["source"]
    for name, source in (("mi325x", "mi300x"), ("mi350x", "mi355x")):
        assert rows[name]["calibration"] == "transferred" and source in rows[name]["source"]


def test_transferred_attention_is_named_in_a_warning():
    with pytest.warns(UserWarning, match="attention NOT FITTED"):
        kernel_calib(load_hardware("mi355x"))
    with pytest.warns(UserWarning, match="transferred from mi300x"):
        kernel_calib(load_hardware("mi325x"))


# measured rows of aiter's tuned tables (microseconds), as the commands time them
MEASURED = [
    # model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv:4039
    # gfx950,256,4096,7168,2048,ck,0,0,120.1982,a8w8_blockscale_1x128x128_256x128x128x128_...
    ("mi355x", "fp8", 4096, 7168, 2048, 120.1982),
    # model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_235b.csv:185
    # gfx942,304,16384,1280,4096,ck,0,0,230.969,a8w8_blockscale_1x128x128_256x128x128x128_...
    ("mi300x", "fp8", 16384, 1280, 4096, 230.969),
]


@pytest.mark.parametrize("gpu, dtype, m, n, k, us", MEASURED)
def test_kernel_gemm_times_amd_gemms(capsys, gpu, dtype, m, n, k, us):
    """CONTRACT item 24: ``moesym kernel gemm --hardware mi355x --dtype fp8`` times an FP8
    block-scale GEMM within 20% of the tuned kernel aiter measured."""
    assert main(["kernel", "gemm", "--hardware", gpu, "--dtype", dtype, "--m", str(m),
                 "--n", str(n), "--k", str(k), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_s"] == pytest.approx(us * 1e-6, rel=0.2)


def test_kernel_gemm_bf16_on_mi355x(capsys):
    assert main(["kernel", "gemm", "--hardware", "mi355x", "--dtype", "bf16", "--m", "128",
                 "--n", "7168", "--k", "2048", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] > 0


def test_heldout_rows_of_every_amd_gpu():
    from moesym.report.validation import kernel_heldout

    doc = kernel_heldout()
    rows = doc["amd_rows"]
    assert {r["gpu"] for r in rows} == {"mi300x", "mi325x", "mi355x"}
    for r in rows:
        assert "aiter" in r["source"] and r["rows_held_out"] > 0
        assert 0 <= r["median"] <= r["p90"]
    # every format MI355X's file holds has its GEMM class measured and its calibration named
    held = {r["backend"]: r for r in rows if r["gpu"] == "mi355x" and r["class"] == "gemm"}
    assert held["fp8_block"]["calibration"] == "[kernel]"
    assert held["bf16"]["calibration"] == "[kernel.dtypes.bf16]"
    assert held["fp4"]["calibration"] == "[kernel.dtypes.fp4]"


# -- the engines' custom all-reduce ---------------------------------------------------------------
def _tp_allreduce_s(hw_name: str, tp: int, tokens: int) -> float:
    """One all-reduce of a decode step of ``tokens`` on TP ``tp`` (EP 1): the layer's TP
    communication is two, after attention and after the MoE (seconds)."""
    import moesym as ms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ms.predict("deepseek-v3", hw_name, ms.Deployment(gpus=tp, tp=tp, ep=1, weights="fp8"),
                       ms.Workload("decode", batch=tokens, context=1024))
    return r["per_layer_s"]["tp_comm"] / 2


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_rocm_custom_allreduce_reads_peers_over_the_groups_links(tp):
    """A one-shot all-reduce of M bytes among p GPUs: every GPU reads the other p - 1 buffers,
    one per direct link, so on a switchless node it takes fixed + M / (one link's rate):
    fixed + (p - 1) M / (one-shot rate x (p - 1) / 7). 4 tokens of DeepSeek-V3 in BF16 are
    57 KiB, under every group size's one-shot limit."""
    hw = load_hardware("mi355x")
    car = hw.allreduce
    m = 4 * 7168 * 2
    want = car.fixed_s + m / (car.oneshot_Bps / 7)
    assert _tp_allreduce_s("mi355x", tp, 4) == pytest.approx(want, rel=1e-9)
    assert car.source.startswith("transferred")


def test_a_tp_group_across_nvl72_trays_runs_the_custom_allreduce():
    """On a GB200 NVL72 rack the NVLink domain is 72 GPUs over trays of 4: TP 8 spans two trays
    and still runs the engine's custom all-reduce (fixed + (p - 1) M / one-shot rate for a
    small message), not NCCL's ring (2 (p - 1) x 3 us of latency alone)."""
    hw = load_hardware("gb200")
    car = hw.allreduce
    m = 4 * 7168 * 2
    assert _tp_allreduce_s("gb200", 8, 4) == pytest.approx(car.fixed_s + 7 * m / car.oneshot_Bps,
                                                            rel=1e-9)
    assert _tp_allreduce_s("gb200", 8, 4) < 2 * 7 * hw.latency.scale_up_s
