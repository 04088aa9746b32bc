"""``moesym comm {dispatch,combine}``: one expert-parallel all-to-all on its own (CONTRACT.md 5)."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import MoesymError
from ..kernels.time_model import RooflineTiming
from ..model.layer_costs import expert_all_to_all
from ..numbers.bindings import fabric_values
from ..routing.stats import GroupRouting
from ..specs.deployment import DTYPE_BYTES, A2AMode, Deployment, activation_dispatch_bytes
from ..specs.hardware import load_hardware
from ..specs.mesh import mesh_values
from ..symbolic.symbols import S
from ..terms import comm, mesh
from ..terms.dims import symbolic_dims
from . import COMMANDS
from .common import add_json, emit_json, fmt_s, positive_int

__all__ = ["comm_report", "register"]

_MODES = {"normal": A2AMode.DEEPEP_NORMAL, "low-latency": A2AMode.DEEPEP_LL,
          "allgather": A2AMode.ALLGATHER}


_GPU_FLAGS = ("tokens", "hidden", "topk", "experts", "ep", "hardware")


def register(sub) -> None:
    p = sub.add_parser("comm", help=COMMANDS["comm"])
    p.add_argument("op", choices=("dispatch", "combine"))
    p.add_argument("--tokens", type=positive_int, default=None, help="tokens per rank")
    p.add_argument("--hidden", type=positive_int, default=None)
    p.add_argument("--topk", type=positive_int, default=None)
    p.add_argument("--experts", type=positive_int, default=None)
    p.add_argument("--ep", type=positive_int, default=None)
    p.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="GPUs per node (default: the hardware file's gpus_per_node)")
    p.add_argument("--mode", choices=(*_MODES, "ring-mcast"), required=True,
                   help="DeepEP normal / low-latency, the all-gather, or a mesh ring's sparse "
                        "multicast (--table: the table of Tenstorrent's DeepSeek-V3 mesh study; "
                        "or one batch of --tokens per device along a column of --ring of --ep "
                        "devices on a mesh --hardware)")
    p.add_argument("--table", action="store_true",
                   help="ring-mcast: the dispatch time for 1..8 active experts in the best, "
                        "average and worst placement, beside Tenstorrent's published table")
    p.add_argument("--ring", type=positive_int, default=16,
                   help="ring-mcast: devices on the dispatch ring (default 16, as in "
                        "Tenstorrent's DeepSeek-V3 mesh study)")
    p.add_argument("--groups", type=positive_int, default=None,
                   help="expert groups of group-limited routing (n_group)")
    p.add_argument("--topk-groups", type=positive_int, default=None,
                   help="groups a token may route into (topk_group)")
    p.add_argument("--hardware", default=None, help="built-in GPU name or path to a hardware .toml")
    add_json(p)
    p.set_defaults(func=run)


def _check(args) -> None:
    if args.mode == "ring-mcast" or args.table:
        if args.table and not (args.mode == "ring-mcast" and args.op == "dispatch"):
            raise MoesymError("--table gives Tenstorrent's published ring dispatch table: use "
                              "`moesym comm dispatch --mode ring-mcast --table`")
        if args.table:
            return
        missing = [f"--{f}" for f in _GPU_FLAGS if getattr(args, f) is None]
        if missing:
            raise MoesymError(f"--mode ring-mcast needs {', '.join(missing)} (a mesh hardware "
                              "file; --ep: devices of the mesh, --ring: those along the dispatch "
                              "axis), or --table for Tenstorrent's published table")
        if args.ep % args.ring or args.experts % args.ep or args.topk > args.experts:
            raise MoesymError(f"--ring {args.ring} must divide --ep {args.ep}, which must divide "
                              f"--experts {args.experts} (at least --topk {args.topk})")
        return
    missing = [f"--{f}" for f in _GPU_FLAGS if getattr(args, f) is None]
    if missing:
        raise MoesymError(f"--mode {args.mode} needs {', '.join(missing)}")
    if args.topk > args.experts:
        raise MoesymError(f"--topk {args.topk} exceeds --experts {args.experts}")
    if args.experts % args.ep:
        raise MoesymError(f"--ep {args.ep} does not divide --experts {args.experts}; choose a divisor")
    if (args.groups is None) != (args.topk_groups is None):
        raise MoesymError("--groups and --topk-groups go together")
    if args.groups is not None:
        if args.experts % args.groups:
            raise MoesymError(f"--groups {args.groups} does not divide --experts {args.experts}")
        if args.topk_groups > args.groups:
            raise MoesymError(f"--topk-groups {args.topk_groups} exceeds --groups {args.groups}")
        if args.topk_groups * (args.experts // args.groups) < args.topk:
            raise MoesymError(f"--topk-groups {args.topk_groups} groups hold fewer than --topk "
                              f"{args.topk} experts")


def comm_report(args) -> dict:
    """Numbers of one dispatch / combine for parsed CLI ``args``."""
    _check(args)
    hw = load_hardware(args.hardware)
    # the EP group is the instance, attention data-parallel (the all-gather runs over its
    # ep data-parallel ranks); links, latencies and DeepEP's fitted kernels as predict binds them
    dep = Deployment(gpus=args.ep, ep=args.ep,
                     gpus_per_node=args.gpus_per_node or hw.gpus_per_node)
    vals = {k: sp.sympify(v) for k, v in fabric_values(hw, dep).items()}
    domain = int(vals[S.gpus_per_node])
    D = replace(symbolic_dims(), hidden=args.hidden, experts=args.experts, topk=args.topk,
                ep=args.ep, gpus=args.ep, tp=1, redundant=0, gpus_per_node=domain,
                dispatch_bytes=activation_dispatch_bytes("fp8"),
                combine_bytes=DTYPE_BYTES["bf16"])
    mode = _MODES[args.mode]
    groups = (GroupRouting(args.experts, args.topk, args.groups, args.topk_groups)
              if args.groups is not None and args.topk_groups < args.groups else None)
    elem = D.dispatch_bytes if args.op == "dispatch" else D.combine_bytes
    vol = comm.a2a_volume(D, args.tokens, elem, mode, domain, groups)
    cost = expert_all_to_all(hw, dep, mode, D, args.tokens, groups)[args.op]
    tt = RooflineTiming().time(cost)  # every time model times a COMM cost alike

    def num(e) -> float:
        return float(sp.sympify(e).xreplace(vals).evalf())

    intra, inter = num(vol.intra_bytes), num(vol.inter_bytes)
    return {"time_s": num(tt.total_s), "bytes": intra + inter, "intra_bytes": intra,
            "inter_bytes": inter, "latency_s": num(cost.fixed_s) + num(tt.overhead_s),
            "distinct_ranks_per_token": num(vol.ranks_per_token),
            "distinct_nodes_per_token": num(vol.nodes_per_token),
            "nodes": num(comm.ep_tiers(args.ep, domain)[1]), "scale_up_domain": domain,
            "mode": args.mode, "op": args.op}


def ring_table_report(args) -> dict:
    """The ring sparse-multicast dispatch table of Tenstorrent's DeepSeek-V3 mesh study (best /
    average / worst placement of the active experts, 1..8) from
    :func:`moesym.terms.comm.ring_dispatch_table`, each beside the study's published value and the
    ratio (the study's best E = 2 entry is reported, not compared)."""
    fabric = comm.RingFabric(ring=args.ring)
    if args.hardware is not None:  # the fabric of a mesh hardware file ([mesh.multicast])
        hw = load_hardware(args.hardware)
        mc = hw.mesh.multicast if hw.mesh is not None else None
        if mc is None:
            raise MoesymError(f"--hardware {args.hardware}: no [mesh.multicast] section (a mesh "
                              "system such as wormhole-tg)")
        fabric = comm.RingFabric(ring=args.ring, base_s=mc.base_s, hop_s=mc.hop_s,
                                 device_s=mc.device_s, expert_s=mc.expert_s)
    table = comm.ring_dispatch_table(fabric)
    out = {**table, "active_experts": list(range(1, 9)), "ring": args.ring, "mode": "ring-mcast",
           "op": "dispatch"}
    if args.ring == 16:
        seed = {k: [x * 1e-6 for x in v] for k, v in comm.SEED004_DISPATCH_US.items()}
        out["published"] = seed
        out["ratio_to_published"] = {k: [None if (k, i) == ("best", 1) else m / s
                                       for i, (m, s) in enumerate(zip(table[k], seed[k]))]
                                   for k in table}
        out["published_note"] = ("the published best-case E=2 entry (96.183 us) equals its "
                                 "worst-case E=2 entry and breaks its row's +3.068 us steps: "
                                 "not compared")
    return out


def mesh_report(args) -> dict:
    """One ring sparse-multicast dispatch (or locally reduced combine) of ``--tokens`` tokens per
    device along a column of ``--ring`` devices of a mesh hardware file
    (:mod:`moesym.terms.mesh`): the fabric and the rows axis's link from the file."""

    hw = load_hardware(args.hardware)
    cols = args.ep // args.ring
    if hw.mesh is None:
        raise MoesymError(f"--hardware {args.hardware}: no [mesh] section (a mesh system such "
                          "as wormhole-tg)")
    mesh_shape = (args.ring, cols)
    hw_all = replace(hw, mesh=replace(hw.mesh, shapes=hw.mesh.shapes + (mesh_shape,)))
    mv = mesh_values(hw_all, Deployment(gpus=args.ep, tp=cols, mesh=mesh_shape))
    col = mesh.ColumnRouting(args.experts, args.topk, args.experts // args.ep, args.ring,
                             hw.mesh.rows.wrap, cols)
    bw = mv["mesh_bw_disp"] * hw.efficiency.scale_up
    if args.op == "dispatch":
        c = mesh.mesh_dispatch(col, args.tokens, args.hidden, activation_dispatch_bytes("fp8"), bw,
                               mv["mc_base"], mv["mc_hop"], mv["mc_device"], mv["mc_expert"])
    else:
        c = mesh.mesh_combine(col, args.tokens, args.hidden, DTYPE_BYTES["bf16"], bw,
                              mv["mc_base"], mv["mc_hop"], mv["mc_device"])
    n = args.tokens * args.ring
    num = lambda e: float(sp.sympify(e).evalf())  # noqa: E731
    return {"time_s": num(c.fixed_s) + num(c.net_bytes) / bw, "bytes": num(c.net_bytes),
            "latency_s": num(c.fixed_s), "farthest_hops": num(col.farthest_hops(n)),
            "max_active_experts": num(col.max_active(n)),
            "devices_per_token": num(col.devices_per_token), "ring": args.ring, "columns": cols,
            "wrap": hw.mesh.rows.wrap, "mode": args.mode, "op": args.op}


def run(args) -> int:
    if args.mode == "ring-mcast" and not args.table:
        _check(args)
        r = mesh_report(args)
        if args.json:
            emit_json(r)
            return 0
        print(f"{args.op} (ring-mcast) of {args.tokens} tokens/device along a column of "
              f"{args.ring} of {args.ep} devices on {args.hardware}")
        print(f"  time             {fmt_s(r['time_s'])}  (fixed {fmt_s(r['latency_s'])})")
        print(f"  bytes / link     {r['bytes']:.4g}")
        print(f"  farthest hop     {r['farthest_hops']:.3f}   most active experts "
              f"{r['max_active_experts']:.3f}")
        print(f"  devices / token  {r['devices_per_token']:.3f}  (combine messages per token)")
        return 0
    if args.mode == "ring-mcast" or args.table:
        _check(args)
        r = ring_table_report(args)
        if args.json:
            emit_json(r)
            return 0
        print(f"ring sparse-multicast dispatch, {args.ring}-device ring (us; Tenstorrent's "
              "published values in brackets)")
        print("  E  " + "".join(f"{c:>22}" for c in ("best", "average", "worst")))
        for i, e in enumerate(r["active_experts"]):
            cells = []
            for c in ("best", "average", "worst"):
                seed = f" [{r['published'][c][i] * 1e6:7.1f}]" if "published" in r else ""
                cells.append(f"{r[c][i] * 1e6:12.1f}{seed}")
            print(f"  {e}  " + "".join(f"{x:>22}" for x in cells))
        if "published_note" in r:
            print(f"  note: {r['published_note']}")
        return 0
    r = comm_report(args)
    if args.json:
        emit_json(r)
        return 0
    print(f"{args.op} ({args.mode}) of {args.tokens} tokens/rank, EP {args.ep} on {args.hardware}")
    print(f"  time             {fmt_s(r['time_s'])}  (fixed {fmt_s(r['latency_s'])})")
    print(f"  bytes / rank     {r['bytes']:.4g}  (NVLink {r['intra_bytes']:.4g}, "
          f"RDMA {r['inter_bytes']:.4g})")
    print(f"  ranks / token    {r['distinct_ranks_per_token']:.3f}")
    print(f"  nodes / token    {r['distinct_nodes_per_token']:.3f}")
    return 0
