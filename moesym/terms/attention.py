"""Attention: projections (GQA/MHA and MLA) and the attention core (decode and causal prefill).

All costs are per GPU for ``tokens`` tokens of one attention data-parallel rank; heads are split
over the ``tp`` ranks of the tensor-parallel group.

>>> from moesym.terms.attention import gemm
>>> from moesym.symbolic.symbols import S
>>> g = gemm("o_proj", S.batch, S.hidden, S.hidden, w_bytes=1, act_bytes=2)
>>> g.flops
2*B*d**2
"""

from __future__ import annotations

import sympy as sp

from .cost import AttentionShape, Cost, GemmShape, KernelClass
from ..symbolic.expr import sym
from .dims import Dims

__all__ = ["gemm", "attention_projections", "attention_core_decode", "attention_core_prefill",
           "kv_bytes_per_token_layer", "indexer", "INDEX_KEY_SCALE_BYTES"]

INDEX_KEY_SCALE_BYTES = 4  # one fp32 scale per FP8 indexer key (DeepSeek-V3.2 and V4)


def gemm(name: str, m, n, k, w_bytes, act_bytes, kind: KernelClass = KernelClass.GEMM,
         groups=1, layout: str = "dense") -> Cost:
    """One GEMM of ``groups`` problems, each (m x k) @ (k x n), weights read once per group.

    FLOPs = 2 m n k groups; HBM bytes = groups (n k w_bytes + m (k + n) act_bytes).

    >>> gemm("up", 4, 8, 16, w_bytes=2, act_bytes=2).hbm_bytes
    448
    """
    m, n, k, g = sym(m), sym(n), sym(k), sym(groups)
    return Cost(name, kind, flops=2 * m * n * k * g,
                hbm_bytes=g * (n * k * sym(w_bytes) + m * (k + n) * sym(act_bytes)),
                launches=1, shape=GemmShape(m, n, k, g, layout))


def fuse_gemms(costs: list[Cost], groups, D: Dims) -> list[Cost]:
    """``costs`` with each group of GEMMs that read the same input run as one GEMM (an engine
    that concatenates their weights: SGLang's ``fused_qkv_a_proj_with_mqa``, vLLM's
    ``fused_qkv_a_proj``, TensorRT-LLM's ``fused_a``): N is the sum of theirs, M and K theirs.
    FLOPs are the same; bytes lose the input's second read (m k b_a) and the launches one
    each. A group the layer does not have whole (a GQA model has no ``q_a_proj``) is left as
    it is; the merged GEMM takes the first one's place and the names joined by ``+``."""
    out = list(costs)
    for group in groups:
        found = [c for c in out if c.name in group]
        if len(found) != len(group) or any(c.shape is None for c in found):
            continue
        m, k = found[0].shape.m, found[0].shape.k
        if any(c.shape.m != m or c.shape.k != k or c.shape.groups != 1
               or c.kind != found[0].kind for c in found):
            continue
        merged = gemm("+".join(c.name for c in found), m, sum(c.shape.n for c in found), k,
                      D.w_bytes, D.act_bytes, kind=found[0].kind)
        at = next(i for i, c in enumerate(out) if c is found[0])
        out = [c for c in out if all(c is not f for f in found)]
        out.insert(at, merged)
    return out


def attention_projections(D: Dims, tokens, mla: bool, gate: bool = False) -> list[Cost]:
    """Q/K/V/O projection GEMMs for ``tokens`` tokens on one GPU.

    ``gate`` (Qwen3-Next, Qwen3.5 gated attention): q_proj also emits a gate of h d_h per token
    (q_proj width 2 h d_h), and an elementwise kernel multiplies the attention output by
    sigmoid(gate) before o_proj: read the output and the gate, write the product, 3 t h d_h b_a.

    GQA: q = d x (h d_h), k and v = d x (h_kv d_h) each, o = (h d_h) x d, with h = n_h / tp and
    h_kv = max(n_kv / tp, 1). MLA (DeepSeek): q_a = d x r_q and kv_a = d x (r_kv + d_rope) are
    replicated over TP; q_b = r_q x h (d_nope + d_rope), kv_b = r_kv x h (d_nope + d_v),
    o = h d_v x d. Absorbing kv_b into q and o in decode (as FlashMLA kernels do) moves the same
    weights and FLOPs per token (h d_nope r_kv + h r_kv d_v = r_kv h (d_nope + d_v)), so one set
    of GEMMs serves both phases; the difference lives in the attention core.
    """
    t = sym(tokens)
    d, wb, ab = D.hidden, D.w_bytes, D.act_bytes
    h = D.local_heads
    if mla:
        out = []
        if D.q_lora != 0:
            out.append(gemm("q_a_proj", t, D.q_lora, d, wb, ab))
            out.append(gemm("q_b_proj", t, h * (D.qk_nope + D.qk_rope), D.q_lora, wb, ab))
        else:
            out.append(gemm("q_proj", t, h * (D.qk_nope + D.qk_rope), d, wb, ab))
        out.append(gemm("kv_a_proj", t, D.kv_lora + D.qk_rope, d, wb, ab))
        out.append(gemm("kv_b_proj", t, h * (D.qk_nope + D.v_head), D.kv_lora, wb, ab))
        out.append(gemm("o_proj", t, d, h * D.v_head, wb, ab))
        return out
    hd = D.head_dim
    q_width = (2 if gate else 1) * h
    out = [gemm("qkv_proj", t, (q_width + 2 * D.local_kv_heads) * hd, d, wb, ab),
           gemm("o_proj", t, d, h * hd, wb, ab)]
    if gate:
        out.append(Cost("attn_output_gate", KernelClass.ELEMENTWISE, hbm_bytes=3 * t * h * hd * ab,
                        launches=1))
    return out


def kv_bytes_per_token_layer(D: Dims, mla: bool) -> sp.Expr:
    """KV-cache bytes one token adds to one layer on one GPU.

    MLA: (r_kv + d_rope) b_kv (the latent is not sharded by TP); GQA: 2 h_kv d_h b_kv.
    """
    if mla:
        return (D.kv_lora + D.qk_rope) * D.kv_bytes
    return 2 * D.local_kv_heads * D.head_dim * D.kv_bytes


def attention_core_decode(D: Dims, batch, context, mla: bool, queries=1) -> Cost:
    """Decode attention for ``batch`` requests with mean KV length ``context`` (one layer),
    ``queries`` query tokens per request (1; N + 1 when speculative decoding verifies N drafts).

    Bound by the KV read: bytes = B L kv_bytes_per_token_layer + q/o activations; the KV is read
    once per request whatever its query tokens (they ride as extra heads, as FlashMLA's and
    FlashInfer's decode kernels take them).
    MLA (absorbed, latent attention over r_kv + d_rope): FLOPs = 2 B q h L (2 r_kv + d_rope).
    GQA: FLOPs = 4 B q h L d_h.
    """
    b, L, q = sym(batch), sym(context), sym(queries)
    h = D.local_heads
    if mla:
        flops = 2 * b * q * h * L * (2 * D.kv_lora + D.qk_rope)
        act = b * q * h * (2 * D.kv_lora + D.qk_rope) * D.act_bytes
    else:
        flops = 4 * b * q * h * L * D.head_dim
        act = 2 * b * q * h * D.head_dim * D.act_bytes
    if mla:
        shape = AttentionShape("decode", b, L, h * q, 1, D.kv_lora + D.qk_rope, D.kv_lora,
                               D.kv_bytes, shared_kv=True)
    else:
        shape = AttentionShape("decode", b, L, h * q, D.local_kv_heads, D.head_dim, D.head_dim,
                               D.kv_bytes)
    return Cost("attention_core", KernelClass.ATTENTION, flops=flops,
                hbm_bytes=b * L * kv_bytes_per_token_layer(D, mla) + act, launches=1, shape=shape)


def attention_core_prefill(D: Dims, tokens, context, chunk, mla: bool, cached=0) -> Cost:
    """Causal prefill attention for ``tokens`` computed tokens of prompts of length ``context``
    (one layer), of which a share ``cached`` of each prompt (a prefix-cache hit) is not
    recomputed: the computed tokens are the last (1 - F) L of each prompt.

    Per token the causal mean over a prompt gives FLOPs = h (d_qk + d_v) L (QK^T and PV, 2 FLOPs
    per multiply-add, half the L x L square), whatever the chunk size; the last (1 - F) L tokens
    sit at mean position L (1 + F) / 2, so FLOPs = T h (d_qk + d_v) L (1 + F). Bytes: Q, K, V, O
    streamed once, plus, with chunks of C, each chunk reads the prompt's KV before it: the cached
    F L and on average ((1 - F) L - C) / 2 computed tokens, i.e. T (F L + ((1 - F) L - C) / 2) / C
    KV entries (F = 0, C = L: none). MLA prefill is not absorbed: d_qk = d_nope + d_rope, d_v per
    head.
    """
    t, L, c, f = sym(tokens), sym(context), sym(chunk), sym(cached)
    h = D.local_heads
    if mla:
        dqk, dv = D.qk_nope + D.qk_rope, D.v_head
        kv_heads = h
    else:
        dqk, dv = D.head_dim, D.head_dim
        kv_heads = D.local_kv_heads
    flops = t * h * (dqk + dv) * L * (1 + f)
    stream = t * (h + kv_heads) * (dqk + dv) * D.act_bytes
    prefix = t * (f * L + ((1 - f) * L - c) / 2) / c * kv_bytes_per_token_layer(D, mla)
    # a kernel's view: causal prompts of length L (1 + F), as many as give the T tokens; the
    # same FLOPs as the last (1 - F) L of prompts of length L
    span = L * (1 + f)
    shape = AttentionShape("prefill", t / span, span, h, kv_heads, dqk, dv, D.act_bytes)
    return Cost("attention_core", KernelClass.ATTENTION, flops=flops, hbm_bytes=stream + prefix,
                launches=1, shape=shape)


def indexer(heads, head_dim, queries, keys, key_reads) -> Cost:
    """A lightning indexer (DeepSeek sparse attention, V3.2 and V4's CSA): ``heads`` H_I of
    ``head_dim`` d_I score ``keys`` keys per query (2 H_I d_I FLOPs each) for ``queries``
    queries; ``key_reads`` FP8 keys of d_I + a 4-byte scale are read, and the fp32 logits are
    written and read for the top-k selection (8 bytes per query and key). Timed at the BF16
    attention rate (the FP8 logits kernel is faster: a conservative bound).

    >>> indexer(64, 128, 1, 1000, 1000).hbm_bytes
    140000
    """
    hi, di = sym(heads), sym(head_dim)
    q, k = sym(queries), sym(keys)
    return Cost("indexer", KernelClass.ATTENTION, flops=2 * q * hi * k * di,
                hbm_bytes=sym(key_reads) * (di + INDEX_KEY_SCALE_BYTES) + 2 * 4 * q * k,
                launches=2)


def gdn_projections(D: Dims, tokens, hk, hv, dk, dv) -> list[Cost]:
    """Gated DeltaNet projections (Qwen3-Next): q, k (h_k d_k each), v and the output gate z
    (h_v d_v each) and the decay / write gates a, b (h_v each) from d; the output h_v d_v -> d.
    Heads split over TP."""
    t, wb, ab = sym(tokens), D.w_bytes, D.act_bytes
    width = (2 * hk * dk + 2 * hv * dv + 2 * hv) / D.tp
    return [gemm("gdn_in_proj", t, width, D.hidden, wb, ab),
            gemm("gdn_out_proj", t, D.hidden, hv * dv / D.tp, wb, ab)]


GDN_CHUNK = 64  # tokens per chunk of the chunked delta-rule prefill (flash-linear-attention)


def gdn_core(D: Dims, kind: str, tokens, hk, hv, dk, dv, conv, queries=1) -> Cost:
    """Gated DeltaNet core of one layer: a recurrent state of h_v d_k x d_v per request (fp32)
    instead of a KV cache, and a causal convolution of width ``conv`` over the q, k, v channels.

    Decode (``tokens`` requests, ``queries`` tokens each): the state is read and written once per
    request, 6 d_k d_v FLOPs per head and token (decay, delta update, readout); the convolution
    state (conv - 1 positions) likewise. Prefill (chunks of 64): per token and head the
    intra-chunk attention 2 x 64 (d_k + d_v) and the state terms 4 d_k d_v FLOPs; q, k, v, o
    streamed, the state read and written once per chunk."""
    t = sym(tokens)
    hk_l, hv_l = hk / D.tp, hv / D.tp
    state = hv_l * dk * dv * 4
    channels = 2 * hk_l * dk + hv_l * dv
    if kind == "decode":
        flops = t * queries * hv_l * 6 * dk * dv
        hbm = 2 * t * (state + channels * (conv - 1) * D.act_bytes)
    else:
        flops = t * hv_l * (2 * GDN_CHUNK * (dk + dv) + 4 * dk * dv)
        hbm = t * (channels + 2 * hv_l * dv) * D.act_bytes + 2 * t / GDN_CHUNK * state
    return Cost("gdn_core", KernelClass.ATTENTION, flops=flops, hbm_bytes=hbm, launches=2)
