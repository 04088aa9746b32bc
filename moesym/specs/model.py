"""Model specifications: :class:`ModelSpec`, the shapes every cost term needs, as a record.

Reading one (the built-in catalog, the project's own ``.toml``, a HuggingFace ``config.json``) is
:mod:`moesym.readers.model`'s; the attention's parameter and KV counts are its variant's
(:mod:`moesym.attention.counts`).

>>> m = ModelSpec(name="toy", source="a test", hidden_size=1024, vocab_size=32000, num_layers=4,
...               num_heads=8, num_kv_heads=8, head_dim=128, num_experts=8, experts_per_token=2,
...               moe_intermediate_size=512)
>>> m.is_moe, m.moe_layers, m.expert_params()
(True, 4, 1572864)
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

from ..errors import SpecError
from .precision import FORMATS as _DTYPES  # a checkpoint's weights: any --weights format

__all__ = ["ModelSpec", "expert_weights", "check_experts", "positive"]


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
    # the HF config's architectures[0] (e.g. DeepseekV3ForCausalLM): the model class an engine
    # loads, on which some of its kernel paths depend ("": not given)
    architecture: str = ""
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
    # the length it extends them to and its words (moesym.plan.rules.position_limit)
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

    # ---- parameter counts (elements); the attention's and the totals are its variant's
    # (moesym.attention.counts)
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


def positive(model, where: str, *names: str) -> None:
    """Raise naming the first of the fields ``names`` of ``model`` that is not a positive
    integer."""
    for f in names:
        v = getattr(model, f)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise SpecError(f"{where}: '{f}' must be a positive integer, got {v!r}")


def _validate(m: ModelSpec) -> None:
    """The fields every model has; its attention's own are its variant's to check
    (:func:`moesym.attention.catalog.check`, run by every reader and by the plan's rules)."""
    where = f"model {m.name}"
    positive(m, where, "hidden_size", "vocab_size", "num_layers", "num_heads")
    _check_bounds({name: getattr(m, name, 0) for name in _BOUNDS}, where)
    for f in fields(m):
        v = getattr(m, f.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise SpecError(f"{where}: '{f.name}' must not be negative, got {v!r}")
    if m.attention != "compressed" and (m.hc_mult or m.csa_layers or m.hca_layers or m.o_groups):
        raise SpecError(f"{where}: csa_layers, hca_layers, o_groups and hc_mult belong to "
                        "attention = 'compressed' (DeepSeek-V4)")
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


_FIELD_NAMES = {f.name for f in fields(ModelSpec)} - {"extra"}

#: families with multi-head latent attention (kv_lora_rank required)
_MLA_FAMILIES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")


def _assumed(where: str, field: str, value, source: str) -> None:
    """One warning line: a config field left out, the value used and where it came from."""
    warnings.warn(f"{where}: field '{field}' missing: using {value} ({source})", stacklevel=3)
