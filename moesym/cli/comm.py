"""``moesym comm {dispatch,combine}``: one expert-parallel all-to-all on its own (CONTRACT.md 5)."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import MoesymError
from ..model.bindings import scale_up_domain
from ..routing.stats import GroupRouting
from ..specs.deployment import DTYPE_BYTES, A2AMode, Deployment, activation_dispatch_bytes
from ..specs.hardware import load_hardware
from ..symbols import S
from ..terms import comm
from ..terms.dims import symbolic_dims
from ..timing import RooflineTiming
from . import COMMANDS
from .common import add_json, emit_json, fmt_s, positive_int

__all__ = ["comm_report", "register"]

_MODES = {"normal": A2AMode.DEEPEP_NORMAL, "low-latency": A2AMode.DEEPEP_LL,
          "allgather": A2AMode.ALLGATHER}


def register(sub) -> None:
    p = sub.add_parser("comm", help=COMMANDS["comm"])
    p.add_argument("op", choices=("dispatch", "combine"))
    p.add_argument("--tokens", type=positive_int, required=True, help="tokens per rank")
    p.add_argument("--hidden", type=positive_int, required=True)
    p.add_argument("--topk", type=positive_int, required=True)
    p.add_argument("--experts", type=positive_int, required=True)
    p.add_argument("--ep", type=positive_int, required=True)
    p.add_argument("--gpus-per-node", type=positive_int, default=8)
    p.add_argument("--mode", choices=tuple(_MODES), required=True)
    p.add_argument("--groups", type=positive_int, default=None,
                   help="expert groups of group-limited routing (n_group)")
    p.add_argument("--topk-groups", type=positive_int, default=None,
                   help="groups a token may route into (topk_group)")
    p.add_argument("--hardware", required=True, help="built-in GPU name or path to a hardware .toml")
    add_json(p)
    p.set_defaults(func=run)


def _check(args) -> None:
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
    domain = scale_up_domain(hw, Deployment(gpus=args.ep, ep=args.ep,
                                            gpus_per_node=args.gpus_per_node))
    # the EP group is the instance, attention data-parallel (the all-gather runs over its
    # ep data-parallel ranks)
    D = replace(symbolic_dims(), hidden=args.hidden, experts=args.experts, topk=args.topk,
                ep=args.ep, gpus=args.ep, tp=1, dispatch_bytes=activation_dispatch_bytes("fp8"),
                combine_bytes=DTYPE_BYTES["bf16"])
    mode = _MODES[args.mode]
    groups = (GroupRouting(args.experts, args.topk, args.groups, args.topk_groups)
              if args.groups is not None and args.topk_groups < args.groups else None)
    elem = D.dispatch_bytes if args.op == "dispatch" else D.combine_bytes
    vol = comm.a2a_volume(D, args.tokens, elem, mode, domain, groups)
    fn = comm.dispatch if args.op == "dispatch" else comm.combine
    cost = fn(D, args.tokens, hw.scale_up_Bps * hw.efficiency.scale_up,
              hw.scale_out_Bps * hw.efficiency.scale_out, hw.latency.scale_up_s,
              hw.latency.scale_out_s, domain, mode, groups)
    tt = RooflineTiming().time(cost)
    val = {S.t_kernel: sp.Float(hw.latency.kernel_s)}

    def num(e) -> float:
        return float(sp.sympify(e).xreplace(val).evalf())

    intra, inter = num(vol.intra_bytes), num(vol.inter_bytes)
    return {"time_s": num(tt.total_s), "bytes": intra + inter, "intra_bytes": intra,
            "inter_bytes": inter, "latency_s": num(cost.fixed_s) + num(tt.overhead_s),
            "distinct_ranks_per_token": num(vol.ranks_per_token),
            "distinct_nodes_per_token": num(vol.nodes_per_token),
            "nodes": num(comm.ep_tiers(args.ep, domain)[1]), "scale_up_domain": domain,
            "mode": args.mode, "op": args.op}


def run(args) -> int:
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
