"""Roots of equations over the step model that ``predict`` evaluates, with the closed form of the
regime that holds at the root.

The calibrated kernel model is piecewise in the workload: tile and wave counts are ceilings,
kernels switch between compute- and memory-bound (maxima), and the load-imbalance term changes
form (Piecewise). A root of ``f(x) = 0`` over that model is found in two steps:

1. **Exact root of the full model.** ``f`` is compiled and scanned (every integer for an integer
   unknown such as the batch, a fine geometric grid then Brent's method otherwise): the root is
   the sign change, exactly what evaluating the model (``predict``) at each point would show.
2. **Closed form of the regime.** At the root every ceiling and floor is frozen at its value
   there (the tile and wave counts of that regime), every Max / Min / Piecewise takes its active
   branch, and the smooth remainder is solved symbolically (:func:`~moesym.solve.solve_smooth`).
   When that root lies in the regime it equals the exact root (``kind = "smooth"``). When the
   sign change happens at a step instead (a tile or wave count, or a Piecewise condition,
   changes between the two sides), the closed form is where that step happens: the solution of
   ``argument = boundary`` (``kind = "step"``). When neither applies the exact root stands
   alone and the note says why (``kind = "numeric"``).

>>> x = sp.Symbol("x", positive=True)
>>> r = model_root(sp.ceiling(x / 4) * 10 - 25, x, {}, 1, 64, integer=True)
>>> r.kind, r.exact, r.value  # 10 ceiling(x/4) reaches 25 when x/4 passes 2: at x = 9
('step', 9.0, 8.0)
>>> model_root(3 * x - 20 + sp.Max(x, 4), x, {}, 1.0, 100.0).value  # 4x = 20 in the x >= 4 regime
5.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

from ..errors import MoesymError
from ..symbolic.compile import evaluate, evaluate_many, evaluate_on
from ..symbolic.expr import dependents, nodes, restrict, substitute, substituter, symbols_of
from .regimes import branch_at, solve_smooth

__all__ = ["ModelRoot", "first_change", "model_root", "nearest_sign_change", "sign_changes",
           "stationary_form", "steps_of"]

_GRID = 4096  # points of the geometric scan of a continuous unknown
_MAX_INTEGERS = 1 << 20  # widest integer scan
_FIRST_CHUNK = 2048  # integers in the first chunk of a scan that may stop early
_TOL = 1e-9  # the relative tolerance moesym.kernels.analytical applies inside ceilings


@dataclass(frozen=True)
class ModelRoot:
    """A root of an equation over the full model and the closed form of its regime.

    ``exact``: the root of the full model (for an integer unknown, the integer past the sign
    change on the side the caller asked for); ``bracket``: the two points around the sign
    change; ``expr`` / ``value``: the closed form of the regime at the root and its number
    (None when there is none); ``kind``: ``smooth``, ``step`` or ``numeric`` (module docstring);
    ``steps``: the frozen tile / wave counts of the regime, by readable argument;
    ``regime``: labels of the active Max / Min / Piecewise branches; ``condition``: where the
    closed form's regime holds (in the unknown); ``note``: how the closed form relates to the
    exact root.
    """

    variable: sp.Symbol
    exact: float
    bracket: tuple[float, float]
    expr: sp.Expr | None
    value: float | None
    kind: str
    regime: tuple[str, ...]
    condition: sp.Basic
    note: str


def _bound(exprs, var: sp.Symbol, values: Mapping) -> dict:
    """``values`` of the symbols of ``exprs`` other than ``var``; raises naming any unbound."""
    used = frozenset().union(*map(symbols_of, exprs))
    vals = {k: v for k, v in values.items() if k != var and k in used}
    missing = used - set(vals) - {var}
    if missing:
        raise MoesymError(f"no value bound for {', '.join(sorted(map(str, missing)))}")
    return vals


def _evaluator(eq: sp.Expr, var: sp.Symbol, values: Mapping):
    vals = _bound((eq,), var, values)
    return lambda x: evaluate(eq, vals, {var: np.asarray(x, dtype=float)})


def _brackets(eq, var, values, lo, hi, integer, scale, until=None) -> tuple:
    """(f, [(a, b, f(a) > 0)]): the function scanned and the grid cells where its side changes
    (:func:`sign_changes`' scan, before bisection). With ``until`` (integer scans of every
    integer), the scan runs over the integers in chunks (2048, then 8 times more each time,
    the last finite point of one joined to the next) and stops after the first chunk with a
    cell whose bracket ``(a, b)`` has ``until(f, a, b)``."""
    if scale is None:
        f = _evaluator(eq, var, values)
    else:  # the two in one function: the scale (compute time) is most of the equation's graph
        vals = _bound((eq, scale), var, values)

        def f(x):
            y, s = (np.asarray(v, dtype=float) for v in evaluate_on((eq, scale), vals, var, x))
            return np.broadcast_to(y - 1e-9 * np.abs(s), np.shape(x)).copy()
    if integer:
        lo, hi = int(np.ceil(lo)), int(np.floor(hi))
        if until is not None and hi - lo + 1 <= _MAX_INTEGERS:
            cells, start, width, last = [], lo, _FIRST_CHUNK, (np.empty(0), np.empty(0))
            while start <= hi:
                end = min(hi, start + width - 1)
                xs, ys = _finite(f, np.arange(start, end + 1, dtype=float))
                # the last finite point of the chunk before joins this one's first
                part = _cells(np.concatenate([last[0], xs]), np.concatenate([last[1], ys]))
                cells += part
                if any(until(f, *_refine(f, a, b, fa, True)) for a, b, fa in part):
                    break
                if len(xs):
                    last = (xs[-1:], ys[-1:])
                start, width = end + 1, width * 8
            return f, cells
        if hi - lo + 1 <= _MAX_INTEGERS:
            xs = np.arange(lo, hi + 1, dtype=float)
        else:  # a geometric grid of integers; each bracket is bisected to adjacent integers
            xs = np.unique(np.round(np.geomspace(max(lo, 1), hi, _MAX_INTEGERS // 16)))
    else:
        xs = np.geomspace(lo, hi, _GRID) if lo > 0 else np.linspace(lo, hi, _GRID)
    return f, _cells(*_finite(f, xs))


def _finite(f, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points of ``xs`` where ``f`` is finite, and its values there."""
    ys = f(xs)
    ok = np.isfinite(ys)
    return xs[ok], ys[ok]


def _cells(xs: np.ndarray, ys: np.ndarray) -> list:
    """[(a, b, f(a) > 0)] of the consecutive points where the side of zero changes."""
    side = ys > 0
    idx = np.flatnonzero(side[1:] != side[:-1])
    return [(float(xs[i]), float(xs[i + 1]), side[i]) for i in idx]


def _refine(f, a: float, b: float, fa, integer: bool) -> tuple[float, float]:
    """A grid cell with a side change bisected to adjacent integers, or to 1e-12 relative."""
    if integer:  # bisect to adjacent integers
        while b - a > 1:
            m = float(np.floor(0.5 * (a + b)))
            if (float(f(m)) > 0) == fa:
                a = m
            else:
                b = m
    else:  # bisect to a bracket 1e-12 wide (Brent needs continuity; this not)
        for _ in range(200):
            m = 0.5 * (a + b)
            if (float(f(m)) > 0) == fa:
                a = m
            else:
                b = m
            if b - a <= 1e-12 * max(abs(a), abs(b), 1e-300):
                break
    return a, b


def sign_changes(eq: sp.Expr, var: sp.Symbol, values: Mapping, lo: float, hi: float,
                 integer: bool = False, scale: sp.Expr | None = None,
                 until=None) -> list[tuple[float, float]]:
    """Brackets ``(a, b)`` with ``f(a)`` and ``f(b)`` on opposite sides of zero, scanning
    [lo, hi] (every integer, or a geometric grid refined by bisection to 1e-12 relative); NaN
    points are skipped. The upper side is ``f > 0``, or ``f > 1e-9 |scale|`` with a ``scale``
    expression (for a side that is zero over a range: exposed communication, say).

    ``until(f, a, b)``: for a caller that wants the brackets only up to the first one it
    accepts (an integer scan; ``f`` is the scanned function): the scan stops in the chunk
    where that one is found (:func:`_brackets`), the brackets after it may be missing."""
    f, cells = _brackets(eq, var, values, lo, hi, integer, scale, until)
    return [_refine(f, a, b, fa, integer) for a, b, fa in cells]


def first_change(f, a: float, b: float) -> bool:
    """:func:`sign_changes`' ``until`` for a caller that uses only the first sign change."""
    return True


def nearest_sign_change(eq: sp.Expr, var: sp.Symbol, values: Mapping, lo: float, hi: float,
                        near: float, scale: sp.Expr | None = None) -> tuple[float, float] | None:
    """The bracket of :func:`sign_changes` (continuous ``var``, the upper side past ``1e-9
    |scale|`` with a ``scale``) whose upper end is nearest ``near`` in ratio, or None: only the
    cells that can hold it are bisected (a relaxed model whose side flickers near zero has
    hundreds of sign changes, each 200 bisection steps)."""
    f, cells = _brackets(eq, var, values, lo, hi, False, scale)
    if not cells:
        return None
    dist = lambda ab: abs(np.log(ab[1] / near))  # noqa: E731
    if near <= 0 or cells[0][0] <= 0:  # no ratio bound: every cell bisected
        return min((_refine(f, a, b, fa, False) for a, b, fa in cells), key=dist)

    def bound(c) -> float:  # the least distance of any upper end inside the cell
        return 0.0 if c[0] < near <= c[1] else min(dist((0, c[0])), dist((0, c[1])))

    refined, best = {}, float("inf")
    for i in sorted(range(len(cells)), key=lambda i: bound(cells[i])):
        if bound(cells[i]) > best:
            break
        refined[i] = _refine(f, *cells[i], False)
        best = min(best, dist(refined[i]))
    return min((refined[i] for i in sorted(refined)), key=dist)


def steps_of(expr: sp.Basic, var: sp.Symbol) -> list[sp.Basic]:
    """Every ceiling / floor node of ``expr`` that depends on ``var``."""
    dep = dependents(expr, var)
    return nodes(expr, lambda e: isinstance(e, (sp.ceiling, sp.floor)) and e in dep)


def _step_values(steps: Sequence[sp.Basic], var, values, x: float) -> dict:
    """Each step node's value at ``var = x`` (as the compiled model computes it)."""
    ys = evaluate_many([n.args[0] for n in steps], values, var, x)
    return {n: float(np.ceil(y) if isinstance(n, sp.ceiling) else np.floor(y))
            for n, y in zip(steps, ys)}


def _freeze(expr, step_vals: Mapping) -> sp.Expr:
    return substitute(expr, {n: sp.Integer(int(v)) for n, v in step_vals.items()})


def _clean(expr: sp.Expr) -> sp.Expr:
    """Drop the 1 -+ 1e-9 factors the kernel model puts inside its ceilings (exact counts
    computed in floating point) from a displayed closed form."""
    return substitute(expr, {sp.Float(1 - _TOL): sp.Integer(1), sp.Float(1 + _TOL): sp.Integer(1)})


def _number(expr: sp.Expr, values: Mapping) -> float:
    """``expr`` at ``values``: SymPy's number where the substitution leaves one; where exact
    irrationals stay inside ceilings (``sqrt(2)`` of a load-imbalance constant), the compiled
    NumPy value, as the model is evaluated (SymPy's ``evalf`` of nested ceilings evaluates the
    inner ones again at each precision it tries: 13-25 s on one closed form of a DeepSeek-V3
    step). A complex root is an error."""
    v = substitute(expr, {k: sp.Float(x) for k, x in values.items()})
    if not v.is_Number and nodes(v, lambda e: isinstance(e, (sp.ceiling, sp.floor))):
        r = float(evaluate(v, {}, {}))
        if not np.isfinite(r):
            raise ValueError("complex root")
        return r
    c = complex(v.evalf())
    if abs(c.imag) > 1e-9 * max(1.0, abs(c.real)):
        raise ValueError("complex root")
    return c.real


def _piecewise_switch(eq, var, vals, a, b):
    """(boundary equation, label) of the first Piecewise condition on ``var`` whose active
    piece differs between a and b, or None."""
    dep = dependents(eq, var)
    # one substitution per side, remembered across the conditions (they share subexpressions)
    at = {x: substituter({**{k: sp.Float(v) for k, v in vals.items()}, var: sp.Float(x)})
          for x in (a, b)}
    for p in nodes(eq, lambda e: isinstance(e, sp.Piecewise) and e in dep):
        def active(x):
            for i, (_, c) in enumerate(p.args):
                cv = at[x](c)
                if cv in (sp.true, True) or (cv not in (sp.false, False) and bool(cv)):
                    return i
            return None

        ia, ib = active(a), active(b)
        if ia != ib and ia is not None:
            c = p.args[min(ia, ib)][1]
            if isinstance(c, sp.core.relational.Relational) and c.has(var):
                return c.lhs - c.rhs, f"piecewise: {c}"
    return None


_SAMPLES = 1025  # points of the interval scanned by _jumps_across
_MARGIN = 1e3  # how far above the zero tolerance every sampled |f| must stay
_ZERO = 1e-7  # |f| <= _ZERO x (the larger |f| of the two sides): the full model is at zero


def _jumps_across(f, a: float, b: float, tol: float) -> bool:
    """Whether ``f`` changes sign between ``a`` and ``b`` only by a jump (a tile, wave or
    Piecewise step) and stays far from zero everywhere else: sampled at 1025 points, every
    ``|f|`` is above ``1000 tol``, with one side change whose two sides, bisected to 1e-12
    apart, are both above it too. Then no point of [a, b] has ``|f| <= tol``, so no regime's
    smooth root can be a root of the full model there (:func:`closed_form_at`'s test), and its
    symbolic solves on the two sides can be skipped. Continuous pieces of the step model are
    rational in the unknown with a curvature of order ``|f| / x^2``: to reach ``tol`` between
    two samples 1/1024 apart, one would have to fall by 999 ``tol`` and come back within them.
    Anything less clear (a near-zero sample, several side changes, a small jump) is False: the
    full test runs."""
    xs = np.linspace(a, b, _SAMPLES)
    ys = np.asarray(f(xs), dtype=float)
    if not np.all(np.isfinite(ys)) or np.min(np.abs(ys)) <= _MARGIN * tol:
        return False
    side = ys > 0
    cells = np.flatnonzero(side[1:] != side[:-1])
    if len(cells) != 1:
        return False
    i = int(cells[0])
    lo, hi = _refine(f, float(xs[i]), float(xs[i + 1]), bool(side[i]), False)
    return min(abs(float(f(lo))), abs(float(f(hi)))) > _MARGIN * tol


def _regime_root(eq, var, vals, f, a, b, exact, integer, steps, tried) -> ModelRoot | None:
    """The closed form of the regime on either side of the bracket when its smooth root is a
    root of the full model (``kind = "smooth"``), else None with why appended to ``tried``."""
    scale = max(abs(float(f(a))), abs(float(f(b))), 1e-300)
    for point in (b, a) if integer else (0.5 * (a + b),):
        sv = _step_values(steps, var, vals, point)
        frozen = _freeze(eq, sv)
        try:
            smooth, cond, labels = branch_at(frozen, var, {**vals, var: point}, lazy=True)
            root = solve_smooth(smooth, var, vals, point, general=False)
            value = _number(root, vals)
        except (NotImplementedError, ValueError, TypeError, RuntimeError) as exc:
            tried.append(f"no closed form of the regime at {point:.6g} ({exc})")
            continue
        # the regime's root counts when the full model is at zero there
        if integer:  # the regime's root must be a root of the full model in the bracket
            inside = a - 1e-9 * max(1.0, abs(a)) <= value <= b + 1e-9 * max(1.0, abs(b))
            holds = inside and abs(float(f(value))) <= _ZERO * scale + 1e-15
        else:  # the bracket is 1e-12 wide: the regime's root must fall inside it
            holds = abs(value - exact) <= 1e-6 * max(abs(exact), 1e-300)
        if holds:
            try:  # the regime's condition, built only for the root that holds
                cond = cond()
            except (NotImplementedError, ValueError, TypeError, RuntimeError) as exc:
                tried.append(f"no closed form of the regime at {point:.6g} ({exc})")
                continue
            clean = _clean(root)
            return ModelRoot(var, exact, (a, b), clean, _number(clean, vals), "smooth",
                             labels, cond, "the closed form of the regime is the full model's root")
        tried.append(f"the regime's own root {value:.6g} lies outside it")
    return None


def _step_root(eq, var, vals, a, b, exact, steps) -> ModelRoot | None:
    """The closed form of the step between the bracket's two sides (a tile / wave count or a
    Piecewise condition that changes there, ``kind = "step"``), else None."""
    sa, sb = _step_values(steps, var, vals, a), _step_values(steps, var, vals, b)
    mid = 0.5 * (a + b)
    for n in steps:
        if sa[n] == sb[n]:
            continue
        boundary = min(sa[n], sb[n]) if isinstance(n, sp.ceiling) else max(sa[n], sb[n])
        # the count's argument, with the counts inside it at their values past the step
        arg = _freeze(n.args[0], _step_values(steps_of(n.args[0], var), var, vals, b))
        try:
            root = solve_smooth(arg - boundary, var, vals, mid, general=False)
            value = _number(root, vals)
        except (NotImplementedError, ValueError, TypeError, RuntimeError):
            continue
        if a - 1e-6 * max(1.0, abs(a)) <= value <= b + 1e-6 * max(1.0, abs(b)):
            clean = _clean(root)
            label = f"{'ceiling' if isinstance(n, sp.ceiling) else 'floor'} step to " \
                    f"{int(sb[n])}"
            return ModelRoot(var, exact, (a, b), clean, _number(clean, vals), "step",
                             (label,), sp.true,
                             f"the sign change is a step of the model ({label}): the "
                             "closed form is where that count changes")
    sw = _piecewise_switch(eq, var, vals, a, b)
    if sw is not None:
        g, label = sw
        try:
            root = solve_smooth(g, var, vals, mid, general=False)
            value = _number(root, vals)
            if a - 1e-6 * max(1.0, abs(a)) <= value <= b + 1e-6 * max(1.0, abs(b)):
                clean = _clean(root)
                return ModelRoot(var, exact, (a, b), clean, _number(clean, vals),
                                 "step", (label,), sp.true,
                                 f"the sign change is where the model changes form ({label})")
        except (NotImplementedError, ValueError, TypeError, RuntimeError):
            pass
    return None


def bracket_of(a: float, b: float) -> tuple[float, float]:
    return (a, b)


def closed_form_at(eq: sp.Expr, var: sp.Symbol, values: Mapping, bracket: tuple[float, float],
                   exact: float, integer: bool = False) -> ModelRoot:
    """The closed form of the regime at the sign change ``bracket`` of ``eq`` (see the module
    docstring); ``exact`` is reported as the full model's root.

    The regime's smooth root is tried first, on either side; then the step between them. When
    the full model jumps across zero inside an integer bracket (:func:`_jumps_across`), no
    regime's root can hold there, so the step is looked for first and the two symbolic solves
    run only if it is not found (for the note)."""
    a, b = bracket
    vals = restrict(values, eq, var)
    steps = steps_of(eq, var)
    f = _evaluator(eq, var, vals)
    stepped = integer or b - a <= 1e-9 * max(1.0, abs(b))
    jump = integer and _jumps_across(f, a, b, _ZERO * max(abs(float(f(a))), abs(float(f(b))),
                                                          1e-300) + 1e-15)
    if jump:
        found = _step_root(eq, var, vals, a, b, exact, steps)
        if found is not None:
            return found
    tried: list[str] = []
    found = _regime_root(eq, var, vals, f, a, b, exact, integer, steps, tried)
    if found is None and stepped and not jump:
        found = _step_root(eq, var, vals, a, b, exact, steps)
    if found is not None:
        return found
    return ModelRoot(var, exact, bracket, None, None, "numeric", (), sp.true,
                     "exact root of the full model only: " + "; ".join(tried or ["no regime"]))


def model_root(eq: sp.Expr, var: sp.Symbol, values: Mapping, lo: float, hi: float,
               integer: bool = False, which: str = "first") -> ModelRoot:
    """The root of ``eq = 0`` in [lo, hi] over the full model and the closed form of its regime.

    ``which``: ``first`` (the sign change nearest ``lo``) or ``last``. For an integer unknown
    ``exact`` is the first integer past the sign change (the side where ``f`` has left the sign
    it had at the bracket's lower end).
    """
    found = sign_changes(eq, var, values, lo, hi, integer,
                         until=first_change if which == "first" else None)
    if not found:
        raise MoesymError(f"no root in {var} between {lo:g} and {hi:g}")
    a, b = found[0] if which == "first" else found[-1]
    exact = b if integer else 0.5 * (a + b)
    return closed_form_at(eq, var, values, (a, b), exact, integer)


def stationary_form(term: sp.Expr, var: sp.Symbol, values: Mapping, x: float,
                    integer: bool = False) -> tuple:
    """The closed form of where ``term`` is smallest, at the full model's interior minimum
    ``x``: (expression or None, its number or None, kind, a note). A stationary point of the
    regime that holds at ``x`` (the root of its derivative, tile and wave counts frozen at
    ``x``) when it lands on ``x`` (within one for an integer unknown); otherwise the minimum
    sits at a kink or step of the model and there is none."""
    try:
        sv = _step_values(steps_of(term, var), var, values, x)
        branch, _, _ = branch_at(_freeze(term, sv), var, {**values, var: x})
        cand = solve_smooth(sp.diff(branch, var), var, values, x, general=False)
        cv = float(substitute(cand, {k: sp.Float(v) for k, v in values.items()}).evalf())
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
        return None, None, "numeric", f"no closed form of the regime's stationary point ({exc})"
    if abs(cv - x) <= 1e-6 * max(1.0, abs(x)) + (1.0 if integer else 0.0):
        return _clean(cand), cv, "smooth", "a stationary point of the regime at the minimum"
    return (None, None, "numeric",
            "the minimum is at a kink or step of the model, not a stationary point")
