"""Files and configs answered honestly (issue 51): a file that is not UTF-8, a folder, or
malformed is named in one line with its path and what is wrong (exit 2); a HuggingFace config
that contradicts itself or names sizes no model has is refused naming the field; a hardware
file whose [kernel] holds only an engine's values says it falls back to the defaults."""

from __future__ import annotations

import io
import json
import re
import warnings
from contextlib import redirect_stderr, redirect_stdout

import pytest

from moesym.cli import main
from moesym.io.resources import data_dir

DEC = ["--phase", "decode", "--batch", "1", "--context", "512"]
BAD = b'name = "x"\n\xff\xfe not utf-8\n'

# a Qwen3-MoE config as its model card gives it (Qwen/Qwen3-30B-A3B config.json, trimmed)
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "vocab_size": 151936, "intermediate_size": 6144, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
             "mlp_only_layers": [], "max_position_embeddings": 40960,
             "tie_word_embeddings": False}


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _one_line_error(argv, *needles):
    rc, out, err = _run(argv)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("moesym: error:") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[-1], (n, lines[-1])
    return lines[-1]


@pytest.mark.parametrize("make, argv", [
    ("hw.toml", ["predict", "qwen3-8b", "--hardware", "{f}", *DEC]),
    ("config.json", ["predict", "{f}", "--hardware", "h100", *DEC]),
    ("engine.toml", ["predict", "qwen3-8b", "--hardware", "h100", "--engine", "{f}", *DEC]),
    ("model.toml", ["predict", "{f}", "--hardware", "h100", *DEC]),
    ("lengths.txt", ["simulate", "qwen3-8b", "--hardware", "h100", "--isl-dist", "{f}",
                     "--osl", "4", "--concurrency", "1", "--num-prompts", "1"]),
    ("pairs.csv", ["simulate", "qwen3-8b", "--hardware", "h100", "--lengths-file", "{f}",
                   "--concurrency", "1", "--num-prompts", "1"]),
    ("ctx.txt", ["predict", "qwen3-8b", "--hardware", "h100", "--phase", "decode",
                 "--context-dist", "{f}"]),
    ("freq.csv", ["predict", "qwen3-30b-a3b", "--hardware", "h100", *DEC, "--routing",
                  "freq:{f}"]),
    ("cases.json", ["validate", "--cases", "{f}"]),
    ("sched.toml", ["predict", "qwen3-8b", "--hardware", "h100", *DEC, "--overlap", "{f}"]),
])
def test_a_file_that_is_not_utf8_is_named(make, argv, tmp_path):
    f = tmp_path / make
    f.write_bytes(BAD)
    line = _one_line_error([a.replace("{f}", str(f)) for a in argv], str(f), "not UTF-8")
    assert "0xff" in line


def test_a_folder_named_as_a_file(tmp_path):
    d = tmp_path / "gpu.toml"
    d.mkdir()
    _one_line_error(["predict", "qwen3-8b", "--hardware", str(d), *DEC], str(d), "folder")


def _config(tmp_path, **change) -> str:
    cfg = {**QWEN3_MOE, **change}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_the_unchanged_config_runs(tmp_path, cli_json):
    r = cli_json(["predict", _config(tmp_path), "--hardware", "h100", *DEC])
    assert r["per_layer_s"]["moe_routed"] > 0


@pytest.mark.parametrize("change, field", [
    ({"decoder_sparse_step": 100}, "decoder_sparse_step"),    # beyond 48 layers: no MoE layer
    ({"mlp_only_layers": list(range(48))}, "mlp_only_layers"),
    ({"mlp_only_layers": [60]}, "mlp_only_layers"),
    ({"head_dim": 7}, "head_dim"),
    ({"head_dim": 4096}, "head_dim"),
    ({"max_position_embeddings": 0}, "max_position_embeddings"),
    ({"max_position_embeddings": -5}, "max_position_embeddings"),
    ({"num_hidden_layers": 1e18}, "num_layers"),
    ({"hidden_size": 1e12}, "hidden_size"),
    ({"num_experts": 10**9}, "num_experts"),
    ({"vocab_size": 10**12}, "vocab_size"),
])
def test_inconsistent_or_absurd_configs_refused(change, field, tmp_path):
    _one_line_error(["predict", _config(tmp_path, **change), "--hardware", "h100", *DEC], field)


def test_head_dim_not_a_multiple_of_8_is_said(tmp_path, cli_json):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        cli_json(["predict", _config(tmp_path, head_dim=100), "--hardware", "h100", *DEC])
    assert any("head_dim 100 is not a multiple of 8" in str(w.message) for w in rec)


def test_kernel_table_with_only_an_engine_subsection_warns(tmp_path):
    """H100's file with its [kernel] values removed but its [kernel.engines.trtllm] kept: the
    default calibration fills in, and a warning says so."""
    text = (data_dir("hardware") / "h100.toml").read_text(encoding="utf-8")
    # drop the [kernel] table's own lines (up to the next table header)
    text = re.sub(r"(?ms)^\[kernel\][^\n]*\n(?:(?!\[).*?\n)*", "", text)
    assert not re.search(r"(?m)^\[kernel\]", text) and "[kernel.engines.trtllm]" in text
    f = tmp_path / "gpu.toml"
    f.write_text(text)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rc, out, err = _run(["predict", "qwen3-8b", "--hardware", str(f), *DEC])
    assert rc == 0, err
    said = [str(w.message) for w in rec if "holds only [kernel.engines.*]" in str(w.message)]
    assert said and "default kernel calibration" in said[0]
