"""DeepSeek sparse attention (DeepSeek-V3.2): selected KV entries and the indexer, by hand."""

from __future__ import annotations

import pytest

from moesym import Deployment, Workload, load_hardware, load_model
from moesym.model.predictor import predict


def _run(name, context, batch=16):
    return predict(load_model(name), load_hardware("h200"), Deployment(gpus=8, weights="fp8"),
                   Workload("decode", batch=batch, context=context))


def test_decode_reads_the_top_2048_entries_plus_the_indexer():
    """At 128K context each request's attention reads 2048 latent KV entries (576 x 2 bytes per
    layer, attention data-parallel on each GPU) and its q / o rows; the indexer reads every
    key (128 FP8 + a 4-byte scale) and writes and reads its fp32 logits."""
    L, b = 131072, 16
    work = _run("deepseek-v3.2", L)["work_per_layer"]["attention_core"]
    rows = b * 128 * (2 * 512 + 64) * 2
    want = b * 2048 * 576 * 2 + rows + b * L * 132 + 2 * 4 * b * L
    assert work["hbm_bytes"] == pytest.approx(want)
    flops_attn = 2 * b * 128 * 2048 * (2 * 512 + 64)
    assert work["flop"] == pytest.approx(flops_attn + 2 * b * 64 * L * 128)


def test_sparse_attention_pays_off_at_long_context_only():
    short = _run("deepseek-v3.2", 2048)["tpot_s"], _run("deepseek-v3", 2048)["tpot_s"]
    long = _run("deepseek-v3.2", 131072)["tpot_s"], _run("deepseek-v3", 131072)["tpot_s"]
    assert short[0] >= short[1]  # below 2048 entries nothing is skipped, the indexer costs
    assert long[0] < 0.6 * long[1]


def test_indexer_keys_are_held_in_memory():
    a = _run("deepseek-v3.2", 8192)
    b = _run("deepseek-v3", 8192)
    # 61 layers x 132 bytes per token more, for 16 requests of 8192 tokens (one GPU's DP rank)
    assert a["memory_bytes"] - b["memory_bytes"] == pytest.approx(61 * 132 * 16 * 8192, rel=0.01)
