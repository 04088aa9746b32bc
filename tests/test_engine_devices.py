"""Which engines run on which devices: every built-in engine profile names the device makers it
runs on (``runs_on``, read in each engine's own packaging: SGLang 0.5.23's CUDA/ROCm checks and
Apple back ends, vLLM 0.33.0's platform modules, llama.cpp's ggml back ends, mlx-lm 0.32.2's CUDA
extras, ttnn's Tenstorrent SoC descriptors, TensorRT-LLM CUDA only), every hardware file its
maker (``vendor``), and an engine that does not run on the device is one line, exit 2, naming
the engines that do. Without ``--engine`` the CLI times the engine people run on the device:
llama.cpp on Apple silicon and Ryzen AI Max, tt-metal on Tenstorrent, SGLang elsewhere."""

from __future__ import annotations

import io
import json
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from moesym import engines, load_hardware
from moesym.cli import main
from moesym.engines import builtin_engines, default_engine, load_engine, runs_on
from moesym.errors import SpecError
from moesym.io.resources import data_dir
from moesym.specs.hardware import VENDORS, builtin_hardware

# written from each engine's packaging (see the module docstring), not from builtin.toml
RUNS_ON = {"sglang": {"nvidia", "amd", "apple"}, "sglang-0.5.9": {"nvidia", "amd", "apple"},
           "vllm": {"nvidia", "amd"}, "trtllm": {"nvidia"},
           # NVIDIA's Dynamo (CUDA images); SGLang with AMD's MoRI and AMD's ATOM: ROCm only
           "dynamo-trt": {"nvidia"}, "dynamo-sglang": {"nvidia"}, "mori-sglang": {"amd"},
           "atom": {"amd"}, "llama.cpp": {"nvidia", "amd", "apple"},
           "mlx": {"apple", "nvidia"}, "tt-metal": {"tenstorrent"}}
MAKER = {"m2-max": "apple", "m2-ultra": "apple", "m3-max": "apple", "m4-max": "apple",
         "mi300x": "amd", "mi325x": "amd", "mi350x": "amd", "mi355x": "amd",
         "ryzen-ai-max-395": "amd", "blackhole-p150": "tenstorrent",
         "wormhole-n300": "tenstorrent", "wormhole-tg": "tenstorrent"}  # others: NVIDIA
BASE = ["predict", "qwen3-30b-a3b", "--phase", "decode", "--batch", "1", "--context", "512"]


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main([*argv])
    return rc, out.getvalue(), err.getvalue()


def test_engines_run_where_their_packaging_says():
    assert {n: set(load_engine(n).runs_on) for n in builtin_engines()} == RUNS_ON


@pytest.mark.parametrize("name", builtin_hardware())
def test_every_device_names_its_maker_and_its_default_runs_there(name):
    hw = load_hardware(name)
    assert hw.vendor == MAKER.get(name, "nvidia")
    assert runs_on(load_engine(default_engine(hw)), hw)


@pytest.mark.parametrize("hw,engine", [(h, e) for h in ("h200", "mi300x", "m2-ultra", "blackhole-p150")
                                       for e in RUNS_ON if MAKER.get(h, "nvidia") not in RUNS_ON[e]])
def test_an_engine_off_its_devices_is_one_line(hw, engine):
    rc, out, err = _run(*BASE, "--hardware", hw, "--engine", engine)
    lines = [x for x in err.strip().splitlines() if "error" in x]
    assert rc == 2 and out == "" and len(lines) == 1
    assert f"--engine {engine}" in lines[0] and VENDORS[MAKER.get(hw, "nvidia")] in lines[0]
    maker = MAKER.get(hw, "nvidia")
    for other in (e for e in RUNS_ON if maker in RUNS_ON[e]):
        assert other in lines[0].split("use --engine", 1)[1]


@pytest.mark.parametrize("hw,expected", [("m2-ultra", "llama.cpp"), ("blackhole-p150", "tt-metal"),
                                         ("h200", "sglang")])
def test_without_engine_the_cli_times_the_devices_engine(hw, expected):
    rc, default, _ = _run(*BASE, "--hardware", hw, "--json")
    rc2, named, _ = _run(*BASE, "--hardware", hw, "--engine", expected, "--json")
    assert rc == rc2 == 0 and json.loads(default) == json.loads(named)


def test_python_deployment_off_its_device_names_the_fix():
    import moesym as ms

    with pytest.raises(SpecError, match="tt-metal"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms.predict("qwen3-30b-a3b", "blackhole-p150", ms.Deployment(),
                       ms.Workload("decode", batch=1, context=512))


def test_bad_vendor_and_runs_on_are_one_line(tmp_path):
    text = (data_dir("hardware") / "h200.toml").read_text()
    f = tmp_path / "x.toml"
    f.write_text(text.replace('vendor = "nvidia"', 'vendor = "intel"'))
    rc, _, err = _run(*BASE, "--hardware", str(f))
    assert rc == 2 and "vendor 'intel'" in err and "nvidia" in err
    g = tmp_path / "eng.toml"
    builtin = Path(engines.__file__).with_name("builtin.toml").read_text()
    g.write_text(builtin.split("[vllm]")[0].replace('runs_on = ["nvidia", "amd", "apple"]',
                                                    'runs_on = ["cerebras"]'))
    with pytest.raises(SpecError, match="runs_on"):
        load_engine(str(g))


def test_list_engines_says_where_each_runs_and_where_it_is_the_default():
    rc, out, _ = _run("list", "engines", "--json")
    rows = {r["name"]: r for r in json.loads(out)["engines"]}
    assert rc == 0 and list(rows) == list(RUNS_ON)
    for name, makers in RUNS_ON.items():
        assert set(rows[name]["runs_on"]) == {VENDORS[m] for m in makers}
    assert {"m2-ultra", "ryzen-ai-max-395"} <= set(rows["llama.cpp"]["default_on"])
    assert set(rows["tt-metal"]["default_on"]) == {h for h, m in MAKER.items() if m == "tenstorrent"}
    assert "h200" in rows["sglang"]["default_on"] and not rows["trtllm"]["default_on"]
