"""A model's weight and KV counts that depend on its attention, through the variant that owns
the attention's fields (:func:`moesym.attention.catalog.base`).

>>> from moesym.readers.model import load_model
>>> m = load_model("deepseek-v3")
>>> round(total_params(m) / 1e9, 1), round(active_params(m) / 1e9, 1)
(671.0, 37.6)
>>> m.num_layers * kv_elements_per_token_layer(m)  # MLA: the latent and the RoPE key
35136
"""

from __future__ import annotations

from .catalog import base

__all__ = ["active_params", "attention_params", "kv_elements_per_token_layer", "total_params"]


def kv_elements_per_token_layer(m) -> int:
    """KV-cache elements one token adds to one full-attention layer (before TP sharding)."""
    return base(m).kv_elements(m)


def attention_params(m) -> float:
    """One (average) layer's attention weights (elements)."""
    return base(m).params(m)


def total_params(m, include_mtp: bool = False) -> float:
    """All weights of the main model (norm vectors included, elements); MTP modules only on
    request."""
    norms = m.num_layers * 2 * m.hidden_size + m.hidden_size
    per_layer = (m.num_layers * attention_params(m)
                 + m.dense_layers * m.dense_ffn_params()
                 + m.moe_layers * m.moe_layer_params())
    total = per_layer + m.embedding_params() + norms
    if include_mtp:
        total += m.mtp_layers * (attention_params(m) + m.moe_layer_params()
                                 + 2 * m.hidden_size * m.hidden_size)
    return float(total)


def active_params(m) -> float:
    """Weights a token touches: all but the unselected routed experts (embeddings included)."""
    inactive = m.moe_layers * (m.num_experts - m.experts_per_token) * m.expert_params()
    return total_params(m) - inactive
