"""Grid sweeps time every point as ``moesym predict`` does: one model per (GPUs, EP), the
prefill chunk of each point, and the KV of every prompt in the memory fit."""

import pytest

import moesym as ms
from moesym.sweep import sweep_frame


def _predict(model, hw, phase, gpus, ep, size, context):
    from moesym.memory import memory_model
    from moesym.symbols import S

    wl = (ms.Workload("decode", batch=size, context=context) if phase == "decode"
          else ms.Workload("prefill", tokens=size, context=context))
    m, h, dep = ms.load_model(model), ms.load_hardware(hw), ms.Deployment(gpus=gpus, ep=ep)
    r = ms.build_step(m, h, dep, wl).predict()
    mm = memory_model(m, h, dep, wl)
    r["memory_bytes"] = mm.number(mm.used_expr())
    r["fits"] = r["memory_bytes"] <= mm.values[S.hbm_capacity]
    return r


@pytest.mark.parametrize("phase,sizes", [("decode", [8, 64]), ("prefill", [1024, 4096, 16384])])
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
