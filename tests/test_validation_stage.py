"""The validation stage and what it assumes out loud (issue 33): warnings with a correct answer,
the host tier's capacity (unified memory: one pool), config fields left out per family, the
calibration provenance said once after the answer, --quiet and -v, and the grid sizes a sweep
counts before building. The errors themselves are cases of tests/test_bad_input.py.
"""

from __future__ import annotations

import io
import json
import math
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from moesym.cli import main
from moesym.errors import SpecError
from moesym.plan.rules import max_draft_tokens, position_limit
from moesym.readers.model import from_hf_config
from moesym.search.sweep import list_size, parse_list

ROOT = Path(__file__).resolve().parent.parent
W4A16 = 4 / 8 + 4 / 128  # bytes per weight: 4 bits, an fp16 scale and zero point per 128


def _run(argv):
    """(exit code, stdout, stderr) of the command line, warnings written as the CLI writes them
    (pytest records warnings, so the hook that prints them is put back for the run)."""
    out, err = io.StringIO(), io.StringIO()
    show = warnings._showwarnmsg_impl
    try:
        warnings._showwarnmsg_impl = lambda msg: sys.stderr.write(warnings._formatwarnmsg(msg))
        with warnings.catch_warnings(), redirect_stdout(out), redirect_stderr(err):
            warnings.simplefilter("default")
            rc = main(argv)
    finally:
        warnings._showwarnmsg_impl = show
    return rc, out.getvalue(), err.getvalue()


def _warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("moesym: warning:")]


# --- the host tier: unified memory is one pool ---------------------------------------------------
def test_unified_memory_holds_the_device_and_the_host_tier_together():
    """Issue 33's M2 Max: Qwen3-235B-A22B w4a16 with 48 of 128 experts per layer on the
    device leaves 80 in "host" memory, the same 96 GB of DRAM."""
    rc, out, _ = _run(["memory", "qwen3-235b-a22b", "--hardware", "m2-max", "--weights", "w4a16",
                       "--expert-cache", "48", "--json"])
    r = json.loads(out)
    host = 94 * 80 * 3 * 4096 * 1536 * W4A16  # MoE layers x cold experts x expert weights
    assert rc == 0 and r["host_expert_bytes"] == pytest.approx(host, rel=1e-12)
    device = r["hbm_bytes"] - r["free_bytes"]
    assert device + host > 96e9 and r["fits"] is False
    assert "unified memory" in r["fits_reason"] and "96 GB" in r["fits_reason"]


def test_a_host_tier_that_fits_unified_memory_fits():
    rc, out, _ = _run(["predict", "qwen3-30b-a3b", "--hardware", "m2-max", "--phase", "decode",
                       "--weights", "w4a16", "--expert-cache", "64", "--json"])
    r = json.loads(out)
    host = 48 * 64 * 3 * 2048 * 768 * W4A16
    assert r["host_expert_bytes"] == pytest.approx(host, rel=1e-12)
    assert r["memory_bytes"] + host <= 96e9 and r["fits"] is True and "fits_reason" not in r


@pytest.mark.parametrize("capacity_gb, fits", [(8, False), (64, True)])
def test_the_host_tier_against_the_files_host_capacity(tmp_path, capacity_gb, fits):
    """Mixtral-8x7B w4a16 with 4 of 8 experts per layer cached leaves 32 x 4 experts of
    3 x 4096 x 14336 weights (12.0 GB) in host memory."""
    text = (ROOT / "hardware" / "rtx-4090.toml").read_text()
    hw = tmp_path / "pc.toml"
    hw.write_text(text.replace("[host]", f"[host]\ncapacity_GB = {capacity_gb}", 1))
    rc, out, err = _run(["predict", "mixtral-8x7b", "--hardware", str(hw), "--phase", "decode",
                         "--weights", "w4a16", "--expert-cache", "4", "--json"])
    r = json.loads(out)
    assert r["host_expert_bytes"] == pytest.approx(32 * 4 * 3 * 4096 * 14336 * W4A16, rel=1e-12)
    assert r["fits"] is fits and ("host memory" in r.get("fits_reason", "")) is not fits
    assert "capacity_GB" not in err  # given: nothing to warn


# --- warnings with a correct answer --------------------------------------------------------------
def _yarn(tmp_path) -> Path:
    cfg = {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
           "intermediate_size": 3072, "vocab_size": 1000, "max_position_embeddings": 40960,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                            "original_max_position_embeddings": 32768}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("argv, said", [
    (["predict", "deepseek-v3", "--hardware", "h800", "--phase", "decode", "--gpus", "16",
      "--pp", "4", "--weights", "fp8"], "--pp 4 splits the 61 layers of deepseek-v3 unevenly "
                                        "(the largest stage holds 16)"),
    (["predict", "{cfg}", "--hardware", "h800", "--phase", "decode", "--context", "100000"],
     "its rope scaling yarn x4 of 32768 extends it to 131072"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", "--phase", "decode",
      "--redundant-experts", "8"], "--redundant-experts 8 with EP 1"),
    (["predict", "mixtral-8x7b", "--hardware", "rtx-4090", "--phase", "decode", "--weights",
      "w4a16", "--expert-cache", "4"], "12.0 GB of experts in host memory, not checked"),
    (["predict", "qwen3-8b", "--hardware", "h800", "--phase", "decode", "--gpus", "64",
      "--gpus-per-node", "64", "--tp", "8"], "--gpus-per-node 64 is more than h800's 8"),
])
def test_an_assumption_is_one_warning_line_beside_the_answer(tmp_path, argv, said):
    argv = [a.replace("{cfg}", str(_yarn(tmp_path))) for a in argv]
    rc, out, err = _run(argv + ["--json"])
    assert rc == 0 and json.loads(out)["step_time_s"] > 0
    lines = [ln for ln in _warnings(err) if said in ln]
    assert len(lines) == 1, err


def test_rope_scaling_length_is_vllms_derivation(tmp_path):
    """yarn scales the original length (32768 x 4), as vLLM's _get_and_verify_max_len."""
    from moesym.readers.model import load_model

    m = load_model(str(_yarn(tmp_path)))
    assert position_limit(m) == (40960, 131072, "yarn x4 of 32768")
    assert position_limit(load_model("deepseek-v3"))[:2] == (163840, 4096 * 40)


def test_draft_token_bound_is_where_the_last_is_reached_once_in_a_thousand():
    for p in (0.5, 0.7, 0.85):
        n = max_draft_tokens(p)
        assert p ** (n - 1) >= 1e-3 > p ** n  # token n reached; token n + 1 not
    assert max_draft_tokens(0.95) == max_draft_tokens(1.0) == 64  # the cap


# --- config fields left out: an error naming the field, or a warning with the value used ------
_QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
              "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
              "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
              "num_experts_per_tok": 8, "vocab_size": 151936}
_MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
_DSV3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
         "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
         "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
         "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
         "vocab_size": 129280}
_GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
            "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
            "sliding_window": 128, "vocab_size": 201088,
            "layer_types": ["sliding_attention", "full_attention"] * 18}
_QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
               "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
               "intermediate_size": 5120, "moe_intermediate_size": 512, "num_experts": 512,
               "num_experts_per_tok": 10, "shared_expert_intermediate_size": 512,
               "full_attention_interval": 4, "linear_num_key_heads": 16,
               "linear_num_value_heads": 32, "linear_key_head_dim": 128,
               "linear_value_head_dim": 128, "vocab_size": 151936}
_QWEN3 = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
          "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
          "intermediate_size": 12288, "vocab_size": 151936, "sliding_window": 4096,
          "use_sliding_window": False}


def _without(cfg: dict, field: str, **extra) -> dict:
    return {**{k: v for k, v in cfg.items() if k != field}, **extra}


@pytest.mark.parametrize("cfg, field", [
    (_without(_QWEN3_MOE, "moe_intermediate_size", model_type="qwen2_moe"),
     "moe_intermediate_size"),
    (_without(_QWEN3_MOE, "moe_intermediate_size"), "moe_intermediate_size"),
    ({**_QWEN3_MOE, "moe_intermediate_size": 0}, "moe_intermediate_size"),
    (_without(_QWEN3_MOE, "num_experts"), "num_experts"),
    (_without(_DSV3, "kv_lora_rank"), "kv_lora_rank"),
    (_without(_DSV3, "moe_intermediate_size"), "moe_intermediate_size"),
    (_without(_MIXTRAL, "intermediate_size"), "intermediate_size"),
    (_without(_QWEN3_NEXT, "linear_num_value_heads"), "linear_num_value_heads"),
])
def test_a_cost_changing_field_left_out_is_an_error_naming_it(cfg, field):
    with pytest.raises(SpecError, match=field):
        from_hf_config(cfg)


@pytest.mark.parametrize("cfg, field, check", [
    # transformers' Qwen3MoeConfig: head_dim 128
    (_without(_QWEN3_MOE, "head_dim"), "head_dim", lambda m: m.head_dim == 128),
    # MHA by transformers' default: 32 KV heads, 4x the KV cache of the 8 the model has
    (_without(_MIXTRAL, "num_key_value_heads"), "num_key_value_heads",
     lambda m: m.num_kv_heads == 32),
    # GptOssConfig's default layer types alternate sliding and full attention: 18 of 36 windowed
    (_without(_GPT_OSS, "layer_types"), "layer_types",
     lambda m: m.sliding_layers == 18 and m.sliding_window == 128),
    # Qwen3NextConfig's default: one full-attention layer in four, 36 of 48 gated DeltaNet
    (_without(_QWEN3_NEXT, "full_attention_interval"), "full_attention_interval",
     lambda m: m.linear_layers == 36),
    # Qwen2/3 apply the window only with use_sliding_window (default false)
    (_without(_QWEN3, "use_sliding_window"), "use_sliding_window",
     lambda m: m.sliding_layers == 0),
    # transformers' DeepseekV3Config: the first 3 layers dense
    (_without(_DSV3, "first_k_dense_replace"), "first_k_dense_replace",
     lambda m: m.dense_layers == 3),
    # an unknown family: head_dim from hidden_size / heads, said
    (_without({**_QWEN3, "model_type": "newfamily"}, "head_dim"), "head_dim",
     lambda m: m.head_dim == 128),
    # an unknown MoE family without its own expert width: intermediate_size, said
    (_without({**_QWEN3_MOE, "model_type": "newmoe"}, "moe_intermediate_size"),
     "moe_intermediate_size", lambda m: m.moe_intermediate_size == 6144),
])
def test_a_field_left_out_is_a_warning_with_the_value_used(cfg, field, check):
    with pytest.warns(UserWarning, match=f"field '{field}' missing: using") as caught:
        m = from_hf_config(cfg)
    assert check(m)
    assert sum(f"'{field}'" in str(w.message) for w in caught) == 1


def test_complete_configs_read_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cfg in (_QWEN3_MOE, _MIXTRAL, _DSV3, _GPT_OSS, _QWEN3_NEXT, _QWEN3):
            from_hf_config(cfg)


# --- the calibration's provenance: once, after the answer, only where something is timed ------
def test_calibration_provenance_once_after_the_answer_quiet_and_verbose():
    base = ["predict", "qwen3-8b", "--hardware", "gh200", "--phase", "decode"]
    rc, out, err = _run(base)
    said = [ln for ln in _warnings(err) if "kernel calibration" in ln]
    assert rc == 0 and len(said) == 1 and "transferred" in said[0] and ";" not in said[0]
    rc, _, err = _run(base + ["-v"])
    full = [ln for ln in _warnings(err) if "kernel calibration" in ln]
    assert rc == 0 and len(full) == 1 and len(full[0]) > len(said[0])
    rc, out, err = _run(base + ["--quiet"])
    assert rc == 0 and "step time" in out and "warning" not in err
    rc, _, err = _run(["memory", "qwen3-8b", "--hardware", "gh200"])
    assert rc == 0 and "kernel calibration" not in err  # memory times nothing
    rc, _, err = _run(base + ["--context", "1000000"])
    assert rc == 2 and err.strip().splitlines() == [ln for ln in err.strip().splitlines()
                                                    if ln.startswith("moesym: error")]


# --- a sweep counts its grid before building it --------------------------------------------------
@pytest.mark.parametrize("text", ["1:16", "3:24", "3:23", "5:5", "7:1000", "1:100:7", "4,8,4",
                                  "2:2:1", "10:1000:33"])
def test_list_size_counts_what_parse_list_lists(text):
    assert list_size(text, "--batch") == len(parse_list(text, "--batch"))


def test_a_huge_range_is_counted_not_listed():
    n = list_size("1:100000000:1", "--batch")
    assert n == 10 ** 8
    assert list_size("1:1073741824", "--batch") == 31  # 2^0 .. 2^30
    assert math.prod([list_size("1:1000:1", "x"), list_size("1:40000:1", "x")]) == 4 * 10 ** 7


def test_sweep_and_optimize_hold_the_unified_host_tier_too(tmp_path):
    """A sweep row and the optimizer's memory budget count the host tier: on the M2 Max the
    80 cold experts per layer (75.4 GB) leave 96 GB - 75.4 GB of the one DRAM to the device."""
    import csv

    from moesym import load_hardware, load_model
    from moesym.search.optimize import device_capacity
    from moesym.specs.deployment import Deployment

    out = tmp_path / "s.csv"
    rc, _, _ = _run(["sweep", "qwen3-235b-a22b", "--hardware", "m2-max", "--weights", "w4a16",
                     "--expert-cache", "48", "--phase", "decode", "--batch", "1,2", "--out",
                     str(out)])
    rows = list(csv.DictReader(out.open()))
    assert rc == 0 and [r["fits"] for r in rows] == ["False", "False"]
    host = 94 * 80 * 3 * 4096 * 1536 * W4A16
    dep = Deployment(weights="w4a16", expert_cache=48)
    cap = device_capacity(load_model("qwen3-235b-a22b"), load_hardware("m2-max"), dep)
    assert cap == pytest.approx(96e9 - host, rel=1e-12)
