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
    # EP 24 alone gets the load balancer's redundant slots (tests/test_serving_benchmark.py);
    # slots the user gives that still do not divide are refused
    (["predict", *V3, *DEC, "--gpus", "24", "--ep", "24", "--redundant-experts", "3"], "--ep"),
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
    # simulate: a disaggregation whose prefill sizes do not divide, an acceptance length above
    # the draft, no request in flight, a negative one-time prefill
    (["simulate", *Q8, "--isl", "256", "--osl", "8", "--concurrency", "2", "--disaggregate",
      "1:1", "--prefill-gpus", "4", "--prefill-tp", "3"], "--prefill-tp"),
    (["simulate", *V3, "--weights", "fp8", "--gpus", "16", "--isl", "256", "--osl", "8",
      "--concurrency", "2", "--disaggregate", "1:1", "--prefill-gpus", "8", "--prefill-ep",
      "3"], "--prefill-ep"),
    (["simulate", *V3, "--weights", "fp8", "--gpus", "16", "--isl", "256", "--osl", "8",
      "--concurrency", "2", "--mtp", "2", "--accept-length", "3.5"], "--accept-length"),
    (["simulate", *Q8, "--isl", "256", "--osl", "8", "--concurrency", "0"], "--concurrency"),
    (["simulate", *Q8, "--isl", "256", "--osl", "8", "--concurrency", "2",
      "--cold-prefill-ms", "-5"], "--cold-prefill-ms"),
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
    # issue 33: checked against the model, the hardware and physics before anything is timed
    # lengths against the model's positions (DeepSeek-V3: 163840; Qwen3-8B: 40960; Mixtral 32768)
    (["predict", *V3, *DEC, "--gpus", "16", "--context", "1000000"], "--context 1000000"),
    (["predict", *V3, "--gpus", "16", "--phase", "serve", "--batch", "1", "--isl", "100000000",
      "--osl", "10"], "--isl 100000000"),
    (["predict", "mixtral-8x7b", "--hardware", "h800", *DEC, "--context", "40000"],
     "--context 40000"),
    (["predict", *Q8, "--phase", "prefill", "--context", "50000"], "--context 50000"),
    (["predict", *Q8, *DEC, "--context-dist", "uniform:1000:100000"], "--context-dist"),
    (["memory", *V3, "--gpus", "16", "--context", "1000000"], "--context 1000000"),
    (["memory", "qwen3-30b-a3b", "--hardware", "h800", "--phase", "serve", "--batch", "1",
      "--isl", "40000", "--osl", "1000"], "--isl 40000"),
    (["report", *V3, *DEC, "--gpus", "16", "--context", "1000000", "--out", "{tmp}/r.html"],
     "--context 1000000"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--context", "100000", "--out", "{tmp}/s.csv"],
     "--context 100000"),
    (["optimize", *Q8, *DEC, "--context", "100000"], "--context 100000"),
    (["optimize", "qwen3-30b-a3b", "--hardware", "h800", "--phase", "serve", "--isl", "40000",
      "--osl", "2000"], "--isl 40000"),
    (["simulate", *V3, "--gpus", "8", "--isl", "200000", "--osl", "10", "--concurrency", "1",
      "--num-prompts", "1"], "--isl 200000"),
    (["derive", "crossover", *V3, "--gpus", "8", "--context", "1000000"], "--context 1000000"),
    (["predict", "{tmp}/rope.json", "--hardware", "h800", *DEC], "rope_scaling.factor"),
    # pipeline stages against layers (DeepSeek-V3: 61)
    (["predict", *V3, *DEC, "--gpus", "64", "--pp", "64"], "--pp 64"),
    (["memory", *V3, "--gpus", "64", "--pp", "64"], "--pp 64"),
    (["sweep", *V3, *DEC, "--batch", "8", "--gpus", "64", "--pp", "64", "--out", "{tmp}/s.csv"],
     "--pp 64"),
    (["optimize", *V3, "--gpus", "64", "--pp", "64", *DEC, "--context", "1024"], "--pp 64"),
    # draft tokens, redundant experts
    (["predict", *V3, *DEC, "--gpus", "16", "--mtp", "1000"], "--mtp 1000"),
    (["predict", *V3, *DEC, "--gpus", "8", "--mtp", "50", "--accept", "0.5"], "--mtp 50"),
    (["optimize", *V3, "--gpus", "8", *DEC, "--context", "1024", "--mtp", "1000"], "--mtp 1000"),
    (["derive", "tpot", *V3, "--gpus", "8", "--tpot-ms", "50", "--mtp", "1000"], "--mtp 1000"),
    (["predict", *V3, *DEC, "--gpus", "16", "--redundant-experts", "100000"],
     "--redundant-experts 100000"),
    (["predict", *V3, *DEC, "--gpus", "8", "--redundant-experts", "264"],
     "--redundant-experts 264"),
    (["predict", *Q8, *DEC, "--redundant-experts", "8"], "--redundant-experts"),
    (["simulate", *V3, "--gpus", "16", "--isl", "100", "--osl", "10", "--concurrency", "1",
      "--num-prompts", "1", "--redundant-experts", "100000"], "--redundant-experts"),
    # weight-scale groups: the kernels' groups and the GEMMs' K
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--weights", "w4a16",
      "--group-size", "7"], "--group-size 7"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--weights", "int8",
      "--group-size", "1000000000"], "--group-size 1000000000"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--weights", "fp4",
      "--group-size", "64"], "--group-size 64"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--weights", "moe=w4a16",
      "--group-size", "256"], "--group-size 256"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--weights", "w4a8",
      "--group-size", "96"], "--group-size 96"),
    (["memory", "qwen3-30b-a3b", "--hardware", "h800", "--weights", "w4a16", "--group-size",
      "7"], "--group-size 7"),
    (["predict", *V3, *DEC, "--gpus", "8", "--weights", "int8", "--group-size", "7"],
     "kv_lora_rank 512"),  # hidden 7168 = 7 x 1024 divides; the MLA ranks do not
    (["sweep", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--batch", "8", "--weights", "w4a16",
      "--group-size", "7", "--out", "{tmp}/s.csv"], "--group-size 7"),
    # derived sizes named as derived
    (["predict", *V3, *DEC, "--gpus", "1000000"], "--gpus 1000000 gives EP 1000000"),
    (["memory", *V3, "--gpus", "1000000"], "--gpus 1000000 gives EP 1000000"),
    (["predict", *V3, *DEC, "--gpus", "48", "--pp", "2", "--redundant-experts", "4"],
     "--gpus 48 / --pp 2 gives EP 24"),
    (["predict", "deepseek-v3", "--hardware", "wormhole-tg", *DEC, "--mesh", "1000x1000"],
     "--mesh 1000x1000"),
    # hardware files: integral counts, typed keys, the file and key named
    (["predict", *Q8[:1], "--hardware", "{tmp}/sms.toml", *DEC], "sms"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/gpn.toml", *DEC], "gpus_per_node"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/domain.toml", *DEC], "scale_up_domain_gpus"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/name.toml", *DEC], "name.toml name"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/table.toml", *DEC], "compute_formats"),
    (["predict", *Q8[:1], "--hardware", "{tmp}/host.toml", *DEC], "capacity_GB"),
    (["predict", "deepseek-v3", "--hardware", "{tmp}/mesh.toml", *DEC, "--mesh", "4x8"],
     "mesh.toml [mesh] shapes"),
    (["memory", *Q8[:1], "--hardware", "{tmp}/sms.toml"], "sms"),
    (["kernel", "gemm", "--m", "8", "--n", "1024", "--k", "1024", "--hardware", "{tmp}/sms.toml"],
     "sms"),
    (["comm", "dispatch", "--tokens", "128", "--hidden", "7168", "--topk", "8", "--experts",
      "256", "--ep", "8", "--mode", "low-latency", "--hardware", "{tmp}/sms.toml"], "sms"),
    # schedule files: each operation once per micro-batch, integer fields, the key named
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "{tmp}/twice.toml"], "twice.toml"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "{tmp}/mb.toml"], "micro_batches"),
    (["predict", *V3, *DEC, "--gpus", "8", "--overlap", "{tmp}/extra.toml"], "stage_count"),
    # routing frequency files: ids in range, each once
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--routing", "freq:{tmp}/dup.csv"],
     "listed twice"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--routing",
      "freq:{tmp}/range.csv"], "out of that range"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--routing",
      "freq:{tmp}/negid.csv"], "negative"),
    (["predict", "qwen3-30b-a3b", "--hardware", "h800", *DEC, "--routing",
      "freq:{tmp}/cols.csv"], "EXPERT,COUNT"),
    # config files: a cost-changing field missing is an error naming it
    (["predict", "{tmp}/qwen2_moe.json", "--hardware", "h800", *DEC], "moe_intermediate_size"),
    (["predict", "{tmp}/qwen2_moe_zero.json", "--hardware", "h800", *DEC],
     "moe_intermediate_size"),
    (["predict", "{tmp}/no_mla.json", "--hardware", "h800", *DEC], "kv_lora_rank"),
    # output paths checked before any work
    (["report", *Q8, *DEC, "--out", "{tmp}/"], "--out"),
    # derive pages writes a folder: a file there is refused before any page is derived
    (["derive", "pages", "--out", "{tmp}/bad.toml"], "--out"),
    (["report", *Q8, *DEC, "--out", "{tmp}"], "--out"),
    (["predict", *Q8, *DEC, "--plot", "{tmp}/"], "--plot"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--out", "{tmp}/"], "--out"),
    (["optimize", *Q8, *DEC, "--context", "1024", "--report", "{tmp}/"], "--report"),
    # bounded work
    (["sweep", *Q8, *DEC, "--batch", "1:100000000:1", "--out", "{tmp}/s.csv"],
     "--batch 1:100000000:1"),
    (["sweep", *Q8, *DEC, "--batch", "1:1000:1", "--context", "1:40000:1", "--out",
      "{tmp}/s.csv"], "--context 1:40000:1 (40,000) gives 40,000,000 points"),
    (["sweep", *Q8, *DEC, "--batch", "1:64:1", "--max-points", "10", "--out", "{tmp}/s.csv"],
     "--max-points 10"),
    (["sweep", *Q8, *DEC, "--batch", "8", "--max-points", "0", "--out", "{tmp}/s.csv"],
     "--max-points"),
    (["optimize", *V3, "--gpus", "8", *DEC, "--context", "1024", "--max-size", "1000000000"],
     "--max-points"),
    (["optimize", *Q8, *DEC, "--context", "1024", "--max-points", "10"], "--max-points 10"),
    # cost and power of serving answers (issue 49): a price of 0 or below, a PUE under 1, no
    # years, owned hardware without all three of its flags, both a price and owned hardware
    (["predict", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--price", "0"], "--price"),
    (["predict", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--price", "-1"],
     "--price"),
    (["predict", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--pue", "0.5"], "--pue"),
    (["predict", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--capex", "9000",
      "--years", "0", "--power-price", "0.1"], "--years"),
    (["predict", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--capex", "9000"],
     "--years"),
    (["simulate", *Q8, "--isl", "64", "--osl", "8", "--concurrency", "1", "--price", "0"],
     "--price"),
    (["simulate", *Q8, "--isl", "64", "--osl", "8", "--concurrency", "1", "--pue", "0.99"],
     "--pue"),
    (["optimize", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--price", "-3"],
     "--price"),
    (["optimize", *Q8, "--phase", "serve", "--isl", "64", "--osl", "8", "--price", "2",
      "--capex", "9000", "--years", "4", "--power-price", "0.1"], "--price"),
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
    # issue 33's files
    (d / "rope.json").write_text(json.dumps({**cfg, "max_position_embeddings": 40960,
                                             "rope_scaling": {"rope_type": "yarn", "factor": 0.5}}))
    q2 = {k: v for k, v in cfg.items() if k != "moe_intermediate_size"}
    (d / "qwen2_moe.json").write_text(json.dumps({**q2, "model_type": "qwen2_moe"}))
    (d / "qwen2_moe_zero.json").write_text(json.dumps({**cfg, "model_type": "qwen2_moe",
                                                       "moe_intermediate_size": 0}))
    (d / "no_mla.json").write_text(json.dumps({**cfg, "model_type": "deepseek_v3",
                                               "qk_rope_head_dim": 64}))
    for name, old, new in (("sms", "sms = 132", "sms = 132.5"),
                           ("gpn", "gpus_per_node = 8", "gpus_per_node = 8.5"),
                           ("domain", "scale_up_domain_gpus = 8", "scale_up_domain_gpus = 7.5"),
                           ("name", 'name = "h800"', "name = 5"),
                           ("table", 'name = "h800"', 'name = "h800"\ncompute_formats = 5'),
                           ("host", "[interconnect]", "[host]\ndram_GBps = 100\npeak_TFLOPs = 1"
                                                      "\ncapacity_GB = -1\n[interconnect]")):
        assert old in h800, old
        (d / f"{name}.toml").write_text(h800.replace(old, new, 1))
    tg = (Path(__file__).resolve().parent.parent / "hardware" / "wormhole-tg.toml").read_text()
    (d / "mesh.toml").write_text(tg.replace('shapes = ["4x8",', 'shapes = ["4y8",', 1))
    ops = ('["attn_prep", "attn_core", "router", "dispatch_send", "dispatch_wait", "shared", '
           '"experts", "combine_send", "combine_wait", "output"')
    (d / "twice.toml").write_text(f"[mine.decode]\nmicro_batches = 1\nstages = [{ops}, "
                                  '"shared"]]\n')
    (d / "mb.toml").write_text(f"[mine.decode]\nmicro_batches = 1.5\nstages = [{ops}]]\n")
    (d / "extra.toml").write_text(f"[mine.decode]\nmicro_batches = 1\nstage_count = 1\n"
                                  f"stages = [{ops}]]\n")
    rows = [f"{i},{i + 1}" for i in range(128)]
    (d / "dup.csv").write_text("\n".join(rows[:-1] + ["5,3"]) + "\n")
    (d / "range.csv").write_text("\n".join(rows[:-1] + ["300,3"]) + "\n")
    (d / "negid.csv").write_text("\n".join(rows[:-1] + ["-1,3"]) + "\n")
    (d / "cols.csv").write_text("\n".join(r + ",1" for r in rows) + "\n")
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
