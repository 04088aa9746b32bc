"""The speculative draft's time in one step (``--mtp``): DeepSeek's MTP block, or an
EAGLE-style head timed as one of the model's own layers (:mod:`moesym.specs.speculative` gives
what a verify step emits)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import sympy as sp

from ..attention import compose
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.expr import substitute
from ..symbolic.symbols import S
from ..terms import attention as att
from ..terms import ffn
from ..terms.dims import Dims
from .layer_costs import dense_layer_costs, moe_layer_costs
from .layer_time import layer_time, reserved_terms, timed

__all__ = ["draft_s"]


def draft_s(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims, timing,
             hw: HardwareSpec | None = None) -> sp.Expr:
    """Time of the speculative draft in one step: ``N - 1`` autoregressive passes of the draft
    module over one token per decode request and one pass over the ``N + 1`` tokens per request
    the target just verified (the draft extend that gives the next step's first draft token
    and the hidden states; SGLang 0.5.9 speculative/eagle_worker.py: draft, verify,
    draft-extend; TensorRT-LLM's MTP is taken to run the same passes), and in a step that
    prefills, one pass over the prefill tokens (the draft extends over the prompt too). The draft
    module is DeepSeek's MTP block: a projection of the embedding and hidden state (2d -> d), one
    decoder layer of the model and the shared LM head; a model without MTP layers is drafted by
    an EAGLE-style head timed the same way (one of its own layers)."""
    if not model.mtp_layers:
        warnings.warn(f"{model.name} has no MTP layers: --mtp {dep.mtp} drafts with an "
                      "EAGLE-style head timed as one of the model's own layers plus its LM head",
                      stacklevel=2)
    plain = replace(dep, mtp=0, accept=None)
    costs = moe_layer_costs if model.is_moe else dense_layer_costs
    # DeepSeek-V4's MTP layer attends its sliding window only (vLLM: compress ratio 0)
    layer_model = compose.draft_model(model)  # DeepSeek-V4's MTP layer: its sliding window only

    def one_pass(phase: Phase, tokens, logits, d: Deployment = plain) -> sp.Expr:
        w = Workload(phase, batch=1, tokens=1, context=2, chunk=1)
        cs = costs(layer_model, d, w, D, hw)
        layer, _, edges = layer_time(timed(cs, timing), d, w, D.micro_batches,
                                      lambda: reserved_terms(cs, timing, layer_model, d))
        head = (att.gemm("mtp_eh_proj", tokens, D.hidden, 2 * D.hidden, D.w_bytes, D.act_bytes),
                ffn.lm_head(D, logits))
        return layer + edges + sum(timing.time(c).total_s for c in head)

    out = sp.Integer(0)
    if wl.phase is not Phase.PREFILL:
        verified = S.batch * (S.mtp + 1)  # the draft extend: a verify-shaped pass, one layer
        out += (S.mtp - 1) * one_pass(Phase.DECODE, S.batch, S.batch)
        out += one_pass(Phase.DECODE, verified, verified, replace(dep, accept=None))
    if wl.phase is Phase.PREFILL:
        out += one_pass(Phase.PREFILL, S.tokens, S.tokens / S.context)
    elif wl.phase is Phase.SERVE:  # the chunk's prompts, at their own length
        out += substitute(one_pass(Phase.PREFILL, S.tokens, S.tokens / S.isl), {S.context: S.isl})
    return out
