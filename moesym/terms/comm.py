"""Communication terms: expert-parallel dispatch / combine and tensor-parallel collectives.

Every function returns SymPy (``Cost`` records of kind COMM or plain expressions) and accepts
symbols or numbers, so EP and GPU counts stay symbolic in sweeps.

Tiers. An EP group of ``ep`` GPUs is laid over scale-up domains of ``G`` GPUs (``G`` is the
``gpus_per_node`` symbol, bound to the NVLink domain: 8 on HGX, 72 on GB200 NVL72):

    g     = min(ep, G)        GPUs of the EP group inside one scale-up domain
    nodes = max(ep / G, 1)    scale-up domains the EP group spans

Traffic inside a domain moves at the scale-up rate W_up x eta_up (NVLink), traffic between
domains at W_out x eta_out (RDMA). A domain without a switch (AMD Instinct's 8-GPU node: seven
Infinity Fabric links per GPU, one to each other GPU) gives a group of p of its GPUs only the
links among them, a share min(1, (p - 1) / L) of W_up (:func:`link_share`; the hardware file's
``scale_up_links`` L). Both tiers run at once, so a collective takes
max(intra / W_up_eff, inter / W_out_eff) plus a fixed latency per tier it touches: small messages
are latency-bound, large ones bandwidth-bound.

Expected distinct destinations. With uniform top-k routing over E experts spread evenly over n
destinations, a token's k experts land on n x (1 - C(E - E/n, k) / C(E, k)) distinct
destinations (:func:`moesym.routing.stats.distinct_destinations`, which also holds the
group-limited form of DeepSeek-V3's routing: n_group = G_r groups, topk_group = k_G of them).

>>> from moesym.terms.comm import tp_allreduce
>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.symbolic.symbols import S
>>> tp_allreduce(symbolic_dims(), S.batch, 1e11, 0).net_bytes
2*B*b_a*d*(t_p - 1)/t_p
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy.logic.boolalg import Boolean

from ..routing.stats import GroupRouting, distinct_destinations, no_hit_probability
from ..specs.deployment import A2AMode
from .cost import Cost, KernelClass
from ..symbolic.expr import smax, smin, sym
from .dims import Dims
from ..specs.mesh import RingFabric

__all__ = ["A2AVolume", "a2a_volume", "combine", "dispatch", "distinct_nodes_per_token",
           "distinct_ranks_per_token", "ep_tiers", "group_bandwidth", "group_latency", "link_share",
           "ring_dispatch_table", "ring_dispatch_time", "ring_farthest_hops", "tp_allgather",
           "tp_allreduce", "tp_allreduce_custom", "tp_moe_boundary", "tp_reduce_scatter"]


def ep_tiers(ep, domain) -> tuple[sp.Expr, sp.Expr]:
    """(g, nodes): EP GPUs per scale-up domain, g = min(ep, G), and domains spanned, ep / g.

    >>> ep_tiers(32, 8)
    (8, 4)
    >>> ep_tiers(4, 8)
    (4, 1)
    """
    e, G = sym(ep), sym(domain)
    g = smin(e, G) if not (e.is_number and G.is_number) else smin(e, G)
    return g, e / g


def _destinations(D: Dims, n, groups: GroupRouting | None) -> sp.Expr:
    if groups is None:
        return distinct_destinations(D.experts, D.topk, n)
    return distinct_destinations(groups.experts, groups.topk, n, groups.groups, groups.topk_groups)


def distinct_ranks_per_token(D: Dims, groups: GroupRouting | None = None) -> sp.Expr:
    """Expected EP ranks (own included) a token's top-k experts live on:
    ep x (1 - C(E - E/ep, k) / C(E, k)) for uniform routing.

    >>> from moesym.terms.dims import symbolic_dims
    >>> from dataclasses import replace
    >>> D = replace(symbolic_dims(), experts=16, topk=2, ep=4)
    >>> distinct_ranks_per_token(D)
    9/5
    """
    return _destinations(D, D.ep, groups)


def distinct_nodes_per_token(D: Dims, domain, groups: GroupRouting | None = None) -> sp.Expr:
    """Expected scale-up domains (own included) a token's experts live on:
    nodes x (1 - C(E - E/nodes, k) / C(E, k)), nodes = max(ep / G, 1); with group-limited routing
    and groups mapped onto nodes this is at most topk_group.

    >>> from moesym.terms.dims import symbolic_dims
    >>> from dataclasses import replace
    >>> D = replace(symbolic_dims(), experts=16, topk=2, ep=4)
    >>> distinct_nodes_per_token(D, 2)
    23/15
    """
    _, nodes = ep_tiers(D.ep, domain)
    return _destinations(D, nodes, groups)


@dataclass(frozen=True)
class A2AVolume:
    """Bytes one rank sends (= receives, by symmetry) in one all-to-all, split by tier.

    ``serial``: the tiers run one after the other (hierarchical all-gather) instead of at once.
    """

    intra_bytes: sp.Expr
    inter_bytes: sp.Expr
    ranks_per_token: sp.Expr
    nodes_per_token: sp.Expr
    serial: bool = False
    group: object = None  # GPUs that exchange tokens (default: the EP group)
    tiers: tuple | None = None  # (GPUs per domain, domains) of a serial collective's ring


def a2a_volume(D: Dims, tokens, elem_bytes, mode: A2AMode, domain, groups=None) -> A2AVolume:
    """Per-rank bytes of one dispatch (or combine) of ``tokens`` tokens per GPU (T, d, b).

    deepep-normal (node-deduplicated; NVLink forwarding inside the node):
        inter = T d b x N_n (nodes - 1) / nodes      (one RDMA copy per remote node)
        intra = T d b x N_r (g - 1) / g              (one NVLink copy per rank but the entry GPU)
    deepep-ll (one message per selected expert, no deduplication):
        inter = T d b x k (ep - g) / ep,  intra = T d b x k (g - 1) / ep
    allgather (all-gather tokens, reduce-scatter outputs; hierarchical, tiers in series):
        inter = T d b (nodes - 1),  intra = T d b nodes (g - 1), over the attention DP ranks
        (N_gpu / t_p; a DP rank's TP group already shares its tokens): every DP rank needs
        every token when the experts are also tensor-parallel (e_p < N_gpu)
    N_r, N_n: expected distinct ranks / nodes per token. The k / ep share of a token's experts on
    its own GPU never leaves it.

    >>> from moesym.terms.dims import symbolic_dims
    >>> from dataclasses import replace
    >>> D = replace(symbolic_dims(), experts=16, topk=2, ep=4, hidden=1)
    >>> v = a2a_volume(D, 1, 1, A2AMode.DEEPEP_LL, 2)
    >>> v.intra_bytes, v.inter_bytes
    (1/2, 1)
    """
    T, b = sym(tokens), sym(elem_bytes)
    g, nodes = ep_tiers(D.ep, domain)
    per_tok = T * D.hidden * b
    n_r = distinct_ranks_per_token(D, groups)
    n_n = _destinations(D, nodes, groups)
    if mode is A2AMode.DEEPEP_NORMAL:
        return A2AVolume(per_tok * n_r * (g - 1) / g, per_tok * n_n * (nodes - 1) / nodes, n_r, n_n)
    if mode is A2AMode.DEEPEP_LL:
        return A2AVolume(per_tok * D.topk * (g - 1) / D.ep, per_tok * D.topk * (D.ep - g) / D.ep,
                         n_r, n_n)
    if mode is A2AMode.ALLGATHER:
        dp = D.gpus / D.tp
        g, nodes = ep_tiers(dp, smax(sym(domain) / D.tp, 1))
        return A2AVolume(per_tok * nodes * (g - 1), per_tok * (nodes - 1), dp, nodes, serial=True,
                         group=dp, tiers=(g, nodes))
    raise ValueError(f"a2a mode {mode.value!r} must be resolved (deepep-normal, deepep-ll or "
                     f"allgather) before costing")


def link_share(p, links) -> sp.Expr:
    """Share of a GPU's scale-up bandwidth that traffic among ``p`` GPUs of one switchless domain
    moves over: each GPU has ``links`` direct links (``[interconnect] scale_up_links``), one to
    every other GPU of the domain, so p GPUs exchange over their p - 1 links:
    min(1, (p - 1) / L). A switched domain (L = 0: NVSwitch) gives every group the whole rate.
    One GPU moves nothing; its share is one link's (never 0: a rate that divides no bytes).

    On an 8-GPU AMD Instinct node (7 Infinity Fabric links per GPU, no switch) a pair reaches
    1/7 of the GPU's scale-up rate, four GPUs 3/7, all eight 7/7.

    >>> link_share(2, 7), link_share(4, 7), link_share(8, 7), link_share(2, 0), link_share(1, 7)
    (1/7, 3/7, 1, 1, 1/7)
    """
    if not links:
        return sp.Integer(1)
    return smin(1, smax(sym(p) - 1, 1) / sym(links))


def _comm_cost(name: str, D: Dims, vol: A2AVolume, bw_up, bw_out, lat_up, lat_out, domain,
               links=0) -> Cost:
    """time = max(intra / W_up, inter / W_out) (sum when serial) + tau_up + [ep > G] tau_out;
    on a switchless domain (``links``) W_up is the share of the links among the group's g GPUs
    inside one domain (:func:`link_share`)."""
    if links:
        g = vol.tiers[0] if vol.tiers is not None else ep_tiers(D.ep, domain)[0]
        bw_up = sym(bw_up) * link_share(g, links)
    bw_up, bw_out, lat_up, lat_out, G = (sym(x) for x in (bw_up, bw_out, lat_up, lat_out, domain))
    total = vol.intra_bytes + vol.inter_bytes
    t_up, t_out = vol.intra_bytes / bw_up, vol.inter_bytes / bw_out
    busy = t_up + t_out if vol.serial else smax(t_up, t_out)
    ep = D.ep if vol.group is None else sym(vol.group)
    if vol.serial:  # ring steps of the hierarchical all-gather: (g - 1) + (nodes - 1) hops
        g, nodes = vol.tiers
        lat = (g - 1) * lat_up + (nodes - 1) * lat_out
    else:
        lat = lat_up + sp.Piecewise((lat_out, ep > G), (0, True))
    if ep.is_number and ep <= 1:
        return Cost(name, KernelClass.COMM)
    if total == 0:
        return Cost(name, KernelClass.COMM, fixed_s=lat, launches=1)
    net_bw = sp.Piecewise((bw_up, ep <= 1), (total / busy, True))
    return Cost(name, KernelClass.COMM, net_bytes=total, net_bw=net_bw,
                fixed_s=sp.Piecewise((0, ep <= 1), (lat, True)),
                launches=sp.Piecewise((0, ep <= 1), (1, True)))


def dispatch(D: Dims, tokens, bw_up, bw_out, lat_up, lat_out, domain,
             mode: A2AMode = A2AMode.DEEPEP_NORMAL, groups=None, links=0) -> Cost:
    """EP dispatch of ``tokens`` tokens per GPU in FP8 with its scales (b = b_disp).

    time = max(intra / W_up, inter / W_out) + tau_up + [ep > G] tau_out, volumes from
    :func:`a2a_volume`; no traffic when ep = 1. ``bw_*`` are achievable rates (peak x eta);
    ``links``: direct links per GPU of a switchless domain (:func:`link_share`: g GPUs of the
    group in one domain exchange over their g - 1 links; 0: a switch).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from dataclasses import replace
    >>> D = replace(symbolic_dims(), experts=16, topk=2, ep=4, hidden=100, dispatch_bytes=1)
    >>> c = dispatch(D, 10, 100.0, 10.0, 0, 0, 2, A2AMode.DEEPEP_LL)
    >>> c.net_bytes, float(c.net_bytes / c.net_bw)
    (1500, 100.0)
    """
    vol = a2a_volume(D, tokens, D.dispatch_bytes, mode, domain, groups)
    return _comm_cost("dispatch", D, vol, bw_up, bw_out, lat_up, lat_out, domain, links)


def combine(D: Dims, tokens, bw_up, bw_out, lat_up, lat_out, domain,
            mode: A2AMode = A2AMode.DEEPEP_NORMAL, groups=None, links=0) -> Cost:
    """EP combine: the expert outputs coming back in BF16 (b = b_comb), same paths as dispatch
    (normal mode reduces inside the node before the one RDMA copy per node; low-latency mode
    returns one message per expert; allgather mode is a reduce-scatter; ``links`` as for
    :func:`dispatch`).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from dataclasses import replace
    >>> D = replace(symbolic_dims(), experts=16, topk=2, ep=1, hidden=100, combine_bytes=2)
    >>> combine(D, 10, 1.0, 1.0, 1e-6, 1e-5, 8).net_bytes
    0
    """
    vol = a2a_volume(D, tokens, D.combine_bytes, mode, domain, groups)
    return _comm_cost("combine", D, vol, bw_up, bw_out, lat_up, lat_out, domain, links)


# --- tensor-parallel collectives ---------------------------------------------------------------

def group_bandwidth(p, domain, bw_up, bw_out, links=0) -> sp.Expr:
    """Rate of a collective over p GPUs: W_up inside one scale-up domain (p <= G), else W_out;
    on a switchless domain of ``links`` direct links per GPU, the share of W_up on the p - 1
    links among them (:func:`link_share`).

    >>> group_bandwidth(8, 8, 400, 50), group_bandwidth(2, 8, 448, 50, links=7)
    (400, 64)
    """
    p, G = sym(p), sym(domain)
    up = sym(bw_up) * link_share(p, links) if links else sym(bw_up)
    if p.is_number and G.is_number:
        return up if p <= G else sym(bw_out)
    return sp.Piecewise((up, p <= G), (sym(bw_out), True))


def group_latency(p, domain, lat_up, lat_out) -> sp.Expr:
    """Fixed latency of one step of a collective over p GPUs (tau_up or tau_out, as above)."""
    return group_bandwidth(p, domain, lat_up, lat_out)


def tp_allreduce(D: Dims, tokens, bw, lat, algo: str = "ring", group=None) -> Cost:
    """All-reduce of a (tokens x d) BF16 activation over p = tp GPUs (``group`` overrides p).

    ring: bytes 2 (p - 1) / p x T d b_a, latency 2 (p - 1) tau
    tree: bytes 2 (p - 1) / p x T d b_a (NCCL double binary tree), latency 2 log2(p) tau

    >>> from moesym.terms.dims import symbolic_dims
    >>> tp_allreduce(symbolic_dims(), 1, 1, 1e-6, "tree").fixed_s
    2.0e-6*log(t_p)/log(2)
    """
    p = D.tp if group is None else sym(group)
    vol = 2 * ((p - 1) / p) * sym(tokens) * D.hidden * D.act_bytes
    if algo == "ring":
        fixed = 2 * (p - 1) * sym(lat)
    elif algo == "tree":
        fixed = 2 * sp.log(p, 2) * sym(lat)
    else:
        raise ValueError(f"all-reduce algorithm {algo!r}: use ring or tree")
    return Cost("tp_comm", KernelClass.COMM, net_bytes=vol, net_bw=sym(bw), fixed_s=fixed,
                launches=smin(p - 1, 1))


def _by_group(table, p) -> sp.Expr:
    """A switch point by group size p from ``((p', bytes), ...)`` ascending in p': the first
    p' >= p, the last beyond."""
    return sp.Piecewise(*[(v, sp.Le(p, w)) for w, v in table[:-1]], (table[-1][1], True))


def tp_allreduce_custom(D: Dims, tokens, car, bw, lat, group=None) -> Cost:
    """All-reduce of a (tokens x d) BF16 activation of M bytes over p = tp GPUs of one NVLink
    node by the engine's custom kernel (``car``, a
    :class:`~moesym.specs.hardware.CustomAllReduce`), NCCL's ring beyond its size limit::

        one-shot (M <= M_1(p), the engine's switch point for p GPUs):
                   tau_car + (p - 1) M / W_1        (each GPU reads every peer's buffer)
        two-shot (M <= M_max(p), the custom kernel's limit for p GPUs):
                   2 tau_car + 2 (p - 1) / p M / W_2   (reduce-scatter + all-gather)
        beyond:    :func:`tp_allreduce` (ring)

    ``M_1`` and ``M_max`` are tables by group size (``((p', bytes), ...)``: the first p' >= p
    applies, the last beyond).

    Under CUDA-graph replay the measured tau_car holds the kernel's launch: no launch latency
    is added in the custom branches.

    >>> from types import SimpleNamespace as N
    >>> from moesym.terms.dims import symbolic_dims
    >>> car = N(fixed_s=3e-6, oneshot_Bps=2e11, twoshot_Bps=1.5e11,
    ...         oneshot_max_bytes=((4, 393216), (8, 131072)), max_bytes=((8, 16777216),))
    >>> D = symbolic_dims()
    >>> c = tp_allreduce_custom(D, 8, car, 4e11, 3e-6, group=8)
    >>> m = 8 * 7168 * 2  # bytes of 8 tokens of DeepSeek-V3's hidden state in BF16
    >>> t = (c.net_bytes / c.net_bw + c.fixed_s).subs({D.hidden: 7168, D.act_bytes: 2})
    >>> round(float(t) * 1e6, 2), round((3e-6 + 7 * m / 2e11) * 1e6, 2)
    (7.01, 7.01)
    """
    p = D.tp if group is None else sym(group)
    m = sym(tokens) * D.hidden * D.act_bytes
    ring = tp_allreduce(D, tokens, bw, lat, "ring", group)
    one = _folded(sp.Le(m, _by_group(car.oneshot_max_bytes, p)))
    two = _folded(sp.Le(m, _by_group(car.max_bytes, p)))
    active = smin(p - 1, 1)  # one GPU: nothing to reduce
    return Cost("tp_comm", KernelClass.COMM,
                net_bytes=sp.Piecewise(((p - 1) * m, one), (2 * (p - 1) / p * m, two),
                                       (ring.net_bytes, True)),
                net_bw=sp.Piecewise((car.oneshot_Bps, one), (car.twoshot_Bps, two),
                                    (ring.net_bw, True)),
                fixed_s=sp.Piecewise((car.fixed_s * active, one), (2 * car.fixed_s * active, two),
                                     (ring.fixed_s, True)),
                launches=sp.Piecewise((0, two), (ring.launches, True)))


def _folded(cond):
    """``cond`` as a Piecewise's condition holds it: a Piecewise inside folded out and written
    as ITE (what SymPy's ExprCondPair does to each condition; done once here for the three
    Piecewise that share it).

    SymPy's ``rewrite(ITE)`` takes each condition's set (an inequality solve, 0.1-0.35 s for the
    one-shot limit's table) only to find a condition that covers every real and cut the chain
    there. A table's conditions are upper bounds ``p <= p'`` on the group size, whose union never
    covers the reals: for those the chain is built directly, the same expression
    ``rewrite(ITE)`` returns (``_canonical`` of the nested ITE)."""
    from sympy.functions.elementary.piecewise import _canonical, piecewise_fold
    from sympy.logic.boolalg import ITE

    out = piecewise_fold(cond)
    if not isinstance(out, sp.Piecewise):
        return out
    *pieces, (last, default) = out.args
    if default != True or not all(  # noqa: E712 - SymPy's true, as rewrite(ITE) tests it
            isinstance(c, (sp.LessThan, sp.StrictLessThan)) and c.lhs.is_Symbol
            and c.rhs.is_Number and c.rhs.is_finite and isinstance(e, Boolean)
            for e, c in pieces):
        return out.rewrite(ITE)
    for e, c in reversed(pieces):
        last = ITE(c, e, last)
    return _canonical(last)


def tp_allgather(D: Dims, tokens, bw, lat, group=None, elem_bytes=None) -> Cost:
    """Ring all-gather of a (tokens x d) activation sharded p ways over p = tp GPUs:
    bytes (p - 1) / p x T d b_a, latency (p - 1) tau.

    >>> from moesym.terms.dims import symbolic_dims
    >>> tp_allgather(symbolic_dims(), 1, 1, 0).net_bytes
    b_a*d*(t_p - 1)/t_p
    """
    p = D.tp if group is None else sym(group)
    b = D.act_bytes if elem_bytes is None else sym(elem_bytes)
    return Cost("tp_comm", KernelClass.COMM, net_bytes=(p - 1) / p * sym(tokens) * D.hidden * b,
                net_bw=sym(bw), fixed_s=(p - 1) * sym(lat), launches=smin(p - 1, 1))


def tp_reduce_scatter(D: Dims, tokens, bw, lat, group=None, elem_bytes=None) -> Cost:
    """Ring reduce-scatter of a replicated (tokens x d) activation into p shards:
    bytes (p - 1) / p x T d b_a, latency (p - 1) tau (the mirror image of the all-gather).

    >>> from moesym.terms.dims import symbolic_dims
    >>> tp_reduce_scatter(symbolic_dims(), 1, 1, 1).fixed_s
    t_p - 1
    """
    return tp_allgather(D, tokens, bw, lat, group, elem_bytes)


def tp_moe_boundary(D: Dims, tokens, bw, lat) -> list[Cost]:
    """Seed 004 layout: TP-sharded activations [T, d / tp] are all-gathered to [T, d] before the
    MoE and the MoE output is reduce-scattered back to [T, d / tp] after it:
    2 x (tp - 1) / tp x T d b_a bytes and 2 (tp - 1) tau per layer.

    >>> from moesym.terms.dims import symbolic_dims
    >>> sum(c.net_bytes for c in tp_moe_boundary(symbolic_dims(), 1, 1, 0))
    2*b_a*d*(t_p - 1)/t_p
    """
    return [tp_allgather(D, tokens, bw, lat), tp_reduce_scatter(D, tokens, bw, lat)]


# --- ring / mesh fabrics (seed 004) --------------------------------------------------------------



def ring_farthest_hops(n_dest, ring: int) -> sp.Expr:
    """Expected hop distance to the farthest of ``n_dest`` distinct devices picked uniformly
    among the other ring - 1 devices of a bidirectional ring:
    sum_{h=0}^{R/2-1} (1 - C(2h, n) / C(R - 1, n)) (2h devices lie within h hops).

    >>> ring_farthest_hops(1, 16)
    64/15
    """
    n = sym(n_dest)
    R = int(ring)
    half = R // 2
    total = sp.Integer(0)
    for h in range(half):
        total += 1 - _choose_ratio(2 * h, R - 1, n)
    return total


def _choose_ratio(a, b, n) -> sp.Expr:
    """C(a, n) / C(b, n) for integers a <= b (0 when a < n)."""
    n = sym(n)
    if n.is_number:
        return sp.binomial(a, n) / sp.binomial(b, n) if a >= n else sp.Integer(0)
    return no_hit_probability(b, b - a, n)


def ring_dispatch_time(active_experts, case: str = "average", fabric: RingFabric = RingFabric(),
                       experts_per_device=None) -> sp.Expr:
    """Dispatch time of one token batch on a ring, vs the most experts E active in one column.

    time = base + hop x H + device x D + expert x E, where
      best:    all E experts on the nearest device (the seed's best row: only the expert
               entries grow): D = ceil(E / x), H = ceil(D / 2), x = ``experts_per_device``
               (default E: one device holds them all)
      average: the E experts drawn at random from the x R experts of the column (x =
               ``fabric.experts_per_device``), the token's own device among them (no hop, no
               write): H = sum_{h < R/2} (1 - C(x (2h + 1), E) / C(x R, E)) (all within h hops),
               D = (R - 1) (1 - C(x R - x, E) / C(x R, E)) remote devices
      worst:   D = E devices with the chain running to the far side: H = R / 2

    >>> round(float(ring_dispatch_time(1, "worst")) * 1e6, 3)
    85.808
    """
    E = sym(active_experts)
    f = fabric
    if case == "best":
        x = E if experts_per_device is None else sym(experts_per_device)
        D = sp.ceiling(E / x)
        H = sp.ceiling(D / 2)
    elif case == "average":
        x, R = f.experts_per_device, f.ring
        H = sp.Add(*[1 - _choose_ratio(x * (2 * h + 1), x * R, E) for h in range(R // 2)])
        D = (R - 1) * (1 - _choose_ratio(x * R - x, x * R, E))
    elif case == "worst":
        D, H = E, sp.Integer(f.ring // 2)
    else:
        raise ValueError(f"case {case!r}: use best, average or worst")
    return f.base_s + f.hop_s * H + f.device_s * D + f.expert_s * E


#: Seed 004's dispatch table (DeepSeek-V3 on a Tenstorrent mesh, a 16-device ring; microseconds
#: per number of active experts E = 1..8). Its best-case E = 2 entry, 96.183, equals the
#: worst-case E = 2 entry and breaks the arithmetic progression of its row (every other step is
#: +3.068 us): a copy slip in the seed, so it is reported but not compared.
SEED004_DISPATCH_US = {
    "best": [26.868, 96.183, 33.005, 36.073, 39.141, 42.209, 45.277, 48.345],
    "average": [55.258, 66.713, 78.169, 89.624, 101.079, 112.535, 123.990, 135.445],
    "worst": [88.238, 96.183, 104.129, 112.074, 120.020, 127.965, 135.911, 143.856],
}


def ring_dispatch_table(fabric: RingFabric = RingFabric(), max_active: int = 8) -> dict:
    """{case: [seconds for E = 1..max_active]} in the layout of seed 004's dispatch table.

    >>> [round(x * 1e6, 1) for x in ring_dispatch_table(max_active=2)["best"]]
    [26.8, 29.9]
    """
    return {case: [float(ring_dispatch_time(e, case, fabric)) for e in range(1, max_active + 1)]
            for case in ("best", "average", "worst")}
