"""Decode steps replayed as CUDA graphs, or launched eagerly (``--eager``, ``cuda_graphs``).

An engine that replays its decode step as a CUDA graph pays the graph's per-kernel floor for
each elementwise kernel (``[latency_us] graph_kernel``, measured on H200:
benchmarks/gpu_small_batch.md); an eager step pays the kernel model's host-launch floor
(``elementwise_launch_s`` of the GPU's ``[kernel]``). Everything else is the same model, so the
step time is linear in the per-kernel floor with the step's elementwise launch count as slope.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from moesym.cli import main
from moesym.engines import load_engine
from moesym.errors import SpecError
from moesym.specs.kernel_calib import kernel_calib
from moesym.model.predictor import predict
from moesym.model.step import build_step
from moesym.report.validation import single_device_cases
from moesym.serving.engine import scheduler_config
from moesym.specs.deployment import Deployment, Phase, Workload
from moesym.specs.hardware import load_hardware
from moesym.readers.model import load_model

MODEL = "qwen3-30b-a3b"
DECODE = Workload(Phase.DECODE, batch=1, context=512)


def _step_s(hw, dep, wl=DECODE) -> float:
    return predict(load_model(MODEL), hw, dep, wl, memory=False)["step_time_s"]


def _gpu_s(hw, dep, wl=DECODE) -> float:
    step = build_step(load_model(MODEL), hw, dep, wl)
    return float(step.evaluate(step.gpu_s))


@pytest.mark.parametrize("hw_name, engine, weights", [
    ("rtx-4090", "llama.cpp", "q4_0"), ("h200", "sglang", "bf16")])
def test_eager_step_is_the_graph_step_at_the_host_launch_floor(hw_name, engine, weights):
    """Two graph floors give the step's elementwise launch count n (the slope); the eager step
    must then be the graph step plus n x (host launch floor - graph floor)."""
    hw = load_hardware(hw_name)
    dep = Deployment(weights=weights, engine=engine)
    f1, f2 = 1.5e-6, 3.5e-6
    t1 = _step_s(replace(hw, latency=replace(hw.latency, graph_kernel_s=f1)), dep)
    t2 = _step_s(replace(hw, latency=replace(hw.latency, graph_kernel_s=f2)), dep)
    n = (t2 - t1) / (f2 - f1)
    assert n > 48  # at least one elementwise kernel per layer (48 layers)
    eager = replace(dep, cuda_graphs=False)
    gpu = _gpu_s(hw, eager)  # the GPU's side of the eager step
    launch = kernel_calib(hw).elementwise_launch_s
    assert launch > hw.latency.graph_kernel_s
    assert gpu == pytest.approx(_gpu_s(hw, dep) + n * (launch - hw.latency.graph_kernel_s),
                                rel=1e-9)
    # the host launches every kernel too: the step is never shorter than the GPU's side
    assert _step_s(hw, eager) >= gpu * (1 - 1e-12)


def test_eager_prefill_is_launched_by_the_host_with_or_without_decode_graphs():
    """SGLang 0.5.9 prefills eagerly either way (its graphs are decode graphs); SGLang 0.5.23
    replays prefill graphs unless the server runs without CUDA graphs, when its short prefill
    is the host's launches."""
    hw = load_hardware("h200")
    wl = Workload(Phase.PREFILL, tokens=256, context=256)
    old = Deployment(engine="sglang-0.5.9")
    assert _step_s(hw, old, wl) == _step_s(hw, replace(old, cuda_graphs=False), wl)
    assert _step_s(hw, Deployment(cuda_graphs=False), wl) > 2 * _step_s(hw, Deployment(), wl)


def test_eager_pads_no_decode_batch():
    """Graph padding (a decode batch replayed at the next captured size) needs graphs."""
    model, hw, sglang = load_model(MODEL), load_hardware("h200"), load_engine("sglang")
    on = scheduler_config(sglang, model, hw, Deployment(), mean_len=1024, max_len=1024)
    off = scheduler_config(sglang, model, hw, Deployment(cuda_graphs=False), mean_len=1024,
                           max_len=1024)
    assert on.graph_sizes and off.graph_sizes == ()


def test_the_open_llama_bench_rows_ran_without_graphs():
    """The llama.cpp builds that measured the open table (2023-08, 2024-01) predate its CUDA
    graphs: the cases time them eagerly."""
    cases = single_device_cases()
    assert cases and all(not c.deployment.cuda_graphs for c in cases)


def test_bad_value_names_the_field():
    with pytest.raises(SpecError, match="`cuda_graphs` must be true or false"):
        Deployment(cuda_graphs="no")


def _launch(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["launch"]


@pytest.mark.parametrize("engine, word", [("sglang", "--disable-decode-cuda-graph"),
                                          ("vllm", "--enforce-eager")])
def test_emit_turns_the_graphs_off(capsys, engine, word):
    argv = ["predict", MODEL, "--hardware", "h100", "--phase", "decode", "--batch", "600",
            "--engine", engine, "--emit", engine]
    eager = shlex.split(_launch(capsys, *argv, "--eager")["command"])
    assert word in eager
    # no capture size is raised for a batch that runs without graphs
    assert not {"--cuda-graph-max-bs-decode", "--max-cudagraph-capture-size"} & set(eager)
    assert word not in shlex.split(_launch(capsys, *argv)["command"])


def test_emit_llamacpp_sets_its_environment_variable(capsys):
    c = _launch(capsys, "predict", MODEL, "--hardware", "rtx-4090", "--phase", "decode",
                "--weights", "q4_0", "--engine", "llama.cpp", "--emit", "llama.cpp", "--eager")
    for line in (c["command"], c["bench"]):
        assert shlex.split(line)[0] == "GGML_CUDA_DISABLE_GRAPHS=1"


def test_emit_trtllm_says_it_in_a_note(capsys):
    c = _launch(capsys, "predict", MODEL, "--hardware", "h100", "--phase", "decode",
                "--engine", "trtllm", "--emit", "trtllm", "--eager")
    assert any("cuda_graph_config: null" in n for n in c["notes"])
