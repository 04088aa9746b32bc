"""``moesym routing``: routing statistics of one MoE layer for one step."""

from __future__ import annotations

from ..routing import routing_report
from . import COMMANDS
from .common import add_json, emit_json, positive_int

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("routing", help=COMMANDS["routing"])
    p.add_argument("--experts", type=positive_int, required=True)
    p.add_argument("--topk", type=positive_int, required=True)
    p.add_argument("--tokens", type=positive_int, required=True,
                   help="tokens routed in one step across the whole EP group")
    p.add_argument("--ep", type=positive_int, required=True)
    p.add_argument("--groups", type=positive_int, default=None)
    p.add_argument("--topk-groups", type=positive_int, default=None)
    p.add_argument("--routing", default="uniform", help="uniform, balanced, zipf:S or freq:FILE.csv (measured per-expert assignment counts)")
    p.add_argument("--placement", choices=("round_robin", "contiguous"), default="round_robin",
                   help="how experts map to ranks (matters for zipf)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    r = routing_report(args.experts, args.topk, args.tokens, args.ep, groups=args.groups,
                       topk_groups=args.topk_groups, routing=args.routing, placement=args.placement)
    if args.json:
        emit_json(r)
        return 0
    for k, v in r.items():
        print(f"{k:<28} {v:.4f}")
    return 0
