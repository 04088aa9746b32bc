"""The serving simulation (moesym.serving) against an independent event simulation written
here (plain Python, one request and one token at a time), queueing identities, the single-
request limit and the steady state, and its bad-input errors."""

import math
import random

import numpy as np
import pytest

from moesym.serving.clients import Client, lengths, range_ratio
from moesym.serving.scheduler import SchedulerConfig
from moesym.serving.simulator import run


# -- an independent reference: every request and every token stepped explicitly -------------
def toy_time(kind, b, kv, p, L):
    """A synthetic rank step time (s) of the step's contents: nonlinear enough that a wrong
    batch, KV, token count or prompt length changes it."""
    if kind == 0:
        return 0.0
    return 1e-3 + 2e-4 * b + 1e-7 * b * kv + 3e-6 * p + 1e-9 * p * L + (5e-4 if p else 0.0)


def _pad(b, sizes):
    big = [s for s in sizes if s >= b]
    return min(big) if big else b


def reference(cfg, ranks, isl, osl, closed_c=None, arrivals=None):
    """Per request (arrival, first token, finish) times, by brute force."""
    n = len(isl)
    arr = [math.inf] * n
    if closed_c is not None:
        for i in range(min(closed_c, n)):
            arr[i] = 0.0
    else:
        arr = list(arrivals)
    rank = [i % ranks for i in range(n)]      # round robin in sending order
    seen = [False] * n
    waiting = [[] for _ in range(ranks)]
    pref = [[] for _ in range(ranks)]
    dec = [[] for _ in range(ranks)]
    done = [0] * n
    steps_left = [max(0, math.ceil(o - 1)) for o in osl]
    emitted_decode = [0] * n
    first = [None] * n
    fin = [None] * n
    sent = min(closed_c, n) if closed_c is not None else n
    t = 0.0
    t_prev = -math.inf   # start of the step before the one being formed (busy engine)
    held = 0             # steps new prompts have waited for the DP balance
    count = 0            # the receive counter (recv_interval > 1)
    was_prefill = False
    route = 0
    booting = []         # received by a loop with a batch to run: they join at the next loop
    while any(f is None for f in fin):
        idle = not any(waiting[r] or pref[r] or dec[r] for r in range(ranks))
        for i in booting:  # the bootstrap lag: polled again, their handshake is done
            rank[i] = route % ranks
            route += 1
            waiting[rank[i]].append(i)
        booting = []
        if not idle:  # the receive counter: a decode step adds 1, a step that prefills K
            count += cfg.recv_interval if was_prefill else 1
        if idle or count >= cfg.recv_interval:
            count = 0
            # the idle loop spins: everything sent by now is received; a busy engine receives
            # at its loop before it forms this step: when the last step ended, or (overlap
            # scheduler) when the one before it did, and a request sent at that very moment
            # is not there yet (the client's round trip)
            upto = t if idle else (t_prev if cfg.recv_lag else t)
            # a loop that has a batch to run (queued, or just bootstrapped) leaves what it
            # receives bootstrapping; one with nothing to run spins through the handshake
            lag = cfg.bootstrap_lag and any(waiting[r] or pref[r] or dec[r] for r in range(ranks))
            for i in sorted(range(n), key=lambda i: arr[i]):
                if not seen[i] and (arr[i] <= upto if idle else arr[i] < upto):
                    seen[i] = True
                    if lag:
                        booting.append(i)
                        continue
                    rank[i] = route % ranks
                    route += 1
                    waiting[rank[i]].append(i)
        if not any(waiting[r] or pref[r] or dec[r] for r in range(ranks)):
            t = min(arr[i] for i in range(n) if not seen[i])
            t_prev, was_prefill = -math.inf, False
            continue
        # the attention-DP balance: new prompts wait while some rank has none waiting and
        # every rank decodes, for at most dp_balance_steps steps
        hold = False
        if cfg.dp_balance_steps and ranks > 1 and any(waiting[r] for r in range(ranks)):
            hold = (not all(waiting[r] for r in range(ranks))
                    and all(dec[r] for r in range(ranks)) and held < cfg.dp_balance_steps)
        held = held + 1 if hold else 0
        times, finished, pc_any = [], [], []
        for r in range(ranks):
            kv = sum(isl[i] + emitted_decode[i] for i in dec[r]) + sum(isl[i] for i in pref[r])
            reserved = cfg.kv_reserve * sum(steps_left[i] - emitted_decode[i] for i in dec[r])

            def pieces(budget, ndec):
                out = []
                for i in pref[r]:
                    if budget <= 0:
                        break
                    x = min(isl[i] - done[i], budget)
                    out.append((i, x))
                    budget -= x
                nheld = ndec + len(pref[r])
                nonlocal kv
                while budget > 0 and waiting[r] and nheld < cfg.max_running and not hold:
                    i = waiting[r][0]
                    if kv + reserved + isl[i] + cfg.kv_reserve * steps_left[i] > cfg.kv_capacity_tokens:
                        break
                    waiting[r].pop(0)
                    pref[r].append(i)
                    kv += isl[i]
                    nheld += 1
                    x = min(isl[i] - done[i], budget)
                    out.append((i, x))
                    budget -= x
                return out

            if cfg.policy == "prefill-first":
                pc = pieces(cfg.chunk_tokens, len(dec[r]))
                decode = not pc or cfg.mixed_chunk
            else:
                pc = pieces(max(0, min(cfg.step_tokens - len(dec[r]), cfg.chunk_tokens)), len(dec[r]))
                decode = True
            b = len(dec[r]) if decode else 0
            kvd = sum(isl[i] + emitted_decode[i] for i in dec[r])
            p = sum(x for _, x in pc)
            pc_any.append(bool(p))
            L = sum(isl[i] * x for i, x in pc) / p if p else 0.0
            kind = (3 if b else 2) if p else (1 if b else 0)
            bb = _pad(b, cfg.graph_sizes) if (b and not p) else b
            times.append(toy_time(kind, bb, kvd / b if b else 0.0, p, L))
            if b:
                for i in list(dec[r]):
                    emitted_decode[i] += 1
                    if emitted_decode[i] >= steps_left[i]:
                        dec[r].remove(i)
                        finished.append(i)
            for i, x in pc:
                done[i] += x
                if done[i] >= isl[i]:
                    pref[r].remove(i)
                    first[i] = ("step", None)
                    if steps_left[i] == 0:
                        finished.append(i)
                    else:
                        dec[r].append(i)
            for i, x in pc:
                if first[i] == ("step", None):
                    first[i] = "pending"
        dt = max(times)
        t_prev, was_prefill = t, any(pc_any)
        t += dt
        for i in range(n):
            if first[i] == "pending":
                first[i] = t
        for i in finished:
            fin[i] = t
            if closed_c is not None and sent < n:
                arr[sent] = t
                sent += 1
    return np.array(arr), np.array(first, dtype=float), np.array(fin, dtype=float)


def toy_times(kind, b, kv, p, L):
    out = np.zeros(kind.shape)
    for idx in np.ndindex(kind.shape):
        out[idx] = toy_time(kind[idx], b[idx], kv[idx], p[idx], L[idx])
    return out


def random_case(rng):
    policy = rng.choice(["prefill-first", "decode-first"])
    cfg = SchedulerConfig(policy=policy, mixed_chunk=bool(rng.random() < 0.5),
                          chunk_tokens=rng.choice([16, 64, 200]), step_tokens=rng.choice([64, 300]),
                          max_running=rng.choice([2, 5, 1000]),
                          kv_capacity_tokens=rng.choice([math.inf, 2000.0]),
                          kv_reserve=1.0, graph_sizes=rng.choice([(), (1, 2, 4, 8)]),
                          recv_lag=rng.choice([0, 1]), recv_interval=rng.choice([1, 1, 3]),
                          dp_balance_steps=rng.choice([0, 0, 2]),
                          bootstrap_lag=rng.choice([0, 0, 1]))
    n = rng.randint(1, 25)
    isl = [rng.randint(1, 300) for _ in range(n)]
    osl = [rng.randint(1, 30) for _ in range(n)]
    ranks = rng.choice([1, 2, 3])
    return cfg, ranks, isl, osl


@pytest.mark.parametrize("seed", range(40))
def test_matches_an_independent_event_simulation(seed):
    rng = random.Random(seed)
    cfg, ranks, isl, osl = random_case(rng)
    if rng.random() < 0.5:
        c = rng.randint(1, 8)
        got = run(cfg, ranks, Client(concurrency=c, num_prompts=len(isl)), isl, osl, toy_times)
        want = reference(cfg, ranks, isl, osl, closed_c=c)
    else:
        arrivals = np.cumsum([rng.expovariate(30.0) for _ in isl])
        got = run(cfg, ranks, Client(request_rate=30.0, num_prompts=len(isl)), isl, osl,
                  toy_times, arrivals)
        want = reference(cfg, ranks, isl, osl, arrivals=arrivals)
    np.testing.assert_allclose(got.arrival_s, want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.first_token_s, want[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.finish_s, want[2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_one_rank_stands_for_identical_ranks(seed):
    """A closed loop of one length split evenly over R ranks: one rank simulated and replicated
    (what Simulation.run does for such loads) equals the R-rank run, per request and per step,
    with either routing and with preemption."""
    from dataclasses import replace

    from moesym.serving.simulator import replicate

    rng = random.Random(seed)
    cfg, _, _, _ = random_case(rng)
    cfg = replace(cfg, dp_routing=rng.choice(["round-robin", "shortest-queue"]),
                  kv_reserve=rng.choice([0.0, 1.0]))
    ranks, per = rng.choice([2, 3, 4]), rng.randint(1, 4)
    n = ranks * rng.randint(per, 3 * per)
    isl, osl = [rng.randint(1, 300)] * n, [rng.randint(1, 30)] * n
    full = run(cfg, ranks, Client(concurrency=ranks * per, num_prompts=n), isl, osl, toy_times)
    one = replicate(run(cfg, 1, Client(concurrency=per, num_prompts=n // ranks), isl[:n // ranks],
                        osl[:n // ranks], toy_times), ranks)
    for a, b in ((full.arrival_s, one.arrival_s), (full.first_token_s, one.first_token_s),
                 (full.finish_s, one.finish_s), (full.step_s, one.step_s),
                 (full.running, one.running), (full.kv_used, one.kv_used),
                 (full.contents["tokens"], one.contents["tokens"])):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    assert full.preemptions == one.preemptions
    for a, b in zip(full.token_times, one.token_times):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_preemption_keeps_every_token_and_the_kv_within_capacity():
    """On-demand KV (reserve 0) that runs out: requests are preempted and recomputed, every
    request still emits all its tokens, in order, and the KV never exceeds the capacity."""
    cfg = SchedulerConfig(policy="decode-first", chunk_tokens=256, step_tokens=512,
                          kv_capacity_tokens=1500.0, kv_reserve=0.0)
    isl, osl = [200] * 12, [200] * 12
    r = run(cfg, 1, Client(concurrency=12, num_prompts=12), isl, osl, toy_times)
    assert r.preemptions > 0
    assert r.kv_used.max() <= 1500.0
    for tt, o in zip(r.token_times, osl):
        assert len(tt) == o and np.all(np.diff(tt) > 0)


def test_littles_law():
    """Time-averaged requests in the system (the scheduler's own running + waiting, weighted
    by step time) = arrival rate x mean time in the system, for a Poisson client."""
    cfg = SchedulerConfig(policy="decode-first", chunk_tokens=128, step_tokens=256)
    rng = np.random.default_rng(1)
    n = 400
    isl, osl = rng.integers(50, 300, n), rng.integers(20, 60, n)
    arrivals = np.cumsum(rng.exponential(1 / 60.0, n))
    r = run(cfg, 1, Client(request_rate=60.0, num_prompts=n), isl, osl, toy_times, arrivals)
    T = r.finish_s.max()
    in_system = np.sum((r.running + r.waiting) * r.step_s) / T
    lam_w = n / T * np.mean(r.finish_s - r.arrival_s)
    assert in_system == pytest.approx(lam_w, rel=0.05)


# -- on moesym's own compiled model -----------------------------------------------------------
@pytest.fixture(scope="module")
def qwen_h20():
    import moesym as ms

    return ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"), ms.Deployment(gpus=1)


def _profile(**kw):
    """vLLM's profile with a 2048-token step and chunk (and any other field overridden)."""
    from dataclasses import replace

    from moesym.engines import load_engine

    base = dict(chunk_tokens=2048, step_token_budget=2048, cuda_graph_batch_sizes=(1, 2, 4, 8))
    base.update(kw)
    return replace(load_engine("vllm"), **base)


def test_one_request_at_a_time_is_its_prefill_and_decode_steps(qwen_h20):
    """Concurrency 1: TTFT = the prompt's prefill step (predict's prefill at that prompt),
    TPOT = the mean of predict's decode step at batch 1 over the KV lengths it passes."""
    import moesym as ms
    from moesym.serving import simulate

    model, hw, dep = qwen_h20
    isl, osl = 1000, 6
    r = simulate(model, hw, dep, Client(concurrency=1, num_prompts=2), str(isl), str(osl),
                 engine=_profile())
    pre = ms.predict(model, hw, dep, phase="prefill", tokens=isl, context=isl)
    dec = [ms.predict(model, hw, dep, phase="decode", batch=1, context=isl + j)["step_time_s"]
           for j in range(osl - 1)]
    assert r["ttft_ms"]["mean"] == pytest.approx(pre["step_time_s"] * 1e3, rel=1e-9)
    assert r["tpot_ms"]["mean"] == pytest.approx(np.mean(dec) * 1e3, rel=1e-9)


def test_empty_queue_matches_the_steady_state(qwen_h20):
    """Desynchronised requests that never queue (decode-first, mixed chunks): the simulated
    TPOT and output throughput come close to predict --phase serve's steady state at the same
    requests in flight (the steady state's Poisson approximation of prefill arrivals and its
    mean KV length are the difference)."""
    import moesym as ms
    from moesym.serving import simulate

    model, hw, dep = qwen_h20
    r = simulate(model, hw, dep, Client(concurrency=32, num_prompts=600), "uniform:500:1500",
                 "uniform:100:300", engine=_profile(cuda_graph_padding=False))
    ss = ms.predict(model, hw, dep, phase="serve", batch=32, isl=1000, osl=200, chunk=2048)
    assert r["timeline"]["waiting"][-len(r["timeline"]["waiting"]) // 2] == 0
    assert r["tpot_ms"]["mean"] == pytest.approx(ss["tpot_s"] * 1e3, rel=0.1)
    assert r["output_tokens_per_gpu_s"] == pytest.approx(ss["output_tokens_per_gpu_s"], rel=0.1)


def test_lengths_and_range_ratio():
    isl, osl = lengths(1000, "uniform:10:20", "lognormal:100:0.5", seed=3)
    assert isl.min() >= 10 and isl.max() <= 20 and set(np.unique(isl)) == set(range(10, 21))
    assert abs(osl.mean() - 100) < 5
    # SGLang bench_serving: randint(max(int(N R), 1), N + 1); vLLM: [floor(N(1-R)), ceil(N(1+R))]
    assert range_ratio(1000, 0.5) == "uniform:500:1000"
    assert range_ratio(1000, 0.5, "vllm") == "uniform:500:1500"


@pytest.mark.parametrize("argv, needle", [
    (["--concurrency", "0", "--isl", "10", "--osl", "10"], "--concurrency"),
    (["--request-rate", "-1", "--duration", "5", "--isl", "10", "--osl", "10"], "--request-rate"),
    (["--request-rate", "2", "--isl", "10", "--osl", "10"], "--duration"),
    (["--concurrency", "4", "--duration", "5", "--isl", "10", "--osl", "10"], "--duration"),
    (["--concurrency", "4", "--osl", "10"], "--isl"),
    (["--concurrency", "4", "--isl-dist", "uniform:9:3", "--osl", "10"], "--isl"),
    (["--concurrency", "4", "--isl", "10", "--osl", "10", "--num-prompts", "0"], "--num-prompts"),
    (["--concurrency", "4", "--isl", "10", "--osl", "10", "--pp", "2", "--gpus", "2"], "--pp"),
    (["--concurrency", "4", "--isl", "10", "--osl", "10", "--engine", "nosuch"], "nosuch"),
    (["--concurrency", "4", "--lengths-file", "/nonexistent.csv"], "--lengths-file"),
    # 3M tokens exceed Qwen3-8B's 40960 positions (refused before their 442 GB of KV)
    (["--concurrency", "1", "--isl", "3000000", "--osl", "10"], "--isl 3000000"),
    (["--concurrency", "1", "--isl", "9000", "--osl", "10", "--engine", "trtllm"], "--chunk"),
])
def test_bad_input_is_one_line(argv, needle, capsys):
    from moesym.cli import main

    rc = main(["simulate", "qwen3-8b", "--hardware", "h20"] + argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_empty_lengths_file(tmp_path, capsys):
    from moesym.cli import main

    f = tmp_path / "lengths.csv"
    f.write_text("isl,osl\n")
    rc = main(["simulate", "qwen3-8b", "--hardware", "h20", "--concurrency", "2",
               "--lengths-file", str(f)])
    assert rc == 2 and "--lengths-file" in capsys.readouterr().err


@pytest.mark.slow
# -- optimize against percentile limits -------------------------------------------------------
def test_sla_optimize_answer_meets_its_limits_and_the_next_concurrency_does_not(cli_json):
    """The best deployment's concurrency meets the p90 limits when simulated again through
    moesym simulate (the last two of three rounds measured), and the concurrency the search
    found failing misses the limit it names as binding."""
    from moesym.cli import main

    args = ["qwen3-30b-a3b", "--hardware", "h20", "--gpus", "2", "--isl", "512", "--osl", "64"]
    r = cli_json(["optimize", *args, "--phase", "serve", "--ttft-ms", "400", "--tpot-ms", "40",
                  "--percentile", "90", "--engine", "vllm"])
    b = r["best"]
    assert b["meets"] and b["ttft_p90_s"] <= 0.4 and b["tpot_p90_s"] <= 0.04

    def p90(concurrency):
        import moesym as ms
        from moesym.serving import Simulation
        from moesym.serving.clients import Client
        from moesym.serving.sla import percentile_latencies

        dep = ms.Deployment(gpus=2, tp=b["tp"], ep=b["ep"], micro_batches=b["micro_batches"],
                            a2a=ms.A2AMode(b["a2a"]))
        sim = Simulation(ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"), dep, "vllm")
        run = sim.run(Client(concurrency=concurrency, num_prompts=3 * concurrency), "512", "64")
        return percentile_latencies(run, 90, warmup=concurrency)

    ok = p90(b["concurrency"])
    assert ok["ttft_s"] <= 0.4 and ok["tpot_s"] <= 0.04
    if b["fails_at_concurrency"] is not None:
        bad = p90(b["fails_at_concurrency"])
        assert all(bad[f"{k}_s"] > {"ttft": 0.4, "tpot": 0.04}[k] for k in b["binding"])


@pytest.mark.slow
def test_sla_pools_answer_meets_its_limits_and_the_next_concurrency_does_not(cli_json):
    """Disaggregated pools: the answer's concurrency meets the p90 limits when its pools are
    simulated again (simulate_disaggregated, the last two of three rounds measured), the
    concurrency found failing misses the binding limit, and the pools fit the GPUs."""
    import moesym as ms
    from moesym.serving import simulate_disaggregated
    from moesym.serving.clients import Client

    args = ["qwen3-30b-a3b", "--hardware", "h20", "--gpus", "4", "--isl", "512", "--osl", "64"]
    lim = {"ttft": 0.5, "tpot": 0.05}
    r = cli_json(["optimize", *args, "--phase", "serve", "--ttft-ms", "500", "--tpot-ms", "50",
                  "--percentile", "90", "--disaggregate", "512:64"])
    b = r["best"]
    assert b["meets"] and b["ttft_p90_s"] <= lim["ttft"] and b["tpot_p90_s"] <= lim["tpot"]
    assert (b["prefill_replicas"] * b["prefill"]["gpus"] + b["decode_replicas"]
            * b["decode"]["gpus"]) == b["gpus_used"] <= 4

    def p90(concurrency):
        deps = [ms.Deployment(gpus=x["gpus"], tp=x["tp"], ep=x["ep"],
                              micro_batches=x["micro_batches"], a2a=ms.A2AMode(x["a2a"]))
                for x in (b["prefill"], b["decode"])]
        out = simulate_disaggregated(ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"),
                                     *deps, (b["prefill_replicas"], b["decode_replicas"]),
                                     Client(concurrency=concurrency, num_prompts=3 * concurrency),
                                     "512", "64", warmup=concurrency)
        return {k: out[f"{k}_ms"]["p90"] / 1e3 for k in lim}

    ok = p90(b["concurrency"])
    assert all(ok[k] <= lim[k] for k in lim), ok
    if b["fails_at_concurrency"] is not None:
        bad = p90(b["fails_at_concurrency"])
        assert all(bad[k] > lim[k] for k in b["binding"]), (bad, b["binding"])


def test_pool_sizes_balance_the_steady_state_rates():
    """One-GPU prefill replicas at 1 request/s and two-GPU decode replicas at 4 requests/s on 8
    GPUs: 4 prefill + 1 decode serve 4 requests/s on 6 GPUs (0.667 per GPU), better than 4 + 2
    (4 on 8: 0.5) or 2 + 1 (2 on 4: 0.5); by hand."""
    from moesym.serving.sla import _replicas

    assert _replicas(8, 1, 2, 1.0, 4.0) == (4, 1)
    assert _replicas(8, 2, 2, 1.0, 1.0) == (2, 2)  # equal rates: even pools, all 8 GPUs


@pytest.mark.parametrize("extra, needle", [
    (["--percentile", "90", "--tpot-ms", "50", "--disaggregate", "100:10"], "--disaggregate"),
    (["--percentile", "0", "--tpot-ms", "50"], "--percentile"),
    (["--percentile", "101", "--tpot-ms", "50"], "--percentile"),
    (["--percentile", "90"], "--ttft-ms"),
    (["--percentile", "90", "--tpot-ms", "0.001"], "relax"),
])
def test_sla_bad_input_is_one_line(extra, needle, capsys):
    from moesym.cli import main

    rc = main(["optimize", "qwen3-8b", "--hardware", "h20", "--gpus", "1", "--phase", "serve",
               "--isl", "256", "--osl", "32", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_report_serve_page_has_the_simulated_benchmark_it_says_how_to_reproduce(tmp_path, cli_json):
    """The serve report's "Under load" section prints a moesym simulate command; running it
    gives the TTFT and TPOT the page shows."""
    import html
    import re
    import shlex

    from moesym.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "qwen3-8b", "--hardware", "h20", "--phase", "serve", "--isl", "512",
                 "--osl", "32", "--batch", "4", "--out", str(out)]) == 0
    page = out.read_text()
    cmd = html.unescape(re.search(r"Reproduce: <code>(moesym simulate[^<]*)</code>", page)[1])
    r = cli_json(shlex.split(cmd)[1:])
    section = page[page.index("Under load"):]
    for key in ("ttft", "tpot"):
        mean = re.search(rf"<td>{key.upper()}</td><td>([0-9.]+) (ms|s)</td>", section)
        shown = float(mean[1]) * (1e3 if mean[2] == "s" else 1.0)
        assert shown == pytest.approx(r[f"{key}_ms"]["mean"], rel=1e-3)


# -- disaggregated: the co-simulation's clocks against a plain discrete-event loop -------------
def des_disaggregated(cfgs, ranks, replicas, isl, osl, xfer, closed_c=None, arrivals=None):
    """One step at a time in global time order (the replica whose next step starts first goes
    next; finished prompts and requests are routed in the order they finish, before any step
    that starts after them), each replica's scheduler as moesym's (checked above against the
    brute force)."""
    import heapq

    from moesym.serving.scheduler import EngineState

    n = len(isl)
    sides = ([("p", EngineState(cfgs[0], ranks[0], isl, [1] * n)) for _ in range(replicas[0])]
             + [("d", EngineState(cfgs[1], ranks[1], isl, osl, prefilled=True))
                for _ in range(replicas[1])])
    clock = [0.0] * len(sides)
    last_end = [-math.inf] * len(sides)
    pending = [[] for _ in sides]
    arr, first, fin = np.zeros(n), np.zeros(n), np.zeros(n)
    rr = {"p": 0, "d": 0}
    idx = {"p": [i for i, s in enumerate(sides) if s[0] == "p"],
           "d": [i for i, s in enumerate(sides) if s[0] == "d"]}

    def push(kind, t, rid):
        i = idx[kind][rr[kind] % len(idx[kind])]
        rr[kind] += 1
        pending[i].append((t, rid))
        if kind == "p":
            arr[rid] = t

    sent = 0
    if closed_c is not None:
        for _ in range(min(closed_c, n)):
            push("p", 0.0, sent)
            sent += 1
    else:
        for rid, t in enumerate(arrivals):
            push("p", float(t), rid)
        sent = n
    outputs = []  # (time, kind, request) of finished prompts and requests

    def release(upto):
        nonlocal sent
        while outputs and outputs[0][0] <= upto:
            t, kind, rid = heapq.heappop(outputs)
            if kind == "p":
                push("d", t + xfer[rid], rid)
            else:
                fin[rid] = t
                if closed_c is not None and sent < n:
                    push("p", t, sent)
                    sent += 1

    while True:
        cand = []
        for i, (kind, st) in enumerate(sides):
            due = [t for t, _ in pending[i]]
            if st.busy() or any(t <= clock[i] for t in due):
                cand.append((clock[i], i))
            elif due:
                cand.append((max(clock[i], min(due)), i))
        if not cand:
            if not outputs:
                break
            release(outputs[0][0])
            continue
        c, i = min(cand)
        if outputs and outputs[0][0] <= c:
            release(c)
            continue
        kind, st = sides[i]
        clock[i] = c
        for t, rid in sorted(pending[i]):
            if t <= c:  # it came while this side's last step ran, or while it was idle
                st.arrive(rid, st.step_index - 1 if st.step_index and last_end[i] >= c
                          else None)
        pending[i] = [(t, rid) for t, rid in pending[i] if t > c]
        row = st.step()
        dt = max(toy_time(x[0], x[2], x[3], x[4], x[5]) for x in row)
        end = c + dt
        for rid in st.finished_at[-1]:
            heapq.heappush(outputs, (end, kind, rid))
        for rid in range(n):
            if kind == "d" and st.first_step[rid] == st.step_index - 1:
                first[rid] = c
        clock[i] = last_end[i] = end
    return arr, first, fin


@pytest.mark.parametrize("seed", range(20))
def test_disaggregated_matches_a_discrete_event_loop(seed):
    from moesym.serving.disagg import run_disaggregated

    rng = random.Random(100 + seed)
    cfg_p, rp, isl, osl = random_case(rng)
    cfg_d, rd, _, _ = random_case(rng)
    replicas = (rng.randint(1, 2), rng.randint(1, 2))
    xfer = [rng.uniform(0.0, 0.01) for _ in isl]
    if rng.random() < 0.5:
        c = rng.randint(1, 8)
        client, arrivals = Client(concurrency=c, num_prompts=len(isl)), None
        want = des_disaggregated((cfg_p, cfg_d), (rp, rd), replicas, isl, osl, xfer, closed_c=c)
    else:
        arrivals = np.cumsum([rng.expovariate(30.0) for _ in isl])
        client = Client(request_rate=30.0, num_prompts=len(isl))
        want = des_disaggregated((cfg_p, cfg_d), (rp, rd), replicas, isl, osl, xfer,
                                 arrivals=arrivals)
    got, info = run_disaggregated((cfg_p, cfg_d), (rp, rd), replicas, client, isl, osl,
                                  (toy_times, toy_times), np.asarray(xfer), arrivals)
    assert info["late_arrivals"] == 0
    np.testing.assert_allclose(got.arrival_s, want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.first_token_s, want[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.finish_s, want[2], rtol=1e-9, atol=1e-12)


def test_disaggregated_one_request_at_a_time(qwen_h20):
    """Concurrency 1, one prefill and one decode replica: TTFT = the prompt's prefill step plus
    its KV transfer (isl x KV bytes per token over the link at its efficiency, plus its
    latency: the two GPUs share one H20 node, so NVLink; across nodes the scale-out link),
    TPOT = the mean of predict's decode steps over the KV lengths it passes."""
    import moesym as ms
    from moesym.serving import simulate_disaggregated

    model, hw, dep = qwen_h20
    isl, osl = 1000, 6
    r = simulate_disaggregated(model, hw, dep, dep, (1, 1), Client(concurrency=1, num_prompts=2),
                               str(isl), str(osl), engine=_profile())
    pre = ms.predict(model, hw, dep, phase="prefill", tokens=isl, context=isl)["step_time_s"]
    from moesym.memory import memory_model

    kv_per_token = memory_model(model, hw, dep).parts()["kv_per_token"]
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 dims x (K and V) x 2 bytes = 98,304 B/token
    assert kv_per_token == 48 * 4 * 128 * 2 * 2
    xfer = isl * kv_per_token / (hw.scale_up_Bps * hw.efficiency.scale_up) + hw.latency.scale_up_s
    dec = [ms.predict(model, hw, dep, phase="decode", batch=1, context=isl + j)["step_time_s"]
           for j in range(osl - 1)]
    assert r["ttft_ms"]["mean"] == pytest.approx((pre + xfer) * 1e3, rel=1e-9)
    assert r["tpot_ms"]["mean"] == pytest.approx(np.mean(dec) * 1e3, rel=1e-9)
    assert r["disaggregation"]["gpus"] == 2 and r["disaggregation"]["late_arrivals"] == 0


@pytest.mark.parametrize("argv, needle", [
    (["--prefill-gpus", "2"], "--disaggregate"),
    (["--disaggregate", "1"], "--disaggregate"),
    (["--disaggregate", "0:1"], "--disaggregate"),
    (["--disaggregate", "1:1", "--prefill-tp", "3", "--prefill-gpus", "3"], "prefill replica"),
])
def test_disaggregate_bad_input(argv, needle, capsys):
    from moesym.cli import main

    rc = main(["simulate", "qwen3-8b", "--hardware", "h20", "--concurrency", "2", "--isl", "64",
               "--osl", "8", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_lengths_file_pairs_are_sent_in_order(tmp_path, cli_json):
    """--lengths-file: one request per line, in order and repeated; the prompt and output
    tokens the run reports are the file's sums."""
    f = tmp_path / "pairs.csv"
    f.write_text("isl,osl\n100,5\n300,9\n")
    r = cli_json(["simulate", "qwen3-8b", "--hardware", "h20", "--concurrency", "2",
                  "--num-prompts", "4", "--lengths-file", str(f)])
    # 4 requests: (100,5), (300,9), (100,5), (300,9) -> 800 prompt and 28 output tokens
    assert r["input_tokens_per_gpu_s"] * r["duration_s"] == pytest.approx(800)
    assert r["output_tokens_per_gpu_s"] * r["duration_s"] == pytest.approx(28)


def test_progress_changes_nothing_and_stays_off_a_pipe(qwen_h20, capfd):
    """The simulate bar (issue 51: a long simulation says how far it is) is drawn only on a
    terminal: through a pipe nothing reaches stderr, and the numbers are the same with and
    without it."""
    from moesym.serving import simulate

    model, hw, dep = qwen_h20
    client = Client(concurrency=4, num_prompts=16)
    quiet = simulate(model, hw, dep, client, "256", "16", timeline_points=1)
    shown = simulate(model, hw, dep, client, "256", "16", timeline_points=1, progress=True)
    assert shown["tpot_ms"] == quiet["tpot_ms"] and shown["ttft_ms"] == quiet["ttft_ms"]
    assert "simulate" not in capfd.readouterr().err
