"""Serving as the public benchmarks measure it (issue 47): what a request's TTFT is made of, the
engines' eager prefill, their receive interval, TensorRT-LLM's attention-DP balance, the
speculative acceptance as a length, the engine profiles at other versions and behind other
front ends, and the published runs' table. The scheduler's mechanisms themselves are checked
against the brute-force event simulation in test_simulate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import moesym as ms
from moesym.errors import MoesymError, SpecError
from moesym.serving import simulate, simulate_disaggregated
from moesym.serving.clients import Client, range_ratio
from moesym.serving.engine import Launch


# -- the eager prefill's host time ---------------------------------------------------------------
def _profile(tmp_path, **keys) -> str:
    """A user profile over SGLang 0.5.9 with ``keys`` (TOML values)."""
    body = "\n".join(f"{k} = {v}" for k, v in keys.items())
    path = tmp_path / "eager.toml"
    path.write_text(f'[eager]\nbase = "sglang-0.5.9"\n{body}\n', encoding="utf-8")
    return str(path)


def test_an_eager_prefill_is_the_host_launching_its_kernels(tmp_path):
    """Qwen3-8B (36 dense layers) prefilling 16 tokens on an H200: the GPU needs a few ms
    (about 16 GB of weights at 4.8 TB/s is 3.4 ms), so with 100 us of host time per launched
    kernel the step is the host's: t_step (the hardware file's 500 us) + 36 layers x 11 kernels
    x 100 us. The 11 kernels of a layer, as the cost model lists them: the qkv and o
    projections, attention, the gate-up and down GEMMs, two RMSNorms with the residual add,
    rotary embedding, the KV-cache write and the query/key norms (the three elementwise
    attention kernels), and the SwiGLU activation. Replayed as a graph the step is the GPU's."""
    model, hw = ms.load_model("qwen3-8b"), ms.load_hardware("h200")
    wl = ms.Workload("prefill", tokens=16, context=16)
    eager = _profile(tmp_path, host_launch_us="{ nvidia = 100.0 }")
    step = ms.build_step(model, hw, ms.Deployment(engine=eager), wl).predict()["step_time_s"]
    assert step == pytest.approx(500e-6 + 36 * 11 * 100e-6, rel=1e-9)
    graphs = ms.build_step(model, hw, ms.Deployment(engine=eager, prefill_graphs=True),
                           wl).predict()["step_time_s"]
    assert 1e-3 < graphs < 10e-3
    # a decode step replays its CUDA graph: no per-kernel host time
    dec = ms.Workload("decode", batch=1, context=16)
    assert ms.build_step(model, hw, ms.Deployment(engine=eager), dec).predict()["step_time_s"] \
        == pytest.approx(ms.build_step(model, hw, ms.Deployment(engine="sglang-0.5.9"),
                                       dec).predict()["step_time_s"], rel=1e-12)


def test_a_maker_without_a_fit_takes_another_makers_with_a_warning(tmp_path):
    from moesym.engines import load_engine

    path = tmp_path / "v.toml"
    path.write_text('[v]\nbase = "vllm"\nhost_launch_us = { nvidia = 80.0 }\n', encoding="utf-8")
    p = load_engine(str(path))
    assert p.host_launch("nvidia") == pytest.approx(80e-6)
    with pytest.warns(UserWarning, match="no host launch time fitted on amd"):
        assert p.host_launch("amd") == pytest.approx(80e-6)


# -- what TTFT is made of ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen_h20():
    return ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20")


@pytest.mark.parametrize("engine", ["sglang-0.5.9", "vllm", "trtllm"])
def test_ttft_components_add_up_to_the_mean_ttft(qwen_h20, engine):
    model, hw = qwen_h20
    r = simulate(model, hw, ms.Deployment(engine=engine), Client(concurrency=24, num_prompts=96),
                 range_ratio(1024, 0.8), range_ratio(256, 0.8), timeline_points=1)
    parts = r["ttft_components_ms"]
    # first_use: the engine profile's one-time first prefill, where it has one
    assert set(parts) - {"first_use"} == {"receive", "queue", "prefill"}
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(r["ttft_ms"]["mean"], rel=1e-9)


def test_disaggregated_ttft_components_add_up(qwen_h20):
    model, hw = qwen_h20
    dep = ms.Deployment()
    r = simulate_disaggregated(model, hw, dep, dep, (1, 1), Client(concurrency=16,
                                                                    num_prompts=64),
                               "1024", "128", timeline_points=1)
    parts = r["ttft_components_ms"]
    assert set(parts) == {"receive", "queue", "prefill", "kv_transfer", "decode_admission"}
    assert sum(parts.values()) == pytest.approx(r["ttft_ms"]["mean"], rel=1e-9)
    # the transfer is the KV of the prompt over the scale-out link (kv_transfer_s: tested in
    # test_simulate.py's one-request case): the same for every request of one length
    assert parts["kv_transfer"] == pytest.approx(r["disaggregation"]["kv_transfer_ms"]["mean"])


def test_the_prefill_to_decode_hand_off_delays_each_request_by_its_seconds(qwen_h20, capsys):
    """One request at a time (concurrency 1): nothing queues, so a hand-off of c seconds between
    a prompt's prefill and its decode rank (the engine's path beside the KV transfer) moves
    every request's first token by exactly c, and leaves its decode untouched. The flag
    overrides the profile's fit; the fitted engine profiles carry theirs per device maker."""
    model, hw = qwen_h20
    dep = ms.Deployment(engine="dynamo-sglang")
    runs = {c: simulate_disaggregated(model, hw, dep, dep, (1, 1),
                                      Client(concurrency=1, num_prompts=6), "512", "32",
                                      launch=Launch(pd_handoff_s=c), timeline_points=1)
            for c in (0.0, 0.05)}
    for q in ("mean", "p50", "p90", "p99"):
        assert runs[0.05]["ttft_ms"][q] - runs[0.0]["ttft_ms"][q] == pytest.approx(50.0, abs=1e-6)
    assert runs[0.05]["tpot_ms"]["mean"] == pytest.approx(runs[0.0]["tpot_ms"]["mean"], rel=1e-12)
    assert runs[0.05]["disaggregation"]["pd_handoff_ms"] == pytest.approx(50.0)
    from moesym.engines import load_engine

    assert load_engine("dynamo-sglang").pd_handoff("nvidia") > 0
    assert load_engine("sglang").pd_handoff("nvidia") == 0.0
    from moesym.cli import main

    argv = ["simulate", "qwen3-30b-a3b", "--hardware", "h20", "--disaggregate", "1:1",
            "--concurrency", "1", "--num-prompts", "2", "--isl", "64", "--osl", "4"]
    assert main(argv + ["--pd-handoff-ms", "-5"]) == 2
    assert "--pd-handoff-ms" in capsys.readouterr().err


def _toy_times(kind, batch, kv_mean, tokens, prompt_len):
    """A step time that depends on the step's contents only: 1 ms + 10 us per prompt token
    and per decode request."""
    return 1e-3 + 1e-5 * (np.asarray(tokens) + np.asarray(batch))


@pytest.mark.parametrize("recv_lag", [0, 1])
def test_the_first_prefill_delays_the_first_wave_and_no_one_else(recv_lag):
    """A closed loop of 8 requests in flight out of 80: the scheduler works in steps, so a
    one-time extra c on the first step that prefills moves every later step by c and changes
    nothing else. The 8 requests of the first wave (all waiting at t = 0) get exactly c more
    TTFT; every later request, sent when an earlier one finished, the same TTFT as without it;
    so the mean TTFT rises by c x 8 / 80, all of it the ``first_use`` component."""
    from dataclasses import replace

    from moesym.serving.scheduler import SchedulerConfig
    from moesym.serving.simulator import run
    from moesym.serving.stats import ttft_components

    cfg = SchedulerConfig(policy="prefill-first", chunk_tokens=4096, recv_lag=recv_lag)
    isl, osl = [500] * 80, [40] * 80
    client = Client(concurrency=8, num_prompts=80)
    times = (lambda *a: np.stack([_toy_times(*a), np.full(len(a[0]), 2e-4)], axis=-1)) \
        if recv_lag else _toy_times
    warm = run(cfg, 1, client, isl, osl, times)
    cold = run(replace(cfg, cold_prefill_s=0.25), 1, client, isl, osl, times)
    ttft = lambda r: r.first_token_s - r.arrival_s  # noqa: E731
    np.testing.assert_allclose(ttft(cold)[:8], ttft(warm)[:8] + 0.25, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ttft(cold)[8:], ttft(warm)[8:], rtol=0, atol=1e-12)
    parts = ttft_components(cold)
    assert parts["first_use"] == pytest.approx(0.25 * 8 / 80 * 1e3, rel=1e-9)
    assert sum(parts.values()) == pytest.approx(np.mean(ttft(cold)) * 1e3, rel=1e-9)
    assert "first_use" not in ttft_components(warm)


def test_the_cold_prefill_flag_and_the_profiles_fit(capsys):
    """``--cold-prefill-ms`` overrides the profile's fitted value; 0 is a warmed-up server."""
    from moesym.cli import main

    argv = ["simulate", "qwen3-30b-a3b", "--hardware", "h20", "--engine", "sglang-0.5.9",
            "--concurrency", "4", "--isl", "256", "--osl", "16", "--json"]
    import json

    means = {}
    for ms_ in ("0", "400"):
        assert main(argv + ["--cold-prefill-ms", ms_]) == 0
        out = json.loads(capsys.readouterr().out)
        means[ms_] = out["ttft_components_ms"].get("first_use", 0.0)
    assert means["0"] == 0.0
    assert means["400"] == pytest.approx(400 * 4 / 40, rel=1e-9)
    assert main(argv + ["--cold-prefill-ms", "-1"]) == 2
    assert "--cold-prefill-ms" in capsys.readouterr().err


def test_the_receive_interval_makes_an_arrival_wait_for_the_engine(qwen_h20):
    """Requests arrive one at a time, far apart, to an engine that decodes a long request:
    with a receive interval of K decode steps an arrival waits on average (K - 1) / 2 steps
    more before the engine takes it (the counter is at a uniform phase when it comes)."""
    model, hw = qwen_h20
    dep = ms.Deployment(engine="sglang-0.5.9")

    def receive_ms(k):
        r = simulate(model, hw, dep, Client(request_rate=4.0, num_prompts=200), "128", "512",
                     launch=Launch(recv_interval=k), seed=3, timeline_points=1)
        return r["ttft_components_ms"]["receive"], r["tpot_ms"]["mean"]

    one, tpot = receive_ms(1)
    thirty, _ = receive_ms(30)
    assert thirty - one == pytest.approx(14.5 * tpot, rel=0.25)


def test_a_receive_interval_with_attention_dp_is_refused(qwen_h20):
    model, hw = qwen_h20
    dep = ms.Deployment(gpus=2, ep=2, engine="sglang-0.5.9")
    with pytest.raises(MoesymError, match="DP attention"):
        simulate(model, hw, dep, Client(concurrency=2, num_prompts=4), "64", "8",
                 launch=Launch(recv_interval=10))


@pytest.mark.parametrize("kw", [dict(chunk=0), dict(max_running=-1), dict(recv_interval=1.5),
                                dict(kv_fraction=1.2), dict(dp_balance_steps=-1)])
def test_bad_launch_settings_are_one_line(kw):
    with pytest.raises(MoesymError, match="engine launch setting"):
        Launch(**kw)


# -- speculative decoding ------------------------------------------------------------------------
def test_accept_length_inverts_the_accepted_length():
    from moesym.specs.speculative import accept_from_length, accepted_length

    for n, p in ((1, 0.85), (2, 0.6), (3, 0.607)):
        assert accept_from_length(n, accepted_length(n, p)) == pytest.approx(p, abs=1e-9)
    with pytest.raises(SpecError, match="between 1"):
        accept_from_length(3, 4.5)


@pytest.mark.parametrize("argv, needle", [
    (["--mtp", "3", "--accept-length", "4.2"], "--accept-length 4.2"),
    (["--mtp", "3", "--accept-length", "2", "--accept", "0.5"], "give one"),
    (["--accept-length", "2"], "needs `mtp`"),
])
def test_accept_length_bad_input(argv, needle, capsys):
    from moesym.cli import main

    rc = main(["predict", "deepseek-v3", "--hardware", "b200", "--gpus", "8", "--tp", "8",
               "--weights", "fp8", "--phase", "decode", "--batch", "8", "--context", "1000",
               *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle.replace("`mtp`", "--mtp") in err.replace("`mtp`", "--mtp")
    assert "\n" not in err and "Traceback" not in err


def test_more_draft_tokens_cost_more_per_step():
    """Each further draft token adds a one-token pass of the draft layer and a query per
    request to the verify and the draft extend: the step grows with N."""
    model, hw = ms.load_model("deepseek-v3"), ms.load_hardware("h200")
    wl = ms.Workload("decode", batch=8, context=1024)
    step = lambda n: ms.build_step(model, hw, ms.Deployment(gpus=8, tp=8, weights="fp8",  # noqa: E731
                                                            mtp=n, accept=0.6),
                                   wl).predict()["step_time_s"]
    zero, one, two, three = (step(n) if n else ms.build_step(
        model, hw, ms.Deployment(gpus=8, tp=8, weights="fp8"), wl).predict()["step_time_s"]
        for n in range(4))
    assert zero < one < two < three


# -- expert parallelism that does not divide the experts ---------------------------------------
def test_ep_that_does_not_divide_the_experts_gets_the_balancers_slots():
    """DeepSeek's 256 routed experts over EP 48 (GB200 decode workers of 48 GPUs): the fewest
    slots that EP divides are 288 = 6 x 48, so 32 redundant experts, said in a warning; EP 24
    takes 8 (264 = 11 x 24); a dividing EP or slots the user gave are left alone."""
    from moesym.specs.deployment import eplb_slots

    model = ms.load_model("deepseek-v3")
    with pytest.warns(UserWarning, match="32 redundant expert slots"):
        assert eplb_slots(model, ms.Deployment(gpus=48, ep=48)).redundant_experts == 32
    with pytest.warns(UserWarning, match="8 redundant"):
        assert eplb_slots(model, ms.Deployment(gpus=24, ep=24)).redundant_experts == 8
    assert eplb_slots(model, ms.Deployment(gpus=32, ep=32)).redundant_experts == 0
    given = ms.Deployment(gpus=48, ep=48, redundant_experts=64)
    assert eplb_slots(model, given) is given


# -- engine profiles -----------------------------------------------------------------------------
def test_sglang_059_is_0523_where_its_source_agrees():
    """The differences read in SGLang 0.5.9's source (server_args.py): no prefill graphs
    (enable_piecewise_cuda_graph False), the overlap scheduler off with speculative decoding
    (SGLANG_ENABLE_SPEC_V2 False), no prefill-graph or DeepEP term in the memory rule; the
    rest of the profile is 0.5.23's (the host time per eager kernel, fitted on 0.5.9's runs,
    is 0.5.23's too: the same Python runtime launches them)."""
    from dataclasses import fields

    from moesym.engines import load_engine

    old, new = load_engine("sglang-0.5.9"), load_engine("sglang")
    differ = {f.name for f in fields(old) if getattr(old, f.name) != getattr(new, f.name)}
    assert differ == {"name", "version", "description", "prefill_graphs",
                      "overlap_with_speculative", "kv_memory_rule", "lineage"}
    assert old.lineage == ("sglang-0.5.9", "sglang")
    assert old.prefill_graphs is False and new.prefill_graphs is True
    assert old.kv_memory_rule.prefill_graph_mla_bytes == 0
    assert old.kv_memory_rule.base_bytes == new.kv_memory_rule.base_bytes


def test_inferencex_framework_names_are_engines():
    from moesym.engines import load_engine

    assert load_engine("trt") is load_engine("trtllm")
    assert ms.Deployment(engine="trt").engine == "trtllm"
    assert load_engine("dynamo-trt").policy == load_engine("trtllm").policy
    assert load_engine("dynamo-sglang").prefill_graphs is False
    assert load_engine("mori-sglang").runs_on == ("amd",)
    assert load_engine("atom").runs_on == ("amd",)


def test_a_profile_based_on_an_unknown_table_is_one_line(tmp_path):
    from moesym.engines import load_engine

    path = tmp_path / "x.toml"
    path.write_text('[x]\nbase = "sglang-9"\n', encoding="utf-8")
    with pytest.raises(SpecError, match="base = 'sglang-9': names no other engine"):
        load_engine(str(path))


# -- the published runs' table -------------------------------------------------------------------
def test_the_runs_table_is_consistent_with_the_benchmark_arithmetic():
    """InferenceX counts all tokens per GPU of the deployment: for a disaggregated run
    tput = (input per prefill GPU x prefill GPUs + output per decode GPU x decode GPUs) / all
    GPUs (its README); an aggregated run's total is its input plus output per GPU. And the
    closed loop's output rate is Little's law's (within 20%: the first and last waves)."""
    from moesym.report.inferencex import load_runs

    runs = load_runs()
    assert len(runs) == 633
    for r in runs:
        if r.disagg:
            g_p, g_d = r.prefill_workers * r.prefill_gpus, r.decode_workers * r.decode_gpus
            total = (r.input_tput_per_gpu * g_p + r.output_tput_per_gpu * g_d) / (g_p + g_d)
            assert total == pytest.approx(r.tput_per_gpu, rel=0.02), r.id
            out_total = r.output_tput_per_gpu * g_d
        else:
            assert r.tput_per_gpu == pytest.approx(r.input_tput_per_gpu
                                                   + r.output_tput_per_gpu, rel=0.02), r.id
            out_total = r.output_tput_per_gpu * r.gpus
        # Little's law for the closed loop: C requests in flight, each E2E = TTFT + TPOT x
        # (OSL - 1) long and emitting OSL tokens (OSL uniform in [0.8, 1] x 1024: mean 922)
        e2e_s = (r.ttft_mean_ms + r.tpot_mean_ms * 921) * 1e-3
        assert out_total == pytest.approx(r.conc * 922 / e2e_s, rel=0.2), r.id


def test_a_run_is_simulated_as_the_benchmark_ran_it():
    """H200 SGLang TP8 at concurrency 4 (InferenceX run 26): the deployment, engine and client
    that the run's row and launch script give."""
    from moesym.report.inferencex import load_runs, setup

    run = next(r for r in load_runs() if r.id == 26)
    model, hw, engine, (dep_p, dep_d), replicas, launch = setup(run)
    assert (hw.name, engine, replicas) == ("h200", "sglang-0.5.9", None)
    assert (dep_d.gpus, dep_d.tp, dep_d.ep, dep_d.weights, dep_d.kv) == (8, 8, 1, "fp8", "bf16")
    # dsr1_fp8_h200.sh: --chunked-prefill-size 32768 --max-running-requests 512
    # --cuda-graph-max-bs 512 --mem-fraction-static 0.82
    assert (launch.chunk, launch.max_running, launch.cuda_graph_max_bs, launch.kv_fraction) \
        == (32768, 512, 512, 0.82)


@pytest.mark.slow
def test_validate_serving_runs_a_gpus_runs_against_what_was_measured(capsys):
    """`moesym validate --serving --gpu h200 --framework sglang --json`: InferenceX's five H200
    SGLang 0.5.9 runs (concurrency 4-64), each simulated and set against its published TPOT,
    TTFT and throughput; the mean TPOT within 20% of each measured value (these runs are
    among those the host launch time was fitted on, for their median TTFT only)."""
    import json

    from moesym.cli import main

    rc = main(["validate", "--serving", "--gpu", "h200", "--framework", "sglang", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["conc"] for r in doc["runs"]] == [4, 8, 16, 32, 64]
    for r in doc["runs"]:
        assert abs(r["tpot_mean_ms"]["error"]) < 0.2, r
        assert set(r["ttft_components_ms"]) == {"receive", "queue", "prefill"}
    assert doc["summary"]["all"]["runs"] == 5 and doc["summary"]["all"]["skipped"] == 0


def test_a_deployment_the_engine_runs_is_not_refused_by_its_default_share(capsys):
    """DeepSeek-R1 FP8 on 4 GB200s (169 GB of weights per 186 GB GPU) ran in InferenceX under
    Dynamo + SGLang, whose default memory share (about 0.85) would leave no KV: the launch set a
    larger one. moesym says so and uses its memory model's pool; the default share given
    explicitly (--mem-fraction) is the launch's, and then it truly does not fit."""
    from moesym.cli import main

    argv = ["simulate", "deepseek-v3", "--hardware", "gb200", "--gpus", "4", "--tp", "4",
            "--ep", "4", "--weights", "fp8", "--kv", "fp8", "--engine", "dynamo-sglang",
            "--concurrency", "4", "--isl", "1024", "--osl", "8", "--json"]
    with pytest.warns(UserWarning, match="default memory share .* leaves no KV room"):
        assert main(argv) == 0
    capsys.readouterr()
    assert main(argv + ["--mem-fraction", "0.85"]) == 2
    assert "does not fit" in capsys.readouterr().err
