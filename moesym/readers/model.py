"""Reading a model: the built-in catalog, the project's own spec ``.toml`` and HuggingFace
``config.json`` parsing, each giving a :class:`~moesym.specs.model.ModelSpec` whose attention
fields its variant has checked (:func:`moesym.attention.catalog.check`).

Built-in models live in ``moesym/catalog/*.toml``, each naming its source. Any HuggingFace
``config.json`` can be given as a path; the field spellings of DeepSeek-V3, Qwen2/3-MoE, Mixtral,
gpt-oss and Llama-4 are understood.

>>> m = load_model("deepseek-v3")
>>> m.num_experts, m.experts_per_token, m.moe_layers, m.dense_layers
(256, 8, 58, 3)
"""

from __future__ import annotations

import json
import math
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..attention.catalog import all_variants, check
from ..errors import SpecError
from ..io.text import read_text
from ..io.toml import load_toml
from ..specs.model import _FIELD_NAMES, _MLA_FAMILIES, ModelSpec, _assumed, _check_bounds

__all__ = ["RENAMED", "builtin_models", "from_hf_config", "load_model"]


def _catalog() -> Path:
    return Path(str(resources.files("moesym"))) / "catalog"


def builtin_models() -> list[str]:
    return sorted(p.stem for p in _catalog().glob("*.toml"))


def _variant_fields() -> set:
    """Fields the catalog's attention variants declare beyond ModelSpec's (``extra``)."""
    return {f for v in all_variants() for f in (v.extra or {})}


def _checked(m: ModelSpec) -> ModelSpec:
    """``m`` once its attention variant has checked the fields it owns."""
    check(m)
    return m


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
    return _checked(ModelSpec(**_with_extra(dict(raw))))


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


#: MoE families whose experts have a width of their own (moe_intermediate_size required)
_OWN_EXPERT_WIDTH = ("qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3",
                     "deepseek_v32", "kimi_k2")
#: families whose experts take intermediate_size (transformers' Mixtral, GptOss, Llama4 configs)
_EXPERTS_USE_INTERMEDIATE = ("mixtral", "gpt_oss", "llama4")


def _attention_variants(base: bool) -> list:
    """The attention variants of :mod:`moesym.attention.catalog` whose parsers read a config:
    the base ones (the layers' own attention) or the ones that take a share of the layers."""
    return [v for v in all_variants() if v.base == base]


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
    archs = top.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        kw["architecture"] = archs[0]
    # the variants that take a share of the layers (gated DeltaNet, sliding window)
    for v in _attention_variants(base=False):
        kw.update(v.parse_hf(c, raw, top, family, kw, where))
    return _checked(ModelSpec(**_with_extra(kw)))


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
