"""Speculative decoding (--mtp N --accept P): accepted length, verify-step work, draft cost."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moesym import Deployment, Workload, load_hardware, load_model
from moesym.cli import main
from moesym.model.predictor import predict
from moesym.specs.speculative import accepted_length


@pytest.mark.parametrize("n,p", [(1, 0.85), (2, 0.7), (3, 0.5), (5, 0.9)])
def test_accepted_length_matches_a_simulated_verifier(n, p):
    """Monte Carlo of chain verification: draft tokens are checked in order, the first
    rejection ends the step, and the target model always adds its own (bonus) token."""
    rng = np.random.default_rng(7)
    ok = rng.random((200_000, n)) < p
    accepted = np.where(ok.all(axis=1), n, np.argmin(ok, axis=1))  # drafts before a rejection
    assert accepted_length(n, p) == pytest.approx(1 + accepted.mean(), rel=5e-3)


def test_unit_example():
    # one draft token accepted 85% of the time: 1 + 0.85 tokens per step; two at 50%: 1.75
    assert accepted_length(1, 0.85) == pytest.approx(1.85)
    assert accepted_length(2, 0.5) == pytest.approx(1.75)


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3"), load_hardware("h800")


def _run(m, h, batch, **dep):
    return predict(m, h, Deployment(gpus=16, ep=16, weights="fp8", **dep),
                   Workload("decode", batch=batch, context=2048))


def test_accept_zero_is_slower_than_no_mtp(v3):
    m, h = v3
    base = _run(m, h, 32)
    spec = _run(m, h, 32, mtp=2, accept=0.0)
    assert spec["tokens_per_gpu_s"] < base["tokens_per_gpu_s"]
    assert spec["tpot_s"] > base["tpot_s"]


def test_verify_step_does_the_work_of_n_plus_one_tokens(v3):
    """The verify step's GEMMs see B (N + 1) tokens; its attention reads each request's KV once
    (the drafts ride as extra query heads)."""
    m, h = v3
    spec = _run(m, h, 8, mtp=3, accept=0.5)["work_per_layer"]
    wide = _run(m, h, 32)["work_per_layer"]
    narrow = _run(m, h, 8)["work_per_layer"]
    for key in ("attention_proj", "moe_routed", "shared_expert"):
        assert spec[key]["flop"] == pytest.approx(wide[key]["flop"], rel=1e-12)
    assert spec["dispatch"]["net_bytes"] == pytest.approx(wide["dispatch"]["net_bytes"], rel=1e-12)
    assert spec["attention_core"]["flop"] == pytest.approx(4 * narrow["attention_core"]["flop"])
    # bytes: the KV once per request (8 x 2048 tokens x (512 + 64) latent x 2 bytes, one GPU
    # of EP16 with attention data-parallel) and the absorbed q / o rows per query token
    # (128 heads x (2 x 512 + 64) x 2 bytes), four query tokens per request
    kv, rows = 8 * 2048 * 576 * 2, 8 * 128 * 1088 * 2
    assert narrow["attention_core"]["hbm_bytes"] == kv + rows
    assert spec["attention_core"]["hbm_bytes"] == kv + 4 * rows


def test_cheap_drafts_approach_n_plus_one():
    """A dense model, one request on one GPU: the verify step reads the same weights as a plain
    step, so with every draft accepted the tokens per second approach N + 1 times, less the
    drafts' own cost (a layer and the 152k-row LM head each: about 8% of the step per draft)."""
    m, h = load_model("qwen3-8b"), load_hardware("h20")
    wl = Workload("decode", batch=1, context=2048)
    base = predict(m, h, Deployment(), wl)["tokens_per_gpu_s"]
    gains = []
    for n in (1, 2, 3):
        r = predict(m, h, Deployment(mtp=n, accept=1.0), wl)
        assert r["accepted_tokens_per_step"] == n + 1
        gains.append(r["tokens_per_gpu_s"] / base / (n + 1))
    assert 0.9 < gains[0] <= 1 and all(0.75 < g <= 1 for g in gains)
    assert gains == sorted(gains, reverse=True)  # each draft costs its pass


def test_moe_verify_touches_more_experts():
    """An MoE model at one request: verifying N + 1 tokens activates more experts than one
    token does, so the gain stays well below N + 1 even with every draft accepted."""
    m, h = load_model("qwen3-30b-a3b"), load_hardware("h20")
    wl = Workload("decode", batch=1, context=2048)
    base = predict(m, h, Deployment(), wl)
    spec = predict(m, h, Deployment(mtp=1, accept=1.0), wl)
    load = lambda r: r["work_per_layer"]["moe_weight_load"]["hbm_bytes"]  # noqa: E731
    # 8 of 128 experts for one token; 128 (1 - (1 - 8/128)^2) = 15.5 for two
    assert load(spec) / load(base) == pytest.approx(128 * (1 - (120 / 128) ** 2) / 8)
    assert 1 < spec["tokens_per_gpu_s"] / base["tokens_per_gpu_s"] < 1.7


def test_memory_holds_the_mtp_module(v3, capsys):
    m, h = v3
    args = ["memory", "deepseek-v3", "--hardware", "h800", "--gpus", "16", "--weights", "fp8",
            "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--mtp", "2"]) == 0
    spec = json.loads(capsys.readouterr().out)
    extra = spec["weights_bytes"] - plain["weights_bytes"]
    # DeepSeek's MTP module is one more MoE layer (and its projection): about 1/58 of the MoE
    # layers' weights per GPU, the shared embedding and head excepted
    assert 0.5e9 / 16 < extra < 2 * 11.5e9 / 16


@pytest.mark.slow
def test_serve_with_mtp_emits_more_per_step(v3):
    m, h = v3
    dep = Deployment(gpus=8, ep=8, weights="fp8")
    wl = Workload("serve", batch=16, isl=1024, osl=1024)
    plain = predict(m, h, dep, wl, memory=False)
    spec = predict(m, h, Deployment(gpus=8, ep=8, weights="fp8", mtp=1, accept=0.85), wl,
                   memory=False)
    assert spec["accepted_tokens_per_step"] == pytest.approx(1.85)
    assert spec["output_tokens_per_gpu_s"] > plain["output_tokens_per_gpu_s"]
    assert spec["tpot_s"] < plain["tpot_s"]


def test_accept_needs_mtp(capsys):
    assert main(["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode",
                 "--accept", "0.5"]) == 2
    assert "--mtp" in capsys.readouterr().err
