"""Model specifications: the project's own spec files and HuggingFace ``config.json`` parsing.

A :class:`ModelSpec` holds the shapes every cost term needs. Built-in models live in
``moesym/catalog/*.toml``, each naming its source. Any HuggingFace ``config.json`` can be given as a
path; the field spellings of DeepSeek-V3, Qwen2/3-MoE, Mixtral, gpt-oss and Llama-4 are understood.

>>> from moesym.specs.model import load_model
>>> m = load_model("deepseek-v3")
>>> m.num_experts, m.experts_per_token, m.moe_layers, m.dense_layers
(256, 8, 58, 3)
>>> round(m.total_params() / 1e9, 1), round(m.active_params() / 1e9, 1)
(671.0, 37.6)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..io.text import read_text
from ..io.toml import load_toml
from ..errors import SpecError
from .precision import FORMATS as _DTYPES  # a checkpoint's weights: any --weights format

__all__ = ["ModelSpec", "load_model", "builtin_models", "from_hf_config", "expert_weights",
           "check_experts"]


def check_experts(num_experts: int, experts_per_token: int, expert_groups: int = 1,
                  groups_per_token: int = 1, ep: int | None = None) -> None:
    """The one check of a MoE layer's routing shape (positive integers given): top-k within the
    experts, the expert groups dividing the experts, the groups a token picks within the
    groups, at most k (one expert each at least) and holding its k experts, and, with ``ep``,
    EP dividing the experts and, under group-limited routing, EP and the group count dividing
    one another. A model file (:func:`_check`), ``moesym routing``
    (:func:`moesym.routing.routing_report`) and the group-limited routing statistics
    (:mod:`moesym.routing.stats`) call it; an error names the field.

    >>> check_experts(256, 8, 8, 4, ep=16)
    >>> check_experts(256, 8, 64, 1)
    Traceback (most recent call last):
    ...
    moesym.errors.SpecError: `experts_per_token` 8 exceeds the 4 experts of `groups_per_token` 1; raise `groups_per_token`
    """
    E, k, G, kG = num_experts, experts_per_token, expert_groups, groups_per_token
    if k > E:
        raise SpecError(f"`experts_per_token` {k} exceeds `num_experts` {E}; choose at most {E}")
    if E % G:
        raise SpecError(f"`expert_groups` {G} does not divide `num_experts` {E}; choose a divisor")
    if kG > G:
        raise SpecError(f"`groups_per_token` {kG} exceeds `expert_groups` {G}")
    if kG > k:  # group-limited routing's model (moesym.routing.stats): a leader in each group
        raise SpecError(f"`groups_per_token` {kG} exceeds `experts_per_token` {k}: each "
                        "selected group holds at least one of a token's experts")
    if k > kG * (E // G):
        raise SpecError(f"`experts_per_token` {k} exceeds the {kG * E // G} experts of "
                        f"`groups_per_token` {kG}; raise `groups_per_token`")
    if ep is None:
        return
    if E % ep:
        raise SpecError(f"`ep` {ep} does not divide `num_experts` {E}; choose a divisor")
    if ep % G and G % ep:
        raise SpecError(f"`ep` {ep} and `expert_groups` {G}: one must divide the other for "
                        "group-limited routing")


def expert_weights(hidden, moe_inter, bytes_per_param=1, expert_tp=1):
    """One routed expert's weights on one GPU: its gate, up and down projections,
    ``3 x hidden x moe_inter`` parameters, split over ``expert_tp`` GPUs, in bytes at
    ``bytes_per_param`` (parameters at 1). Numbers (an int stays an int) or symbols: the one
    home of the formula the memory model, the cost terms, the expert-offload transfer and the
    derivation pages use.

    >>> expert_weights(7168, 2048)
    44040192
    """
    w = 3 * hidden * moe_inter
    if bytes_per_param != 1:
        w = w * bytes_per_param
    return w if expert_tp == 1 else w / expert_tp



@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer with optional MoE layers (all sizes in elements)."""

    name: str
    source: str
    hidden_size: int
    vocab_size: int
    num_layers: int
    num_heads: int
    # 'gqa' (MHA is GQA with kv = heads), 'mla', or 'compressed' (DeepSeek-V4: shared-KV MQA of
    # head_dim over a sliding window plus CSA / HCA compressed entries, moesym.terms.compressed)
    attention: str = "gqa"
    num_kv_heads: int = 0
    head_dim: int = 0
    # MLA (DeepSeek); q_lora_rank 0 means a direct query projection
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # FFN / MoE
    dense_intermediate_size: int = 0
    dense_layers: int = 0  # layers with a dense FFN (all layers for a dense model)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0  # all shared experts together
    expert_groups: int = 1
    groups_per_token: int = 1
    # other
    mtp_layers: int = 0
    tie_embeddings: bool = False
    weight_dtype: str = "bf16"  # checkpoint precision of the GEMM weights
    sliding_window: int = 0  # tokens; 0 = none
    sliding_layers: int = 0  # layers that use the sliding window
    # DeepSeek sparse attention (V3.2): a lightning indexer keeps the top index_topk KV entries
    index_topk: int = 0  # 0: dense attention
    index_heads: int = 0
    index_head_dim: int = 0
    # DeepSeek-V4 compressed attention: grouped output projection (o_groups x o_lora_rank),
    # csa_layers with compress ratio csa_ratio and the indexer, hca_layers with hca_ratio, the
    # rest sliding-window only (every layer keeps a window of sliding_window entries);
    # hc_mult residual streams (manifold-constrained hyper-connections, 0 = a plain residual)
    o_groups: int = 0
    o_lora_rank: int = 0
    csa_layers: int = 0
    hca_layers: int = 0
    csa_ratio: int = 4
    hca_ratio: int = 128
    hc_mult: int = 0
    # hybrid linear attention (Qwen3-Next, Qwen3.5): gated DeltaNet layers with a fixed
    # recurrent state instead of a KV cache, interleaved with full-attention layers
    linear_layers: int = 0
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    linear_conv: int = 0  # causal convolution width
    # gated attention output (Qwen3-Next, Qwen3.5): q_proj also emits a gate of h d_h per token
    # and the attention output is multiplied by sigmoid(gate) before o_proj
    attn_output_gate: bool = False
    # positions (max_position_embeddings; 0: not known) and, where the config has rope scaling,
    # the length it extends them to and its words (moesym.specs.checks.position_limit)
    max_positions: int = 0
    rope_positions: int = 0
    rope_scaling: str = ""
    published_total_params: float = 0.0
    published_active_params: float = 0.0
    # fields of attention variants added outside this class (moesym.attention.catalog.register,
    # a variant's ``extra``), as sorted (name, value) pairs: read them with ``field``
    extra: tuple = ()

    def __post_init__(self) -> None:
        _validate(self)

    def field(self, name: str, default: Any = 0) -> Any:
        """A field by name: one of this class's, or an attention variant's own (``extra``)."""
        if name in _FIELD_NAMES:
            return getattr(self, name)
        return dict(self.extra).get(name, default)

    # ---- derived shapes
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.dense_layers

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def is_compressed(self) -> bool:
        return self.attention == "compressed"

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    def kv_elements_per_token_layer(self) -> int:
        """KV-cache elements one token adds to one full-attention layer (before TP sharding):
        the model's attention variant's (:mod:`moesym.attention`)."""
        from ..attention.catalog import base

        return base(self).kv_elements(self)

    # ---- parameter counts (elements), used for checks against published totals
    def attention_params(self) -> float:
        """One (average) layer's attention weights: the model's attention variant's."""
        from ..attention.catalog import base

        return base(self).params(self)

    def expert_params(self) -> int:
        """One routed expert (gate, up, down): :func:`expert_weights`."""
        return expert_weights(self.hidden_size, self.moe_intermediate_size)

    def moe_layer_params(self, active: bool = False) -> int:
        n = self.experts_per_token if active else self.num_experts
        router = self.num_experts * self.hidden_size
        return n * self.expert_params() + 3 * self.hidden_size * self.shared_intermediate_size + router

    def dense_ffn_params(self) -> int:
        return 3 * self.hidden_size * self.dense_intermediate_size

    def embedding_params(self) -> int:
        e = self.vocab_size * self.hidden_size
        return e if self.tie_embeddings else 2 * e

    def total_params(self, include_mtp: bool = False) -> float:
        """All weights of the main model (norm vectors included); MTP modules only on request."""
        norms = self.num_layers * 2 * self.hidden_size + self.hidden_size
        per_layer = (self.num_layers * self.attention_params()
                     + self.dense_layers * self.dense_ffn_params()
                     + self.moe_layers * self.moe_layer_params())
        total = per_layer + self.embedding_params() + norms
        if include_mtp:
            total += self.mtp_layers * (self.attention_params() + self.moe_layer_params()
                                        + 2 * self.hidden_size * self.hidden_size)
        return float(total)

    def active_params(self) -> float:
        """Weights a token touches: all but the unselected routed experts (embeddings included)."""
        inactive = self.moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params()
        return self.total_params() - inactive

    def with_(self, **changes: Any) -> "ModelSpec":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


#: sizes no model comes near (the largest today: hidden 16,384-25,600, 128-200 layers, 384
#: experts, vocabularies of 262,144): a value beyond them is a typo or a unit slip, and would
#: make every answer a runaway (a 1e18-layer model) or a nonsense number
_BOUNDS = {"hidden_size": 2**20, "num_layers": 10_000, "num_heads": 2**16, "vocab_size": 2**26,
           "num_experts": 2**20, "moe_intermediate_size": 2**22,
           "dense_intermediate_size": 2**22, "shared_intermediate_size": 2**22,
           "max_positions": 2**34}
_BOUND_WHY = "a bound far above the largest models"


def _check_bounds(sizes: Mapping[str, Any], where: str) -> None:
    """Refuse a size of :data:`_BOUNDS` beyond its bound (before any loop over the layers)."""
    for name, top in _BOUNDS.items():
        v = sizes.get(name, 0)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > top:
            raise SpecError(f"{where}: '{name}' {v:g} is beyond any model's ({top:,}, "
                            f"{_BOUND_WHY}); check the config")


def _validate(m: ModelSpec) -> None:
    from ..attention.base import positive
    from ..attention.catalog import base

    where = f"model {m.name}"
    positive(m, where, "hidden_size", "vocab_size", "num_layers", "num_heads")
    _check_bounds({name: getattr(m, name, 0) for name in _BOUNDS}, where)
    for f in fields(m):
        v = getattr(m, f.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise SpecError(f"{where}: '{f.name}' must not be negative, got {v!r}")
    if m.attention not in ("gqa", "mla", "compressed") + _registered_attention():
        raise SpecError(f"{where}: 'attention' must be 'gqa', 'mla' or 'compressed', got "
                        f"{m.attention!r}")
    if m.attention != "compressed" and (m.hc_mult or m.csa_layers or m.hca_layers or m.o_groups):
        raise SpecError(f"{where}: csa_layers, hca_layers, o_groups and hc_mult belong to "
                        "attention = 'compressed' (DeepSeek-V4)")
    base(m).validate(m, where)  # the model's own attention's fields (moesym.attention)
    if not 0 <= m.dense_layers <= m.num_layers:
        raise SpecError(f"{where}: dense_layers ({m.dense_layers}) must be within 0..num_layers "
                        f"({m.num_layers})")
    if m.num_experts:
        positive(m, where, "experts_per_token", "moe_intermediate_size", "expert_groups",
                 "groups_per_token")
        try:
            check_experts(m.num_experts, m.experts_per_token, m.expert_groups,
                          m.groups_per_token)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    else:
        if m.dense_layers != m.num_layers:
            raise SpecError(f"{where}: a dense model (num_experts = 0) needs dense_layers = num_layers")
    if m.dense_layers:
        positive(m, where, "dense_intermediate_size")
    if m.weight_dtype not in _DTYPES:
        raise SpecError(f"{where}: weight_dtype must be one of {', '.join(_DTYPES)}, got {m.weight_dtype!r}")
    if m.sliding_layers > m.num_layers:
        raise SpecError(f"{where}: sliding_layers exceeds num_layers")
    if m.sliding_layers and not m.sliding_window:
        raise SpecError(f"{where}: sliding_layers given without sliding_window")


# ---------------------------------------------------------------------------------------------
# Built-in catalog
def _catalog() -> Path:
    return Path(str(resources.files("moesym"))) / "catalog"


def builtin_models() -> list[str]:
    return sorted(p.stem for p in _catalog().glob("*.toml"))


_FIELD_NAMES = {f.name for f in fields(ModelSpec)} - {"extra"}


def _variant_fields() -> set:
    """Fields the catalog's attention variants declare beyond ModelSpec's (``extra``)."""
    from ..attention.catalog import all_variants

    return {f for v in all_variants() for f in (v.extra or {})}


def _with_extra(kw: dict) -> dict:
    """``kw`` with the attention variants' own fields moved into ``extra``."""
    own = {k: kw.pop(k) for k in sorted(set(kw) - _FIELD_NAMES)}
    if own:
        kw["extra"] = tuple(sorted(own.items()))
    return kw


def _from_own_toml(raw: Mapping[str, Any], where: str) -> ModelSpec:
    unknown = set(raw) - _FIELD_NAMES
    if unknown:  # an attention variant's own fields (the variants load only then)
        unknown -= _variant_fields()
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    for f in ("name", "source", "hidden_size", "vocab_size", "num_layers", "num_heads"):
        if f not in raw:
            raise SpecError(f"{where}: missing key '{f}'")
    return ModelSpec(**_with_extra(dict(raw)))


#: built-in names that changed, so that scripts written against the old name keep working
RENAMED = {"seed003-moe-7b": "marlin-moe-7b"}


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A built-in model by name, a project spec ``.toml``, or a HuggingFace ``config.json`` path."""
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".json", ".toml") or p.is_file() or p.is_dir():
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise SpecError(f"model file {p} not found")
        if p.suffix == ".toml":
            return _from_own_toml(load_toml(p), str(p))
        try:
            raw = json.loads(read_text(p))
        except json.JSONDecodeError as exc:
            raise SpecError(f"{p}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{p}: a config.json must hold a JSON object")
        return from_hf_config(raw, name=_config_name(raw, p), source=str(p))
    path = _catalog() / f"{RENAMED.get(text.lower(), text.lower())}.toml"
    if not path.is_file():
        raise SpecError(f"unknown model {text!r}; built-in: {', '.join(builtin_models())} "
                        f"(or give a path to a HuggingFace config.json)")
    return _from_own_toml(load_toml(path), path.name)


# ---------------------------------------------------------------------------------------------
# HuggingFace config.json
class _Cfg:
    """Field access that names the config and field on a missing or ill-typed value."""

    def __init__(self, raw: Mapping[str, Any], where: str):
        self.raw, self.where = raw, where

    def has(self, *keys: str) -> bool:
        return any(k in self.raw and self.raw[k] is not None for k in keys)

    def get(self, *keys: str, default: Any = None) -> Any:
        for k in keys:
            if k in self.raw and self.raw[k] is not None:
                return self.raw[k]
        return default

    def int(self, *keys: str, default: Any = ...) -> int:
        v = self.get(*keys)
        if v is None:
            if default is ...:
                raise SpecError(f"{self.where}: missing field '{keys[0]}'"
                                + (f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""))
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or int(v) != v:
            raise SpecError(f"{self.where}: field '{keys[0]}' must be an integer, got {v!r}")
        return int(v)


def _hf_weight_dtype(q: Any, where: str) -> str:
    if not q:
        return "bf16"
    if not isinstance(q, dict):
        raise SpecError(f"{where}: field 'quantization_config' must be an object")
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo", "")).lower()
    fmt = str(q.get("fmt", q.get("format", ""))).lower()
    if method in ("awq", "gptq"):  # AutoAWQ / GPTQ: int4 with fp16 scales and zero points
        if q.get("bits") != 4:
            raise SpecError(f"{where}: quantization_config {method} with bits "
                            f"{q.get('bits')!r}: moesym models 4-bit {method} (bits 4)")
        if q.get("group_size", 128) != 128:
            import warnings

            warnings.warn(f"{where}: quantization_config group_size {q.get('group_size')!r}: "
                          f"pass --group-size with --weights {method} (its default is 128)",
                          stacklevel=3)
        return method
    if method == "modelopt" and algo == "fp8":  # ModelOpt FP8: one scale per tensor
        return "modelopt-fp8"
    if "fp4" in method or "fp4" in algo or "mxfp4" in fmt or "nvfp4" in fmt:
        return "fp4"
    if method in ("fp8", "fbgemm_fp8") or "fp8" in algo or fmt in ("e4m3", "float-quantized"):
        return "fp8"
    if method == "compressed-tensors":
        groups = q.get("config_groups", {}) or {}
        for g in groups.values():
            w = (g or {}).get("weights", {}) or {}
            if w.get("type") == "float" and w.get("num_bits") == 8:
                return "fp8"
            if w.get("num_bits") == 4 and w.get("type") == "float":
                return "fp4"
            if w.get("num_bits") == 4 and w.get("type") == "int" \
                    and not (g or {}).get("input_activations"):
                return "w4a16"  # compressed-tensors W4A16: int4 weights, 16-bit activations
    raise SpecError(f"{where}: quantization_config with quant_method {method!r} is not supported; "
                    f"use an fp8, fp4, awq, gptq, modelopt or compressed-tensors checkpoint or "
                    f"remove quantization_config")


def _config_name(raw: Mapping[str, Any], path: Path) -> str:
    """A model's name from its config: ``_name_or_path`` (last part), else ``model_type``, else
    the file's folder."""
    named = str(raw.get("_name_or_path") or "").rstrip("/").split("/")[-1]
    return named or str(raw.get("model_type") or "") or path.parent.name or path.stem


#: families with multi-head latent attention (kv_lora_rank required)
_MLA_FAMILIES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")
#: MoE families whose experts have a width of their own (moe_intermediate_size required)
_OWN_EXPERT_WIDTH = ("qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3",
                     "deepseek_v32", "kimi_k2")
#: families whose experts take intermediate_size (transformers' Mixtral, GptOss, Llama4 configs)
_EXPERTS_USE_INTERMEDIATE = ("mixtral", "gpt_oss", "llama4")


def _registered_attention() -> tuple:
    """Names of base attention variants registered at run time
    (:func:`moesym.attention.catalog.register`): further values of ``attention``."""
    from ..attention.catalog import registered

    return tuple(v.name for v in registered() if v.base)


def _attention_variants(base: bool) -> list:
    """The attention variants of :mod:`moesym.attention.catalog` whose parsers read a config:
    the base ones (the layers' own attention) or the ones that take a share of the layers."""
    from ..attention.catalog import all_variants

    return [v for v in all_variants() if v.base == base]


def _assumed(where: str, field: str, value, source: str) -> None:
    """One warning line: a config field left out, the value used and where it came from."""
    import warnings

    warnings.warn(f"{where}: field '{field}' missing: using {value} ({source})", stacklevel=3)


#: families that are always MoE: a config of theirs without an expert count is broken, not dense
_MOE_FAMILIES = ("qwen2_moe", "qwen3_moe", "qwen3_next", "mixtral", "deepseek_v2", "deepseek_v3",
                 "deepseek_v32", "deepseek_v4", "kimi_k2", "gpt_oss", "llama4", "llama4_text")

#: config fields that change the cost of a step and that moesym does not model yet: each is said
#: in one warning line naming the field and what is timed instead (never silently ignored)
_UNMODELLED = (
    ("vision_config", "the vision encoder is not modelled: the text decoder only"),
    ("attention_chunk_size", "chunked local attention ({v}-token chunks, Llama-4's RoPE layers) "
     "is not modelled: every layer attends the whole context (an upper bound on attention "
     "time and KV memory beyond {v} tokens)"),
)


def _warn_unmodelled(top: Mapping[str, Any], raw: Mapping[str, Any], where: str) -> None:
    import warnings

    for key, what in _UNMODELLED:
        v = raw.get(key, top.get(key))
        if v not in (None, False, 0, {}):
            warnings.warn(f"{where}: config field '{key}': " + what.format(v=v), stacklevel=3)


def from_hf_config(raw: Mapping[str, Any], name: str = "hf-model", source: str = "config.json") -> ModelSpec:
    """Parse a HuggingFace ``config.json`` (as a dict) into a :class:`ModelSpec`; a field that
    changes the cost and is not modelled (:data:`_UNMODELLED`) is said in a warning."""
    where = source
    top = raw
    if isinstance(raw.get("text_config"), dict):  # Llama-4, Qwen3.5 and other multimodal wrappers
        raw = {**raw["text_config"], **{k: v for k, v in raw.items()
                                         if k == "quantization_config"}}
    _warn_unmodelled(top, raw, where)
    family = str(top.get("model_type", raw.get("model_type", "")))  # transformers' model_type
    c = _Cfg(raw, where)
    for f in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if not c.has(f):
            raise SpecError(f"{where}: missing field '{f}'")
    d = c.int("hidden_size")
    n_layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kw: dict[str, Any] = dict(name=name, source=source, hidden_size=d, vocab_size=c.int("vocab_size"),
                              num_layers=n_layers, num_heads=heads)
    _check_bounds(kw, where)  # before anything loops over the layers
    # the layers' own attention: the first base variant of moesym.attention.catalog whose
    # parser finds its fields (DeepSeek-V4's compressed, MLA, else GQA), plus the indexer
    for v in _attention_variants(base=True):
        kw.update(v.parse_hf(c, raw, top, family, kw, where))

    n_exp = c.int("n_routed_experts", "num_routed_experts", "num_experts", "num_local_experts", default=0)
    if not n_exp and family in _MOE_FAMILIES:
        raise SpecError(f"{where}: a {family} config names its routed experts: field "
                        f"'num_experts' (or n_routed_experts, num_local_experts) is missing or 0")
    kw["dense_intermediate_size"] = c.int("intermediate_size_mlp", "intermediate_size", "ffn_dim", default=0)
    if n_exp:
        topk = c.int("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k")
        moe_inter = c.int("moe_intermediate_size", default=0)
        if not moe_inter and (c.has("moe_intermediate_size") or family in _OWN_EXPERT_WIDTH):
            raise SpecError(f"{where}: a {family or 'MoE'} config gives its experts' width in "
                            "field 'moe_intermediate_size', which is missing or 0")
        if not moe_inter:
            if not c.has("intermediate_size"):
                raise SpecError(f"{where}: missing field 'moe_intermediate_size' (or intermediate_size)")
            moe_inter = c.int("intermediate_size")  # Mixtral, gpt-oss, Llama-4: experts use it
            if not any(family.startswith(f) for f in _EXPERTS_USE_INTERMEDIATE):
                _assumed(where, "moe_intermediate_size", moe_inter, "intermediate_size, as "
                         "Mixtral's experts")
        n_shared = c.int("n_shared_experts", "num_shared_experts", default=0)
        shared = n_shared * moe_inter
        if c.has("shared_expert_intermediate_size"):
            shared = c.int("shared_expert_intermediate_size")
        if "llama4" in family and not c.has("n_shared_experts", "num_shared_experts"):
            shared = c.int("intermediate_size")  # Llama-4 has one shared expert per MoE layer
        if family in _MLA_FAMILIES and not c.has("first_k_dense_replace", "moe_layer_freq"):
            k = 3 if family == "deepseek_v3" else 0
            _assumed(where, "first_k_dense_replace", k, "the default of transformers' "
                     "DeepseekV3Config" if k else "every layer MoE")
            c = _Cfg({**c.raw, "first_k_dense_replace": k}, where)
        dense_idx = _dense_layer_indices(c, n_layers, where)
        _check_pattern(c, n_exp, dense_idx, n_layers, where)
        kw.update(num_experts=n_exp, experts_per_token=topk, moe_intermediate_size=moe_inter,
                  shared_intermediate_size=shared, dense_layers=len(dense_idx),
                  expert_groups=c.int("n_group", default=1) or 1,
                  groups_per_token=c.int("topk_group", default=1) or 1)
        if kw["dense_layers"] and not kw["dense_intermediate_size"]:
            raise SpecError(f"{where}: dense layers present but 'intermediate_size' is missing")
        if "llama4" in family and c.has("intermediate_size_mlp"):
            kw["dense_intermediate_size"] = c.int("intermediate_size_mlp")
    else:
        if not kw["dense_intermediate_size"]:
            raise SpecError(f"{where}: missing field 'intermediate_size'")
        kw["dense_layers"] = n_layers
    kw["mtp_layers"] = c.int("num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)
    # gated attention output: Qwen3.5 says so in its config; Qwen3-Next always gates (HF
    # transformers 5.23 modeling_qwen3_next.py: q_proj of 2 n_h d_h, output x sigmoid(gate))
    if raw.get("attn_output_gate", top.get("attn_output_gate")) or family.startswith("qwen3_next"):
        kw["attn_output_gate"] = True
    kw.update(_positions(c, raw, top, where))
    kw["tie_embeddings"] = bool(top.get("tie_word_embeddings", raw.get("tie_word_embeddings", False)))
    kw["weight_dtype"] = _hf_weight_dtype(raw.get("quantization_config"), where)
    # the variants that take a share of the layers (gated DeltaNet, sliding window)
    for v in _attention_variants(base=False):
        kw.update(v.parse_hf(c, raw, top, family, kw, where))
    return ModelSpec(**_with_extra(kw))


def _positions(c: _Cfg, raw: Mapping[str, Any], top: Mapping[str, Any], where: str) -> dict:
    """``max_positions`` and the rope scaling's length and words, by vLLM's derivation of the
    longest sequence (vllm/config: ``_get_and_verify_max_len``): yarn scales
    ``original_max_position_embeddings``, linear and dynamic ``max_position_embeddings``; su,
    longrope and llama3 configs give the extended length as ``max_position_embeddings``."""
    n = c.int("max_position_embeddings", default=0)
    if c.has("max_position_embeddings") and n <= 0:
        raise SpecError(f"{where}: field 'max_position_embeddings' must be positive (the longest "
                        f"sequence the model takes), got {n}")
    rope = raw.get("rope_scaling") or raw.get("rope_parameters") or top.get("rope_scaling")
    if not n or not isinstance(rope, Mapping):
        return {"max_positions": n}
    kind = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = rope.get("factor")
    if kind == "default" or factor is None:
        return {"max_positions": n}
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        raise SpecError(f"{where}: field 'rope_scaling.factor' must be a number >= 1, got {factor!r}")
    orig = rope.get("original_max_position_embeddings")
    words = f"{kind} x{factor:g}" + (f" of {orig}" if orig else "")
    if kind in ("su", "longrope", "llama3"):
        return {"max_positions": n, "rope_positions": n, "rope_scaling": words}
    base = orig if (kind == "yarn" and isinstance(orig, int) and orig > 0) else n
    return {"max_positions": n, "rope_positions": max(n, int(base * factor)),
            "rope_scaling": words}


def _dense_layer_indices(c: _Cfg, n_layers: int, where: str) -> list[int]:
    """Indices of layers with a dense FFN in an MoE config, by each family's rule."""
    if c.has("first_k_dense_replace", "moe_layer_freq"):  # DeepSeek
        k = c.int("first_k_dense_replace", default=0)
        freq = c.int("moe_layer_freq", default=1)
        if freq <= 0:
            raise SpecError(f"{where}: field 'moe_layer_freq' must be positive")
        return [i for i in range(n_layers) if not (i >= k and (i - k) % freq == 0)]
    if c.has("decoder_sparse_step", "mlp_only_layers"):  # Qwen2/3-MoE
        step = c.int("decoder_sparse_step", default=1)
        only = c.get("mlp_only_layers", default=[]) or []
        if not isinstance(only, list) or any(not isinstance(i, int) or not 0 <= i < n_layers for i in only):
            raise SpecError(f"{where}: field 'mlp_only_layers' must list layer indices in 0..{n_layers - 1}")
        if step <= 0:
            raise SpecError(f"{where}: field 'decoder_sparse_step' must be positive")
        return [i for i in range(n_layers) if i in only or (i + 1) % step != 0]
    if c.has("interleave_moe_layer_step"):  # Llama-4
        step = c.int("interleave_moe_layer_step")
        if step <= 0:
            raise SpecError(f"{where}: field 'interleave_moe_layer_step' must be positive")
        return [i for i in range(n_layers) if (i + 1) % step != 0]
    if c.has("moe_layers"):
        moe = c.get("moe_layers")
        if not isinstance(moe, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                for i in moe):
            raise SpecError(f"{where}: field 'moe_layers' must be a list of layer indices, got "
                            f"{moe!r}")
        if any(not 0 <= i < n_layers for i in moe):
            raise SpecError(f"{where}: field 'moe_layers' lists layers outside 0..{n_layers - 1} "
                            f"(num_hidden_layers {n_layers})")
        return [i for i in range(n_layers) if i not in moe]
    return []


#: the config fields that place the MoE layers among the layers
_PATTERN_FIELDS = ("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
                   "mlp_only_layers", "interleave_moe_layer_step", "moe_layers")


def _check_pattern(c: "_Cfg", n_exp: int, dense_idx: list, n_layers: int, where: str) -> None:
    """An MoE config whose layer pattern leaves no MoE layer is inconsistent (its experts would
    be counted in the weights and never run): refused, naming the fields."""
    if n_exp and len(dense_idx) >= n_layers:
        given = ", ".join(f"{f} {c.get(f)!r}" for f in _PATTERN_FIELDS if c.has(f))
        raise SpecError(f"{where}: its layer pattern ({given}) leaves none of the "
                        f"{n_layers} layers (num_hidden_layers) an MoE layer, though it names "
                        f"{n_exp} experts; fix the pattern field, or drop the experts for a "
                        "dense model")
