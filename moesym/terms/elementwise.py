"""Memory-bound elementwise work that real profiles show is large next to small-batch GEMMs.

Norms with fused residual adds, rotary embedding, KV-cache writes, activation quantization casts,
SwiGLU activation, and the permute / unpermute (gather and weighted scatter) around the routed
experts. Each is HBM bytes read + written at an achieved fraction of HBM bandwidth, plus one
kernel launch.

>>> from moesym.terms.elementwise import norm_residual
>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.symbolic.symbols import S
>>> norm_residual(symbolic_dims(), S.batch).hbm_bytes
4*B*b_a*d
"""

from __future__ import annotations

import sympy as sp

from .attention import kv_bytes_per_token_layer
from .cost import Cost, KernelClass
from ..symbolic.expr import sym
from .dims import Dims

__all__ = ["norm_residual", "attention_elementwise", "fp8_input_cast", "moe_elementwise", "moe_dispatch_combine",
           "swiglu_activation"]

# per-token-group FP8 quantization: one FP32 scale per 128 elements (DeepSeek-V3 block format)
_SCALE_BYTES_PER_ELEMENT = sp.Rational(4, 128)

_EW = KernelClass.ELEMENTWISE


def norm_residual(D: Dims, tokens) -> Cost:
    """RMSNorm with the residual add fused: read x and residual, write both: 4 t d b_a bytes."""
    return Cost("norm_residual", _EW, hbm_bytes=4 * sym(tokens) * D.hidden * D.act_bytes, launches=1)


def attention_elementwise(D: Dims, tokens, mla: bool, fp8_gemm: bool) -> Cost:
    """Rotary embedding, KV-cache write, MLA latent norms and fp8 input casts of one layer.

    rotary: read + write of the rotary parts of q and k; KV write: one token's KV per layer;
    MLA adds RMSNorms of the q and kv latents; fp8 casts read b_a and write 1 byte per element of
    each GEMM input (d, and r_q, h d_v for MLA or h d_h for GQA).
    """
    t = sym(tokens)
    h, ab = D.local_heads, D.act_bytes
    if mla:
        rope = 2 * (h + 1) * D.qk_rope * ab
        norms = 2 * 2 * (D.q_lora + D.kv_lora) * ab
        cast_in = D.hidden + D.q_lora + D.kv_lora + h * D.v_head
        launches = 5
    else:
        rope = 2 * (h + D.local_kv_heads) * D.head_dim * ab
        norms = 0
        cast_in = D.hidden + h * D.head_dim
        launches = 3
    cast = (ab + 1) * cast_in if fp8_gemm else 0
    kv_write = kv_bytes_per_token_layer(D, mla)
    return Cost("attention_elementwise", _EW, hbm_bytes=t * (rope + norms + cast + kv_write),
                launches=launches + (1 if fp8_gemm else 0))


def swiglu_activation(name: str, rows, width, act_bytes) -> Cost:
    """SiLU(gate) * up: read 2 x width, write width, per row."""
    return Cost(name, _EW, hbm_bytes=3 * sym(rows) * sym(width) * sym(act_bytes), launches=1)


def absorbed_weight_cast(D: Dims) -> Cost:
    """MLA's absorbed kv_b weights (w_kc, w_vc: h (d_nope + d_v) r_kv elements a GPU, FP8 with a
    per-tensor scale) cast to BF16 and scaled at every step before BF16 batched GEMMs (SGLang on
    gfx942): a cast (read 1 B, write 2 B) and a scale (read and write 2 B) per weight, four
    kernels a layer; the BMMs then read 2 B an element where FP8 ones read 1: 8 B an element.

    >>> from moesym.terms.dims import symbolic_dims
    >>> absorbed_weight_cast(symbolic_dims()).hbm_bytes
    8*n_h*r_kv*(d_nope + d_v)/t_p
    """
    elems = D.local_heads * (D.qk_nope + D.v_head) * D.kv_lora
    return Cost("absorbed_weight_cast", _EW, hbm_bytes=8 * elems, launches=4)


def fp8_input_cast(name: str, rows, width, act_bytes) -> Cost:
    """Quantize a BF16 GEMM input to FP8 with per-128-element scales (SGLang's
    per_token_group_quant before each block-FP8 linear): read b_a, write 1 byte + 4/128 bytes
    of scale per element.

    >>> fp8_input_cast("x", 2, 128, 2).hbm_bytes
    776
    """
    return Cost(name, _EW, hbm_bytes=sym(rows) * sym(width) * (sym(act_bytes) + 1
                                                                + _SCALE_BYTES_PER_ELEMENT),
                launches=1)


def moe_elementwise(D: Dims, moe_tokens, rows, fused: bool = False) -> Cost:
    """Top-k selection, permute into expert order, and weighted unpermute-reduce.

    permute: read and write each routed copy (rows x d x b_disp); unpermute: read rows x d x b_a,
    write moe_tokens x d x b_a; top-k: read the router logits (tokens x E x 4 bytes).
    ``fused``: the dispatch and combine kernels do the permute and the reduce (DeepEP
    low-latency), leaving only the top-k.
    """
    t, r = sym(moe_tokens), sym(rows)
    d = D.hidden
    topk = t * D.experts * 4
    if fused:
        return Cost("moe_elementwise", _EW, hbm_bytes=topk, launches=1)
    permute = 2 * r * d * D.dispatch_bytes
    unpermute = r * d * D.act_bytes + t * d * D.act_bytes
    return Cost("moe_elementwise", _EW, hbm_bytes=permute + unpermute + topk, launches=3)


def moe_dispatch_combine(D: Dims, moe_tokens, rows, fused: bool = False,
                         grouping: bool = True) -> list[Cost]:
    """:func:`moe_elementwise` as seed 003's two stages, same bytes and launches in total:
    ``moe_dispatch`` (top-k selection and the permute into expert order: 2 kernels) and
    ``moe_combine`` (the weighted unpermute-reduce: 1 kernel). ``fused``: only the top-k is
    left (the dispatch and combine kernels do the rest). ``grouping`` False (per-token
    dispatch, seed 003's baseline): tokens are not grouped, so no permute.
    """
    t, r = sym(moe_tokens), sym(rows)
    d = D.hidden
    topk = t * D.experts * 4
    if fused:
        return [Cost("moe_dispatch", _EW, hbm_bytes=topk, launches=1)]
    permute = 2 * r * d * D.dispatch_bytes if grouping else 0
    unpermute = r * d * D.act_bytes + t * d * D.act_bytes
    return [Cost("moe_dispatch", _EW, hbm_bytes=permute + topk, launches=2 if grouping else 1),
            Cost("moe_combine", _EW, hbm_bytes=unpermute, launches=1)]
