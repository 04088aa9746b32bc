"""The built symbolic step model on disk: a solver that needs the SymPy step (``derive``) loads
it instead of composing it again.

:func:`cached_step` is :func:`moesym.model.step.build_step` through the compiled-model cache
(:mod:`moesym.numeric.cache`), keyed the same way (:func:`moesym.numeric.cache.key_for`: the
package's source, the entry format) with every input of the build in the description: the
model, hardware, deployment and whole workload specs, the files the deployment names
(:func:`moesym.model.predictor.files_of`) and SymPy's version (the entry holds its classes).
The entry is the pickled :class:`~moesym.model.step.StepModel` with the warnings its build gave,
said again when it is read back. SymPy's own pickling rebuilds each node through its
constructor, which re-simplifies maxima (seconds on a step model) and may change them; here a
node comes back as it was stored (its class, arguments in their order and slots), so the loaded
step is the built one, node for node. An entry that cannot be read back is rebuilt; a step that
cannot be pickled is not stored.
"""

from __future__ import annotations

import base64
import io
import pickle
import sys
import warnings
from types import MappingProxyType

import sympy as sp

from ..numeric import cache
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from .step import StepModel, build_step

__all__ = ["cached_step", "step_structure", "dumps", "loads"]

# slots SymPy fills in itself: the hash (salted per process), the arguments, the assumptions
_OWN_SLOTS = frozenset({"_mhash", "_args", "_assumptions", "__weakref__", "__dict__"})
_DEPTH = 20000  # pickle recurses once per level of the expression tree


def step_structure(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> str:
    """What fixes a built step model (the cache key's input): every spec the build reads, the
    whole workload (its numbers are bound in the step's values) and SymPy's version."""
    from .predictor import files_of

    return repr(("step", sp.__version__, model, hw, dep, wl, *files_of(dep)))


def _node(cls, args, state, facts):
    """A SymPy node of class ``cls`` with ``args`` as they were (no constructor, so nothing is
    re-simplified or reordered), the slots its constructor had set and the assumptions SymPy
    had worked out on it (``facts``: SymPy caches each on the node; without them a solver
    asks again what the build already asked)."""
    obj = sp.Basic.__new__(cls, *args)
    for name, value in state:
        setattr(obj, name, value)
    if facts:
        known = cls.default_assumptions.copy()
        known.update(facts)
        obj._assumptions = known
    return obj


def _state(obj: sp.Basic) -> tuple:
    """The slots and attributes of a node beyond SymPy's own (``is_commutative`` of sums,
    products and powers, the argument set of maxima and minima)."""
    out = [(s, getattr(obj, s)) for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
           if s not in _OWN_SLOTS and hasattr(obj, s)]
    out.extend(sorted(getattr(obj, "__dict__", {}).items()))
    return tuple(out)


def _proxy(d: dict) -> MappingProxyType:
    return MappingProxyType(d)


class _Pickler(pickle.Pickler):
    """Stores each distinct SymPy node once (equal nodes shared) as class, arguments and
    slots; read-only mappings as their dict."""

    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self._canon: dict = {}

    def reducer_override(self, obj):
        if isinstance(obj, sp.Basic) and not obj.is_Atom:
            obj = self._canon.setdefault(obj, obj)
            known = obj._assumptions
            facts = None if known is type(obj).default_assumptions else dict(known)
            return _node, (type(obj), obj.args, _state(obj), facts)
        if isinstance(obj, MappingProxyType):
            return _proxy, (dict(obj),)
        return NotImplemented  # atoms (symbols, numbers) pickle as SymPy defines


def _deep(fn, *args):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _DEPTH))
    try:
        return fn(*args)
    finally:
        sys.setrecursionlimit(limit)


def dumps(step: StepModel, caught=()) -> bytes:
    """``step`` (and the warnings ``caught`` building it, as (category, message) pairs) as
    bytes :func:`loads` reads back node for node."""
    f = io.BytesIO()
    _deep(_Pickler(f).dump, (step, tuple(caught)))
    return f.getvalue()


def loads(data: bytes) -> tuple[StepModel, tuple]:
    """The (step, warnings) :func:`dumps` wrote."""
    return _deep(pickle.loads, data)


def cached_step(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> StepModel:
    """``build_step(model, hw, dep, wl)``, read from the disk cache where it was built before;
    the warnings of the build are given either way."""
    key = cache.key_for(step_structure(model, hw, dep, wl))
    payload = cache.load(key)
    got = None
    if payload is not None:
        try:
            got = loads(base64.b64decode(payload["step_pickle"]))
        except Exception:  # noqa: BLE001 - a bad entry is rebuilt, never trusted
            got = None
    if got is None:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            try:
                step = build_step(model, hw, dep, wl)
            except BaseException:
                step = None
                raise
            finally:
                caught = tuple((w.category, str(w.message)) for w in rec)
                if step is None:  # said before the error, as the build said them
                    _warn(caught)
        got = (step, caught)
        try:
            data = dumps(*got)
        except Exception:  # noqa: BLE001 - a step holding something unpicklable is not stored
            data = None
        if data is not None:
            cache.store(key, {"step_pickle": base64.b64encode(data).decode("ascii")})
    step, caught = got
    _warn(caught)
    return step


def _warn(caught) -> None:
    for category, message in caught:
        warnings.warn(message, category, stacklevel=3)
