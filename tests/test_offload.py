"""Expert tiers (--expert-cache): hit rates against a simulated cache, offload time by hand,
limits and monotonicity, memory."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from moesym import Deployment, Workload, load_hardware, load_model
from moesym.cli import main
from moesym.model.predictor import predict
from moesym.routing.cache import hit_rate, misses_per_step
from moesym.routing.zipf import zipf_popularity


def _simulate(E, k, C, s, policy, T, steps=3000, seed=1):
    """Token-level hit rate of a real cache: each token draws k distinct experts by Zipf
    weights (successive sampling); static-top pins the C most popular, LRU keeps the C most
    recently active experts (recency updated after each step, ties in random order)."""
    rng = np.random.default_rng(seed)
    p = zipf_popularity(E, s)
    last = np.full(E, -1.0)  # step an expert was last active (LRU)
    hits = total = 0
    for step in range(steps):
        picks = np.array([rng.choice(E, size=k, replace=False, p=p) for _ in range(T)]).ravel()
        if policy == "static-top":
            cached = set(range(C))
        else:
            cached = set(np.argsort(-last, kind="stable")[:C]) if step else set()
        if step >= 200 or policy == "static-top":  # LRU after its warm-up
            hits += sum(e in cached for e in picks)
            total += len(picks)
        active = np.unique(picks)  # ties within a step broken at random, as token order does
        last[active] = step + 0.5 * rng.random(len(active))
    return hits / total


@pytest.mark.parametrize("policy", ["static-top", "lru"])
@pytest.mark.parametrize("E,k,C,s,T", [(8, 2, 4, 1.0, 1), (64, 4, 16, 0.8, 4), (32, 2, 8, 1.2, 2)])
def test_hit_rate_within_two_points_of_a_simulated_cache(E, k, C, s, T, policy):
    sim = _simulate(E, k, C, s, policy, T)
    assert hit_rate(E, k, C, s, policy, T) == pytest.approx(sim, abs=0.02)


def test_uniform_static_top_by_hand():
    # uniform routing: C / E of the assignments hit; the E - C cold experts are each active
    # with probability 1 - (1 - k/E)^T
    assert hit_rate(8, 2, 2, 0.0, "static-top", 3) == pytest.approx(2 / 8)
    assert misses_per_step(8, 2, 2, 0.0, "static-top", 3) == pytest.approx(6 * (1 - (6 / 8) ** 3))


@pytest.fixture(scope="module")
def mix():
    return load_model("mixtral-8x7b"), load_hardware("rtx-4090")


def _tpot(mix, **dep):
    m, h = mix
    return predict(m, h, Deployment(weights="w4a16", **dep),
                   Workload("decode", batch=1, context=4096), memory=False)


def test_full_cache_is_no_offload(mix):
    base = _tpot(mix)["step_time_s"]
    assert _tpot(mix, expert_cache=8)["step_time_s"] == pytest.approx(base, rel=1e-9)


def test_empty_cache_streams_every_active_expert_by_hand(mix):
    """Cache 0, one token, top-2 of 8: two experts cross PCIe per layer, each 3 d d_e weights
    at 4.25 bits: 2 x 3 x 4096 x 14336 x 0.53125 B / 31.5 GB/s."""
    r = _tpot(mix, expert_cache=0)
    assert r["expert_cache_hit_rate"] == 0
    want = 2 * 3 * 4096 * 14336 * 0.53125 / 31.5e9
    assert r["per_layer_s"]["expert_offload"] == pytest.approx(want, rel=1e-9)
    assert r["step_time_s"] - _tpot(mix)["step_time_s"] == pytest.approx(32 * want, rel=1e-6)


@pytest.mark.slow
def test_more_cache_is_never_slower(mix):
    for placement in ("stream", "host-compute"):
        for policy in ("static-top", "lru"):
            times = [_tpot(mix, expert_cache=c, cache_policy=policy, expert_placement=placement,
                           routing="zipf:1.0")["step_time_s"] for c in range(9)]
            assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))


def test_prefetch_hides_copies_under_compute(mix):
    plain, pre = _tpot(mix, expert_cache=6), _tpot(mix, expert_cache=6, prefetch=True)
    assert pre["step_time_s"] < plain["step_time_s"]
    assert pre["step_time_s"] >= _tpot(mix)["step_time_s"]


def test_memory_holds_only_the_cache(capsys):
    args = ["memory", "mixtral-8x7b", "--hardware", "rtx-4090", "--weights", "w4a16", "--json"]
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(args + ["--expert-cache", "2"]) == 0
    part = json.loads(capsys.readouterr().out)
    routed = full["weights_breakdown"]["routed_experts"]
    assert part["weights_breakdown"]["routed_experts"] == pytest.approx(routed * 2 / 8)
    assert part["host_expert_bytes"] == pytest.approx(routed * 6 / 8)
    assert part["free_bytes"] - full["free_bytes"] == pytest.approx(routed * 6 / 8, rel=1e-6)


def test_deepseek_w4a16_is_about_four_and_a_quarter_bits(capsys):
    assert main(["memory", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--weights",
                 "w4a16", "--group-size", "128", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    params = 58 * 256 * 3 * 7168 * 2048 / 8  # routed experts of one GPU of 8
    assert r["weights_breakdown"]["routed_experts"] * 8 / params == pytest.approx(4.25)


def test_contract_command_runs(capsys):
    assert main(["predict", "mixtral-8x7b", "--hardware", "rtx-4090", "--phase", "decode",
                 "--batch", "1", "--context", "4096", "--weights", "w4a16", "--group-size", "128",
                 "--expert-cache", "4", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert 0 < r["expert_cache_hit_rate"] < 1 and r["tokens_per_gpu_s"] > 0


@pytest.mark.slow
def test_derive_expert_cache_is_where_the_streamed_tier_fits_under_compute():
    # issue 17 item 4: the cache size from which the expert tier hides under the layer's compute.
    # Qwen3-30B-A3B BF16 on one H100 (PCIe host link), batch 256, uniform routing, static cache:
    # a pass activates each cold expert with a = 1 - (1 - 8/128)^256 and streams
    # 3 x 2048 x 768 x 2 bytes for it, so the tier costs (E - C) a bytes / W_host, by hand.
    from moesym.derive.expert_cache import expert_cache_hides

    m, h = load_model("qwen3-30b-a3b"), load_hardware("h100")
    dep = Deployment(prefetch=True, expert_cache=0)
    wl = Workload("decode", batch=256, context=2048)
    cf = expert_cache_hides(m, h, dep, wl)
    per_expert_s = 3 * 2048 * 768 * 2 / h.host_link_Bps
    a = 1 - (1 - 8 / 128) ** 256
    t_c = predict(m, h, dep.with_(expert_cache=100), wl)["layer_compute_s"]
    # streaming leaves the device's work alone: the compute is the same at every cache size
    assert predict(m, h, dep.with_(expert_cache=10), wl)["layer_compute_s"] == pytest.approx(t_c, rel=1e-12)
    want = math.ceil(128 - t_c / (a * per_expert_s))
    assert 0 < want < 128 and cf.value == want
    assert cf.closed_value == pytest.approx(128 - t_c / (a * per_expert_s), rel=1e-9)
    # and the model agrees on both sides of it
    off = lambda c: predict(m, h, dep.with_(expert_cache=c), wl)["per_layer_s"]["expert_offload"]  # noqa: E731
    assert off(want) <= t_c < off(want - 1)


def _freq_file(tmp_path, shares, header=True):
    p = tmp_path / "freq.csv"
    rows = [f"{i},{float(x)!r}" for i, x in enumerate(shares)]
    p.write_text(("expert,count\n" if header else "") + "\n".join(rows) + "\n")
    return p


def test_measured_frequencies_are_the_inclusion_probabilities(tmp_path):
    # issue 19: a per-expert frequency file. A token takes k distinct experts, so the share of
    # assignments s_i gives the inclusion probability k s_i exactly; static-top's token hit
    # rate is then the sum of the C largest shares (by hand).
    from moesym.routing.cache import hit_rate
    from moesym.specs.deployment import Routing

    counts = [40, 10, 30, 20, 5, 5, 60, 30]  # Mixtral's 8 experts, top-2: shares count / 200
    r = Routing.parse(f"freq:{_freq_file(tmp_path, counts)}")
    shares = np.array(counts) / 200
    assert r.kind == "freq" and np.allclose(r.freqs, shares)
    assert hit_rate(8, 2, 3, r.skew, "static-top", 1) == pytest.approx(
        np.sort(shares)[::-1][:3].sum(), rel=1e-12)
    m, h = load_model("mixtral-8x7b"), load_hardware("rtx-4090")
    dep = Deployment(weights="w4a16", expert_cache=3, routing=r)
    got = predict(m, h, dep, Workload("decode", batch=1, context=1024))
    assert got["expert_cache_hit_rate"] == pytest.approx(np.sort(shares)[::-1][:3].sum(), rel=1e-9)


def test_a_frequency_file_of_zipf_shares_reproduces_zipf_routing(tmp_path):
    # the file path and the Zipf path meet in the same inclusion probabilities: a file holding
    # Zipf(1.0)'s inclusion probabilities / k must give zipf:1.0's prediction
    from moesym.routing.zipf import zipf_inclusion_probabilities

    m, h = load_model("qwen3-30b-a3b"), load_hardware("h20")
    pi = zipf_inclusion_probabilities(128, 8, 1.0)
    f = _freq_file(tmp_path, list(pi / 8), header=False)
    wl = Workload("decode", batch=64, context=2048)
    a = predict(m, h, Deployment(gpus=4, ep=4, routing=f"freq:{f}"), wl)
    b = predict(m, h, Deployment(gpus=4, ep=4, routing="zipf:1.0"), wl)
    assert a["step_time_s"] == pytest.approx(b["step_time_s"], rel=1e-9)
    assert a["step_time_s"] > predict(m, h, Deployment(gpus=4, ep=4), wl)["step_time_s"]


@pytest.mark.parametrize("text, field", [
    ("1\n2\n3\n", "3 experts in the file"),           # Qwen3-30B-A3B routes over 128
    ("a,b\n1,x\n", "is not a number"),
    ("-1\n" * 128, ">= 0"),
    ("1000\n" + "1\n" * 127, "more than 1/k"),       # one expert in more than every token
])
def test_bad_frequency_files_are_one_line_exit_2(tmp_path, capsys, text, field):
    p = tmp_path / "f.csv"
    p.write_text(text)
    rc = main(["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode", "--batch",
               "8", "--context", "1024", "--routing", f"freq:{p}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and field in err and "--routing" in err


@pytest.mark.slow
def test_optimize_chooses_the_expert_cache_against_the_batch_it_displaces():
    # issue 19: optimize searches the cache size; checked against a brute force of predict over
    # every (cache, batch): a bigger cache is faster per step but leaves less memory for KV
    from moesym.search.optimize import optimize

    m, h = load_model("mixtral-8x7b"), load_hardware("rtx-4090")
    base = Deployment(weights="w4a16", prefetch=True)
    r = optimize(m, h, 1, "decode", context=4096, tpot_s=2.0, base=base, max_size=48,
                 micro_batches=(1,), expert_caches=[1, 4, 6])
    best = None
    for c in (1, 4, 6):
        for b in range(1, 49):
            p = predict(m, h, base.with_(expert_cache=c), Workload("decode", batch=b, context=4096))
            if p["fits"] and p["tpot_s"] <= 2.0 and (best is None or p["tokens_per_gpu_s"] > best[0]):
                best = (p["tokens_per_gpu_s"], c, b)
    assert (r.best["expert_cache"], r.best["batch"]) == best[1:]
    assert r.best["tokens_per_gpu_s"] == pytest.approx(best[0], rel=1e-9)
    with pytest.raises(Exception, match="--gpus 1"):
        optimize(m, h, 2, "decode", context=4096, tpot_s=2.0, base=base, expert_caches="auto")
