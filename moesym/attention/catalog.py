"""Which attention variants a model runs: :data:`ENTRIES`, data mapping a model's fields to
the variants of :mod:`moesym.attention`.

Each entry is ``(name, applies, module)``: ``applies(model)`` decides from the model's fields,
``module`` (``moesym.attention.<module>``) holds the ``VARIANT``. Base entries (``VARIANT.base``)
are tried in order and the first that applies is the model's own attention; every other entry
that applies takes its share of the layers from it.

Adding a variant: write ``moesym/attention/<name>.py`` defining ``VARIANT`` (one
:class:`moesym.attention.base.AttentionVariant`) and add one line here, or call
:func:`register` (tests, plugins): docs/how-to/add-attention-variant.md.

>>> from moesym.readers.model import load_model
>>> [(v.name, str(s)) for v, s in kinds(load_model("gpt-oss-120b"))]
[('gqa', '1/2'), ('sliding', '1/2')]
>>> [v.name for v, _ in kinds(load_model("deepseek-v3.2"))]
['dsa']
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Callable

from ..errors import SpecError

if TYPE_CHECKING:
    from .base import AttentionVariant

__all__ = ["ENTRIES", "register", "unregister", "registered", "all_variants", "kinds", "base",
           "check", "load"]

#: (name, applies(model), module under moesym.attention): base variants first, in order of
#: precedence; then the variants that take a share of the layers
ENTRIES: list[tuple[str, Callable, str]] = [
    ("compressed", lambda m: m.attention == "compressed", "compressed"),
    ("dsa", lambda m: bool(m.index_topk), "dsa"),
    ("mla", lambda m: m.attention == "mla", "mla"),
    ("gqa", lambda m: m.attention == "gqa", "gqa"),
    ("gdn", lambda m: m.attention != "compressed" and m.linear_layers > 0, "gdn"),
    ("sliding", lambda m: m.attention != "compressed" and not m.index_topk
     and m.sliding_layers > 0, "sliding"),
]

_REGISTERED: dict[str, AttentionVariant] = {}


def load(module: str) -> AttentionVariant:
    """The ``VARIANT`` of ``moesym.attention.<module>``, or a registered variant by name."""
    if module in _REGISTERED:
        return _REGISTERED[module]
    return import_module(f"{__package__}.{module}").VARIANT


def register(variant: AttentionVariant, applies: Callable, before: str | None = None) -> None:
    """Add ``variant`` to the catalog (a plugin or a test): ``applies(model)`` decides which
    models run it. A base variant goes before the entry named ``before`` (default: before
    every built-in base, so it takes precedence); another after every entry."""
    unregister(variant.name)
    _REGISTERED[variant.name] = variant
    entry = (variant.name, applies, variant.name)
    if variant.base:
        names = [e[0] for e in ENTRIES]
        ENTRIES.insert(names.index(before) if before in names else 0, entry)
    else:
        ENTRIES.append(entry)


def unregister(name: str) -> None:
    """Remove the variant registered as ``name`` (nothing if there is none)."""
    if _REGISTERED.pop(name, None) is not None:
        ENTRIES[:] = [e for e in ENTRIES if e[0] != name]


def registered() -> list[AttentionVariant]:
    """The variants added by :func:`register`."""
    return list(_REGISTERED.values())


def all_variants() -> list[AttentionVariant]:
    """Every variant of the catalog, in its order."""
    return [load(mod) for _, _, mod in ENTRIES]


def base(model) -> AttentionVariant:
    """The model's own attention: the first base entry that applies."""
    for _, applies, mod in ENTRIES:
        v = load(mod)
        if v.base and applies(model):
            return v
    raise SpecError(f"model {model.name}: no attention variant applies (attention = "
                    f"{model.attention!r}); see moesym.attention.catalog")


def check(model) -> None:
    """The model's attention, checked: a name the catalog knows and the fields its variant owns
    (each reader runs it on the model it made; the plan's rules on every model they are given)."""
    names = ("gqa", "mla", "compressed") + tuple(v.name for v in registered() if v.base)
    if model.attention not in names:
        raise SpecError(f"model {model.name}: 'attention' must be 'gqa', 'mla' or 'compressed', "
                        f"got {model.attention!r}")
    base(model).validate(model, f"model {model.name}")


def kinds(model) -> list[tuple[AttentionVariant, object]]:
    """``[(variant, share of the layers)]``: the base first with what the others leave (SymPy
    numbers)."""
    import sympy as sp

    others = [load(mod) for _, applies, mod in ENTRIES
              if not load(mod).base and applies(model)]
    shares = [sp.sympify(v.share(model)) for v in others]
    return [(base(model), sp.Integer(1) - sum(shares, sp.Integer(0))), *zip(others, shares)]
