"""``moesym derive expert-cache``: the smallest expert cache (experts per MoE layer on the device)
whose tier traffic hides under the layer's compute."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..model.expert_tiers import tier_s
from ..model.predictor import predict
from ..numbers.bindings import bindings
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec, expert_weights
from ..symbolic.expr import restrict, smax
from ..symbolic.symbols import S
from .closed_form import ClosedForm, root_sensitivity
from .registry import Page

__all__ = ["expert_cache_hides", "ask", "PAGES"]


def expert_cache_hides(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload
                       ) -> ClosedForm:
    """Smallest expert cache (experts per MoE layer resident on the device, ``--expert-cache``)
    at which the expert tier's traffic fits under the layer's device compute: the cold experts a
    pass activates, copied over the host link (``stream``) or run on the host CPU
    (``host-compute``), take no longer than the layer's compute, so ``--prefetch`` hides them.

    Exact value: the step model ``predict`` builds at each cache size (one structure per size;
    bisection, since more cache is never slower), its ``expert_offload`` against
    ``layer_compute``. Closed form: uniform routing and a static cache, where a pass of
    T = B (1 + n_mtp) / n_mb tokens activates each cold expert with probability
    a = 1 - (1 - k/E)^T, so the tier costs n_mb (E - C) a c_x with c_x the time per cold expert
    (3 d d_e b_we / W_host streamed; on the host 3 d d_e b_we / W_dram + 6 d d_e T k / (E F_cpu)
    / a), and C* = E - t_c / (n_mb a c_x), t_c the layer's device compute at the root."""
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no experts to cache")
    if wl.phase is not Phase.DECODE:
        raise MoesymError("derive expert-cache answers for a decode step (--phase decode)")
    if dep.expert_cache is None:
        dep = dep.with_(expert_cache=0)
    E = model.num_experts

    def at(c: int) -> dict:
        return predict(model, hw, dep.with_(expert_cache=int(c)), wl, memory=True)

    def gap(r: dict) -> float:
        return r["per_layer_s"].get("expert_offload", 0.0) - r["layer_compute_s"]

    seen: dict[int, dict] = {}
    lo, hi = 0, E  # gap(E) <= 0: a full cache moves nothing
    seen[0] = at(0)
    if gap(seen[0]) <= 0:
        hi = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seen[mid] = at(mid)
        lo, hi = (mid, hi) if gap(seen[mid]) > 0 else (lo, mid)
    root = hi
    r = seen.get(root) or at(root)
    # closed form (uniform routing, static cache) with the device compute t_c named
    C, t_c = sp.Symbol("C", nonnegative=True), sp.Symbol("t_c", positive=True)
    T = S.batch * (1 + S.mtp) / S.micro_batches
    a = 1 - (1 - S.topk / S.experts) ** T
    # per cold expert: its assignments under uniform routing are T k / (E a) (module tier_s)
    per_cold = tier_s(dep.expert_placement, 1, T * S.topk / (S.experts * a),
                      expert_weights(S.hidden, S.moe_inter, S.w_bytes_expert),
                      6 * S.hidden * S.moe_inter)
    expr = S.experts - t_c / (S.micro_batches * a * per_cold)
    vals = restrict(bindings(model, hw, dep, wl), expr)
    vals.update({S.batch: wl.batch, t_c: r["layer_compute_s"]})
    for sym_, v in ((S.mtp, dep.mtp), (S.micro_batches, dep.micro_batches)):
        vals.setdefault(sym_, v)
    closed = float(expr.subs(vals))
    mem = "fits" if r.get("fits") else "does NOT fit"
    routing = str(dep.routing)
    note = (f"Decode, batch {wl.batch}, context {wl.context}, {dep.expert_placement} placement, "
            f"{dep.cache_policy} cache, {routing} routing. Exact: the model predict evaluates at "
            f"each cache size (C={root}: tier {r['per_layer_s'].get('expert_offload', 0) * 1e6:.1f} "
            f"us vs device compute {r['layer_compute_s'] * 1e6:.1f} us per layer; memory "
            f"{r.get('memory_bytes', 0) / 1e9:.2f} GB, {mem} in {hw.hbm_capacity_bytes / 1e9:.0f} GB). "
            f"Closed form: uniform routing and a static cache with t_c = {r['layer_compute_s'] * 1e6:.1f} "
            f"us (the layer's device compute at C={root}), continuous in C; "
            + ("it is the model's own arithmetic for uniform routing." if routing == "uniform"
               and dep.cache_policy != "lru" else
               "the model's routing and cache policy differ from it, hence the gap to the exact value."))
    tier = S.micro_batches * smax(S.experts - C, 0) * a * per_cold
    return ClosedForm("expert_cache_hides", "Expert cache size from which the tier hides under compute",
                      expr, vals, float(root), sp.true, note, expr - C, C, closed, "smooth", {},
                      dep.timing, (("expert tier, uniform relaxation", tier),
                                   ("layer device compute t_c", t_c + 0 * C)),
                      sensitivity=root_sensitivity(expr - C, C, vals, closed))


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive expert-cache`` at the decode point (each cache size's memory is in the
    note)."""
    return expert_cache_hides(model, hw, dep, wl)


PAGES = (Page("expert_cache_hides",
              "Qwen3-30B-A3B BF16 on one H100, experts streamed over PCIe (64 GB/s) with "
              "prefetch, 256 requests, context 2048",
              lambda timing: expert_cache_hides(
                  load_model("qwen3-30b-a3b"), load_hardware("h100"),
                  Deployment(prefetch=True, expert_cache=0, timing=timing),
                  Workload(Phase.DECODE, batch=256, context=2048)),
              expert_cache_hides),)
