"""llama.cpp file types (``--weights Q4_K_M``): which GGUF block type each tensor of a model gets,
and the bytes per weight each GEMM class averages to.

A GGUF file made by ``llama-quantize MODEL FILE_TYPE`` does not hold one block type: the file
type names a default type, and ``llama_tensor_get_type_impl`` (``src/llama-quant.cpp``, llama.cpp
as vendored in llama-cpp-python 0.3.36) moves some tensors to others. The rules kept here
(:data:`RULES`, data read in that function's order, the last match winning) are those of the
file types moesym names (:data:`FILE_TYPES`), for a file quantized without an importance matrix:

* ``output`` (the LM head; the token embeddings too when tied): Q6_K, or Q8_0 when the file type
  is Q8_0 or the hidden size is not a multiple of the default type's block;
* Q4_K_M and Q5_K_M: ``attn_v`` and ``ffn_down`` in Q6_K in the layers ``use_more_bits`` picks
  (the first and last eighth, and every third layer between: i < n/8, i >= 7n/8, (i - n/8) % 3
  == 2); Q4_K_S: ``attn_v`` of the first 4 layers and ``ffn_down`` of the first eighth in Q5_K;
  Q2_K: ``attn_v`` Q4_K (Q3_K with fewer than 4 query heads per KV head), ``ffn_down`` and
  ``attn_output`` Q3_K; IQ4_XS / IQ4_NL: ``attn_v`` Q5_K with 4 or more query heads per KV head,
  ``ffn_down`` of the first eighth Q5_K;
* a model with exactly 8 experts (Mixtral): ``attn_v`` and ``attn_k`` in Q8_0, ``attn_output`` in
  Q5_K for the Q2_K, Q4_K_S, Q4_K_M and IQ4 file types;
* a tensor whose rows (K, ggml's ``ne[0]``) are not a multiple of its type's block falls back to
  a 32-block type (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS ->
  IQ4_NL), and to F16 when that does not divide either (``tensor_type_fallback``).

``ffn_down`` covers the routed, shared and dense down projections of a layer (llama.cpp reads the
layer from the tensor's name); ``attn_v`` is a GQA layer's V projection, counted over the layers
with attention. The tensor list (:func:`tensors`) is that of llama.cpp's converters: DeepSeek's MLA
``kv_b`` is stored split as ``attn_k_b`` (rows of ``qk_nope_head_dim``) and ``attn_v_b``, which no
rule names. Simplified: dense FFN layers are taken to come first (DeepSeek, Kimi, GLM); the
projections of linear-attention (gated DeltaNet) and compressed-attention (DeepSeek-V4) layers
are counted at the default type with rows of the hidden size; the 70B-only and Falcon-only rules
and the importance-matrix rules are not applied; router (F32 in a GGUF file) and norms are counted
at the embeddings' bytes, as moesym's memory model holds them with the embeddings.

A plain block type given alone (``--weights q4_k``, which has no file type of its own) gets the
rules every file type has (the output tensor, the 8-expert bumps).

>>> from moesym.readers.model import load_model
>>> m = load_model("qwen3-30b-a3b")
>>> [more_bits(i, 48) for i in range(10)]
[True, True, True, True, True, True, False, False, True, False]
>>> b = component_bytes(m, "q4_k_m")
>>> b["moe"] * 8  # gate, up Q4_K; down Q6_K in 24 of 48 layers: 2/3 4.5 + 1/3 (4.5 + 6.5625)/2
4.84375
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import SpecError
from ..attention.catalog import base, kinds
from ..specs.precision import FILE_TYPES, GGUF_TYPES, WeightRecipe, bytes_per_element

__all__ = ["FILE_TYPES", "RULES", "Tensor", "component_bytes", "file_type_bytes", "file_type_of",
           "more_bits", "tensor_types", "tensors"]

_EXPERTS8_OUTPUT = ("q2_k", "iq4_nl", "q4_k_s", "q4_k_m", "iq4_xs")


@dataclass(frozen=True)
class Rule:
    tensor: str  # attn_v, attn_k, attn_output, ffn_down
    file_types: tuple  # () for every file type
    layers: str  # "all", "more_bits", "first_eighth", "first4"
    when: str  # "", "experts8", "not_experts8", "gqa4", "gqa_lt4"
    to: str  # the block type


#: llama_tensor_get_type_impl's rules for the file types above, in its order (last match wins)
RULES = (
    Rule("attn_v", ("q2_k",), "all", "gqa4", "q4_k"),
    Rule("attn_v", ("q2_k",), "all", "gqa_lt4", "q3_k"),
    Rule("attn_v", ("iq4_nl", "iq4_xs"), "all", "gqa4", "q5_k"),
    Rule("attn_v", ("q4_k_m", "q5_k_m"), "more_bits", "", "q6_k"),
    Rule("attn_v", ("q4_k_s",), "first4", "", "q5_k"),
    Rule("attn_v", (), "all", "experts8", "q8_0"),
    Rule("attn_k", (), "all", "experts8", "q8_0"),
    Rule("ffn_down", ("q2_k",), "all", "", "q3_k"),
    Rule("ffn_down", ("q4_k_m", "q5_k_m"), "more_bits", "", "q6_k"),
    Rule("ffn_down", ("iq4_nl", "iq4_xs", "q4_k_s"), "first_eighth", "", "q5_k"),
    Rule("attn_output", _EXPERTS8_OUTPUT, "all", "experts8", "q5_k"),
    Rule("attn_output", ("q2_k",), "all", "not_experts8", "q3_k"),
)

#: tensor_type_fallback: a 32-block type for rows that the 256-block type does not divide
FALLBACK = {"q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0",
            "iq4_xs": "iq4_nl"}


def more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's ``use_more_bits``: the first and last eighth of the layers and every
    third layer between them."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _layers_match(sel: str, i: int, n: int) -> bool:
    return {"all": True, "more_bits": more_bits(i, n), "first_eighth": i < n // 8,
            "first4": i < 4}[sel]


@dataclass(frozen=True)
class Tensor:
    component: str  # attn, moe, dense, embed, head
    kind: str  # the rule's tensor class (attn_v, ffn_down, ...; "" for none)
    index: int  # the index its rule counts (layer; attention layer for attn_v)
    count: int  # of how many
    rows: int  # K: ggml's ne[0], the length of a row
    elements: int


def _block(t: str) -> int:
    return GGUF_TYPES[t][2] if t in GGUF_TYPES else 1


def _attention(shapes, i: int, n: int) -> list[Tensor]:
    """One layer's attention tensors from its variant's ``gguf_tensors`` (kind, rows, columns)."""
    return [Tensor("attn", kind, i, n, k, k * cols) for kind, k, cols in shapes]


def tensors(m) -> list[Tensor]:
    """The GEMM weights, token embeddings and output of model ``m`` as llama.cpp stores them,
    one :class:`Tensor` per tensor (stacked experts as one, as in a GGUF file)."""
    n, d = m.num_layers, m.hidden_size
    # layers of a variant with projections of its own (gated DeltaNet) interleave with the
    # base's: every round(n / n_base)-th layer is the base's, counted among the base's layers
    own = [v for v, _ in kinds(m)[1:] if v.gguf_tensors is not None]
    n_own = sum(int(s * n) for v, s in kinds(m)[1:] if v.gguf_tensors is not None)
    n_attn = n - n_own
    out: list[Tensor] = []
    i_attn = 0
    for i in range(n):
        if own and n_attn < n and (i + 1) % max(1, round(n / max(n_attn, 1))) != 0:
            out += _attention(own[0].gguf_tensors(m), i, n)
        else:
            out += _attention(base(m).gguf_tensors(m), i_attn, n_attn)
            i_attn += 1
        ffn = [("dense", m.dense_intermediate_size)] if (not m.is_moe or i < m.dense_layers) \
            else [("moe", m.moe_intermediate_size * m.num_experts),
                  ("dense", m.shared_intermediate_size)]
        for comp, width in ffn:
            if width:
                out += [Tensor(comp, "", i, n, d, 2 * d * width),  # gate and up
                        Tensor(comp, "ffn_down", i, n,
                               width // (m.num_experts if comp == "moe" else 1), d * width)]
    out.append(Tensor("embed", "token_embd", 0, 1, d, m.vocab_size * d))
    if not m.tie_embeddings:
        out.append(Tensor("head", "output", 0, 1, d, m.vocab_size * d))
    return out


def _when(cond: str, m) -> bool:
    gqa = m.num_heads // max(m.num_kv_heads or m.num_heads, 1)
    return {"": True, "experts8": m.num_experts == 8, "not_experts8": m.num_experts != 8,
            "gqa4": gqa >= 4, "gqa_lt4": gqa < 4}[cond]


def file_type_of(name: str) -> str:
    """The default block type of a file type or block type name (case-insensitive)."""
    key = str(name).strip().lower()
    if key in FILE_TYPES:
        return FILE_TYPES[key]
    if key in GGUF_TYPES:
        return key
    raise SpecError(f"`weights` {name!r}: not a llama.cpp file type; use one of "
                    f"{', '.join(FILE_TYPES)}")


def tensor_types(m, file_type: str) -> list[tuple[Tensor, str]]:
    """Each tensor of ``m`` with the block type llama-quantize gives it for ``file_type``."""
    ft = str(file_type).strip().lower()
    base = file_type_of(ft)
    out = []
    for t in tensors(m):
        typ = base
        if base == "f16":  # not a quantized type: llama-quantize leaves every tensor F16
            out.append((t, typ))
            continue
        if t.kind == "output" or (t.kind == "token_embd" and m.tie_embeddings):
            typ = "q8_0" if (base == "q8_0" or t.rows % _block(base)) else "q6_k"
        for r in RULES:
            if r.tensor == t.kind and (not r.file_types or ft in r.file_types) \
                    and _when(r.when, m) and _layers_match(r.layers, t.index, t.count):
                typ = r.to
        if t.rows % _block(typ):
            typ = FALLBACK.get(typ, typ)
            if t.rows % _block(typ):
                typ = "f16"
        out.append((t, typ))
    return out


def component_bytes(m, file_type: str) -> dict[str, float]:
    """Bytes per weight element of each class (attn, moe, dense; ``hp``: the embeddings and LM
    head together) in a llama.cpp ``file_type`` file of model ``m``: each class's tensors'
    bytes over its elements."""
    return dict(_component_bytes(m, str(file_type).strip().lower()))


@lru_cache(maxsize=256)
def _component_bytes(m, file_type: str) -> tuple:
    elems: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    for t, typ in tensor_types(m, file_type):
        comp = "hp" if t.component in ("embed", "head") else t.component
        elems[comp] = elems.get(comp, 0) + t.elements
        nbytes[comp] = nbytes.get(comp, 0) + t.elements * bytes_per_element(typ)
    base = bytes_per_element(file_type_of(file_type))
    return tuple((c, nbytes[c] / elems[c] if elems.get(c) else base)
                 for c in ("attn", "moe", "dense", "hp"))


def file_type_bytes(recipe: WeightRecipe, model) -> dict | None:
    """``{attn, moe, dense, hp: bytes per element}`` of a llama.cpp file type's tensors in
    ``model`` (:func:`component_bytes`; ``hp``: embeddings and LM head), or None where the
    recipe is not one."""
    if not recipe.mix:
        return None
    return component_bytes(model, recipe.mix)
