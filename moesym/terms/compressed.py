"""DeepSeek-V4 compressed attention (CSA / HCA): projections, attention core, its elementwise
work, the hyper-connection seams, and the per-request cache it keeps.

Read from the architecture as HF transformers 5.23.0 (``models/deepseek_v4``) and vLLM 0.33.0
(``vllm/models/deepseek_v4``) implement it:

* **Shared-KV multi-query attention.** One KV head of ``head_dim`` (512) serves as key and value
  (``kv_proj``: d -> d_h); queries come through a low-rank ``q_a`` (d -> r_q, fused with
  ``kv_proj`` in vLLM) and ``q_b`` (r_q -> n_h d_h). Only the last ``d_rope`` (64) dims carry
  RoPE.
* **Grouped output projection.** The n_h d_h output is split into ``o_groups`` g groups, each
  projected to ``o_lora_rank`` d_g (``wo_a``, a batched GEMM), then g d_g -> d (``wo_b``).
* **Three layer kinds**, each with a sliding window of the last W (128) raw entries:
  sliding-only; CSA (compress ratio m = 4): a compressor turns every m tokens into one entry
  (overlapping windows, kv and gate projections d -> 2 x 2 d_h) and a lightning indexer
  (n_I heads of d_I over its own compressed keys, its queries from the q latent) keeps the
  top k (``index_topk``) compressed entries per query; HCA (m' = 128): every compressed entry
  is attended (kv and gate projections d -> 2 d_h, no overlap, no indexer).
* **Cache** per request and layer: the window's W entries, L / m compressed entries, the CSA
  indexer's L / 4 keys, and the compressors' fp32 state over their last (1 + overlap) m tokens
  (kv and score, 2 (1 + overlap) d_h values per token; vLLM's ``CompressorStateCache``). An
  entry is vLLM's ``fp8_ds_mla`` record: (d_h - d_rope) values at the KV format and d_rope at
  the activation format (BF16); the indexer keys are FP8 plus a 4-byte scale (vLLM's default
  ``indexer_kv_dtype``).
* **Manifold-constrained hyper-connections** (mHC): the residual is ``hc_mult`` n streams of d;
  two seams per layer each read the streams and the block's output and write the streams
  in one fused pass (as vLLM's ROCm path runs it with aiter's
  ``mhc_fused_post_pre_delayed_rmsnorm``) and project n d -> (2 + n) n mixing weights.

The compressors' and the indexer's head-weight projections are BF16 in the checkpoint
(vLLM builds them with ``quant_config=None``); everything else is the attention weights' format.
Every function returns the work of one *average* layer: each layer kind's cost weighted by its
share of the layers.

>>> from moesym.readers.model import load_model
>>> m = load_model("deepseek-v4-flash")
>>> (m.csa_layers, m.hca_layers, m.num_layers - m.csa_layers - m.hca_layers)
(20, 23, 0)
"""

from __future__ import annotations

import sympy as sp

from ..symbolic.symbols import S
from .attention import INDEX_KEY_SCALE_BYTES, gemm, indexer
from .cost import AttentionShape, Cost, KernelClass
from ..symbolic.expr import smax, smin, sym
from .dims import Dims

__all__ = ["projections", "core", "elementwise", "entry_bytes",
           "cache_bytes_per_request", "cache_bytes_per_token", "state_bytes_per_request",
           "attention_params", "mean_prefill_keys"]

_BF16 = sp.Integer(2)


def _shares(model) -> tuple:
    """(sliding-only, CSA, HCA) shares of the layers."""
    n = model.num_layers
    c, h = model.csa_layers, model.hca_layers
    return sp.Rational(n - c - h, n), sp.Rational(c, n), sp.Rational(h, n)


def entry_bytes(D: Dims, model) -> sp.Expr:
    """Bytes of one cached entry (a window token or a compressed entry): (d_h - d_rope) b_kv +
    d_rope b_a (vLLM's fp8_ds_mla record: FP8 nope, BF16 rope; BF16 KV: 2 d_h)."""
    dr = model.qk_rope_head_dim
    return (model.head_dim - dr) * D.kv_bytes + dr * D.act_bytes


def _index_key_bytes(model) -> int:
    return model.index_head_dim + INDEX_KEY_SCALE_BYTES


def projections(D: Dims, tokens, model) -> list[Cost]:
    """GEMMs of one average layer for ``tokens`` tokens on one GPU (heads and output groups
    over TP; q_a + kv, the compressors and the indexer's projections replicated).

    q_a + kv: d -> r_q + d_h; q_b: r_q -> h d_h; wo_a: g / t_p groups of (n_h d_h / g) -> d_g;
    wo_b: (g / t_p) d_g -> d; CSA layers add the compressor's d -> 4 d_h (kv and gate, two
    overlapping windows) and the indexer's q (r_q -> n_I d_I), key compressor (d -> 4 d_I) and
    head weights (d -> n_I); HCA layers the compressor's d -> 2 d_h.
    """
    t = sym(tokens)
    d, wb, ab = D.hidden, D.w_bytes, D.act_bytes
    hd, g, dg = model.head_dim, model.o_groups, model.o_lora_rank
    _, f_c, f_h = _shares(model)
    out = [gemm("q_a_kv_proj", t, model.q_lora_rank + hd, d, wb, ab),
           gemm("q_b_proj", t, D.local_heads * hd, model.q_lora_rank, wb, ab),
           gemm("o_a_proj", t, dg, model.num_heads * hd // g, wb, ab, groups=g / D.tp),
           gemm("o_b_proj", t, d, g * dg / D.tp, wb, ab)]
    if f_c:
        hi, di = model.index_heads, model.index_head_dim
        out += [gemm("csa_compressor", t, 4 * hd, d, _BF16, ab).scaled(f_c),
                gemm("indexer_wq", t, hi * di, model.q_lora_rank, wb, ab).scaled(f_c),
                gemm("indexer_compressor", t, 4 * di, d, _BF16, ab).scaled(f_c),
                gemm("indexer_weights", t, hi, d, _BF16, ab).scaled(f_c)]
    if f_h:
        out.append(gemm("hca_compressor", t, 2 * hd, d, _BF16, ab).scaled(f_h))
    return out


def _keys(model, ctx, kind: str):
    """Entries one query attends in a layer of ``kind`` at context ``ctx`` (decode):
    min(L, W), plus min(L / 4, k) for CSA, plus L / 128 for HCA."""
    L, W = sym(ctx), sp.Integer(model.sliding_window)
    win = smin(L, W)
    if kind == "csa":
        return win + smin(L / model.csa_ratio, sp.Integer(model.index_topk))
    if kind == "hca":
        return win + L / model.hca_ratio
    return win


def _capped_integral(x, slope, cap):
    """Integral over p in (0, x] of min(slope p, cap) (``cap`` None: slope p)."""
    if cap is None:
        return slope * x ** 2 / 2
    return sp.Piecewise((slope * x ** 2 / 2, x <= cap / slope), (cap * x - cap ** 2 / (2 * slope),
                                                                  True))


def mean_prefill_keys(model, ctx, kind: str, cached=0):
    """Entries a prompt's query attends on average over its computed positions p in (F L, L]
    (``cached`` F: the share of the prompt found in the prefix cache, 0 by default): the mean of
    min(p, W) (the window), plus min(p / m, k) for CSA or p / m' for HCA, the integral of each
    over (F L, L] divided by (1 - F) L. With F = 0 the window averages L / 2 (L <= W) or
    W - W^2 / (2 L), CSA's term L / (2 m) (L <= m k) or k - m k^2 / (2 L), HCA's L / (2 m')."""
    L, W = sym(ctx), sp.Integer(model.sliding_window)
    terms = [(1, W)]
    if kind == "csa":
        terms.append((sp.Rational(1, model.csa_ratio), sp.Integer(model.index_topk)))
    elif kind == "hca":
        terms.append((sp.Rational(1, model.hca_ratio), None))
    f = sym(cached)
    start = f * L
    total = sum(_capped_integral(L, a, c) - (_capped_integral(start, a, c) if f != 0 else 0)
                for a, c in terms)
    return total / (L - start)


def core(D: Dims, model, phase: str, tokens, ctx, queries=1, cached=0) -> list[Cost]:
    """Attention of one average layer, per layer kind, and the CSA layers' indexer.

    Decode (``tokens`` requests of ``queries`` tokens at KV length ``ctx``): h q heads over the
    kind's entries (:func:`_keys`), 4 d_h FLOPs per head and entry (QK^T and PV on the shared
    vector), each entry read once per request; the indexer scores the L / 4 keys per query.
    Prefill (``tokens`` prompt tokens of prompts of length ``ctx``): each query gathers its mean
    entry count K (:func:`mean_prefill_keys`; FlashMLA's sparse prefill gathers the window and
    top-k indices per query), 4 h d_h K FLOPs and K entries read per token, timed as causal
    prompts of 2 K keys (the same FLOPs); the indexer scores a causal L / 8 keys per query, each
    prompt chunk reading the prompt's L / 4 keys. With a prefix-cache hit (``cached`` F) the
    computed tokens are each prompt's last (1 - F) L: K is their mean, and their indexer
    queries score (1 + F) L / 8 keys on average."""
    n, q = sym(tokens), sym(queries) if phase == "decode" else 1
    h, hd = D.local_heads, model.head_dim
    eb = entry_bytes(D, model)
    comp = sym(ctx) / model.csa_ratio
    out = []
    for kind, share in zip(("swa", "csa", "hca"), _shares(model)):
        if not share:
            continue
        if phase == "decode":
            keys = _keys(model, ctx, kind)
            shape = AttentionShape("decode", n, keys, h * q, 1, hd, hd, eb / hd,
                                   shared_kv=True)
            scored, reads = comp, n * comp
        else:
            keys = mean_prefill_keys(model, ctx, kind, cached)
            shape = AttentionShape("prefill", n / (2 * keys), 2 * keys, h, 1, hd, hd,
                                   D.act_bytes)
            scored = comp * (1 + sym(cached)) / 2
            reads = n / model.csa_ratio * smax(1, sym(ctx) / S.chunk)
        out.append(Cost(f"attention_{kind}", KernelClass.ATTENTION,
                        flops=share * 4 * n * q * h * keys * hd,
                        hbm_bytes=share * n * (keys * eb + 2 * q * h * hd * D.act_bytes),
                        launches=share, shape=shape))
        if kind == "csa":
            out.append(indexer(model.index_heads, model.index_head_dim, n * q, scored, reads
                               ).scaled(share))
    return out


def elementwise(D: Dims, tokens, model, fp8_gemm: bool) -> Cost:
    """Elementwise work of one average layer per token: RMSNorms of the q latent, the KV vector
    and the h query heads (read + write), RoPE on the d_rope dims of the queries and the key and
    its inverse on the output's, the window entry written, the compressors' fp32 kv + score
    state written (2 (1 + overlap) d_h values; one compressed entry per m tokens), the two mHC
    seams (each reads the n streams and the block output, writes the streams and the collapsed
    input: (2 n + 2) d b_a, and (2 + n) n outputs of an n d projection, 2 (2 + n) n^2 d FLOPs),
    and FP8 input casts of the projections' inputs."""
    t = sym(tokens)
    h, ab, hd, dr = D.local_heads, D.act_bytes, model.head_dim, model.qk_rope_head_dim
    _, f_c, f_h = _shares(model)
    norms = 2 * (model.q_lora_rank + hd + h * hd) * ab
    rope = 2 * (2 * h + 1) * dr * ab
    write = entry_bytes(D, model)
    state = 4 * (f_c * (4 * hd + 4 * model.index_head_dim) + f_h * 2 * hd)
    compressed = (f_c / model.csa_ratio + f_h / model.hca_ratio) * entry_bytes(D, model) \
        + f_c / model.csa_ratio * _index_key_bytes(model)
    n = model.hc_mult
    mhc_bytes = 2 * (2 * n + 2) * D.hidden * ab if n else 0
    mhc_flops = 2 * 2 * (2 + n) * n * n * D.hidden if n else 0
    cast = (ab + 1) * (D.hidden + model.q_lora_rank + h * hd) if fp8_gemm else 0
    return Cost("attention_elementwise", KernelClass.ELEMENTWISE, flops=t * mhc_flops,
                hbm_bytes=t * (norms + rope + write + state + compressed + mhc_bytes + cast),
                launches=6 + (2 if n else 0) + (1 if fp8_gemm else 0))


def state_bytes_per_request(model) -> int:
    """The compressors' fp32 state one request keeps over all layers: a CSA layer 2 m tokens of
    4 d_h (kv, score; two overlapping windows) plus its indexer's 2 m tokens of 4 d_I, an HCA
    layer m' tokens of 2 d_h (vLLM's CompressorStateCache: sliding window (1 + overlap) m)."""
    m, mh, hd, di = model.csa_ratio, model.hca_ratio, model.head_dim, model.index_head_dim
    csa = 2 * m * 4 * hd * 4 + 2 * m * 4 * di * 4
    hca = mh * 2 * hd * 4
    return model.csa_layers * csa + model.hca_layers * hca


def cache_bytes_per_request(D: Dims, model, context, n_layers=None) -> sp.Expr:
    """Cache bytes of one request of ``context`` tokens over the layers (not sharded by TP:
    one KV head): every layer min(L, W) window entries, CSA layers L / 4 compressed entries and
    L / 4 indexer keys, HCA layers L / 128 entries, plus the compressors' state.
    ``n_layers`` (default the model's) scales the per-layer mix, e.g. to one pipeline stage's
    layers."""
    L, W = sym(context), sp.Integer(model.sliding_window)
    n = model.num_layers
    scale = sp.Rational(1) if n_layers is None else sym(n_layers) / n
    eb = entry_bytes(D, model)
    entries = n * smin(L, W) + model.csa_layers * L / model.csa_ratio \
        + model.hca_layers * L / model.hca_ratio
    index = model.csa_layers * L / model.csa_ratio * _index_key_bytes(model)
    return scale * (entries * eb + index + state_bytes_per_request(model))


def cache_bytes_per_token(D: Dims, model, n_layers=None) -> sp.Expr:
    """Bytes one more context token adds once the context exceeds the window: the compressed
    entries' and indexer keys' share, (N_csa / 4 + N_hca / 128) entry + N_csa / 4 (d_I + 4)."""
    n = model.num_layers
    scale = sp.Rational(1) if n_layers is None else sym(n_layers) / n
    per = (sp.Rational(model.csa_layers, model.csa_ratio)
           + sp.Rational(model.hca_layers, model.hca_ratio)) * entry_bytes(D, model)
    return scale * (per + sp.Rational(model.csa_layers, model.csa_ratio) * _index_key_bytes(model))


def attention_params(model) -> tuple[int, int, int]:
    """Weights of all attention layers (elements): ``(tp-sharded, replicated, replicated BF16)``.

    Per layer, sharded over TP (vLLM's column / row parallel linears): q_b r_q n_h d_h, wo_a
    n_h d_h d_g, wo_b g d_g d; replicated: q_a + kv d (r_q + d_h) and CSA's indexer query
    r_q n_I d_I; BF16 (replicated): CSA's compressors d 4 d_h + d 4 d_I and head weights d n_I,
    HCA's compressor d 2 d_h, and every layer's two mHC projections n d (2 + n) n (fp32 in the
    checkpoint, counted at BF16). Norm vectors are counted with the model's norms."""
    m = model
    d, hd, rq, h = m.hidden_size, m.head_dim, m.q_lora_rank, m.num_heads
    sharded = m.num_layers * (rq * h * hd + h * hd * m.o_lora_rank + m.o_groups * m.o_lora_rank * d)
    replicated = m.num_layers * d * (rq + hd) + m.csa_layers * rq * m.index_heads * m.index_head_dim
    n = m.hc_mult
    bf16 = (m.csa_layers * d * (4 * hd + 4 * m.index_head_dim + m.index_heads)
            + m.hca_layers * d * 2 * hd + m.num_layers * 2 * n * d * (2 + n) * n)
    return sharded, replicated, bf16
