"""Engine x weight format x device from one table (issue 51): predict, simulate, optimize and
--emit refuse the same pairs with the same line; a GGUF format without --engine is timed as
llama.cpp runs it on every device, an MLX format as MLX, each with a one-line note."""

from __future__ import annotations

import io
import warnings
from contextlib import redirect_stderr, redirect_stdout

import pytest

from moesym.cli import main
from moesym.engines.emit import ENGINES

HW = "rtx-4090"  # CUDA: every engine but MLX's Apple build runs here
FORMATS = ("q4_k_m", "q8_0", "mlx-4bit", "fp8", "bf16", "awq")
# what each engine loads, written out from the engines' documentation: llama.cpp GGUF files
# (and F16/BF16), MLX its own quantization (and BF16), the serving engines HuggingFace
# checkpoints (not GGUF, not MLX)
LOADS = {"sglang": {"fp8", "bf16", "awq"}, "vllm": {"fp8", "bf16", "awq"},
         "trtllm": {"fp8", "bf16", "awq"}, "llama.cpp": {"q4_k_m", "q8_0", "bf16"},
         "mlx": {"mlx-4bit", "bf16"}}


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


PAIRS = [(e, f) for e in ENGINES for f in FORMATS]
REFUSED = [(e, f) for e, f in PAIRS if f not in LOADS[e]]


def test_seven_serving_pairs_and_more_refused():
    # 3 serving engines x (2 GGUF + 1 MLX) + llama.cpp (fp8, mlx, awq) + MLX (GGUF x 2, fp8, awq)
    assert len(REFUSED) == 9 + 3 + 4


@pytest.mark.parametrize("engine, fmt", REFUSED)
def test_predict_and_emit_refuse_alike(engine, fmt):
    base = ["predict", "qwen3-8b", "--hardware", HW, "--phase", "decode", "--batch", "1",
            "--context", "512", "--weights", fmt]
    rc, out, err = _run(base + ["--engine", engine])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"--engine {engine}" in err and "Traceback" not in err
    # --emit of the same pair, with an engine that loads the format timing it
    timed = next(e for e in ENGINES if fmt in LOADS[e])
    rc2, _, err2 = _run(base + ["--engine", timed, "--emit", engine])
    assert rc2 == 2 and f"--emit {engine}" in err2, err2
    # the same reason, flag aside
    assert err.replace("--engine", "--emit") == err2


@pytest.mark.parametrize("cmd", [
    ["simulate", "qwen3-8b", "--hardware", HW, "--isl", "64", "--osl", "4", "--concurrency", "1",
     "--num-prompts", "1"],
    ["optimize", "qwen3-8b", "--hardware", HW, "--phase", "decode", "--context", "512"],
    ["sweep", "qwen3-8b", "--hardware", HW, "--phase", "decode", "--batch", "1", "--out",
     "{tmp}/s.csv"],
    ["report", "qwen3-8b", "--hardware", HW, "--phase", "decode", "--batch", "1", "--out",
     "{tmp}/r.html"],
])
def test_every_command_refuses_the_pair(cmd, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in cmd]
    rc, _, err = _run(argv + ["--weights", "q4_k_m", "--engine", "trtllm"])
    assert rc == 2 and "--engine trtllm: --weights q4_k_m is a GGUF" in err, err


@pytest.mark.parametrize("hw, fmt, engine, note", [
    ("rtx-4090", "q4_k_m", "llama.cpp", True),
    ("h100", "Q8_0", "llama.cpp", True),
    ("mi300x", "q4_0", "llama.cpp", True),
    ("m2-ultra", "q4_0", "llama.cpp", False),  # the Mac's own default: nothing to say
    ("m4-max", "mlx-4bit", "mlx", True),
    ("h100", "fp8", "sglang", False),
])
def test_format_picks_its_engine(hw, fmt, engine, note, cli_json):
    argv = ["predict", "qwen3-8b", "--hardware", hw, "--phase", "decode", "--batch", "1",
            "--context", "512", "--weights", fmt]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        r = cli_json(argv)
    said = [str(w.message) for w in rec if "timed as" in str(w.message)]
    assert bool(said) == note, said
    if note:
        assert said[0].startswith(f"--weights {fmt} is ") and f"--engine {engine}" in said[0]
    rc, out, _ = _run(argv + ["--emit", engine]) if engine != "sglang" else (0, "", "")
    assert rc == 0
    assert r["step_time_s"] > 0


def test_gguf_on_a_cuda_gpu_is_timed_as_llama_cpp(cli_json):
    """Without --engine the GGUF run's step equals the one with --engine llama.cpp (not
    SGLang's int8 tensor-core GEMMs)."""
    base = ["predict", "llama-7b", "--hardware", "rtx-4090", "--weights", "q8_0", "--phase",
            "prefill", "--tokens", "512", "--context", "512"]
    default = cli_json(base)["step_time_s"]
    assert default == cli_json(base + ["--engine", "llama.cpp"])["step_time_s"]
    assert default != cli_json(base + ["--engine", "sglang", "--weights", "int8"])["step_time_s"]
