"""One average layer's attention from the model's variants (:func:`moesym.attention.catalog.kinds`):
each variant's cost weighted by its share of the layers. A variant without projections or
elementwise work of its own (``None``) runs the base's: its share goes to the base's. A share of
the layers runs the whole batch's kernel, so its work and launches scale while the kernel's
shape stays one layer's (the timing repeats it ``launches`` times).

>>> from moesym.readers.model import load_model
>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.symbolic.symbols import S
>>> from moesym.attention.base import Kernel
>>> [c.name for c in core(load_model("gpt-oss-120b"), symbolic_dims(),
...                        [Kernel("decode", S.batch, S.context)])]
['attention_core', 'attention_core_window']
"""

from __future__ import annotations

import sympy as sp

from ..specs.deployment import Phase
from ..symbolic.symbols import S
from ..terms.cost import Cost
from ..terms.tokens import context_parallel as _cp
from ..terms.tokens import queries as _queries
from .base import Kernel, Memory, MemorySite, StepSite
from .catalog import base, kinds

__all__ = ["core", "step_core", "projections", "elementwise", "kv_bytes_per_token_layer", "memory",
           "draft_model", "weights", "no_cp"]


def _scaled(costs, share) -> list[Cost]:
    return list(costs) if share == 1 else [c.scaled(share) for c in costs]


def _own(model, what: str) -> list:
    """``[(variant, share)]`` running their own ``what`` (projections or elementwise): the base
    carries the shares of the variants that have none."""
    ks = kinds(model)
    borrowed = sum((s for v, s in ks[1:] if getattr(v, what) is None), sp.Integer(0))
    return [(ks[0][0], ks[0][1] + borrowed)] + [(v, s) for v, s in ks[1:]
                                                if getattr(v, what) is not None]


def core(model, D, kernels: list[Kernel], site: StepSite = StepSite()) -> list[Cost]:
    """Attention cores of one average layer for each of ``kernels`` (one micro-batch)."""
    return [c for v, s in kinds(model) for k in kernels
            for c in _scaled(v.core(model, D, k, site), s)]


def step_core(model, dep, wl, D, t) -> list[Cost]:
    """Attention of ``t`` tokens (one micro-batch) of a step of ``wl`` under ``dep``. A mixed
    serving step runs two kernels: decode attention of its requests over their KV (L) and
    chunked prefill attention of its prefill tokens over their prompts (L_in)."""

    n = D.micro_batches
    kernels = {Phase.DECODE: [Kernel("decode", S.batch / n, S.context)],
               Phase.PREFILL: [Kernel("prefill", t, S.context)],
               Phase.SERVE: [Kernel("decode", S.batch / n, S.context),
                             Kernel("prefill", S.tokens / n, S.isl)]}[wl.phase]
    site = StepSite(_queries(dep), _cp(dep), S.prefix_hit if wl.prefix_hit else 0)
    return core(model, D, kernels, site)


def projections(model, D, tokens) -> list[Cost]:
    """Attention GEMMs of one average layer for ``tokens`` tokens on one GPU."""
    return [c for v, s in _own(model, "projections")
            for c in _scaled(v.projections(model, D, tokens), s)]


def elementwise(model, D, tokens, fp8_gemm: bool) -> list[Cost]:
    """The attention block's elementwise kernels of one average layer."""
    return [c for v, s in _own(model, "elementwise")
            for c in _scaled([v.elementwise(model, D, tokens, fp8_gemm)], s)]


def kv_bytes_per_token_layer(model, D) -> sp.Expr:
    """Bytes one token adds to one layer's cache of the model's own attention on one GPU."""
    return base(model).kv_bytes_per_token_layer(model, D)


def memory(model, D, stage_layers, context, block_size, fragmentation: bool,
           mtp_layers) -> Memory:
    """Cache of one request on one GPU holding ``stage_layers`` layers: every variant's over
    its own layers (the base's: what the others leave), summed."""
    ks = kinds(model)
    counts = [v.layer_count(model, stage_layers) if v.layer_count else stage_layers * s
              for v, s in ks[1:]]
    counts.insert(0, stage_layers - sum(counts, sp.Integer(0)))
    kv_layers = sum((n for (v, _), n in zip(ks, counts)
                     if v.kv_bytes_per_token_layer is not None),
                    sp.Integer(0))
    out = Memory(sp.Integer(0), sp.Integer(0))
    for (v, _), n in zip(ks, counts):
        m = v.memory(model, D, MemorySite(n, kv_layers, context, block_size, fragmentation,
                                          mtp_layers if v.base else 0, stage_layers))
        out = Memory(out.per_token + m.per_token, out.per_request + m.per_request)
    return out


def draft_model(model):
    """The model whose one layer times the MTP draft (DeepSeek-V4's attends its window only)."""
    return base(model).draft_model(model)


def weights(model, D, layers) -> dict | None:
    """Attention weight bytes by name where the base counts its own, else None."""
    return base(model).weights(model, D, layers)


def no_cp(model) -> str:
    """Why context parallelism is not modelled for the model's attention ("" where it is)."""
    return base(model).no_cp
