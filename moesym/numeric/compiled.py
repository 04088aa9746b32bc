"""Compiled models as plain data: generated NumPy source and what its functions take and return.

:func:`moesym.symbolic.compile.numpy_source` writes the source (it needs SymPy); this module runs it (it
does not): a :class:`CompiledModel` can come from a fresh build or from the disk cache
(:mod:`moesym.numeric.cache`) and behaves the same either way.

>>> src = "def f0(a0, a1):\\n    a0 = _np.asarray(a0, dtype=float)\\n    return (a0 * a1,)"
>>> cm = CompiledModel(src, ({"fn": "f0", "args": ["B", "d"], "outputs": ["x"],
...                           "static": {"d": 2.0}},))
>>> float(cm.evaluate(0, {"B": 3.0})["x"])
6.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from .cache import code
from .special import DISTINCT_FUNCTIONS, NUMPY_FUNCTIONS

__all__ = ["CompiledModel", "function_from_source", "lambertw_real"]


def lambertw_real(x):
    """Principal-branch Lambert W on real arguments >= -1/e (where it is real), as floats."""
    from scipy.special import lambertw

    w = lambertw(x)
    return np.where(np.asarray(x) >= -np.exp(-1.0), np.real(w), np.nan)


def _namespace(source: str) -> dict:
    ns = {"_np": np, "_nan": np.nan, "_inf": np.inf, "_lambertw_real": lambertw_real}
    ns.update(NUMPY_FUNCTIONS)
    ns.update({f"_d_{k}": f for k, f in DISTINCT_FUNCTIONS.items()})
    if "_sps." in source:
        from scipy import special

        ns["_sps"] = special
    return ns


def function_from_source(source: str, name: str = "f") -> Callable:
    """Execute generated source and return its function ``name``, run with NumPy's floating-point
    warnings off (Piecewise branches are all evaluated; unused ones may divide by zero)."""
    return _functions(source, (name,))[0]


def _functions(source: str, names, keep: bool = False) -> list[Callable]:
    """The functions ``names`` of ``source``; ``keep``: its bytecode kept in the disk cache
    (:func:`moesym.numeric.cache.code`: a compiled model's source, compiled again by every
    process that loads it)."""
    ns = _namespace(source)
    if keep:
        compiled = code(source, "<moesym generated>")
    else:
        compiled = compile(source, "<moesym generated>", "exec")
    exec(compiled, ns)  # noqa: S102 - moesym's own output
    out = []
    for name in names:
        raw = ns[name]

        def fn(*a, _raw=raw):
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return _raw(*a)

        out.append(fn)
    return out


@dataclass
class CompiledModel:
    """Generated source and, per function, its argument names (printed symbol names), output
    names and the numbers fixed at build time (``static``). ``warnings``: what building it
    warned, replayed when it is loaded from the cache."""

    source: str
    parts: tuple[dict, ...]
    warnings: tuple[str, ...] = ()
    per_ep: dict = field(default_factory=dict)  # EP -> {name: value} of EP-dependent numbers
    _fns: list | None = field(default=None, repr=False, compare=False)

    def ep_values(self, ep: int) -> dict:
        """Numbers that depend on the EP degree (bound per EP when one model serves several),
        e.g. group-limited routing's variance factor; empty where none do."""
        return dict(self.per_ep.get(int(ep), {}))

    def function(self, i: int) -> Callable:
        if self._fns is None:
            self._fns = _functions(self.source, [p["fn"] for p in self.parts], keep=True)
        return self._fns[i]

    def evaluate(self, i: int, values: Mapping[str, object]) -> dict:
        """Outputs of function ``i`` by name; ``values`` (by printed name) complete or override
        its static numbers. Arrays broadcast."""
        part = self.parts[i]
        env = {**part["static"], **values}
        missing = [a for a in part["args"] if a not in env]
        if missing:
            raise ValueError("missing value(s) for: " + ", ".join(missing))
        out = self.function(i)(*(env[a] for a in part["args"]))
        return dict(zip(part["outputs"], out))

    def to_payload(self) -> dict:
        return {"source": self.source, "parts": list(self.parts), "warnings": list(self.warnings),
                "per_ep": {str(k): v for k, v in self.per_ep.items()}}

    @classmethod
    def from_payload(cls, payload: Mapping) -> CompiledModel:
        parts = tuple({"fn": str(p["fn"]), "args": [str(a) for a in p["args"]],
                       "outputs": [str(o) for o in p["outputs"]],
                       "static": {str(k): float(v) for k, v in p["static"].items()}}
                      for p in payload["parts"])
        per_ep = {int(k): {str(n): float(x) for n, x in v.items()}
                  for k, v in payload.get("per_ep", {}).items()}
        cm = cls(str(payload["source"]), parts, tuple(str(w) for w in payload["warnings"]), per_ep)
        cm.function(0)  # a source that does not compile is a corrupt entry: fail here
        return cm
