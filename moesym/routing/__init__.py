"""Routing statistics of Mixture-of-Experts layers, by stage:

- :mod:`moesym.routing.stats`: closed forms of uniform and group-limited routing (SymPy): distinct
  experts and destinations, touched experts, load variance and the busiest rank, tile padding,
  activation layouts, expert-cache misses; the one home the step model, ``comm`` and
  ``routing`` share;
- :mod:`moesym.routing.zipf`: numeric estimators under Zipf popularity and redundant experts;
- :mod:`moesym.routing.report`: the ``moesym routing`` report and its input checks;
- :mod:`moesym.routing.pages`: the derivation pages (derivations/routing_*.md), built on use.

Nothing is computed at import.

>>> from moesym.routing import distinct_experts, routing_report
>>> distinct_experts(256, 8, 1)
8
>>> r = routing_report(256, 8, 128 * 128, 128)
>>> round(r["distinct_experts"], 2), round(r["max_rank_load_ratio"], 2)
(256.0, 1.08)
"""

from .pages import Derivation, derivations, write_pages
from .report import REPORT_KEYS, routing_report
from .stats import (EXACT_REGIME_MAX_LOAD, SEED_TILE_BASE_S, SEED_TILE_STEP_S, GroupRouting,
                    activation_bytes, batched_rows, busiest_touched_local_experts, cache_hit_rate,
                    cache_miss_transfer_time_s, contiguous_rows,
                    distinct_destinations, distinct_experts, distinct_experts_from_inclusion,
                    expected_grouped_gemm_time_s, grouped_gemm_time_s, max_expert_load_ratio,
                    max_load_ratio, max_rank_load_ratio, no_hit_probability, padded_rows_per_rank,
                    padded_rows_per_rank_smooth, rank_load_variance_per_token, touched_local_experts,
                    touched_share)
from .zipf import (busiest_touched_slots, eplb_imbalance, replicas_for_target,
                   replicate_hot_experts, zipf_cache_hit_rate,
                   zipf_cache_miss_transfer_time_s, zipf_distinct_ranks_per_token,
                   zipf_inclusion_probabilities, zipf_max_expert_load_ratio,
                   zipf_max_rank_load_ratio, zipf_popularity)

__all__ = [
    "EXACT_REGIME_MAX_LOAD", "REPORT_KEYS", "SEED_TILE_BASE_S", "SEED_TILE_STEP_S", "Derivation",
    "GroupRouting",
    "activation_bytes", "batched_rows", "busiest_touched_local_experts", "busiest_touched_slots",
    "cache_hit_rate",
    "cache_miss_transfer_time_s",
    "contiguous_rows", "derivations", "distinct_destinations", "distinct_experts",
    "distinct_experts_from_inclusion", "eplb_imbalance", "expected_grouped_gemm_time_s",
    "grouped_gemm_time_s", "max_expert_load_ratio", "max_load_ratio", "max_rank_load_ratio",
    "no_hit_probability", "padded_rows_per_rank", "padded_rows_per_rank_smooth",
    "rank_load_variance_per_token", "replicas_for_target", "replicate_hot_experts",
    "routing_report", "touched_local_experts", "touched_share", "write_pages",
    "zipf_cache_hit_rate", "zipf_cache_miss_transfer_time_s", "zipf_distinct_ranks_per_token",
    "zipf_inclusion_probabilities", "zipf_max_expert_load_ratio", "zipf_max_rank_load_ratio",
    "zipf_popularity",
]
