"""Every SymPy symbol moesym uses, declared once with its assumptions, unit and meaning.

Nothing else in the package creates symbols: cost terms receive these (or plain numbers) as
arguments. Values are bound through ``{symbol: value}`` maps that :func:`check_bindings` checks
against an expression's free symbols.

>>> from moesym.symbolic.symbols import S, describe
>>> S.hidden
d
>>> describe(S.hidden)
'd [elements]: model hidden size'
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

import sympy as sp

from .expr import symbols_of
from .symtab import TABLE

__all__ = ["S", "SymbolInfo", "INFO", "describe", "by_name", "check_bindings", "BindingError"]


@dataclass(frozen=True)
class SymbolInfo:
    name: str
    latex: str
    unit: str
    meaning: str
    kind: str  # 'workload', 'deployment', 'model', 'precision', 'hardware', 'calibration', 'routing'


_TABLE = TABLE

_syms: dict[str, sp.Symbol] = {}
_info: dict[sp.Symbol, SymbolInfo] = {}
for _attr, _name, _unit, _meaning, _kind, _assume in _TABLE:
    _s = sp.Symbol(_name, real=True, **_assume)
    _syms[_attr] = _s
    _info[_s] = SymbolInfo(_attr, _name, _unit, _meaning, _kind)


class _Namespace:
    """Read-only attribute access to the declared symbols (``S.hidden``)."""

    __slots__ = ()

    def __getattr__(self, item: str) -> sp.Symbol:
        try:
            return _syms[item]
        except KeyError:
            raise AttributeError(f"moesym declares no symbol {item!r}") from None

    def __iter__(self):
        return iter(_syms.values())

    def __dir__(self):
        return sorted(_syms)


S = _Namespace()
_by_printed: dict[str, sp.Symbol] = {str(s_): s_ for s_ in _syms.values()}
INFO: Mapping[sp.Symbol, SymbolInfo] = MappingProxyType(_info)


def by_name(name: str) -> sp.Symbol:
    """The symbol declared under attribute ``name`` (``'batch'``) or printed name (``'B'``)."""
    if name in _syms:
        return _syms[name]
    if name in _by_printed:
        return _by_printed[name]
    raise KeyError(f"unknown symbol {name!r}; known: {', '.join(sorted(_syms))}")


def describe(sym: sp.Symbol) -> str:
    info = _info[sym]
    return f"{sym} [{info.unit}]: {info.meaning}"


class BindingError(ValueError):
    """A value map does not match an expression's free symbols."""


def check_bindings(expr: sp.Expr | Iterable[sp.Expr], values: Mapping[sp.Symbol, object],
                   free: Iterable[sp.Symbol] = ()) -> None:
    """Raise :class:`BindingError` if ``values`` plus ``free`` differ from the free symbols.

    >>> from moesym.symbolic.symbols import S, check_bindings
    >>> check_bindings(S.hidden * S.batch, {S.hidden: 7168}, free=[S.batch])
    >>> check_bindings(S.hidden, {S.hidden: 1, S.batch: 2})
    Traceback (most recent call last):
    ...
    moesym.symbolic.symbols.BindingError: stray binding(s) not in the expression: B
    """
    exprs = [expr] if isinstance(expr, sp.Basic) else list(expr)
    needed: set[sp.Symbol] = set()
    for e in exprs:
        needed |= symbols_of(sp.sympify(e))
    given = set(values) | set(free)
    missing = needed - given
    stray = given - needed
    if missing:
        raise BindingError("missing binding(s): " + ", ".join(sorted(map(str, missing))))
    if stray:
        raise BindingError("stray binding(s) not in the expression: " + ", ".join(sorted(map(str, stray))))
