"""``moesym routing``: one layer's routing statistics as numbers, with its input checks."""

from __future__ import annotations

import numpy as np

from ..errors import MoesymError
from ..specs.deployment import Routing
from ..specs.model import check_experts
from .stats import (distinct_destinations, distinct_experts, max_expert_load_ratio,
                    max_rank_load_ratio)
from .zipf import (distinct_experts_from_inclusion, zipf_distinct_ranks_per_token,
                   zipf_inclusion_probabilities, zipf_max_expert_load_ratio,
                   zipf_max_rank_load_ratio)

# ---------------------------------------------------------------------------------- report
REPORT_KEYS = ("distinct_experts", "distinct_ranks_per_token", "max_rank_load_ratio",
               "max_expert_load_ratio")


def _positive_int(value, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)):
        raise MoesymError(f"{flag} {value!r}: must be a positive integer")
    if not (value > 0 and float(value) == int(value)):
        raise MoesymError(f"{flag} {value}: must be a positive integer")
    return int(value)


def _parse_routing(routing: str) -> tuple[str, object]:
    """(kind, skew) of a ``--routing`` text, parsed as every command parses it
    (:meth:`moesym.specs.deployment.Routing.parse`)."""
    r = Routing.parse(str(routing))
    return ("zipf" if r.numeric else r.kind), r.skew


def _validate(E, k, T, ep, groups, topk_groups) -> tuple[int, int, int, int, int | None, int | None]:
    E = _positive_int(E, "`num_experts`")
    k = _positive_int(k, "`experts_per_token`")
    T = _positive_int(T, "`tokens`")
    ep = _positive_int(ep, "`ep`")
    if (groups is None) != (topk_groups is None):
        raise MoesymError("`expert_groups` and `groups_per_token`: give both or neither")
    if groups is not None:
        groups = _positive_int(groups, "`expert_groups`")
        topk_groups = _positive_int(topk_groups, "`groups_per_token`")
    check_experts(E, k, groups or 1, topk_groups or 1, ep)
    return E, k, T, ep, groups, topk_groups


def routing_report(E, k, T, ep, groups=None, topk_groups=None, routing: str = "uniform",
                   placement: str = "round_robin") -> dict:
    """Routing statistics of one MoE layer for one step, as Python floats.

    T = tokens routed in the step across the whole EP group. Keys: ``distinct_experts``
    (experts with >= 1 token), ``distinct_ranks_per_token`` (EP ranks one token reaches),
    ``max_rank_load_ratio`` and ``max_expert_load_ratio`` (busiest over mean). 'balanced':
    ratios 1 and min(E, T*k) experts. 'zipf:S': Zipf popularity, experts placed on ranks by
    ``placement`` (popularity order dealt 'round_robin' or in 'contiguous' blocks);
    'freq:FILE': measured per-expert shares, experts placed by their index the same way.

    >>> routing_report(256, 8, 1, 1)["distinct_experts"]
    8.0
    """
    E, k, T, ep, groups, topk_groups = _validate(E, k, T, ep, groups, topk_groups)
    kind, s = _parse_routing(routing)
    ranks = distinct_destinations(E, k, ep, groups, topk_groups)
    if kind == "zipf":
        pi = zipf_inclusion_probabilities(E, k, s)
        out = {
            "distinct_experts": float(distinct_experts_from_inclusion(pi, T)),
            "distinct_ranks_per_token": (float(ranks) if groups is not None
                                         else zipf_distinct_ranks_per_token(E, k, ep, s, placement)),
            "max_rank_load_ratio": (1.0 if ep == 1
                                    else zipf_max_rank_load_ratio(E, k, ep, T, s, placement)),
            "max_expert_load_ratio": zipf_max_expert_load_ratio(E, k, T, s),
        }
        return out
    if kind == "balanced":
        return {"distinct_experts": float(min(E, T * k)), "distinct_ranks_per_token": float(ranks),
                "max_rank_load_ratio": 1.0, "max_expert_load_ratio": 1.0}
    return {
        "distinct_experts": float(distinct_experts(E, k, T)),
        "distinct_ranks_per_token": float(ranks),
        "max_rank_load_ratio": float(max_rank_load_ratio(E, k, ep, T, groups, topk_groups)),
        "max_expert_load_ratio": float(max_expert_load_ratio(E, k, T)),
    }

