"""The parallelism of seed 003's dispatch granularities (``--layout per-token | grouped | fused``):
how many expert kernels one MoE layer launches, the rows each computes, how often the expert
weights are read, and how well one kernel's tiles fill the GPU (``predict`` key
``expert_dispatch``).

Mean values over a micro-batch on one GPU, uniform routing: ``T`` tokens routed through the MoE
group, ``rows = T k / ep`` token-expert assignments on the GPU, ``active = local x (1 - (1 -
k/E)^T)`` local experts with at least one row (:func:`moesym.routing.stats.touched_share`)::

    per-token: 2 rows kernels of 1 row, weights read rows times
    grouped:   2 active kernels of rows / active rows, weights read active times
    fused:     2 kernels (gate/up, down) over all active experts, weights read active times

``tile_row_use`` = rows per kernel / the kernel's M tile (the share of a tile's rows that does
useful work: 1/8 for a GEMV in an 8-row Apple tile, 1/64 on Hopper), ``sm_fill`` = tiles /
(waves x SMs) of the gate/up GEMM (the share of SM slots its waves keep busy).
"""

from __future__ import annotations

from ..specs.deployment import Phase
from ..specs.kernel_calib import kernel_calib

__all__ = ["GRANULARITIES", "dispatch_parallelism"]

GRANULARITIES = ("per-token", "grouped", "fused")


def dispatch_parallelism(model, hw, dep, wl) -> dict:
    """``expert_dispatch`` of a ``predict`` report (see the module docstring)."""
    from ..kernels.analytical import gemm_tiles, tile_m_rows
    from ..routing.stats import touched_share
    from .layer_costs import weight_only

    layout = dep.resolved_layout(wl.phase)
    gran = layout if layout in GRANULARITIES else "fused"
    tokens = wl.batch * (1 + dep.mtp) if wl.phase is not Phase.PREFILL else wl.tokens
    T = tokens * dep.stage_gpus / dep.tp / dep.micro_batches / dep.pp  # through a layer per pass
    E, k = model.num_experts, model.experts_per_token
    local = (E + dep.redundant_experts) / dep.ep
    rows = T * k / dep.ep
    active = local * float(touched_share(E, k, T))
    if gran == "per-token":
        kernels, m, groups, reads = rows, 1.0, 1, rows
    elif gran == "grouped":
        kernels, m, groups, reads = active, rows / active, 1, active
    else:
        kernels, m, groups, reads = 1.0, rows / active, active, active
    calib = kernel_calib(hw)
    floor = 16 if "moe" in weight_only(model, dep, hw) else 64
    n = 2 * model.moe_intermediate_size / dep.expert_tp
    tiles, waves, _ = gemm_tiles(m, n, groups, hw.sms, calib, floor)
    tm = float(tile_m_rows(m, calib, floor))
    return {"granularity": gran, "rows_per_layer": rows, "active_experts": active,
            "kernels_per_layer": 2 * kernels, "rows_per_kernel": m,
            "expert_weight_reads_per_layer": reads, "tile_m_rows": tm,
            "tile_row_use": min(m, tm) / tm, "sm_fill": float(tiles) / (float(waves) * hw.sms)}
