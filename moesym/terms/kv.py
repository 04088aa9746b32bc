"""KV-cache memory per GPU: per token, per request and paged blocks (DeepSeek-V4's compressed
CSA/HCA cache: :mod:`moesym.terms.compressed`).

Per layer and token (``kv_bytes_per_token_layer``): MLA keeps the latent and rotary key,
(r_kv + d_rope) b_kv, on every TP rank (not sharded); GQA/MHA keeps 2 h_kv d_h b_kv with
h_kv = max(n_kv / t_p, 1) (replicated when n_kv < t_p). FP8 KV is b_kv = 1.

Per request of context L: full-attention layers hold L tokens, sliding-window layers min(L, L_sw);
paged blocks of P_blk tokens waste half a block on average per request in each layer
(``fragmentation``). The per-GPU peak is the sum over the B concurrent requests of one attention
data-parallel rank, already divided by the TP sharding above (seed 002 sections 1 and 8).

>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.terms.kv import kv_bytes_per_request
>>> kv_bytes_per_request(symbolic_dims(), mla=True, n_layers=61, fragmentation=False)
61*L*b_kv*(d_rope + r_kv)
"""

from __future__ import annotations

import sympy as sp

from ..symbolic.symbols import S
from .attention import kv_bytes_per_token_layer
from ..symbolic.expr import smin, sym
from .dims import Dims

__all__ = [
    "kv_bytes",
    "kv_bytes_per_request",
    "kv_bytes_per_token",
    "kv_bytes_per_token_layer",
    "speculative_kv_bytes_per_request",
]


def kv_bytes_per_token(D: Dims, mla: bool, n_layers=S.n_moe_layers + S.n_dense_layers,
                       n_sliding_layers=0) -> sp.Expr:
    """Bytes one more context token adds on one GPU once the context exceeds every window:
    (N - N_sw) x ``kv_bytes_per_token_layer`` (sliding-window layers stop growing).

    >>> from moesym.terms.dims import symbolic_dims
    >>> kv_bytes_per_token(symbolic_dims(), mla=False, n_layers=48)
    96*b_kv*d_h*Max(1, n_kv/t_p)
    """
    return (sym(n_layers) - sym(n_sliding_layers)) * kv_bytes_per_token_layer(D, mla)


def kv_bytes_per_request(D: Dims, mla: bool, context=S.context,
                         n_layers=S.n_moe_layers + S.n_dense_layers, n_sliding_layers=0,
                         window=S.window, block_size=S.block_size,
                         fragmentation: bool = True) -> sp.Expr:
    """KV bytes of one request of ``context`` tokens on one GPU.

    ((N - N_sw) (L + P/2) + N_sw (min(L, L_sw) + P/2)) x kv_bytes_per_token_layer, the P/2 terms
    (half a paged block per request per layer, the expected tail waste) only with
    ``fragmentation``.

    >>> from moesym.terms.dims import symbolic_dims
    >>> D = symbolic_dims()
    >>> kv_bytes_per_request(D, mla=True, n_layers=1)
    b_kv*(L + P_blk/2)*(d_rope + r_kv)
    """
    L, n, n_sw = sym(context), sym(n_layers), sym(n_sliding_layers)
    tail = sym(block_size) / 2 if fragmentation else 0
    per_layer = kv_bytes_per_token_layer(D, mla)
    full = (n - n_sw) * (L + tail)
    sliding = n_sw * (smin(L, sym(window)) + tail) if n_sliding_layers != 0 else 0
    return (full + sliding) * per_layer


def kv_bytes(requests, per_request) -> sp.Expr:
    """Per-GPU KV peak: requests x bytes per request (seed 002 section 1: the sum over concurrent
    requests, with the TP split inside ``per_request``).

    >>> from moesym.symbolic.symbols import S
    >>> kv_bytes(S.batch, 70272 * S.context)
    70272*B*L
    """
    return sym(requests) * sym(per_request)


def speculative_kv_bytes_per_request(D: Dims, mla: bool, n_mtp_layers=S.n_mtp_layers,
                                     context=S.context,
                                     n_layers=S.n_moe_layers + S.n_dense_layers) -> sp.Expr:
    """KV an MTP draft adds per request (seed 002 section 7): its own layer's cache over the
    context, N_mtp L, plus N_mtp speculative tokens in every main layer, N_mtp N, each
    ``kv_bytes_per_token_layer``.

    >>> from moesym.terms.dims import symbolic_dims
    >>> speculative_kv_bytes_per_request(symbolic_dims(), mla=True, n_layers=61)
    N_mtp*b_kv*(L + 61)*(d_rope + r_kv)
    """
    return sym(n_mtp_layers) * (sym(context) + sym(n_layers)) * kv_bytes_per_token_layer(D, mla)
