"""SymPy helpers every stage may import: maximum and minimum that stay flat and cheap to build
(``smax``, ``smin``), substitution and transforms over the shared expression graph (each
subexpression rebuilt once), dependency queries. Nothing here knows about MoE.

>>> from moesym.symbolic.expr import smax
>>> from moesym.symbolic.symbols import S
>>> smax(S.batch, smax(S.batch, 1))
Max(1, B)
"""

from __future__ import annotations

from functools import cmp_to_key, lru_cache

import sympy as sp

__all__ = ["nonnegative", "smax", "smin", "power", "sum_or_product", "rebuild", "transform",
           "substitute", "substituter", "nodes", "dependents", "symbols_of", "restrict", "depends",
           "sym"]


def _flat(cls, args) -> list:
    out: list = []
    for a in args:
        a = sym(a)
        out.extend(a.args if a.func is cls else (a,))
    return out


def _extremum(cls, pick, args) -> sp.Expr:
    """``cls`` (Max or Min) of ``args`` without SymPy's pairwise simplification (its
    ``_find_localzeros`` dominates building a kernel-model step): nested calls are flattened,
    numbers folded into one, repeated arguments dropped; only the numeric constant is compared,
    and against a symbolic argument only when that argument's sign settles it."""
    xs = _flat(cls, args)
    nums = [a for a in xs if a.is_Number]
    rest = list(dict.fromkeys(a for a in xs if not a.is_Number))
    if nums:
        c = pick(nums)
        # the constant loses to every other argument only where each provably beats it; cheap
        # for the zero floors the terms use (Max(0, x) with x >= 0)
        if not (rest and c == 0 and cls is sp.Max and all(map(nonnegative, rest))):
            rest.append(c)
    if not rest:
        return sp.Integer(0)
    if len(rest) == 1:
        return rest[0]
    if all(a.is_Atom or all(b.is_Atom for b in a.args) for a in rest):
        return cls(*rest, evaluate=False)  # SymPy's canonical order: cheap for shallow args
    # deep arguments (nested schedules): SymPy's ordering counts tree nodes, exponential in the
    # nesting depth of a shared graph; keep the (deterministic) order the terms were built in
    obj = sp.Expr.__new__(cls, *rest)
    obj._argset = frozenset(rest)
    return obj


@lru_cache(maxsize=65536)
def nonnegative(e: sp.Basic) -> bool:
    """True where ``e`` is provably >= 0 from its structure alone: numbers >= 0, symbols declared
    non-negative, and sums, products, powers, maxima, minima, ceilings and floors of such (a
    cheap sufficient test; SymPy's assumption system answers more but costs seconds on a step
    model). False means "not shown", never "negative".

    >>> from moesym.symbolic.symbols import S
    >>> nonnegative(S.batch * sp.ceiling(S.hidden / 64) + 1), nonnegative(S.batch - 1)
    (True, False)
    """
    if e.is_Number:
        return bool(e >= 0)
    if e.is_Symbol:
        return bool(e.is_nonnegative)
    if e.is_Add or e.is_Mul or isinstance(e, (sp.Min, sp.ceiling, sp.floor)):
        return all(map(nonnegative, e.args))
    if e.is_Pow:
        return nonnegative(e.args[0]) and e.args[1].is_real is True
    if isinstance(e, sp.Max):
        return any(map(nonnegative, e.args))
    if isinstance(e, sp.exp):
        return e.args[0].is_real is True
    return False


def smax(*args) -> sp.Expr:
    """Max without SymPy's pairwise simplification (see :func:`_extremum`).

    >>> from moesym.symbolic.symbols import S
    >>> smax(S.batch, 0), smax(2, 3), smax(S.batch, smax(S.tokens, 1), 4)
    (B, 3, Max(4, B, T))
    """
    return _extremum(sp.Max, max, args)


def smin(*args) -> sp.Expr:
    """Min without SymPy's pairwise simplification (see :func:`_extremum`)."""
    return _extremum(sp.Min, min, args)


def rebuild(e: sp.Basic, args: tuple) -> sp.Basic:
    """``e.func(*args)`` without SymPy's re-simplification of maxima, minima and symbolic
    ceilings / floors (see :func:`substitute`)."""
    if args == e.args:
        return e
    if e.func is sp.Max:
        return smax(*args)
    if e.func is sp.Min:
        return smin(*args)
    if e.func in (sp.ceiling, sp.floor):
        return e.func(args[0]) if args[0].is_Number else e.func(args[0], evaluate=False)
    if e.func is sp.Pow:
        return power(*args)
    if e.func in (sp.Add, sp.Mul):
        return sum_or_product(e.func, args)
    return e.func(*args)


def _direct(base: sp.Basic, exp: sp.Basic) -> bool:
    """``base ** exp`` is a power :func:`power` builds directly: a symbolic, infinity-free sum
    raised to a rational other than 0 and 1."""
    return base.is_Add and exp.is_Rational and exp not in (0, 1) and not base.is_number \
        and _finite(base)


class _Fallback(Exception):
    pass


_ORDER = cmp_to_key(sp.Basic.compare)  # the canonical order of Add's and Mul's arguments


def sum_or_product(cls, args) -> sp.Expr:
    """``cls(*args)`` for ``cls`` Add or Mul, equal to SymPy's own result, without SymPy asking
    whether the terms of a sum are infinite each time it rebuilds a power of that sum (a
    two-term sum raised to -1 inside a product: on a closed form of a DeepSeek-V3 step,
    seconds of assumption queries to learn nothing, see :func:`power`).

    Each sum that is the base of such a power where SymPy's flattening rebuilds it (an
    argument, a factor of a product argument, a term or a term's factor of a sum argument) is
    stood in for by a symbol while SymPy combines the arguments; the powers of the sums are
    then put back as :func:`power` builds them, with the arguments of each rebuilt sum and
    product in SymPy's canonical order. SymPy builds ``cls(*args)`` itself where a stand-in
    could meet its sum in another form (a product holding the sum itself, or the sum raised
    to a power not stood in for) or would come back with exponent 1.

    >>> from moesym.symbolic.symbols import S
    >>> a, b = S.batch, S.hidden
    >>> sum_or_product(sp.Mul, (2, 1 / (a + b), a)) == sp.Mul(2, 1 / (a + b), a)
    True
    """
    stand: dict = {}
    seen: list = []  # the other factors of a product (their bases must not be stood in for)

    def hide(x):
        if x.is_Pow and _direct(x.base, x.exp):
            d = stand.get(x.base)
            if d is None:
                d = stand[x.base] = sp.Dummy()
            return sp.Pow(d, x.exp)
        seen.append(x)
        return x

    def factors(x):  # a product with its powers of sums stood in for
        parts = [hide(f) for f in x.args]
        return x.func(*parts) if any(p is not f for p, f in zip(parts, x.args)) else x

    def terms(x):  # a sum with its powers of sums (terms or a term's factors) stood in for
        parts = [hide(t) if t.is_Pow else factors(t) if t.is_Mul else t for t in x.args]
        return x.func(*parts) if any(p is not t for p, t in zip(parts, x.args)) else x

    args = [sym(a) for a in args]
    if cls is sp.Mul:
        hidden = [factors(a) if a.is_Mul else hide(a) for a in args]
        if not stand or any(f.as_base_exp()[0] in stand for f in seen):
            return cls(*args)
    else:
        hidden = [factors(a) if a.is_Mul else terms(a) if a.is_Add else
                  hide(a) if a.is_Pow else a for a in args]
        if not stand:
            return cls(*args)
    base = {d: b for b, d in stand.items()}

    def back(x):
        if x in base:
            raise _Fallback
        if x.is_Pow and x.base in base:
            return power(base[x.base], x.exp)
        if x.is_Mul or x.is_Add:
            parts = [back(p) for p in x.args]
            if all(p is q for p, q in zip(parts, x.args)):
                return x
            head = [p for p in parts if p.is_Number]
            return x.func._from_args(head + sorted((p for p in parts if not p.is_Number),
                                                   key=_ORDER))
        return x

    try:
        return back(cls(*hidden))
    except _Fallback:
        return cls(*args)


def power(base, exp) -> sp.Expr:
    """``base ** exp``. A symbolic sum free of infinities raised to a rational power other than
    0 and 1 is built as SymPy would build it (its ``Add._eval_power`` has nothing for such a
    sum) without first asking each of the sum's terms whether it is infinite: on the square
    root of a solved quadratic's large discriminant, that question was most of a regime
    form's time.

    >>> from moesym.symbolic.symbols import S
    >>> power(S.batch + S.tokens, sp.S.Half) == sp.sqrt(S.batch + S.tokens)
    True
    """
    base, exp = sym(base), sym(exp)
    if _direct(base, exp):
        return sp.Pow(base, exp, evaluate=False)
    return sp.Pow(base, exp)


_INFINITE = (sp.S.Infinity, sp.S.NegativeInfinity, sp.S.ComplexInfinity, sp.S.NaN)


@lru_cache(maxsize=65536)
def _finite(e: sp.Basic) -> bool:
    """No infinity or NaN anywhere in ``e`` (then no term of it is infinite)."""
    return e not in _INFINITE and all(map(_finite, e.args))


def transform(expr: sp.Basic, fn) -> sp.Basic:
    """Bottom-up rewrite: every node is rebuilt from its rewritten arguments (:func:`rebuild`)
    and then passed through ``fn`` (return the node unchanged to keep it). Shared
    subexpressions are visited once."""
    memo: dict = {}

    def go(e):
        if e in memo:
            return memo[e]
        out = fn(e if e.is_Atom else rebuild(e, tuple(go(a) for a in e.args)))
        memo[e] = out
        return out

    return go(sp.sympify(expr))


def substitute(expr: sp.Basic, mapping) -> sp.Basic:
    """``expr.xreplace(mapping)`` that rebuilds maxima and minima with :func:`smax` /
    :func:`smin` and symbolic ceilings / floors unevaluated: SymPy's own rebuild re-simplifies
    every Max it touches (minutes on a step model). Shared subexpressions are rebuilt once.

    >>> from moesym.symbolic.symbols import S
    >>> substitute(smax(S.batch, 2 * S.tokens), {S.tokens: 3})
    Max(6, B)
    """
    if not dict(mapping):
        return expr
    return substituter(mapping)(sp.sympify(expr))


def substituter(mapping):
    """:func:`substitute` as a function of the expression, remembering every subexpression it
    rebuilt across calls (several expressions over one shared graph, one mapping)."""
    memo = {sp.sympify(k): sp.sympify(v) for k, v in dict(mapping).items()}
    floats = any(isinstance(k, sp.Float) for k in memo)  # else a Float is never looked up

    def go(e):
        if not floats and isinstance(e, sp.Float):
            return e
        if e in memo:
            return memo[e]
        if e.is_Atom:
            return e
        out = rebuild(e, tuple(go(a) for a in e.args))
        memo[e] = out
        return out

    return go


def nodes(expr: sp.Basic, test) -> list[sp.Basic]:
    """Every unique node of ``expr`` for which ``test`` holds, each before the nodes inside it
    (a topological order of the shared graph: SymPy's tree walks, ``atoms``, ``has`` and
    ``preorder_traversal``, visit a shared subexpression once per path to it, exponentially
    often on a large model)."""
    order, seen, floats, stack = [], set(), set(), [(sp.sympify(expr), False)]
    while stack:
        e, done = stack.pop()
        if done:
            order.append(e)
            continue
        # a SymPy Float hashes through its float value (microseconds; a tabulated function
        # holds hundreds): Floats are told apart by identity here, equal ones merged below
        if isinstance(e, sp.Float):
            if id(e) in floats:
                continue
            floats.add(id(e))
        elif e in seen:
            continue
        else:
            seen.add(e)
        stack.append((e, True))
        stack.extend((a, False) for a in e.args if isinstance(a, sp.Float) or a not in seen)
    out = [e for e in reversed(order) if test(e)]
    if floats and any(isinstance(e, sp.Float) for e in out):
        # each Float value once: the first one reached, where the walk by value kept it
        met: set = set()
        out = [e for e in reversed(out)
               if not isinstance(e, sp.Float) or not (e in met or met.add(e))][::-1]
    return out


@lru_cache(maxsize=256)
def dependents(expr: sp.Basic, x: sp.Basic) -> frozenset:
    """The nodes of ``expr`` that contain ``x`` (``x`` included), in one pass over the shared
    graph (see :func:`nodes`); remembered, as a solve asks it of one equation several times."""
    out = set()
    for e in reversed(nodes(expr, lambda e: True)):  # children before parents
        if e == x or any(a in out for a in e.args):
            out.add(e)
    return frozenset(out)


@lru_cache(maxsize=512)
def symbols_of(expr: sp.Basic) -> frozenset:
    """``expr.free_symbols`` walking the shared graph once (SymPy's property recurses into every
    path to a shared subexpression, exponentially often on a large model).

    >>> from moesym.symbolic.symbols import S
    >>> sorted(map(str, symbols_of(smax(S.batch, S.hidden) * S.batch)))
    ['B', 'd']
    """
    return frozenset(nodes(expr, lambda e: e.is_Symbol))


def restrict(values, expr: sp.Basic, without: sp.Basic | None = None) -> dict:
    """The entries of ``values`` whose key is a symbol of ``expr`` (``without`` left out). The
    symbols are found once: :func:`symbols_of` called per entry looks ``expr`` up each time,
    and an equal expression built apart from the one it remembers is compared with it node by
    node, once per entry (half a second for a DeepSeek-V3 step's 47 values).

    >>> from moesym.symbolic.symbols import S
    >>> restrict({S.batch: 1, S.hidden: 2, S.tokens: 3}, S.batch * S.hidden, without=S.batch)
    {d: 2}
    """
    used = symbols_of(expr)
    out = {k: v for k, v in dict(values).items() if k in used}
    if without is not None:
        out.pop(without, None)
    return out


def depends(expr: sp.Basic, x: sp.Basic) -> bool:
    """``expr.has(x)`` walking the shared graph once."""
    return expr in dependents(expr, x)


def sym(x) -> sp.Expr:
    """Accept a SymPy expression or a plain number (never a string)."""
    return sp.sympify(x, strict=True)
