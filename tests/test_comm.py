"""Expert-parallel communication, TP collectives and compute/communication overlap (issue 3).

Golden values are derived by hand here (or are published measurements, cited), never copied
from the code's output.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import sympy as sp

from moesym import Deployment, Workload, build_step, load_hardware, load_model
from moesym.cli import main
from moesym.model import overlap
from moesym.specs.deployment import A2AMode
from moesym.routing import GroupRouting
from moesym.symbolic.symbols import S
from moesym.terms import comm
from moesym.terms.dims import symbolic_dims

LL, NORMAL, AG = A2AMode.DEEPEP_LL, A2AMode.DEEPEP_NORMAL, A2AMode.ALLGATHER

# The small case: 16 experts, top-2, EP 4 = 2 nodes of 2 GPUs; 4 experts per GPU, 8 per node.
SMALL = replace(symbolic_dims(), experts=16, topk=2, ep=4, gpus=4, tp=1, hidden=1)
DOMAIN = 2


def _monte_carlo(n_tokens=200_000, seed=0, groups=None):
    """Seeded routing simulation of the small case: per token, distinct ranks and nodes, remote
    node copies (normal-mode RDMA), NVLink copies (normal mode: destination ranks other than the
    entry GPU of their node) and per-expert copies off-node / on-node-off-GPU (low latency)."""
    rng = np.random.default_rng(seed)
    out = {k: 0.0 for k in ("ranks", "nodes", "rdma_normal", "nvl_normal", "rdma_ll", "nvl_ll")}
    origin = rng.integers(0, 4, n_tokens)
    for i in range(n_tokens):
        if groups is None:
            ex = rng.choice(16, 2, replace=False)
        else:  # n_group groups of 16 / n_group experts, pick topk_group groups, then 2 experts
            n_g, k_g = groups
            size = 16 // n_g
            gs = rng.choice(n_g, k_g, replace=False)
            pool = np.concatenate([np.arange(g * size, (g + 1) * size) for g in gs])
            ex = rng.choice(pool, 2, replace=False)
        ranks = {int(e) // 4 for e in ex}
        nodes = {r // 2 for r in ranks}
        o = int(origin[i])
        out["ranks"] += len(ranks)
        out["nodes"] += len(nodes)
        out["rdma_normal"] += len(nodes - {o // 2})
        entry = {nd: nd * 2 + o % 2 for nd in nodes}  # own node: the origin itself
        out["nvl_normal"] += sum(1 for r in ranks if r != entry[r // 2])
        out["rdma_ll"] += sum(1 for e in ex if (int(e) // 4) // 2 != o // 2)
        out["nvl_ll"] += sum(1 for e in ex if (int(e) // 4) // 2 == o // 2 and int(e) // 4 != o)
    return {k: v / n_tokens for k, v in out.items()}


@pytest.fixture(scope="module")
def mc():
    return _monte_carlo(20_000)


def test_small_case_by_hand(mc):
    # P(a rank gets none of the 2 picks) = C(12,2)/C(16,2) = 66/120; ranks = 4 (1 - 11/20) = 9/5
    assert comm.distinct_ranks_per_token(SMALL) == sp.Rational(9, 5)
    # P(a node is missed) = C(8,2)/C(16,2) = 28/120 = 7/30; nodes = 2 x 23/30 = 23/15
    assert comm.distinct_nodes_per_token(SMALL, DOMAIN) == sp.Rational(23, 15)
    # normal mode: RDMA = nodes x (n - 1)/n = 23/30; NVLink = ranks x (g - 1)/g = 9/10
    v = comm.a2a_volume(SMALL, 1, 1, NORMAL, DOMAIN)
    assert (v.inter_bytes, v.intra_bytes) == (sp.Rational(23, 30), sp.Rational(9, 10))
    # low latency: of k = 2 experts, 2/4 off-node (RDMA), 2 x 1/4 on the other GPU of the node
    v = comm.a2a_volume(SMALL, 1, 1, LL, DOMAIN)
    assert (v.inter_bytes, v.intra_bytes) == (1, sp.Rational(1, 2))
    # allgather: (nodes - 1) T over RDMA, nodes (g - 1) T over NVLink: 1 and 2
    v = comm.a2a_volume(SMALL, 1, 1, AG, DOMAIN)
    assert (v.inter_bytes, v.intra_bytes) == (1, 2)
    # against the simulation (20k tokens: standard errors < 0.01)
    tol = 0.03
    assert mc["ranks"] == pytest.approx(9 / 5, abs=tol)
    assert mc["nodes"] == pytest.approx(23 / 15, abs=tol)
    assert mc["rdma_normal"] == pytest.approx(23 / 30, abs=tol)
    assert mc["nvl_normal"] == pytest.approx(9 / 10, abs=tol)
    assert mc["rdma_ll"] == pytest.approx(1.0, abs=tol)
    assert mc["nvl_ll"] == pytest.approx(0.5, abs=tol)


def test_group_limited_routing_caps_nodes():
    GR = GroupRouting(16, 2, 2, 1)  # group-limited routing of the small case, as numbers
    # 2 groups of 8 experts (one group = one node), topk_group 1: a token stays on one node.
    assert comm.distinct_nodes_per_token(SMALL, DOMAIN, groups=GR) == 1
    # ranks: the chosen group spans 2 ranks of 4 experts; 2 (1 - C(4,2)/C(8,2)) = 2 x 22/28
    assert comm.distinct_ranks_per_token(SMALL, groups=GR) == sp.Rational(11, 7)
    m = _monte_carlo(5_000, seed=1, groups=(2, 1))
    assert m["nodes"] == 1.0
    assert m["ranks"] == pytest.approx(11 / 7, abs=0.03)
    # normal-mode RDMA bytes fall with the cap
    capped = comm.a2a_volume(SMALL, 1, 1, NORMAL, DOMAIN, groups=GR).inter_bytes
    assert capped < comm.a2a_volume(SMALL, 1, 1, NORMAL, DOMAIN).inter_bytes


def test_symbolic_in_ep_matches_numbers():
    # EP over every GPU of the instance (N_gpu = e_p), attention data-parallel (t_p = 1)
    D = replace(symbolic_dims(), experts=256, topk=8, hidden=7168, dispatch_bytes=1.03125, tp=1)

    def seconds(c):
        return c.net_bytes / c.net_bw + c.fixed_s if c.net_bytes != 0 else c.fixed_s

    for mode in (NORMAL, LL, AG):
        t_sym = seconds(comm.dispatch(D, 128, 160e9, 40e9, 3e-6, 10e-6, 8, mode))
        for ep in (1, 4, 8, 32, 128):
            t_num = seconds(comm.dispatch(replace(D, ep=ep, gpus=ep), 128, 160e9, 40e9, 3e-6,
                                          10e-6, 8, mode))
            assert float(t_sym.subs({S.ep: ep, S.gpus: ep})) == pytest.approx(
                float(t_num), rel=1e-9, abs=1e-15)


def test_latency_bound_small_bandwidth_bound_large():
    D = replace(symbolic_dims(), experts=256, topk=8, hidden=7168, ep=64, dispatch_bytes=1)
    costs = [comm.dispatch(D, T, 160e9, 40e9, 3e-6, 10e-6, 8, LL) for T in (1, 4096)]
    t = [float(c.net_bytes / c.net_bw + c.fixed_s) for c in costs]
    assert t[0] < 2 * 13e-6  # one token: about the fixed 13 us
    bytes_4096 = 4096 * 7168 * 8 * (64 - 8) / 64
    assert t[1] == pytest.approx(bytes_4096 / 40e9 + 13e-6, rel=1e-9)


def test_tp_collectives_by_hand():
    D = replace(symbolic_dims(), tp=4, hidden=10, act_bytes=2)
    ar = comm.tp_allreduce(D, 3, 1, 1e-6)
    assert ar.net_bytes == 2 * sp.Rational(3, 4) * 3 * 10 * 2 and float(ar.fixed_s) == pytest.approx(6e-6)
    tree = comm.tp_allreduce(D, 3, 1, 1e-6, "tree")
    assert float(tree.fixed_s) == pytest.approx(4e-6)  # 2 log2(4) steps
    ag, rs = comm.tp_moe_boundary(D, 3, 1, 1e-6)
    assert ag.net_bytes == rs.net_bytes == sp.Rational(3, 4) * 3 * 10 * 2
    assert ag.net_bytes + rs.net_bytes == ar.net_bytes  # all-gather + reduce-scatter = all-reduce
    assert comm.group_bandwidth(16, 8, 400, 50) == 50


# DeepEP README (deepseek-ai/DeepEP, "Performance" / low-latency kernels; H800, CX7 400 Gb/s RDMA
# per GPU; 128 tokens per rank, hidden 7168, top-8 of 256 experts, FP8 dispatch, BF16 combine), us
DEEPEP_LL_H800_US = {16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369), 256: (194, 360)}


@pytest.mark.parametrize("ep", sorted(DEEPEP_LL_H800_US))
def test_deepep_low_latency_published_h800(ep, cli_json):
    """Every multi-node row of DeepEP's published low-latency table within 10%. EP 8 (one
    node) is left out: moesym sends it over NVLink (49 us dispatch), DeepEP's table reports 77 us
    at 98 GB/s, a path this model does not describe."""
    for op, ref_us in zip(("dispatch", "combine"), DEEPEP_LL_H800_US[ep]):
        r = cli_json(["comm", op, "--tokens", "128", "--hidden", "7168", "--topk", "8",
                       "--experts", "256", "--ep", str(ep), "--mode", "low-latency",
                       "--hardware", "h800"])
        assert r["time_s"] == pytest.approx(ref_us * 1e-6, rel=0.10)


def test_seed004_ring_table_shape():
    seed = {  # seed 004 'Perf table in us'; best E=2 (96.183 = worst E=2) is a copy slip
        "best": [26.868, None, 33.005, 36.073, 39.141, 42.209, 45.277, 48.345],
        "average": [55.258, 66.713, 78.169, 89.624, 101.079, 112.535, 123.990, 135.445],
        "worst": [88.238, 96.183, 104.129, 112.074, 120.020, 127.965, 135.911, 143.856]}
    table = comm.ring_dispatch_table()
    # four constants fitted to all three rows (the average row through its derivation, QUAD's
    # 16-device ring with 2 experts per device): issue 20 asks for every entry within 10%
    for case in ("best", "worst", "average"):
        for got, ref in zip(table[case], seed[case]):
            if ref is not None:
                assert got * 1e6 == pytest.approx(ref, rel=0.10)
    for case in table:
        assert all(np.diff(table[case]) > 0)
    for e in range(8):
        assert table["best"][e] < table["average"][e] < table["worst"][e]
    # the average row is predicted from a hand formula: farthest of 1 device = 64/15 hops
    assert comm.ring_farthest_hops(1, 16) == sp.Rational(64, 15)


def test_overlap_formulas():
    c, d, b, s = sp.symbols("c d b s", positive=True)
    assert overlap.pipelined(c, d, b, 1) == c + d + b
    assert overlap.pipelined(c, d, b, 1, shared=s) == c - s + sp.Max(d, s) + b
    three = overlap.pipelined(c, d, b, 3)
    assert three.subs({c: 10, d: 1, b: 2}) == 1 + 10 + 10 + 10 + 2  # hidden: n c + d + b
    assert three.subs({c: 1, d: 4, b: 5}) == 4 + 4 + 9 + 5 + 5  # exposed: communication-bound
    # SM sharing: compute 10 beside communication 5 with a fifth of the SMs gone: 10 + 5/5
    assert overlap.stage(10, 5, sp.Rational(1, 5)) == 11
    assert overlap.sm_share(LL) == 0


# --- full step models ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen():
    return load_model("qwen3-30b-a3b")


def test_ep1_has_no_all_to_all(qwen):
    step = build_step(qwen, load_hardware("h100"), Deployment(gpus=1),
                      Workload("decode", batch=32, context=2048))
    r = step.predict()
    assert r["per_layer_s"]["dispatch"] == 0 and r["per_layer_s"]["combine"] == 0
    for mode in (NORMAL, LL, AG):
        c = comm.dispatch(replace(SMALL, ep=1, gpus=1), 10, 1, 1, 1, 1, 8, mode)
        assert c.net_bytes == 0 and c.fixed_s == 0


def test_expert_tensor_parallel_gathers_every_dp_ranks_tokens(qwen):
    # EP 1 over 4 data-parallel GPUs (experts split 4-way by TP): each GPU must see the other
    # three ranks' T tokens: 3 T d b bytes over NVLink in one node, three ring hops of latency
    c = comm.dispatch(replace(SMALL, ep=1), 10, 1, 1, 1, 1, 8, AG)
    assert float(c.net_bytes.subs(S.dispatch_bytes, 1)) == 30 and float(c.fixed_s) == 3
    # and DeepEP refuses the split: it has no expert tensor parallelism
    from moesym.errors import SpecError

    with pytest.raises(SpecError, match="`ep` equal to `gpus`"):
        Deployment(gpus=4, ep=1, a2a="deepep-ll").check_model(qwen)


@pytest.mark.slow
def test_one_node_never_uses_scale_out(qwen):
    hw = load_hardware("h100")
    for a2a in ("deepep-normal", "deepep-ll", "allgather"):
        dep = Deployment(gpus=8, ep=8, a2a=a2a)
        wl = Workload("decode", batch=64, context=2048)
        slow = build_step(qwen, replace(hw, scale_out_Bps=1e6), dep, wl).predict()["step_time_s"]
        fast = build_step(qwen, replace(hw, scale_out_Bps=1e13), dep, wl).predict()["step_time_s"]
        assert slow == fast
    D = replace(symbolic_dims(), experts=128, topk=8, hidden=2048, ep=8, gpus=8, tp=1)
    for mode in (NORMAL, LL, AG):
        assert comm.a2a_volume(D, 64, 1, mode, 8).inter_bytes == 0


@pytest.mark.parametrize("a2a,n", [pytest.param("deepep-normal", 2, marks=pytest.mark.slow),
                                   ("deepep-ll", 1),
                                   pytest.param("allgather", 2, marks=pytest.mark.slow)])
def test_more_bandwidth_never_slower(qwen, a2a, n):
    hw = load_hardware("h100")
    dep = Deployment(gpus=32, ep=32, a2a=a2a, micro_batches=n)
    wl = Workload("decode", batch=128, context=2048)
    base = build_step(qwen, hw, dep, wl).predict()["step_time_s"]
    for f in ("scale_up_Bps", "scale_out_Bps"):
        faster = build_step(qwen, replace(hw, **{f: getattr(hw, f) * 2}), dep, wl)
        assert faster.predict()["step_time_s"] <= base * (1 + 1e-12)


def _crossover(a2a, ep, hw="h100"):
    m, h = load_model("deepseek-v3"), load_hardware(hw)
    grid = np.arange(1, 2049, dtype=float)
    t = []
    for n in (1, 2):
        st = build_step(m, h, Deployment(gpus=ep, ep=ep, weights="fp8", a2a=a2a, micro_batches=n),
                        Workload("decode", batch=64, context=4096))
        t.append(st.evaluate(batch=grid))
    ratio = t[1] / t[0]
    return grid, ratio


@pytest.mark.parametrize("a2a", ["deepep-ll",
                                 pytest.param("deepep-normal", marks=pytest.mark.slow)])
def test_two_micro_batches_lose_small_win_large(a2a):
    grid, ratio = _crossover(a2a, 32)
    assert ratio[grid == 8][0] > 1.0  # fixed costs paid twice, nothing to hide
    assert ratio[grid == 2048][0] < 1.0  # communication hidden behind the other micro-batch
    first_win = grid[np.argmax(ratio < 1.0)]
    assert 64 <= first_win <= 1024  # where it falls is in the report (about 220 ll, 410 normal)


# --- CLI ----------------------------------------------------------------------------------------



def test_cli_comm_json_keys(capsys, cli_json):
    rc = main(["comm", "dispatch", "--tokens", "1", "--hidden", "1", "--topk", "2", "--experts",
               "16", "--ep", "4", "--gpus-per-node", "2", "--mode", "normal", "--hardware", "h100",
               "--json"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert {"time_s", "bytes", "intra_bytes", "inter_bytes", "distinct_nodes_per_token"} <= set(r)
    # hand: fp8 + scales = 1.03125 B/element; bytes = (23/30 + 9/10) x 1.03125
    assert r["bytes"] == pytest.approx((23 / 30 + 9 / 10) * 1.03125)
    assert r["distinct_nodes_per_token"] == pytest.approx(23 / 15)
    r = cli_json(["comm", "combine", "--tokens", "1", "--hidden", "1", "--topk", "2", "--experts",
                   "16", "--ep", "4", "--gpus-per-node", "2", "--mode", "low-latency",
                   "--hardware", "h100"])
    assert r["bytes"] == pytest.approx(1.5 * 2) and math.isfinite(r["time_s"])


@pytest.mark.parametrize("argv,flag", [
    (["--ep", "3"], "--ep"),
    (["--topk", "32"], "--topk"),
    (["--hardware", "nope"], "nope"),
    (["--mode", "fast"], "--mode"),
    (["--tokens", "0"], "--tokens"),
])
def test_cli_comm_bad_input(capsys, argv, flag):
    base = {"--tokens": "8", "--hidden": "64", "--topk": "2", "--experts": "16", "--ep": "4",
            "--mode": "normal", "--hardware": "h100"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    args = ["comm", "dispatch"] + [x for kv in base.items() for x in kv]
    assert main(args) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


@pytest.mark.parametrize("op,elem", [("dispatch", 7168 * 1.03125), ("combine", 7168 * 2)])
def test_comm_allgather_mode_runs_and_counts_the_ring(op, elem, capsys):
    """`moesym comm ... --mode allgather` (it crashed): EP8 in one node moves each rank's T
    tokens to the 7 others (T d b (g - 1) bytes on NVLink, none on RDMA); EP1 moves nothing."""
    import json

    argv = ["comm", op, "--tokens", "128", "--hidden", "7168", "--topk", "8", "--experts", "256",
            "--mode", "allgather", "--hardware", "h800", "--json"]
    assert main(argv + ["--ep", "8"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["intra_bytes"] == pytest.approx(128 * elem * 7, rel=1e-12)
    assert r["inter_bytes"] == 0 and r["time_s"] > 0
    assert main(argv + ["--ep", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"] == 0


def test_ring_mcast_table_from_the_cli(cli_json):
    """CONTRACT item 14: seed 004's dispatch table through the CLI, beside the seed's values."""
    r = cli_json(["comm", "dispatch", "--mode", "ring-mcast", "--table"])
    assert r["active_experts"] == list(range(1, 9))
    for case in ("best", "average", "worst"):
        assert len(r[case]) == 8 and all(np.diff(r[case]) > 0)
        for i, (got, ratio) in enumerate(zip(r[case], r["ratio_to_published"][case])):
            if (case, i) == ("best", 1):
                assert ratio is None  # the seed's copy slip, reported and not compared
                continue
            assert ratio == pytest.approx(got / (comm.SEED004_DISPATCH_US[case][i] * 1e-6))
            # the fabric's four constants fitted to all three rows (the average row through the
            # expected farthest of E experts drawn from the column): every entry within 10%
            assert abs(ratio - 1) < 0.10


# --- the engine's custom all-reduce (issue 32 item 2) ---------------------------------------

# SGLang 0.5.14's custom all-reduce on H200 under CUDA graphs, BF16, measured by NVIDIA and
# published in AIConfigurator (ai-dynamo/aiconfigurator @ 095f58a, systems/data/h200_sxm/comm/
# sglang/0.5.14/custom_allreduce_perf.parquet): {GPUs: [(message bytes, latency us)]}
_H200_CUSTOM_AR_US = {
    2: [(1024, 2.37), (16384, 2.61), (65536, 3.12), (131072, 3.62), (524288, 5.9),
        (1048576, 9.11), (4194304, 29.47), (8388608, 55.48)],
    8: [(1024, 3.33), (16384, 4.15), (65536, 6.7), (131072, 8.02), (524288, 13.05),
        (1048576, 19.31), (4194304, 61.71), (8388608, 107.6)],
}


def _allreduce_time_s(D_subs, cost):
    t = cost.net_bytes / cost.net_bw + cost.fixed_s
    return float(sp.sympify(t).subs(D_subs))


@pytest.mark.parametrize("gpus", sorted(_H200_CUSTOM_AR_US))
def test_custom_allreduce_meets_the_published_h200_timings(gpus):
    """hardware/h200.toml's [allreduce] (fitted on half the message sizes of that table) times
    the published rows within 25% each. The table's message sizes count BF16 elements, not bytes
    (aiconfigurator-core 0.12.0 sdk/perf_database.py: the comm shims factor "an element count";
    its models query the all-reduce with tokens x hidden): tokens of one element of 2 bytes."""
    D = symbolic_dims()
    car = load_hardware("h200").allreduce
    for m, us in _H200_CUSTOM_AR_US[gpus]:
        c = comm.tp_allreduce_custom(D, m, car, 1e12, 3e-6, group=gpus)
        t = _allreduce_time_s({D.hidden: 1, D.act_bytes: 2}, c)
        assert t == pytest.approx(us * 1e-6, rel=0.25), (gpus, m)


def test_custom_allreduce_switches_as_the_engine_does():
    """One-shot up to the engine's switch point for the group size, two-shot up to the
    workspace, NCCL's ring beyond. Switch points as SGLang 0.5.23 writes them for SM90 under
    CUDA graphs (srt/distributed/device_communicators/configs/custom_all_reduce_v2.py: world 2
    16 MB, world 4 384 KB, world 8 128 KB; the 16 MB SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB
    workspace); bytes derived here."""
    from types import SimpleNamespace

    D = symbolic_dims()
    car = SimpleNamespace(fixed_s=3e-6, oneshot_Bps=2e11, twoshot_Bps=1e11,
                          oneshot_max_bytes=((2, 16 * 2 ** 20), (4, 384 * 1024), (8, 128 * 1024)),
                          max_bytes=((8, 16 * 2 ** 20),))
    subs = {D.hidden: 1, D.act_bytes: 1}

    def net(m, p):
        return float(comm.tp_allreduce_custom(D, m, car, 4e11, 3e-6, group=p).net_bytes.subs(subs))

    assert net(131072, 8) == 7 * 131072            # one-shot: every peer's buffer read
    assert net(131073, 8) == 2 * 7 / 8 * 131073    # two-shot
    assert net(393216, 4) == 3 * 393216            # one-shot up to 384 KiB on 4 GPUs
    assert net(393216, 3) == 2 * 393216            # 3 GPUs: the next listed size's (4's)
    assert net(16 * 2 ** 20, 2) == 16 * 2 ** 20    # one-shot up to the workspace on 2 GPUs
    big = comm.tp_allreduce_custom(D, 2 ** 24 + 16, car, 4e11, 3e-6, group=8)
    ring = comm.tp_allreduce(D, 2 ** 24 + 16, 4e11, 3e-6, group=8)
    assert _allreduce_time_s(subs, big) == pytest.approx(_allreduce_time_s(subs, ring))
    one = comm.tp_allreduce_custom(D, 5, car, 4e11, 3e-6, group=1)
    assert _allreduce_time_s(subs, one) == 0       # one GPU reduces nothing


# TensorRT-LLM 1.3.0rc20's own all-reduce on H200 (AllReduceStrategy AUTO, CUDA graphs, BF16),
# measured by NVIDIA and published in AIConfigurator (same commit, systems/data/h200_sxm/comm/
# trtllm/1.3.0rc20/custom_allreduce_perf.parquet): {GPUs: [(message_size, latency us)]}, the
# message_size in BF16 elements (bytes are twice it), up to the custom kernel's limit (16 MiB on
# 2 GPUs, 4 MiB on 8: NCCL's time beyond). At 8 GPUs its one-shot kernel runs to 1 MiB where
# SGLang's switches to two-shot at 128 KiB: 25.74 us against SGLang's 13.05 at 1 MiB.
_H200_TRTLLM_AR_US = {
    2: [(512, 2.69), (8192, 2.83), (65536, 3.14), (524288, 5.99), (2097152, 16.57),
        (8388608, 70.51)],
    8: [(512, 3.17), (8192, 3.49), (65536, 6.39), (262144, 17.78), (524288, 25.74),
        (2097152, 47.47)],
}


@pytest.mark.parametrize("gpus", sorted(_H200_TRTLLM_AR_US))
def test_trtllm_allreduce_meets_its_published_h200_timings(gpus):
    """hardware/h200.toml's [allreduce.trtllm] (fitted on half the message sizes of TensorRT-LLM's
    own table, its switch points fitted there too) times the published rows within 25% each."""
    D = symbolic_dims()
    car = load_hardware("h200").allreduce_kernels["trtllm"]
    for m, us in _H200_TRTLLM_AR_US[gpus]:
        c = comm.tp_allreduce_custom(D, m, car, 1e12, 3e-6, group=gpus)
        t = _allreduce_time_s({D.hidden: 1, D.act_bytes: 2}, c)
        assert t == pytest.approx(us * 1e-6, rel=0.25), (gpus, m)


def test_custom_allreduce_limit_is_per_group_size():
    """The custom kernel's limit is a table by group size as the switch point is (TensorRT-LLM
    keeps its own kernel to larger messages on fewer GPUs): with 16 MiB on 2 GPUs and 4 MiB on 4
    or more, 8 MiB on 2 GPUs is two-shot, 2 (p - 1) / p M = M bytes at the two-shot rate after
    2 tau; on 8 GPUs it is NCCL's ring, 2 (p - 1) / p M at the ring's rate after 2 (p - 1) tau'."""
    from types import SimpleNamespace

    D = symbolic_dims()
    car = SimpleNamespace(fixed_s=3e-6, oneshot_Bps=3e11, twoshot_Bps=2e11,
                          oneshot_max_bytes=((8, 2 ** 20),),
                          max_bytes=((2, 16 * 2 ** 20), (8, 4 * 2 ** 20)))
    subs = {D.hidden: 1, D.act_bytes: 1}
    m = 8 * 2 ** 20
    two = comm.tp_allreduce_custom(D, m, car, 4e11, 5e-6, group=2)
    assert _allreduce_time_s(subs, two) == pytest.approx(2 * 3e-6 + m / 2e11)
    ring = comm.tp_allreduce_custom(D, m, car, 4e11, 5e-6, group=8)
    assert _allreduce_time_s(subs, ring) == pytest.approx(2 * 7 * 5e-6 + 2 * 7 / 8 * m / 4e11)
    four = comm.tp_allreduce_custom(D, 4 * 2 ** 20, car, 4e11, 5e-6, group=4)  # at the limit
    assert _allreduce_time_s(subs, four) == pytest.approx(2 * 3e-6 + 2 * 3 / 4 * 4 * 2 ** 20 / 2e11)


def test_engine_profile_picks_its_own_allreduce(cli_json):
    """Qwen3-235B decode, 128 tokens, TP8 EP1 on H200: each layer all-reduces two messages of
    M = 128 x 4096 x 2 B = 1 MiB. TensorRT-LLM's profile names [allreduce.trtllm], whose one-shot
    reaches 1 MiB on 8 GPUs: tau + 7 M / W_1; SGLang's runs [allreduce] (one-shot to 128 KiB):
    two-shot, 2 tau + 2 x 7/8 M / W_2 (constants from the file, formulas by hand). The published
    times at 1 MiB on 8 H200s (AIConfigurator, as above) are 25.74 us (TensorRT-LLM) and 13.05 us
    (SGLang 0.5.14): each engine's term is within 15% of its own, and TensorRT-LLM's is the slower
    by more than half, as the tables say (1.97x)."""
    argv = ["predict", "qwen3-235b-a22b", "--phase", "decode", "--batch", "128", "--context",
            "1024", "--gpus", "8", "--tp", "8", "--ep", "1", "--hardware", "h200", "--engine"]
    hw = load_hardware("h200")
    trt, sgl, m = hw.allreduce_kernels["trtllm"], hw.allreduce, 2 ** 20
    want_trt = trt.fixed_s + 7 * m / trt.oneshot_Bps
    want_sgl = 2 * sgl.fixed_s + 2 * 7 / 8 * m / sgl.twoshot_Bps
    got_trt = cli_json(argv + ["trtllm"])["per_layer_s"]["tp_comm"] / 2
    got_sgl = cli_json(argv + ["sglang"])["per_layer_s"]["tp_comm"] / 2
    assert got_trt == pytest.approx(want_trt, rel=1e-9)
    assert got_sgl == pytest.approx(want_sgl, rel=1e-9)
    assert got_trt == pytest.approx(25.74e-6, rel=0.15)
    assert got_sgl == pytest.approx(13.05e-6, rel=0.15)
    assert got_trt / got_sgl > 1.5


def test_engine_allreduce_falls_back_to_the_gpus_default():
    """A profile naming an all-reduce the GPU has no fit of (SGLang's is [allreduce] itself,
    vLLM names none) runs [allreduce]; a GPU without any keeps NCCL's ring (None)."""
    from moesym.engines import load_engine

    h200 = load_hardware("h200")
    assert load_engine("trtllm").hardware(h200).allreduce == h200.allreduce_kernels["trtllm"]
    for engine in ("sglang", "vllm"):
        assert load_engine(engine).hardware(h200).allreduce == h200.allreduce
    assert load_engine("trtllm").hardware(load_hardware("h800")).allreduce is None


def test_tp_decode_uses_the_custom_allreduce_where_the_gpu_has_one(cli_json):
    """DeepSeek-V3 decode, 8 tokens, TP8 EP1 on H200: two one-shot all-reduces per layer of
    M = 8 x 7168 x 2 B = 114,688 B each: 2 (tau + 7 M / W_1) with the file's tau and W_1
    (on H800, without [allreduce], NCCL's ring stays)."""
    argv = ["predict", "deepseek-v3", "--phase", "decode", "--batch", "8", "--context", "1536",
            "--gpus", "8", "--tp", "8", "--ep", "1", "--weights", "fp8", "--hardware"]
    car = load_hardware("h200").allreduce
    m = 8 * 7168 * 2
    want = 2 * (car.fixed_s + 7 * m / car.oneshot_Bps)
    assert cli_json(argv + ["h200"])["per_layer_s"]["tp_comm"] == pytest.approx(want, rel=1e-9)
    assert load_hardware("h800").allreduce is None
    assert cli_json(argv + ["h800"])["per_layer_s"]["tp_comm"] > 3 * want


def test_one_node_deepep_is_the_fitted_kernel(cli_json):
    """DeepSeek-V3 decode on 8 H200, EP8 (DeepEP low-latency inside one node), 64 tokens per
    GPU: dispatch sends 64 x 7168 x (1 + 4/128) B (FP8 with a scale per 128) x 8 experts x 7/8
    (the experts on other GPUs), combine the same in BF16; each takes the fitted fixed time
    (launch included), one poll per expert (256), the tokens of one of the kernel's
    ceil(256 / 3) = 86 thread blocks in turn (ceil(64 / 86) = 1) and its bytes at the fitted
    rate of hardware/h200.toml's [deepep]. H800 has no such fit: its dispatch stays on the
    [interconnect] rate."""
    hw = load_hardware("h200")
    argv = ["predict", "deepseek-v3", "--phase", "decode", "--batch", "64", "--context", "1024",
            "--gpus", "8", "--tp", "1", "--ep", "8", "--weights", "fp8", "--hardware"]
    out = cli_json(argv + ["h200"])
    sent = {"dispatch": 64 * 7168 * (1 + 4 / 128) * 8 * 7 / 8, "combine": 64 * 7168 * 2 * 8 * 7 / 8}
    for op, nbytes in sent.items():
        k = hw.deepep[f"ll_{op}"]
        assert k.expert_s > 0 and k.block_token_s > 0
        assert out["work_per_layer"][op]["net_bytes"] == pytest.approx(nbytes)
        want = k.fixed_s + 256 * k.expert_s + 1 * k.block_token_s + nbytes / k.rate_Bps
        assert out["per_layer_s"][op] == pytest.approx(want, rel=1e-9)
    assert not load_hardware("h800").deepep
    h800 = cli_json(argv + ["h800"])["per_layer_s"]["dispatch"]
    up = load_hardware("h800")
    assert h800 > sent["dispatch"] / (up.scale_up_Bps * up.efficiency.scale_up)


def test_low_latency_deepep_with_few_experts_sends_from_few_blocks(cli_json):
    """Mixtral 8x7B (8 experts, top-2) on 8 H100, EP8 low-latency, 256 tokens per GPU: the
    kernel launches ceil(8 / 3) = 3 thread blocks, so each casts and sends ceil(256 / 3) = 86
    tokens in turn (DeepEP 1.0.0 internode_ll.cu:305); SGLang's one-node table shows the same
    8-expert dispatch at 1024 tokens 2.4x slower than its 8x larger combine. The dispatch is
    the fitted fixed time + 8 polls + 86 block tokens + its bytes at the rate."""
    hw = load_hardware("h100")
    k = hw.deepep["ll_dispatch"]
    out = cli_json(["predict", "mixtral-8x7b", "--phase", "decode", "--batch", "256",
                    "--context", "1024", "--gpus", "8", "--ep", "8", "--a2a", "deepep-ll",
                    "--hardware", "h100"])
    nbytes = out["work_per_layer"]["dispatch"]["net_bytes"]
    want = k.fixed_s + 8 * k.expert_s + 86 * k.block_token_s + nbytes / k.rate_Bps
    assert out["per_layer_s"]["dispatch"] == pytest.approx(want, rel=1e-9)
    assert 86 * k.block_token_s > nbytes / k.rate_Bps  # the blocks, not the link, set it


def test_deepep_fit_recovers_known_low_latency_constants(tmp_path):
    """benchmarks/kernel_fit_aic.py's DeepEP fit on a one-node low-latency table made here in
    AIConfigurator's layout from known constants (dispatch: 7 us, 280 GB/s, 13 ns per expert,
    0.7 us per token a block sends; combine: 9 us, 230 GB/s, 6 ns, 0.08 us) over 8 to 384
    experts: bytes as the step counts them, blocks ceil(experts / 3) (DeepEP 1.0.0). It finds
    the four constants and the held-out rows are exact."""
    import importlib.util
    from pathlib import Path

    import numpy as np
    import pandas as pd

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_fit_aic.py"
    spec = importlib.util.spec_from_file_location("kernel_fit_aic", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    true = {"dispatch": (7.0, 280.0, 13.0, 0.7), "combine": (9.0, 230.0, 6.0, 0.08)}
    rows = []
    for E, k, d in ((8, 2, 4096), (16, 1, 5120), (128, 8, 2048), (256, 8, 7168), (384, 6, 7168)):
        for T in 2 ** np.arange(11):
            r = {"node_num": 1, "hidden_size": d, "num_token": int(T), "num_topk": k,
                 "num_experts": E}
            for op, (f, g, e, b) in true.items():
                nbytes = fit._deepep_bytes("ll", op, E, k, d, T)
                t = f * 1e-6 + nbytes / (g * 1e9) + e * 1e-9 * E + b * 1e-6 * np.ceil(T / np.ceil(E / 3))
                r[f"{op}_avg_t_us"] = t * 1e6
            rows.append(r)
    folder = tmp_path / "h200_sxm" / "comm" / "sglang" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "wideep_deepep_ll_perf.parquet")
    got = fit.fit_deepep(tmp_path, "h200")
    for op, want in true.items():
        g = got[f"ll_{op}"]
        assert (g["fixed_us"], g["GBps"], g["expert_ns"], g["block_token_us"]) == pytest.approx(
            want, rel=1e-3)
        assert g["median"] < 1e-6


def test_trtllm_allreduce_fit_recovers_known_switch_points(tmp_path):
    """benchmarks/kernel_fit_aic.py's TensorRT-LLM all-reduce fit on a table made here in
    AIConfigurator's layout from known constants (tau 3 us, one-shot 300 GB/s, two-shot 200 GB/s;
    2 GPUs: one-shot to 4 MiB, own kernel to 16 MiB; 8 GPUs: one-shot to 256 KiB, own kernel to
    4 MiB; NCCL twice the custom time below the limits and the measured time above): it finds
    both switch points per group size and the constants, and the held-out rows are exact."""
    import importlib.util
    from pathlib import Path

    import pandas as pd

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_fit_aic.py"
    spec = importlib.util.spec_from_file_location("kernel_fit_aic", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    tau, w1, w2 = 3e-6, 300e9, 200e9
    one, top = {2: 4 * 2 ** 20, 8: 256 * 1024}, {2: 16 * 2 ** 20, 8: 4 * 2 ** 20}
    rows, nccl = [], []
    for p in (2, 8):
        for i in range(18):
            elements = 128 * 2 ** i
            m = 2 * elements  # BF16
            custom = tau + (p - 1) * m / w1 if m <= one[p] else 2 * tau + 2 * (p - 1) / p * m / w2
            n = 2 * custom if m <= top[p] else 1.5 * custom
            t = custom if m <= top[p] else n
            rows.append({"allreduce_dtype": "bfloat16", "num_gpus": p, "message_size": elements,
                         "latency": t * 1e3})
            nccl.append({"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": p,
                         "message_size": elements, "latency": n * 1e3})
    for family, name, frame in (("trtllm", "custom_allreduce_perf", rows),
                                ("nccl", "nccl_perf", nccl)):
        folder = tmp_path / "h200_sxm" / "comm" / family / "1.0"
        folder.mkdir(parents=True)
        pd.DataFrame(frame).to_parquet(folder / f"{name}.parquet")
    got = fit.fit_allreduce(tmp_path, "h200", "trtllm")
    assert got["max_bytes"] == top
    assert got["oneshot_max_bytes"] == one
    assert (got["fixed_us"], got["oneshot_GBps"], got["twoshot_GBps"]) == pytest.approx(
        (3.0, 300.0, 200.0), rel=1e-4)
    assert got["test_worst"] < 1e-4


def test_folded_one_shot_condition_is_what_rewrite_ite_gives():
    """comm._folded builds the ITE chain of a table's upper-bound conditions directly: the same
    expression as SymPy's piecewise_fold + rewrite(ITE), for every built-in custom all-reduce."""
    import sympy as sp
    from sympy.functions.elementary.piecewise import piecewise_fold
    from sympy.logic.boolalg import ITE

    import moesym as ms
    from moesym.specs.hardware import builtin_hardware
    from moesym.symbolic.symbols import S
    from moesym.terms import comm

    checked = 0
    for name in builtin_hardware():
        hw = ms.load_hardware(name)
        for car in [hw.allreduce, *hw.allreduce_kernels.values()]:
            if car is None:
                continue
            for tokens in (S.batch, S.batch / S.micro_batches):
                m = tokens * S.hidden * S.act_bytes
                for table in (car.oneshot_max_bytes, car.max_bytes):
                    for p in (S.tp, sp.Integer(4)):
                        cond = sp.Le(m, comm._by_group(table, p))
                        want = piecewise_fold(cond)
                        if isinstance(want, sp.Piecewise):
                            want = want.rewrite(ITE)
                        got = comm._folded(cond)
                        assert sp.srepr(got) == sp.srepr(want)
                        checked += 1
    assert checked >= 8
