"""The routing statistics' derivation pages (derivations/routing_*.md), built on first use."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import sympy as sp

from ..specs.model import expert_weights
from ..symbolic.symbols import S
from .report import routing_report
from .stats import (activation_bytes, batched_rows, cache_hit_rate, cache_miss_transfer_time_s,
                    contiguous_rows, distinct_destinations, distinct_experts, grouped_gemm_time_s,
                    max_expert_load_ratio, max_rank_load_ratio, padded_rows_per_rank,
                    padded_rows_per_rank_smooth, touched_local_experts)
from .zipf import (distinct_experts_from_inclusion, replicas_for_target, zipf_cache_hit_rate,
                   zipf_inclusion_probabilities, zipf_max_rank_load_ratio)

# ----------------------------------------------------------------------------- derivations
@dataclass(frozen=True)
class Derivation:
    """One closed form: name, title, SymPy formula over moesym.symbolic.symbols, assumptions, accuracy."""

    name: str
    title: str
    formula: sp.Expr
    assumptions: str
    accuracy: str
    example: str


def _derivations() -> list[Derivation]:
    E, k, T, ep = S.experts, S.topk, S.tokens, S.ep
    G, kG, s, i = S.n_groups, S.topk_groups, S.zipf_s, S.expert_index
    lam, tile, C = S.zipf_rate, S.tile_m, S.cache_experts
    pi_i = 1 - sp.exp(-lam * i ** -s / sp.Sum(i ** -s, (i, 1, E)))
    uniform = ("T tokens routed in one step across the EP group each pick k of E experts "
               "uniformly without replacement, independently; E/ep experts per rank.")
    ex_re = routing_report(256, 8, 128 * 128, 128)
    return [
        Derivation("distinct_experts", "Expected experts receiving at least one token",
                   distinct_experts(E, k, T), uniform + " A token picks a given expert with "
                   "probability k/E, so P(expert idle) = (1 - k/E)^T.",
                   "Exact under the uniform model (Monte Carlo agrees to its standard error).",
                   "DeepSeek-V3 (E=256, k=8), one token: 8 experts; T=128: "
                   f"{float(distinct_experts(256, 8, 128)):.1f} experts."),
        Derivation("touched_local_experts", "Local experts touched per rank (lazy expert loading)",
                   touched_local_experts(E, k, T, ep), uniform,
                   "Exact under the uniform model.",
                   "DeepSeek-V3 EP128, T=128 tokens: "
                   f"{float(touched_local_experts(256, 8, 128, 128)):.3f} of 2 local experts."),
        Derivation("distinct_experts_zipf", "Expected experts touched under Zipf popularity",
                   sp.Sum(1 - (1 - pi_i) ** T, (i, 1, E)),
                   "Popularity p_i proportional to i^-s; a token's top-k inclusion probabilities "
                   "pi_i = 1 - exp(-Lambda p_i) (successive sampling, Rosen/Hajek) with Lambda "
                   "solving sum_i pi_i = k numerically (brentq).",
                   "Sum exact given pi_i; the successive-sampling pi_i is within ~2% of a "
                   "Gumbel-top-k simulation for s <= 1.2.",
                   "E=64, k=4, s=1, T=16: "
                   f"{float(distinct_experts_from_inclusion(zipf_inclusion_probabilities(64, 4, 1.0), 16)):.2f}."),
        Derivation("distinct_destinations", "Distinct ranks (or nodes) per token",
                   ep * (1 - sp.exp(sp.loggamma(E - E / ep + 1) + sp.loggamma(E - k + 1)
                                    - sp.loggamma(E - E / ep - k + 1) - sp.loggamma(E + 1))),
                   uniform + " P(rank missed) = C(E - E/ep, k)/C(E, k) (hypergeometric).",
                   "Exact under the uniform model.",
                   f"DeepSeek-V3 on 32 ranks: {float(distinct_destinations(256, 8, 32)):.3f} ranks "
                   f"per token; 8 nodes: {float(distinct_destinations(256, 8, 8)):.3f}."),
        Derivation("grouped_distinct_destinations", "Distinct destinations, group-limited routing",
                   kG * (ep / G) * sp.Sum(S.leader_pmf * (1 - sp.binomial(E / G - E / ep, S.leader_c)
                                                          / sp.binomial(E / G, S.leader_c)),
                                          (S.leader_c, 1, k - kG + 1)),
                   "DeepSeek-V3's selection: a group scores the sum of its top-2 experts, the "
                   "top kG of G groups are kept and the top k experts taken from them. Leader "
                   "model: each selected group's best expert is among the token's top k (why "
                   "the group was selected) and the other k - kG fall uniformly on the remaining "
                   "kG E/G - kG candidates, so a selected group holds c = 1 + Hypergeometric("
                   "kG E/G - kG, E/G - 1, k - kG) experts (P(c) above), a uniform subset of its "
                   "E/G. Shown for G dividing ep (ep/G ranks per group); when ep divides G a "
                   "rank is reached when one of its G/ep groups is selected: "
                   "ep (1 - C(G - G/ep, kG)/C(G, kG)).",
                   "Against a Monte Carlo of the real selection (sigmoid scores of normal "
                   "logits, DeepSeek-V3 sizes) within 1% at EP 8..256 (tests/test_routing.py); "
                   "the k experts uniform over all candidates instead is 7% low at EP 16.",
                   "DeepSeek-V3 (256 experts, 8 groups, top-4 groups, top-8): "
                   f"{float(distinct_destinations(256, 8, 8, 8, 4)):.3f} ranks per token at EP 8, "
                   f"{float(distinct_destinations(256, 8, 16, 8, 4)):.3f} at EP 16, "
                   f"{float(distinct_destinations(256, 8, 32, 8, 4)):.3f} at EP 32."),
        Derivation("max_rank_load_ratio", "Busiest EP rank's load over the mean",
                   max_rank_load_ratio(E, k, ep, T), uniform + " Rank load mean T k/ep, "
                   "variance T k/ep (1 - 1/ep)(E-k)/(E-1), inflated by ep/(ep-1) for the fixed "
                   "total; exact iid binomial maximum below a mean of 8 tokens, normal "
                   "extreme value (Blom) with Cornish-Fisher skew term above.",
                   "Within 5% of Monte Carlo for T >= 1 on the tested grid (E 8..256, ep 2..E; "
                   "worst at T = 1 with one expert per bin); exactly 1 for ep = 1.",
                   f"DeepSeek-V3 EP128, 128 tokens per GPU: {ex_re['max_rank_load_ratio']:.3f}."),
        Derivation("max_expert_load_ratio", "Busiest expert's load over the mean",
                   max_expert_load_ratio(E, k, T), uniform + " One bin per expert "
                   "(Binomial(T, k/E)); same machinery with n = E.",
                   "Within 5% of Monte Carlo on the tested grid.",
                   f"DeepSeek-V3, T = 16384: {ex_re['max_expert_load_ratio']:.3f}."),
        Derivation("grouped_max_rank_load_ratio", "Busiest rank under group-limited routing",
                   max_rank_load_ratio(256, 8, 8, T, 8, 4),
                   "Group-limited leader model as above; per-token variance by the law of total "
                   "variance over the selected groups (within 1.5% of a Monte Carlo of the real "
                   "selection for DeepSeek-V3's sizes). Shown for E=256, k=8, ep=G=8, kG=4.",
                   "Within 5% of a Monte Carlo of DeepSeek-V3's real group selection from T = 4 "
                   "tokens (tests/test_routing.py); a single token's rank loads are lumpy (whole "
                   "groups), and T = 1 is held to 10%.",
                   f"T=4096: {float(max_rank_load_ratio(256, 8, 8, 4096, 8, 4)):.3f} vs uniform "
                   f"{float(max_rank_load_ratio(256, 8, 8, 4096)):.3f}."),
        Derivation("zipf_max_rank_load_ratio", "Busiest rank under Zipf popularity (mean load)",
                   ep / (k * T) * T * sp.Sum(pi_i, (i, 1, E)) / ep,
                   "Rank r's load mean T*sum_{i in r} pi_i, variance T*sum pi_i(1-pi_i); ranks "
                   "treated as independent moment-matched binomials, E[max] = sum_j (1 - prod_r "
                   "F_r(j)). Formula shown: the normalisation (sum of pi_i over all experts = k).",
                   "Within 6% of Gumbel-top-k Monte Carlo for s <= 1.2 on the tested grid.",
                   "E=64, k=4, ep=8, T=256, s=1, round robin: "
                   f"{zipf_max_rank_load_ratio(64, 4, 8, 256, 1.0):.3f}."),
        Derivation("replicas_for_target", "Redundant replicas (EPLB) for a target imbalance",
                   sp.Sum(sp.Max(sp.ceiling(pi_i * ep / (S.imbalance * k)) - 1, 0), (i, 1, E)),
                   "Replicas split a hot expert's load evenly; no slot may carry more than the "
                   "target rank load lambda*k/ep (per token). Closed-form lower bound shown; the "
                   "code then scans R upward with greedy replication and LPT packing.",
                   "Lower bound exact for the slot constraint; packing checked numerically.",
                   f"E=64, k=2, ep=8, s=1, target 1.5: {replicas_for_target(64, 2, 8, 1.5, 1.0)} "
                   "replicas."),
        Derivation("padded_rows", "Grouped-GEMM rows per rank with M-tile padding (exact)",
                   padded_rows_per_rank(E, k, T, ep, tile),
                   uniform + " Each expert's X ~ Binomial(T, k/E) rows are padded to the tile.",
                   "Exact mean (numeric sum, PaddedRowsMean).",
                   f"E=256, k=8, ep=32, T=1, tile 32: "
                   f"{float(padded_rows_per_rank(256, 8, 1, 32, 32)):.1f} rows for 0.25 real rows."),
        Derivation("padded_rows_smooth", "Grouped-GEMM rows per rank, relaxed smooth form",
                   padded_rows_per_rank_smooth(E, k, T, ep, tile),
                   "First branch exact when no expert exceeds a tile, second when counts spread "
                   "over many tiles (padding uniform on 0..tile-1).",
                   "Within 12% of the exact mean on the tested grid (worst near one tile per "
                   "expert); exact in both limits.",
                   f"E=256, k=8, ep=32, T=1024, tile 32: "
                   f"{float(padded_rows_per_rank_smooth(256, 8, 1024, 32, 32)):.1f} vs exact "
                   f"{float(padded_rows_per_rank(256, 8, 1024, 32, 32)):.1f}."),
        Derivation("grouped_gemm_time", "Grouped-GEMM step time (seed measurement)",
                   S.t_gemm_base + S.t_gemm_tile * (padded_rows_per_rank(E, k, T, ep, tile) / tile
                                                    - touched_local_experts(E, k, T, ep)),
                   "Seed: 235 us while every expert has <= 32 tokens, about +130 us per further "
                   "32 tokens of any one expert (17,38 -> 365 us; 38,38 -> 495; 38,70 -> 625).",
                   "Reproduces the four seed examples exactly.",
                   f"17 and 38 tokens: {float(grouped_gemm_time_s([17, 38])) * 1e6:.0f} us."),
        Derivation("batched_rows", "Rows of a batched activation layout",
                   batched_rows(E, ep, S.expert_buffer_tokens),
                   "Batched dispatch returns (E/ep, T_buf, d) per rank, valid or not.",
                   "Exact (allocation); compute follows if the kernel does not skip padding.",
                   f"E=256, ep=32, T_buf=128: {int(batched_rows(256, 32, 128))} rows vs contiguous "
                   f"{float(contiguous_rows(256, 8, 128, 32, 32)):.0f} at T=128."),
        Derivation("activation_bytes", "Bytes of an activation buffer",
                   activation_bytes(batched_rows(E, ep, S.expert_buffer_tokens), S.hidden,
                                    S.act_bytes),
                   "rows x hidden x bytes per element (batched layout shown).",
                   "Exact.", "1024 rows x 7168 x 2 B = 14.7 MB."),
        Derivation("cache_hit_rate", "Expert-cache hit rate",
                   cache_hit_rate(E, C),
                   "C experts cached; uniform: C/E. Zipf: sum of the top-C pi_i over k.",
                   "Exact under the uniform model.",
                   f"E=64, C=8: uniform {float(cache_hit_rate(64, 8)):.3f}, Zipf s=1, k=2: "
                   f"{zipf_cache_hit_rate(64, 2, 8, 1.0):.3f}."),
        Derivation("cache_miss_transfer_time", "Host transfer time of cache misses per layer",
                   cache_miss_transfer_time_s(E, k, T, C, expert_weights(S.hidden, S.moe_inter, S.w_bytes),
                                              S.host_bw),
                   "Each cold expert touched in the step is streamed once over the host link; "
                   "expert bytes 3*d*d_e*b_w (gate, up, down).",
                   "Exact expected count under the uniform model; ignores prefetch overlap.",
                   "E=64, k=2, C=8, T=1, 2 MB experts, 25 GB/s: "
                   f"{float(cache_miss_transfer_time_s(64, 2, 1, 8, 2e6, 25e9)) * 1e6:.1f} us."),
    ]


@functools.lru_cache(maxsize=1)
def derivations() -> tuple[Derivation, ...]:
    """The routing statistics pages' entries (built on first use, not at import)."""
    return tuple(_derivations())


def _page(d: Derivation) -> str:
    return "\n".join([
        f"# {d.title}", "", f"`moesym.routing` closed form `{d.name}`.", "",
        "## Formula", "", "$$", sp.latex(d.formula), "$$", "", "As SymPy:", "", "```",
        str(d.formula), "```", "", "## Assumptions", "", d.assumptions, "",
        "## Where it is accurate", "", d.accuracy, "", "## Worked example", "", d.example, "",
    ])


def write_pages(folder) -> list[Path]:
    """Write one markdown page per entry of :func:`derivations` to folder/routing_<name>.md."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in derivations():
        path = folder / f"routing_{d.name}.md"
        path.write_text(_page(d), encoding="utf-8")
        paths.append(path)
    return paths
