"""Every bad input gets a one-line error naming the field, exit code 2, no traceback (issue 21).

Each case: the command line, and a piece of text the error must contain (the field it names).
Files the cases need (malformed TOML/JSON, a hardware file with an infinite bandwidth) are
written into a temporary folder first.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from moesym.cli import main

V3 = ["deepseek-v3", "--hardware", "h800"]
Q8 = ["qwen3-8b", "--hardware", "h800"]
DEC = ["--phase", "decode"]

CASES = [
    # predict: flags, values, contradictions
    (["predict", *Q8, *DEC, "--batch", "0"], "--batch"),
    (["predict", *Q8, *DEC, "--batch", "-3"], "--batch"),
    (["predict", *Q8, *DEC, "--batch", "1.5"], "--batch"),
    (["predict", *Q8, *DEC, "--context", "0"], "--context"),
    (["predict", *Q8, *DEC, "--context", "nan"], "--context"),
    (["predict", *Q8, "--phase", "train"], "--phase"),
    (["predict", *Q8, *DEC, "--gpus", "0"], "--gpus"),
    (["predict", *Q8, *DEC, "--gpus", "16", "--gpus-per-node", "6"], "--gpus-per-node"),
    (["predict", *Q8, *DEC, "--gpus", "8", "--tp", "3"], "--tp"),
    (["predict", *V3, *DEC, "--gpus", "8", "--ep", "3"], "--ep"),
    (["predict", *V3, *DEC, "--gpus", "24", "--ep", "24"], "--ep"),
    (["predict", *V3, *DEC, "--gpus", "16", "--ep", "8", "--a2a", "deepep-ll"], "--a2a"),
    (["predict", *Q8, *DEC, "--weights", "int3"], "--weights"),
    (["predict", *Q8, *DEC, "--kv", "fp4"], "--kv"),
    (["predict", *Q8, *DEC, "--routing", "zipf:-1"], "--routing"),
    (["predict", *Q8, *DEC, "--routing", "pareto"], "--routing"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "nosuch"], "--overlap"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "tbo-sglang"], "--micro-batches"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "{tmp}/missing.toml"], "--overlap"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "{tmp}/bad.toml"], "--overlap"),
    (["predict", *Q8, *DEC, "--timing", "exact"], "--timing"),
    (["predict", *Q8, *DEC, "--micro-batches", "0"], "--micro-batches"),
    (["predict", *Q8, *DEC, "--timeline"], "--timeline"),
    (["predict", "nosuch-model", "--hardware", "h800", *DEC], "model"),
    (["predict", "{tmp}/bad.json", "--hardware", "h800", *DEC], "bad.json"),
    (["predict", *Q8[:1], "--hardware", "nosuch", *DEC], "hardware"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/bad.toml", *DEC], "bad.toml"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/inf.toml", *DEC], "scale_out_GBps"),
    (["predict", *Q8, *DEC, "--plot", "/nonexistent/dir/p.png"], "--plot"),
    (["predict", *Q8, *DEC, "--bogus"], "--bogus"),
    # aggregated serving
    (["predict", *Q8, "--phase", "serve", "--batch", "8", "--isl", "100"], "--osl"),
    (["predict", *Q8, "--phase", "serve", "--batch", "8", "--isl", "0", "--osl", "9"], "--isl"),
    (["sweep", *Q8, "--phase", "serve", "--batch", "8", "--out", "{tmp}/s.csv"], "--isl"),
    (["sweep", *Q8, "--phase", "decode", "--isl", "8", "--out", "{tmp}/s.csv"], "--isl"),
    (["optimize", *Q8, "--phase", "serve", "--isl", "100"], "--osl"),
    (["predict", *Q8, "--phase", "prefill", "--prefix-hit", "1.5"], "--prefix-hit"),
    (["predict", *Q8, *DEC, "--mtp", "-1"], "--mtp"),
    (["predict", *V3, *DEC, "--gpus", "8", "--weights", "moe=fp4,moe=fp8"], "--weights"),
    (["predict", *V3, *DEC, "--gpus", "8", "--weights", "experts=fp4"], "--weights"),
    (["predict", *Q8, *DEC, "--weights", "bf16", "--group-size", "64"], "--group-size"),
    (["predict", *Q8, *DEC, "--mtp", "1", "--accept", "2"], "--accept"),
    (["optimize", *Q8, "--phase", "decode"], "--context"),
    (["optimize", *Q8, "--phase", "serve", "--isl", "9", "--osl", "9", "--context", "9"],
     "--context"),
    # memory
    (["memory", *V3, "--gpus", "8", "--memory-option", "block_size=1.7"], "block_size"),
    (["memory", *V3, "--gpus", "8", "--memory-option", "block_size=0"], "block_size"),
    (["memory", *V3, "--gpus", "8", "--memory-option", "nosuch=1"], "--memory-option"),
    (["memory", *V3, "--gpus", "8", "--memory-option", "load_factor=nan"], "load_factor"),
    (["memory", *V3, "--gpus", "8", "--memory-option", "kv_fragmentation=maybe"],
     "kv_fragmentation"),
    (["memory", *V3, "--gpus", "8", "--memory-option", "reserve_fraction=1.5"],
     "reserve_fraction"),
    # sweep
    (["sweep", *Q8, *DEC, "--batch=-4,0,8", "--out", "{tmp}/s.csv"], "--batch"),
    (["sweep", *Q8, *DEC, "--batch", "0:10:5", "--out", "{tmp}/s.csv"], "--batch"),
    (["sweep", *Q8, *DEC, "--batch", "8:4", "--out", "{tmp}/s.csv"], "--batch"),
    (["sweep", *Q8, *DEC, "--batch", "a,b", "--out", "{tmp}/s.csv"], "--batch"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--out", "/nonexistent/dir/s.csv"], "--out"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--chunk-points", "0", "--out", "{tmp}/s.csv"],
     "--chunk-points"),
    (["sweep", *V3, *DEC, "--batch", "8", "--ep", "3", "--out", "{tmp}/s.csv"], "--ep"),
    # optimize
    (["optimize", *Q8, "--gpus", "1", *DEC, "--context", "1024", "--ttft-ms", "100"],
     "--ttft-ms"),
    (["optimize", *Q8, "--gpus", "1", "--phase", "prefill", "--context", "1024", "--tpot-ms",
      "10"], "--tpot-ms"),
    (["optimize", *Q8, "--gpus", "1", *DEC, "--context", "1024", "--disaggregate", "0:100"],
     "--disaggregate"),
    (["optimize", *Q8, "--gpus", "1", *DEC, "--context", "1024", "--disaggregate", "x"],
     "--disaggregate"),
    (["optimize", *V3, "--gpus", "8", *DEC, "--context", "1024", "--tp", "3"], "--tp"),
    (["optimize", *Q8, "--gpus", "1", *DEC, "--context", "1024", "--tpot-ms", "-5"],
     "--tpot-ms"),
    # derive
    (["derive", "tpot", *V3, "--gpus", "8", "--tpot-ms", "0"], "--tpot-ms"),
    (["derive", "solve", *V3, "--gpus", "8", "--equal", "step", "nosuch", "--for", "batch"],
     "nosuch"),
    (["derive", "solve", *V3, "--gpus", "8", "--equal", "step", "1", "--for", "nosuch"],
     "nosuch"),
    (["derive", "micro-batches", "qwen3-8b", "--hardware", "h800"], "dense"),
    # routing, comm, kernel
    (["routing", "--experts", "256", "--topk", "8", "--tokens", "1", "--ep", "1",
      "--groups", "64", "--topk-groups", "1"], "--topk"),
    (["routing", "--experts", "256", "--topk", "8", "--tokens", "1", "--ep", "3"], "--ep"),
    (["routing", "--experts", "256", "--topk", "8", "--tokens", "0", "--ep", "1"], "--tokens"),
    (["routing", "--experts", "256", "--topk", "8", "--tokens", "1", "--ep", "1",
      "--routing", "zipf:x"], "--routing"),
    (["comm", "dispatch", "--tokens", "128", "--hidden", "7168", "--topk", "8", "--experts",
      "256", "--ep", "3", "--mode", "low-latency", "--hardware", "h800"], "--ep"),
    (["comm", "dispatch", "--tokens", "128", "--hidden", "7168", "--topk", "8", "--experts",
      "256", "--ep", "8", "--mode", "nosuch", "--hardware", "h800"], "--mode"),
    (["kernel", "gemm", "--m", "0", "--n", "1", "--k", "1", "--hardware", "h800"], "--m"),
    (["kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--hardware", "a100", "--dtype",
      "fp8"], "--dtype"),
    # validate
    (["validate", "--cases", "{tmp}/bad.json"], "bad.json"),
    (["validate", "--cases", "{tmp}/missing.json"], "missing.json"),
    # report, timing, dequant (this session)
    (["report", *Q8, *DEC, "--out", "{tmp}/no/such/folder/r.html"], "--out"),
    (["report", *Q8, *DEC], "--out"),
    (["optimize", *Q8, *DEC, "--context", "1024", "--report", "{tmp}/none/r.html"], "--report"),
    (["predict", *Q8, *DEC, "--timing", "tables:{tmp}/missing"], "--timing"),
    (["predict", *Q8, *DEC, "--dequant", "later"], "--dequant"),
    (["optimize", *Q8, *DEC, "--context", "1024", "--expert-cache", "-1"], "--expert-cache"),
    (["optimize", *Q8, "--phase", "prefill", "--context-dist", "uniform:1:9"], "--context-dist"),
    (["optimize", *Q8, *DEC, "--context", "1024", "--context-dist", "uniform:1:9"], "--context-dist"),
    (["optimize", *Q8, *DEC, "--context-dist", "uniform:9:1"], "--context-dist"),
    # a new user's pass over the CLI (this session)
    (["predict", *Q8, *DEC, "--plot", "{tmp}/p.txt"], "--plot"),
    (["predict", *V3, *DEC, "--gpus", "8", "--timeline", "{tmp}/t.jpeg"], "--timeline"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--out", "{tmp}/s.tsv"], "--out"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--out", "{tmp}/s.PARQUET"], "--out"),
    (["predict", "{tmp}/nan.json", "--hardware", "h800", *DEC], "hidden_size"),
    (["predict", "{tmp}/moe_layers.json", "--hardware", "h800", *DEC], "moe_layers"),
    (["sweep", *Q8, *DEC, "--batch", "1,,2", "--out", "{tmp}/s.csv"], "--batch"),
    (["sweep", *Q8, *DEC, "--batch", "1", "--weights", "fp8", "--weights-list", "bf16", "--out",
      "{tmp}/s.csv"], "--weights-list"),
    (["optimize", *V3, "--gpus", "16", *DEC, "--context", "4096", "--weights", "fp8",
      "--overlap", "tbo-sglang", "--micro-batches", "1"], "--overlap"),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.toml").write_text("this is = = not toml\n")
    (d / "bad.json").write_text("{not json")
    h800 = (Path(__file__).resolve().parent.parent / "hardware" / "h800.toml").read_text()
    (d / "inf.toml").write_text(h800.replace("scale_out_GBps = 50", "scale_out_GBps = inf"))
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 16,
           "num_experts_per_tok": 4, "vocab_size": 1000}
    import json

    (d / "nan.json").write_text(json.dumps({**cfg, "hidden_size": float("nan")}))
    (d / "moe_layers.json").write_text(json.dumps({**cfg, "model_type": "x", "moe_layers": 5}))
    return d


@pytest.mark.parametrize("argv,field", CASES, ids=[" ".join(c[0][:4]) + f" {i}"
                                                    for i, c in enumerate(CASES)])
def test_bad_input_is_a_one_line_exit_2_error_naming_the_field(argv, field, tmp):
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code
    text = err.getvalue().strip()
    assert rc == 2, (rc, text)
    lines = [ln for ln in text.splitlines() if not ln.startswith("usage:")
             and not ln.startswith(" ")]
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1, text
    assert "Traceback" not in text
    assert field in errors[0], errors[0]


# --- random argument vectors: any failure is one line, exit 2 ------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALUES = ["0", "-1", "1", "2", "3", "7", "8", "64", "1.5", "nan", "inf", "x", "", "fp8", "bf16",
           "fp4", "zipf:1", "zipf:-2", "decode", "prefill", "auto", "deepep-ll", "allgather",
           "h800", "h20", "nosuch", "1:8", "8:1", "4,8"]
_FLAGS = {
    "predict": ["--hardware", "--phase", "--batch", "--tokens", "--context", "--chunk", "--gpus",
                "--gpus-per-node", "--tp", "--ep", "--micro-batches", "--weights", "--kv",
                "--a2a", "--routing", "--redundant-experts", "--layout", "--overlap", "--timing"],
    "routing": ["--experts", "--topk", "--tokens", "--ep", "--groups", "--topk-groups",
                "--routing", "--placement"],
    "comm": ["--tokens", "--hidden", "--topk", "--experts", "--ep", "--mode", "--hardware",
             "--groups", "--topk-groups", "--gpus-per-node"],
}
_HEAD = {"predict": ["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode"],
         "routing": ["routing", "--experts", "64", "--topk", "4", "--tokens", "32", "--ep", "8"],
         "comm": ["comm", "dispatch", "--hardware", "h800", "--mode", "normal", "--tokens", "8",
                  "--hidden", "1024", "--topk", "2", "--experts", "16", "--ep", "4"]}


@st.composite
def _argv(draw):
    cmd = draw(st.sampled_from(sorted(_FLAGS)))
    pairs = draw(st.lists(st.tuples(st.sampled_from(_FLAGS[cmd]), st.sampled_from(_VALUES)),
                          max_size=6))
    return _HEAD[cmd] + [x for f, v in pairs for x in (f, v)]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_argv())
def test_random_argument_vectors_fail_in_one_line_with_exit_2(argv):
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            rc = main(argv + ["--json"])
        except SystemExit as exc:
            rc = exc.code
    text = err.getvalue()
    assert "Traceback" not in text
    errors = [ln for ln in text.splitlines() if ln.startswith("moesym: error")]
    if rc == 0:
        assert not errors, text
    else:
        assert rc == 2, (argv, text)  # exit 1 would be an unexpected exception
        assert len(errors) == 1, text


@pytest.mark.parametrize("argv,flag", [
    (["predict", *Q8, *DEC, "--tokens", "100"], "--tokens"),
    (["predict", *Q8, "--phase", "prefill", "--batch", "100"], "--batch"),
    pytest.param(["derive", "crossover", *V3, "--gpus", "8", "--weights", "fp8", "--tokens", "5"],
                 "--tokens", marks=pytest.mark.slow),  # a whole derive: the slow tier
    (["predict", *Q8, *DEC, "--prefetch"], "--prefetch"),
    (["predict", *Q8, *DEC, "--cache-policy", "lru"], "--cache-policy"),
    (["predict", "mixtral-8x7b", "--hardware", "rtx-4090", *DEC, "--weights", "w4a16",
      "--expert-cache", "9"], "--expert-cache"),
    (["predict", *Q8, *DEC, "--batch", "1", "--micro-batches", "4"], "--micro-batches"),
    (["predict", *Q8, *DEC, "--context", "100", "--context-dist", "uniform:10:100"], "--context"),
])
def test_a_flag_of_the_other_phase_is_said_not_ignored(argv, flag):
    """A workload flag of the other phase has no effect; it is said in one warning line (an
    error would break callers that pass one workload to both phases)."""
    with pytest.warns(UserWarning, match=f"{flag} .*no effect|{flag} has no effect"):
        with redirect_stdout(io.StringIO()):
            assert main(argv) == 0
