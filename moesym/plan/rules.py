"""The validity rules: a model, a deployment and a workload checked against each other and the
hardware before any model is built. Every check ends in a one-line error naming the flag as the
user gave it (a derived size named as derived), or in a one-line warning naming what is assumed;
never in a number no real system could produce.

>>> from moesym.readers.model import load_model
>>> from moesym.specs.hardware import load_hardware
>>> from moesym.specs.deployment import Deployment, Workload, Phase
>>> m, h = load_model("deepseek-v3"), load_hardware("h800")
>>> check_inputs(m, h, Deployment(gpus=16), Workload(Phase.DECODE, context=1_000_000))
Traceback (most recent call last):
...
moesym.errors.SpecError: `context` 1000000 exceeds the 163840 positions of deepseek-v3 (max_position_embeddings, with its rope scaling yarn x40 of 4096); choose a shorter length
"""

from __future__ import annotations

import math
import warnings

from ..attention.catalog import base, check
from ..engines import load_engine
from ..engines.support import check_format
from ..errors import SpecError
from ..specs.deployment import Phase
from ..specs.mesh import check_mesh
from ..specs.precision import FORMATS

__all__ = ["check_inputs", "check_engine_format", "check_lengths", "check_pipeline",
           "position_limit", "max_draft_tokens", "SUPPORTED_GROUPS"]

#: scale groups the weight-only and 4-bit kernels run (besides the per-channel default):
#: w4a16: vLLM's Marlin kernels, MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]
#: (vllm/model_executor/layers/quantization/utils/marlin_utils.py); fp4: the OCP MX spec's
#: MXFP4 (32 elements per E8M0 scale) and NVIDIA's NVFP4 (16 per FP8 scale). Other grouped
#: formats are checked against the GEMMs' K only.
SUPPORTED_GROUPS = {"w4a16": (32, 64, 128), "fp4": (16, 32)}

#: the share of steps that reach the last draft token below which more draft tokens are refused:
#: draft token n is verified only when the n - 1 before it were accepted (probability p^(n-1))
_DRAFT_REACH = 1e-3
_DRAFT_CAP = 64  # with acceptance 1 the rule above gives no bound


def check_inputs(model, hw, dep, wl=None, sharding: bool = True) -> None:
    """Raise :class:`SpecError` (or warn) where ``dep`` and ``wl`` cannot run ``model`` on
    ``hw``: the weight format against the engine, the mesh, the sharding rules, pipeline
    stages against layers, draft tokens,
    redundant experts, the weight-scale group against the kernels and the GEMMs' K, and the
    workload's lengths against the model's positions. ``sharding`` False skips the mesh and
    sharding rules (a searched deployment is checked per candidate). The model's attention
    fields are checked by their variant first (a model built in Python, not read)."""
    check(model)
    check_engine_format(dep)
    if sharding:
        check_mesh(hw, dep)
        dep.check_model(model)
    if hw is not None and dep.gpus_per_node > hw.gpus_per_node and dep.gpus > hw.gpus_per_node:
        warnings.warn(f"--gpus-per-node {dep.gpus_per_node} is more than {hw.name}'s "
                      f"{hw.gpus_per_node} (its file's gpus_per_node): a hypothetical node, timed "
                      f"with its {dep.gpus_per_node} GPUs on one scale-up fabric", stacklevel=3)
    check_pipeline(model, dep.pp)
    if dep.expert_cache is not None and not model.is_moe:
        warnings.warn(f"--expert-cache {dep.expert_cache} has no effect on {model.name}: a "
                      "dense model has no routed experts to cache (every weight stays on the "
                      "device)", stacklevel=3)
    _draft_tokens(dep)
    _redundant_experts(model, dep)
    _group_size(model, dep)
    if wl is not None:
        _positions(model, wl)


def check_engine_format(dep) -> None:
    """The deployment's weight format is one its engine loads (a GGUF file is llama.cpp's, an
    MLX quantization MLX's): else the one-line error naming the engine and the fix."""
    if isinstance(dep.weights, str):
        check_format(load_engine(dep.engine).name, dep.weights, "`engine`")


def check_pipeline(model, pp: int) -> None:
    """Each pipeline stage holds at least one layer; an uneven split is said (the model times
    the mean layers per stage, an engine's largest stage holds the ceiling)."""
    if pp <= 1:
        return
    L = model.num_layers
    if pp > L:
        raise SpecError(f"`pp` {pp} exceeds the {L} layers of {model.name}: each pipeline "
                        f"stage holds at least one layer; use `pp` {L} or fewer")
    if L % pp:
        most = -(-L // pp)
        warnings.warn(f"--pp {pp} splits the {L} layers of {model.name} unevenly (the "
                      f"largest stage holds {most}); timed at the mean {L / pp:.4g} layers "
                      f"per stage, up to {most / (L / pp) - 1:.0%} short of the slowest "
                      "stage", stacklevel=3)


def max_draft_tokens(accept: float) -> int:
    """Most draft tokens per step worth verifying at per-token acceptance ``accept``: the last
    is reached in at least 1 in 1000 steps (``accept ** (n - 1) >= 1e-3``), at most 64.

    >>> max_draft_tokens(0.85)
    43
    """
    if accept <= 0:
        return 1
    if accept >= 1:
        return _DRAFT_CAP
    return min(_DRAFT_CAP, 1 + int(math.log(_DRAFT_REACH) / math.log(accept)))


def _draft_tokens(dep) -> None:
    if not dep.mtp:
        return
    n = max_draft_tokens(dep.acceptance)
    if dep.mtp > n:
        raise SpecError(f"`mtp` {dep.mtp}: at acceptance {dep.acceptance:g} draft token {n + 1} "
                        f"is reached in under 1 step in 1000 (acceptance^{n}); draft at most "
                        f"{n} tokens (engines draft 1-8)")


def _redundant_experts(model, dep) -> None:
    """Redundant experts copy hot experts onto other GPUs: at most one copy of each expert
    (more copies than experts hold more replicas than originals on every GPU), and only
    where the experts are spread (EP > 1)."""
    r = dep.redundant_experts
    if not r:
        return
    if not model.is_moe:
        raise SpecError(f"`redundant_experts` {r}: {model.name} is dense (no routed experts)")
    if r > model.num_experts:
        per_gpu = (model.num_experts + r) / dep.ep
        raise SpecError(f"`redundant_experts` {r} exceeds the {model.num_experts} experts of "
                        f"{model.name} ({per_gpu:g} experts per GPU, most of them copies); give "
                        f"at most {model.num_experts}")
    if dep.ep == 1:
        warnings.warn(f"--redundant-experts {r} with EP 1: every expert is already on every "
                      "GPU; the copies only take memory", stacklevel=3)


def _gemm_ks(model, fmt_of) -> dict:
    """The reduction length (K) of each GEMM whose weights are in a grouped format, by name."""
    ks = {}
    if fmt_of("attn"):
        ks["hidden_size"] = model.hidden_size
        ks.update(base(model).gemm_ks(model))  # the model's own attention's other GEMMs
    if fmt_of("moe") and model.is_moe:
        ks["hidden_size"] = model.hidden_size
        ks["moe_intermediate_size"] = model.moe_intermediate_size
    if fmt_of("dense") and (model.dense_layers or model.shared_intermediate_size):
        ks["hidden_size"] = model.hidden_size
        if model.dense_intermediate_size:
            ks["intermediate_size"] = model.dense_intermediate_size
    return ks


def _group_size(model, dep) -> None:
    """``--group-size`` against the kernels' supported groups and every grouped GEMM's K."""
    g = dep.group_size
    if not g:
        return
    recipe = dep.weight_recipe(model.is_moe)
    grouped = {c: getattr(recipe, c) for c in ("attn", "moe", "dense")
               if FORMATS[getattr(recipe, c)].grouped}
    for fmt in sorted(set(grouped.values())):
        ok = SUPPORTED_GROUPS.get(fmt)
        if ok and g not in ok:
            raise SpecError(f"`group_size` {g}: {fmt} kernels run groups of "
                            f"{', '.join(map(str, ok))} (or the format's default)")
    ks = _gemm_ks(model, lambda c: c in grouped)
    bad = {k: v for k, v in ks.items() if v % g}
    if bad:
        what = ", ".join(f"{k} {v}" for k, v in bad.items())
        raise SpecError(f"`group_size` {g} does not divide the GEMM K of {model.name} ({what}); "
                        "choose a divisor")


def position_limit(model) -> tuple:
    """(trained positions, positions with the config's rope scaling, its words): the scaled
    length is vLLM's derivation (``_get_and_verify_max_len``: yarn scales the original length,
    other types ``max_position_embeddings``; su, longrope and llama3 extend nothing further)."""
    return model.max_positions, model.rope_positions or model.max_positions, model.rope_scaling


def _positions(model, wl) -> None:
    check_lengths(model, wl.phase, wl.context, wl.isl, wl.osl, wl.lengths)


def check_lengths(model, phase, context: int = 0, isl: int = 0, osl: int = 0,
                  lengths: tuple = ()) -> None:
    """The longest sequence a workload makes (decode and prefill: the context or the longest of
    ``lengths``; serve: the prompt and its output) against the model's positions: an error
    beyond them, a warning where only the config's rope scaling reaches that far."""
    trained, scaled, rope = position_limit(model)
    if not trained:
        return
    if Phase(phase) is Phase.SERVE:
        longest = (max(lengths) if lengths else isl) + osl
        given = (f"--isl-dist (longest {max(lengths)}) + `osl` {osl}" if lengths
                 else f"`isl` {isl} + `osl` {osl}") + f" = {longest} tokens"
    else:
        longest = max(lengths) if lengths else context
        flag = "--context-dist" if Phase(phase) is Phase.DECODE else "--isl-dist"
        given = f"{flag} (longest {longest})" if lengths else f"`context` {longest}"
    if longest <= trained:
        return
    if longest > scaled:
        how = (f"max_position_embeddings, with its rope scaling {rope}" if rope and scaled == trained
               else f"rope scaling {rope} gives {scaled}" if rope
               else "max_position_embeddings; no rope scaling in its config")
        raise SpecError(f"{given} exceeds the {scaled} positions of {model.name} ({how}); "
                        "choose a shorter length")
    warnings.warn(f"{given} is beyond the {trained} positions {model.name} was given "
                  f"(max_position_embeddings): its rope scaling {rope} extends it to {scaled}",
                  stacklevel=3)
