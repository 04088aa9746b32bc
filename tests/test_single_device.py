"""One device as the local engines run it (issue 35; issue 32 item 2's matrix-vector kernels).

- The open llama-bench table (llama.cpp on LLaMA 7B; PR #2917 for the M2 Ultra, PR #4766 for the
  RTX 4090): every pp512 and tg128 within 10% with the shipped hardware files and
  ``--engine llama.cpp``. The fit and its held-out errors (each row predicted from parameters
  fitted without it) are benchmarks/single_device_fit.py and its report.
- Matrix-vector kernels: a GEMM of a handful of rows is not padded to an M tile, on every kind
  of hardware that has them, and the padding returns above ``mv_max_rows``.
- A property: batch-1 decode is never faster than its weights and KV at the device's bandwidth
  plus its per-token host time.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from moesym.attention.counts import active_params
import moesym as ms
from moesym.engines.support import format_problem
from moesym.kernels.analytical import gemm_time
from moesym.specs.kernel_calib import DEFAULTS
from moesym.specs.precision import bytes_per_element
from moesym.report.validation import run_case, single_device_cases

# tokens/s as published (llama-bench, LLaMA 7B): (device, type) -> (pp512, tg128)
PUBLISHED = {
    ("m2-ultra", "Q8_0"): (629.07, 62.05),   # llama.cpp PR #2917, master column, 2023-08-30
    ("m2-ultra", "Q4_0"): (629.60, 88.54),
    ("m2-ultra", "Q4_1"): (631.94, 83.63),
    ("rtx-4090", "F16"): (11048.22, 61.03),  # llama.cpp PR #4766, 2024-01-10, codellama-7b
    ("rtx-4090", "Q8_0"): (7664.00, 98.13),
    ("rtx-4090", "Q4_0"): (7979.85, None),
}


def _key(case):
    return case.hardware, case.name.split("-")[-1]


@pytest.fixture(scope="module")
def results():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: (c, run_case(c)) for c in single_device_cases()}


def test_every_published_row_is_a_case(results):
    rows = {(_key(c), c.workload.phase.value): c.measured for c, _ in results.values()}
    for key, (pp, tg) in PUBLISHED.items():
        assert rows[(key, "prefill")] == pp
        assert rows.get((key, "decode")) == tg


def test_open_table_within_10_percent(results):
    for name, (case, r) in results.items():
        assert abs(r["modeled"] / case.measured - 1) < 0.10, (name, r["modeled"], case.measured)


def test_q4_0_is_faster_than_q8_0_by_less_than_its_bytes(results):
    """M2 Ultra tg128: Q4_0 reads 1.89x fewer bytes than Q8_0 (4.5 vs 8.5 bits per weight) but
    runs only 1.43x faster (88.54 / 62.05); the unpack time per weight makes the difference."""
    q8, q4 = (results[f"llama-7b-tg128-m2-ultra-{f}"][1]["modeled"] for f in ("Q8_0", "Q4_0"))
    assert bytes_per_element("q8_0") / bytes_per_element("q4_0") == pytest.approx(8.5 / 4.5)
    assert 1.3 < q4 / q8 < 1.55


# --- matrix-vector kernels ----------------------------------------------------------------

def test_a_few_rows_are_not_padded_to_the_m_tile():
    """At M <= 8 the kernel streams the weights once at the matrix-vector bandwidth: the time
    is bytes / (eta W), the same for 1 and 8 rows up to the activations' bytes; above 8 rows
    the M tile (64 rows) returns and the compute of a full tile with it."""
    c = replace(DEFAULTS, mv_hbm_frac=0.8)
    kw = dict(sms=132, peak_flops=1e13, hbm_bw_Bps=3e12, calib=c, op_bytes=2)  # slow tensor cores
    n = k = 4096
    one = gemm_time(1, n, k, **kw)
    weights = n * k * 2
    assert float(one.memory_s) == pytest.approx((weights + 1 * k * 2 + 1 * n * 2) / (0.8 * 3e12))
    assert float(one.compute_s) == pytest.approx(2 * n * k / 1e13)  # one row's FLOPs, no tile
    nine = gemm_time(9, n, k, **kw)
    # a 64-row tile: 64 rows' FLOPs at least, at the calibrated tensor fraction
    assert float(nine.compute_s) >= 2 * 64 * n * k / (1e13 * c.gemm_tensor_frac)


def test_tensix_tiles_have_no_matrix_vector_kernel():
    """Tenstorrent: one token is padded to a 32-row tile (mv_max_rows = 0 in the files)."""
    for name in ("wormhole-n300", "wormhole-tg", "blackhole-p150"):
        assert ms.load_hardware(name).kernel["mv_max_rows"] == 0


def test_engines_select_their_kernels():
    """--engine llama.cpp takes the device's llama.cpp values ([kernel.engines."llama.cpp"]):
    on the M2 Ultra a Q4_0 token unpacks its weights (slower than its bytes alone); the same
    device without that section times it with the generic [kernel] table. (No other engine
    loads a GGUF file: an engine given one is refused, tests/test_engines.py.)"""
    from moesym.specs.kernel_calib import ENGINES_KEY

    hw = ms.load_hardware("m2-ultra")
    generic = replace(hw, kernel={k: v for k, v in hw.kernel.items() if k != ENGINES_KEY})
    dep = ms.Deployment(weights="q4_0", engine="llama.cpp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wl = ms.Workload("decode", batch=1, context=64)
        local = ms.predict("llama-7b", hw, dep, wl)
        other = ms.predict("llama-7b", generic, dep, wl)
    assert local["step_time_s"] > 1.2 * other["step_time_s"]


# --- property: batch-1 decode against its bytes -------------------------------------------

LOCAL = ["m2-max", "m2-ultra", "m3-max", "m4-max", "rtx-4090", "rtx-5090", "dgx-spark",
         "ryzen-ai-max-395"]
MODELS = ["llama-7b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b"]  # full attention, GQA/MHA
# (format, engine) pairs the engine loads (any other pair is refused: tests/test_engines.py)
LOADED = [(f, e) for f in ("q4_0", "q4_k", "q8_0", "f16", "mlx-4bit")
          for e in ("llama.cpp", "mlx", "sglang") if format_problem(e, f) is None]


@pytest.mark.slow
@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(hw=st.sampled_from(LOCAL), name=st.sampled_from(MODELS),
       pair=st.sampled_from(LOADED), context=st.integers(1, 16384))
def test_batch1_decode_never_beats_its_bytes_plus_host_time(hw, name, pair, context):
    from moesym.engines import load_engine, runs_on

    fmt, engine = pair
    m, h = ms.load_model(name), ms.load_hardware(hw)
    assume(runs_on(load_engine(engine), h))  # an engine on a device it does not run on: refused
    # weights one token reads: every active weight but the embedding table (one row of it) in
    # the format, the LM head in bf16 (>= the format's bytes); KV of every layer at 2 bytes
    weights = (active_params(m) - m.vocab_size * m.hidden_size) * bytes_per_element(fmt)
    kv = m.num_layers * context * 2 * m.num_kv_heads * m.head_dim * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ms.predict(m, h, ms.Deployment(weights=fmt, engine=engine),
                       ms.Workload("decode", batch=1, context=context))
    assert r["step_time_s"] >= (weights + kv) / h.hbm_bw_Bps + h.latency.step_s


def test_grouped_expert_gemms_pad_unless_the_engine_runs_matrix_vector_kernels():
    """One token's 8 experts (8 groups of 1 row): DeepGEMM-style kernels pad each expert to the
    M block; llama.cpp's mul_mat_id (mv_grouped = 1) reads each expert's weights once."""
    kw = dict(sms=132, peak_flops=1e13, hbm_bw_Bps=3e12, op_bytes=1, groups=8, layout="contiguous")
    padded = gemm_time(1, 2048, 4096, calib=DEFAULTS, **kw)
    mv = gemm_time(1, 2048, 4096, calib=replace(DEFAULTS, mv_grouped=1), **kw)
    assert float(mv.compute_s) == pytest.approx(8 * 2 * 2048 * 4096 / 1e13)
    assert float(padded.compute_s) > 64 * float(mv.compute_s) * 0.9


def test_bad_engine_kernel_table_is_one_line(tmp_path):
    from moesym.errors import SpecError

    from moesym.io.resources import data_dir

    text = (data_dir("hardware") / "m2-ultra.toml").read_text()
    f = tmp_path / "m.toml"
    f.write_text(text.replace('[kernel.engines.mlx]', '[kernel.engines.mlx]\nmv_rows = 3', 1))
    with pytest.raises(SpecError) as e:
        ms.predict("llama-7b", str(f), ms.Deployment(engine="mlx"),
                   ms.Workload("decode", batch=1, context=64))
    assert "mv_rows" in str(e.value) and "\n" not in str(e.value)
