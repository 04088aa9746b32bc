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
    (["predict", "deepseek-v3", "--hardware", "h800", "--phase", "decode", "--gpus", "24",
      "--redundant-experts", "4"], "--gpus 24 gives EP 24"),
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


def test_list_shows_every_gpu_with_its_calibration_state(capsys):
    import json

    from moesym.specs.hardware import builtin_hardware
    from moesym.readers.model import builtin_models

    assert main(["list", "hardware", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["hardware"]}
    assert set(rows) == set(builtin_hardware())
    # h800 and h20 carry [kernel] tables fitted on InferSim's kernels, the NVIDIA GPUs of
    # issue 32 on AIConfigurator's; the others (gh200, ...) the h800 fit
    fitted = ("h800", "h20", "h100", "h200", "b200", "b300", "gb200", "gb300", "a100")
    assert all(rows[g]["kernel_calibration"] == rows[g]["calibration"] == "fitted" for g in fitted)
    assert rows["gh200"]["calibration"] == "transferred" and rows["gh200"]["kernel_error"] is None
    # contract item 17: source and held-out error per kernel class of every fitted GPU
    for g in fitted:
        assert rows[g]["source"] and rows[g]["engine"] and rows[g]["fit_date"]
        err = rows[g]["kernel_error"]
        assert "gemm" in err and "attention" in err and all(0 < v < 1 for v in err.values())
    assert "AIConfigurator" in rows["h200"]["source"] and "TensorRT-LLM" in rows["h200"]["engine"]
    assert rows["h20"]["serving_efficiency"] < 1
    assert main(["list", "models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    assert {m["name"] for m in models} == set(builtin_models())
    assert all(m["source"] for m in models)


def test_transferred_calibration_is_said_in_one_line():
    r = subprocess.run([sys.executable, "-m", "moesym", "predict", "qwen3-8b", "--hardware", "gh200",
                        "--phase", "decode", "--no-cache"], capture_output=True, text=True)
    assert r.returncode == 0
    err = [ln for ln in r.stderr.splitlines() if "transferred" in ln]
    assert len(err) == 1 and err[0].startswith("moesym: warning: hardware gh200")


@pytest.mark.parametrize("gpu", ["h200"] + [pytest.param(g, marks=pytest.mark.slow) for g in
                                            ("h100", "b200", "b300", "gb200", "gb300", "a100")])
def test_fitted_gpus_predict_without_the_transferred_warning(gpu):
    r = subprocess.run([sys.executable, "-m", "moesym", "predict", "qwen3-8b", "--hardware", gpu,
                        "--phase", "decode", "--no-cache"], capture_output=True, text=True)
    assert r.returncode == 0 and "transferred" not in r.stderr and "not measured" not in r.stderr


def test_a_config_is_named_from_the_config_not_its_folder(tmp_path, capsys):
    import json

    folder = tmp_path / "checkpoint-17"
    folder.mkdir()
    cfg = {"model_type": "qwen3_moe", "_name_or_path": "Qwen/Qwen3-30B-A3B", "hidden_size": 2048,
           "vocab_size": 151936, "num_hidden_layers": 48, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
           "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144}
    (folder / "config.json").write_text(json.dumps(cfg))
    assert main(["predict", str(folder), "--hardware", "h20", "--phase", "decode"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("Qwen3-30B-A3B on")
    del cfg["_name_or_path"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert main(["predict", str(folder), "--hardware", "h20", "--phase", "decode"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("qwen3_moe on")


def test_committed_cli_reference_matches_the_parsers():
    from pathlib import Path

    from moesym.cli.reference import reference_text

    committed = (Path(__file__).resolve().parent.parent / "CLI.md").read_text()
    assert committed == reference_text(), "CLI.md drifted: python -m moesym.cli.reference > CLI.md"


def test_status_lines_only_on_a_terminal(monkeypatch, capsys):
    # issue 21: long commands say what they are doing on stderr, a terminal only
    import io
    import sys

    from moesym.io.progress import status

    status("derive crossover: building")
    assert capsys.readouterr().err == ""  # pytest's stderr is not a terminal

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    status("derive crossover: building")
    status("hidden", enabled=False)  # --json
    assert fake.getvalue() == "moesym: derive crossover: building ...\n"


def test_node_size_defaults_to_the_hardware_file(cli_json):
    """gh200.toml's NVLink domain is one superchip: 8 of them talk over the NIC unless
    --gpus-per-node says otherwise (the flag's default of 8 used to put all 8 on NVLink)."""
    base = ["predict", "qwen3-30b-a3b", "--hardware", "gh200", "--gpus", "8", "--phase",
            "decode", "--batch", "64"]
    default, one, eight = (cli_json(base + x) for x in ([], ["--gpus-per-node", "1"],
                                                         ["--gpus-per-node", "8"]))
    assert default["step_time_s"] == one["step_time_s"]
    assert default["per_layer_s"]["dispatch"] > 2 * eight["per_layer_s"]["dispatch"]
    comm = ["comm", "dispatch", "--hardware", "gh200", "--ep", "8", "--tokens", "64", "--mode", "low-latency", "--hidden", "2048", "--topk", "8", "--experts", "128"]
    assert cli_json(comm) == cli_json(comm + ["--gpus-per-node", "1"])


@pytest.mark.slow
def test_checkpoint_precision_not_modelled_is_said():
    """DeepSeek-V3 ships FP8 weights: predicting it at the --weights default (bf16) says so in
    one line, and says nothing once --weights fp8 is given."""
    base = [sys.executable, "-m", "moesym", "predict", "deepseek-v3", "--hardware", "h800",
            "--phase", "decode", "--gpus", "16", "--batch", "8", "--json"]
    default = subprocess.run(base, capture_output=True, text=True, check=True).stderr
    given = subprocess.run(base + ["--weights", "fp8"], capture_output=True, text=True,
                           check=True).stderr
    line = [x for x in default.splitlines() if "checkpoint holds fp8" in x]
    assert len(line) == 1 and "--weights fp8" in line[0]
    assert "checkpoint" not in given


def test_prefill_ttft_counts_the_chunks_of_a_prompt(cli_json):
    """A step advances each prompt by one chunk: 32768-token prompts in chunks of 512 take
    64 steps (of 2048 tokens, four prompts' chunks each); chunks as long as the step, 16."""
    base = ["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "prefill", "--tokens",
            "2048", "--context", "32768"]
    for extra, steps in (([], 16), (["--chunk", "2048"], 16), (["--chunk", "512"], 64)):
        r = cli_json(base + extra)
        assert r["ttft_s"] == pytest.approx(steps * r["step_time_s"], rel=1e-12)
