"""Command-line contract: JSON keys, one-line errors for bad input, run outside the repository."""

import json
import subprocess
import sys

import pytest

from moesym.cli import main

PREDICT = ["predict", "deepseek-v3", "--hardware", "h800", "--phase", "decode", "--batch", "128",
           "--context", "4989", "--gpus", "128", "--ep", "128", "--weights", "fp8",
           "--micro-batches", "2", "--json"]


def test_predict_contract_keys_from_outside_the_repo(tmp_path):
    out = subprocess.run([sys.executable, "-m", "moesym.cli", *PREDICT], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    for k in ("step_time_s", "tokens_per_gpu_s", "tpot_s", "bound", "per_layer_s", "fits"):
        assert k in r
    for k in ("attention_core", "attention_proj", "moe_routed", "moe_weight_load", "shared_expert",
              "dispatch", "combine", "tp_comm", "other"):
        assert k in r["per_layer_s"]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and "moesym" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["predict", "nope", "--hardware", "h800", "--phase", "decode"], "unknown model"),
    (["predict", "qwen3-8b", "--hardware", "tpu", "--phase", "decode"], "unknown hardware"),
    (["predict", "qwen3-8b", "--hardware", "h100", "--phase", "decode", "--gpus", "8",
      "--tp", "3"], "--tp 3"),
    (["predict", "deepseek-v3", "--hardware", "h800", "--phase", "decode", "--gpus", "24"],
     "--ep 24"),
    (["predict", "qwen3-8b", "--hardware", "h100", "--phase", "decode", "--batch", "0"], "--batch"),
    (["routing", "--experts", "256", "--topk", "8", "--tokens", "16", "--ep", "3"], "--ep 3"),
    (["sweep", "qwen3-8b", "--hardware", "h100", "--phase", "decode", "--batch", "x",
      "--out", "o.csv"], "--batch"),
    (["derive", "crossover", "qwen3-8b", "--hardware", "h100"], "dense"),
])
def test_bad_input_one_line(argv, words, capsys):
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err
