"""The interface every attention variant implements: :class:`AttentionVariant`.

A variant is one kind of attention layer (MHA/GQA, MLA, DeepSeek sparse attention, gated
DeltaNet, DeepSeek-V4's compressed attention, sliding-window layers). It says which model
fields it reads, how it parses them from a HuggingFace ``config.json``, the share of the layers
it covers, and, for one layer of its kind, its costs for one micro-batch and its cache per
request. :mod:`moesym.attention.compose` weights the variants of a model by their shares; the
step model (:mod:`moesym.model.step`) and the memory model (:mod:`moesym.memory.capacity`) ask
only the composition.

A new variant is ONE new file in ``moesym/attention/`` defining an ``AttentionVariant`` and one
entry in :data:`moesym.attention.catalog.ENTRIES` (or :func:`moesym.attention.catalog.register`
at run time): docs/how-to/add-attention-variant.md walks through one.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Mapping, Optional

__all__ = ["AttentionVariant", "Kernel", "StepSite", "MemorySite", "Memory", "layers", "Lazy"]


class Lazy:
    """A module imported on its first attribute read: the variant files import SymPy and the
    formulas only when a cost is asked, so the config reader and a cached ``predict`` (which
    loads no SymPy) can read them."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(import_module(self._name), attr)


expr = Lazy("moesym.symbolic.expr")


@dataclass(frozen=True)
class Kernel:
    """One attention kernel of a micro-batch: ``kind`` "decode" (``tokens`` requests at mean KV
    length ``context``) or "prefill" (``tokens`` prompt tokens of prompts of length
    ``context``). A mixed serving step runs one of each."""

    kind: str
    tokens: Any
    context: Any


@dataclass(frozen=True)
class StepSite:
    """What a variant's core needs of the step beyond its model and dims: query tokens per
    decode request (``queries``: 1, or N + 1 verifying N drafts), context-parallel GPUs sharing
    a prompt (``cp``), and the share of each prompt found in the prefix cache (``prefix_hit``:
    0 when the workload has none, else the symbol F)."""

    queries: Any = 1
    cp: Any = 1
    prefix_hit: Any = 0

    def computed(self, context):
        """Tokens of a prompt of ``context`` a prefill computes: (1 - F) L, at least one."""
        if self.prefix_hit == 0:
            return context
        return expr.smax(1 - self.prefix_hit, 1 / context) * context

    def cached(self, context):
        """The share of a prompt not recomputed (0 without a prefix hit)."""
        if self.prefix_hit == 0:
            return 0
        return 1 - self.computed(context) / context


@dataclass(frozen=True)
class MemorySite:
    """What a variant's cache formula needs: ``layers`` (its own layers on this GPU, a symbolic
    count), ``kv_layers`` (all layers that keep a per-token cache: speculative tokens land in
    each), ``context`` (tokens per request), ``block_size`` (tokens of a paged block; half of
    one is wasted per request and layer where ``fragmentation``), ``mtp_layers`` (the draft's
    layers) and ``stage_layers`` (all layers on this GPU)."""

    layers: Any
    kv_layers: Any
    context: Any
    block_size: Any
    fragmentation: bool
    mtp_layers: Any
    stage_layers: Any


@dataclass(frozen=True)
class Memory:
    """One variant's cache on one GPU: ``per_token`` (bytes one more context token adds, past
    every window) and ``per_request`` (bytes of one request of the site's context)."""

    per_token: Any = 0
    per_request: Any = 0


def _none(*_args, **_kw):
    return None


@dataclass(frozen=True)
class AttentionVariant:
    """One attention variant. Every callable takes the :class:`moesym.specs.model.ModelSpec`
    first and reads only the fields named in ``fields``.

    ``base``: True for the layers' own attention (one per model: it owns the projections,
    elementwise work and per-token KV the other layers reuse); False for a variant that takes a
    share of the layers from the base (sliding window, gated DeltaNet).
    ``share(model)``: the share of the layers it covers (a SymPy Rational; a base variant's is
    what the others leave).
    ``core(model, D, kernel, site)``: cost list of one layer of its kind for one
    :class:`Kernel` (unscaled: the composition weights it by the share).
    ``projections(model, D, tokens)`` / ``elementwise(model, D, tokens, fp8_gemm)``: its GEMMs
    and its elementwise cost for ``tokens`` tokens; None: its layers run the base's.
    ``kv_bytes_per_token_layer(model, D)``: bytes one token adds to one of its layers' cache
    (None: none of its own).
    ``memory(model, D, site)``: its :class:`Memory` over ``site.layers`` layers;
    ``layer_count(model, stage_layers)``: its layers on one GPU (default ``stage_layers`` x
    share; a base variant's is what the others leave).
    ``parse_hf(cfg, raw, top, family, kw, where)``: the ModelSpec keywords it reads from a
    HuggingFace config (``cfg`` the checked reader, ``kw`` what is parsed so far), {} if the
    config has none of it; ``fields``: the ModelSpec fields it reads (its own in ``extra``).
    ``extra``: fields of its own, outside ModelSpec's, with their defaults: project spec files
    and configs may carry them (``ModelSpec.extra``).
    ``draft_model(model)``: the model whose one layer times the MTP draft (default the model).
    ``weights(model, D, layers)``: attention weight bytes by name where the generic MLA / GQA
    count does not fit, else None.
    ``params(model)``: one (average) layer's attention weights in elements (for the checks
    against published totals); ``kv_elements(model)``: cache elements one token adds to one of
    its layers before TP sharding.
    ``gemm_ks(model)``: the reduction lengths (K) of its GEMMs besides ``hidden_size``, by a
    name for errors (``--group-size`` must divide each).
    ``gguf_tensors(model)``: one of its layers' attention tensors as llama.cpp's converters
    store them, ``[(rule class, rows K, columns)]`` (:mod:`moesym.readers.gguf`); None: its
    layers hold the base's.
    ``validate(model, where)``: raise :class:`moesym.errors.SpecError` naming the field where
    the model's fields do not make this variant (a base variant's, on every ModelSpec).
    ``no_cp``: why context parallelism is not modelled for it ("" where it is).
    Kernel shapes travel with the costs: each attention core carries its
    :class:`moesym.terms.cost.AttentionShape` (heads, KV heads, widths, shared KV), which the
    kernel models and the measured tables (:mod:`moesym.kernels`) read.
    """

    name: str
    fields: tuple[str, ...]
    share: Callable[..., Any]
    core: Callable[..., list]
    base: bool = True
    projections: Optional[Callable[..., list]] = None
    elementwise: Optional[Callable[..., Any]] = None
    kv_bytes_per_token_layer: Optional[Callable[..., Any]] = None
    memory: Callable[..., Memory] = lambda model, D, site: Memory()
    layer_count: Optional[Callable[..., Any]] = None
    parse_hf: Callable[..., Mapping[str, Any]] = lambda *a: {}
    extra: Optional[Mapping[str, Any]] = None
    draft_model: Callable[..., Any] = lambda model: model
    weights: Callable[..., Optional[dict]] = _none
    gemm_ks: Callable[..., dict] = lambda model: {}
    params: Callable[..., float] = lambda model: 0
    gguf_tensors: Optional[Callable[..., list]] = None
    kv_elements: Callable[..., int] = lambda model: 0
    validate: Callable[..., None] = lambda model, where: None
    no_cp: str = ""

    def __hash__(self) -> int:
        return hash(self.name)


def layers(model, field: str):
    """The share of ``model``'s layers a count field (``sliding_layers``, ``linear_layers``)
    gives (a SymPy Rational)."""
    import sympy as sp

    return sp.Rational(getattr(model, field), model.num_layers)

