"""The derive solvers' shortcuts give what the long way gives (issue 34's speed): a step found
without first solving the regimes on both sides, a scan that stops at the first accepted sign
change, a closed-form solve refused at once through a tabulated function, sums raised to a
power without SymPy's infinity questions, and printers shared across an answer's forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

import moesym.solve.model_root as mr
from moesym.solve.model_root import closed_form_at, sign_changes
from moesym.solve.regimes import solve_smooth
from moesym.symbolic.expr import power, substitute, sum_or_product
from moesym.symbolic.printing import latex, session, text
from moesym.symbolic.special import LogInterp, MaxBinomialMean

x = sp.Symbol("x", positive=True)
a = sp.Symbol("a", positive=True)


def _long_way(monkeypatch, *args, **kw):
    """closed_form_at with the jump test off: both regimes solved before the step."""
    with monkeypatch.context() as m:
        m.setattr(mr, "_jumps_across", lambda *_: False)
        return closed_form_at(*args, **kw)


def test_jump_across_zero_is_told_from_a_crossing():
    # 10 ceiling(x / 4) - 25 + x / 100 jumps from -4.92 to +5.09 at x = 8: nowhere near zero
    jump = lambda v: 10 * np.ceil(np.asarray(v) / 4) - 25 + np.asarray(v) / 100  # noqa: E731
    assert mr._jumps_across(jump, 8.0, 9.0, 1e-7 * 5.09)
    # a continuous crossing inside the bracket (x - 8.5) is not a jump
    assert not mr._jumps_across(lambda v: np.asarray(v) - 8.5, 8.0, 9.0, 1e-7)
    # a jump that lands within 1000 tolerances of zero is left to the full test
    small = lambda v: np.where(np.asarray(v) > 8.5, 1e-6, -1.0)  # noqa: E731
    assert not mr._jumps_across(small, 8.0, 9.0, 1e-7)
    # two crossings (a dip through zero and back, then the jump) are left to it too
    def dip(v):
        v = np.asarray(v)
        return np.where(v > 8.9, 1.0, (v - 8.3) * (v - 8.6))

    assert not mr._jumps_across(dip, 8.0, 9.0, 1e-7)


@pytest.mark.parametrize("eq,bracket", [
    # a tile step carries the sign change: 10 ceiling(x/4) - 25 + x/100 (the step at x = 8)
    (10 * sp.ceiling(x / 4) - 25 + x / 100, (8.0, 9.0)),
    # the smooth part crosses inside the bracket: 3x - 26.5 crosses at 8.8333
    (3 * x - sp.Rational(53, 2) + sp.ceiling(x / 100), (8.0, 9.0)),
    # a Piecewise switch carries it: -1 below x = 8.5, 1 + x/1000 above
    (sp.Piecewise((-1 - x / 1000, x < sp.Rational(17, 2)), (1 + x / 1000, True)), (8.0, 9.0)),
    # a continuous crossing with no closed form (a cubic): numeric, the note says why
    (x ** 3 - 600, (8.0, 9.0)),
    # a jump whose switch has no closed form either: numeric after both searches
    (sp.Piecewise((-1, x ** 3 < 600), (1, True)), (8.0, 9.0)),
])
def test_closed_form_at_equals_the_long_way(monkeypatch, eq, bracket):
    got = closed_form_at(eq, x, {}, bracket, bracket[1], integer=True)
    want = _long_way(monkeypatch, eq, x, {}, bracket, bracket[1], integer=True)
    assert (got.kind, got.exact, got.bracket, got.expr, got.value, got.regime, got.note) == \
        (want.kind, want.exact, want.bracket, want.expr, want.value, want.regime, want.note)


def test_the_step_answer_and_its_closed_form():
    # 10 ceiling(x/4) passes 25 where x/4 passes 2: at x = 8, the ceiling steps to 3 at 8+
    r = closed_form_at(10 * sp.ceiling(x / 4) - 25 + x / 100, x, {}, (8.0, 9.0), 9.0,
                       integer=True)
    assert r.kind == "step" and r.value == pytest.approx(8.0)
    assert r.regime == ("ceiling step to 3",)


def _f(v):
    """Sign changes at 3.5, 2500.5 (down) and 40000.5 (up again); NaN at 2048 and 2049 (the
    boundary of the scan's first chunk)."""
    v = np.asarray(v, dtype=float)
    y = np.where(v < 3.5, -1.0, np.where(v < 2500.5, 1.0, np.where(v < 40000.5, -1.0, 1.0)))
    return np.where((v == 2048) | (v == 2049), np.nan, y)


def test_scan_until_returns_the_full_scans_brackets_up_to_the_accepted_one():
    full = [(3.0, 4.0), (2500.0, 2501.0), (40000.0, 40001.0)]
    with pytest.MonkeyPatch.context() as m:  # the scan's function, from the test's own numbers
        m.setattr(mr, "_evaluator", lambda eq, var, values: _f)
        assert sign_changes(x, x, {}, 1, 65536, integer=True) == full
        assert sign_changes(x, x, {}, 1, 65536, integer=True, until=lambda f, a, b: True) \
            == full[:1]
        # accepted only where f falls below zero: the second change, past the first chunk
        down = lambda f, a, b: float(f(b)) < 0  # noqa: E731
        assert sign_changes(x, x, {}, 1, 65536, integer=True, until=down) == full[:2]
        # never accepted: every chunk scanned, the same brackets as the full scan
        assert sign_changes(x, x, {}, 1, 65536, integer=True,
                            until=lambda f, a, b: False) == full


def test_nan_across_a_chunk_boundary_keeps_its_bracket():
    # the only change is across the NaN points 2048-2049 (1 up to 2047, -1 from 2050)
    g = lambda v: np.where(np.isin(np.asarray(v), (2048.0, 2049.0)), np.nan,  # noqa: E731
                           np.where(np.asarray(v) < 2048, 1.0, -1.0))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mr, "_evaluator", lambda eq, var, values: g)
        full = sign_changes(x, x, {}, 1, 65536, integer=True)
        early = sign_changes(x, x, {}, 1, 65536, integer=True, until=lambda f, a, b: True)
    # the cell (2047, 2050) joins the two chunks; its bisection (the same either way) meets a
    # NaN at 2048 and keeps the side it had
    assert full == early and len(full) == 1 and full[0][0] == 2047.0


@pytest.mark.parametrize("table", [
    LogInterp(a * x, 0.0, 1.0, 2.0, 3.0),
    MaxBinomialMean(x / 8, sp.Rational(1, 2), 16),
])
def test_no_closed_form_through_a_table_is_the_same_refusal(monkeypatch, table):
    eq = a * x ** 2 + table * x - 3
    with pytest.raises(ValueError) as fast:
        solve_smooth(eq, x, {a: 2.0}, 1.0, general=False)
    import moesym.solve.regimes as rg

    monkeypatch.setattr(rg, "_through_table", lambda e, var: False)
    with pytest.raises(ValueError) as slow:
        solve_smooth(eq, x, {a: 2.0}, 1.0, general=False)
    assert str(fast.value) == str(slow.value)


def test_a_table_free_of_the_unknown_still_solves():
    # the tabulated factor is a constant here: a x + LogInterp(a) - 3 = 0 at x = (3 - L) / a
    root = solve_smooth(a * x + LogInterp(a, 0.0, 1.0, 5.0, 2.0) - 3, x, {a: 2.0}, 1.0,
                        general=False)
    assert float(root.subs(a, 2.0).evalf()) == pytest.approx((3 - 1.0 - math.log(2) / 5) / 2)


@pytest.mark.parametrize("base,exp", [
    (a + x, sp.S.Half), (a * x - 3 * a ** 2, sp.Rational(-3, 2)), (sp.Float(2.5) * a + 4 * x, 2),
    (a + x, -1), (a + 1, sp.S.Half), (a + sp.oo, sp.S.Half),
    (sp.Integer(2) + sp.sqrt(3), sp.S.Half),
    (a + x, 0), (a + x, 1), (4 * a ** 2, sp.S.Half), (a + x, sp.Symbol("n")),
])
def test_power_is_sympys_pow(base, exp):
    assert power(base, exp) == sp.Pow(base, exp)
    assert substitute(sp.sqrt(a + sp.Symbol("t")), {sp.Symbol("t"): x ** 2}) == sp.sqrt(a + x ** 2)


def test_a_printing_session_prints_what_sympy_does():
    y = sp.Symbol("y", positive=True)
    shared = sp.Max(x / 7 + sp.Float(0.25) * y, sp.ceiling(x / 64) * sp.Float(1.5e-6))
    exprs = [shared * (shared + 1) / (shared - y), sp.sqrt(shared) + y, -shared / (1 + x),
             sp.Float(64.0), shared]
    with session():
        got = [(text(e), latex(e)) for e in exprs]
    assert got == [(str(e), sp.latex(e)) for e in exprs]


_E, _K, _EP = (sp.Symbol(n, positive=True) for n in ("E", "k", "e_p"))


@pytest.mark.parametrize("E,k,ep", [(256, 8, 128), (256, 8, 16), (_E, 8, 64), (256, 8, _EP),
                                    (_E, _K, _EP)])
def test_rank_load_cap_is_sympys_min(monkeypatch, E, k, ep):
    """The busiest rank's ratio capped at min(ep, E/k), built without SymPy's evaluation of
    the Min, is the Min SymPy builds (numbers, symbols, and a symbolic token count)."""
    import moesym.routing.stats as rs

    T = sp.Symbol("T", positive=True)
    evaluated = sp.Min
    for tokens in (T, 4096):
        got = rs.max_rank_load_ratio(E, k, ep, tokens)
        with monkeypatch.context() as m:  # the ratio's Min evaluated by SymPy in full
            m.setattr(rs.sp, "Min", lambda *a, evaluate=True: evaluated(*a))
            want = rs.max_rank_load_ratio(E, k, ep, tokens)
        assert got == want


def test_nodes_with_floats_is_the_graph_sympy_walks():
    """Floats are walked by identity (their hash is slow) and merged by value: the nodes are
    SymPy's own preorder traversal's, each value once, every node before the nodes inside it."""
    from sympy import preorder_traversal

    from moesym.symbolic.expr import nodes

    y = sp.Symbol("y", positive=True)
    table = LogInterp(x, 0.0, 1.5, 1.0, 2.5, 2.0, 1.5)
    exprs = [sp.Float(2.5) * x + sp.Float(2.5, 6) * y + table + sp.Max(x, sp.Float(1.5)),
             sp.Piecewise((sp.Float(0.1) * x, x < 3), (table * sp.Float(0.1), True)) ** 2]
    for e in exprs:
        for test in (lambda n: True, lambda n: isinstance(n, sp.Float), lambda n: n.is_Symbol):
            got = nodes(e, test)
            assert set(got) == {n for n in preorder_traversal(e) if test(n)}
            assert len(got) == len(set(got))
            pos = {n: i for i, n in enumerate(got)}
            assert all(pos[n] < pos[a] for n in got for a in n.args if a in pos)


def test_a_long_scan_in_slices_is_each_points_own_value():
    """compile.evaluate takes a long single axis in slices: each value equals the expression
    evaluated at that point alone (the special functions included)."""
    from moesym.symbolic.compile import evaluate
    from moesym.symbolic.special import PaddedRowsMean

    T = sp.Symbol("T", positive=True)
    e = (sp.Piecewise((MaxBinomialMean(T / 16, sp.Rational(1, 16), 128), T < 400),
                      (T / 16 + sp.sqrt(T), True))
         + LogInterp(T, 0.0, 1.0, 10.0, 4.0) + PaddedRowsMean(T, sp.Rational(1, 32), 16) / 8
         + a * sp.ceiling(T / 64))
    ts = np.arange(1, 20001, dtype=float)
    whole = evaluate(e, {a: 0.5}, {T: ts})
    assert whole.shape == ts.shape
    for i in (0, 1, 399, 8191, 8192, 8193, 16383, 19999):
        assert whole[i] == float(evaluate(e, {a: 0.5}, {T: ts[i]}))


def test_a_number_through_nested_ceilings_is_evalfs():
    """model_root._number evaluates a closed form whose exact irrationals stay inside ceilings
    compiled (SymPy's evalf re-evaluates nested ceilings at each precision): the same value."""
    c = sp.Min(32, sp.Float(0.08) * sp.sqrt(2) + a)
    e = a * sp.ceiling(sp.Float(256.0) * c / sp.Max(64, 64 * sp.ceiling(4 * c))) + sp.sqrt(2) * a
    got = mr._number(e, {a: 1.5})
    want = float(e.subs(a, sp.Float(1.5)).evalf(30))
    assert got == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="complex root"):
        mr._number(sp.sqrt(-a + sp.ceiling(sp.Min(3, sp.sqrt(2) * a, evaluate=False)) - 4),
                   {a: 1.5})


_Y, _N = sp.Symbol("y", real=True), sp.Symbol("n", integer=True, positive=True)
_SUMS = [a + x, x - 2 * _Y, a * x + 3, a + x + _Y, 1 + sp.sqrt(2) * a]
_EXPS = [-1, -2, sp.S.Half, -sp.S.Half, sp.Rational(3, 2), 2, _N, sp.Float(0.5)]
_ATOMS = [sp.Integer(2), sp.Integer(-3), sp.Rational(1, 3), sp.Float(1.5), a, x, _Y,
          sp.Min(a, x), sp.ceiling(x / 4)]


def _random_operand(rng, depth=0):
    """A random operand of a sum or product: numbers, symbols, a Min, a ceiling, sums raised to
    rational (and other) powers, the sums themselves, and products and sums of such."""
    kind = rng.integers(0, 5 if depth < 2 else 3)
    if kind == 0:
        return _ATOMS[rng.integers(len(_ATOMS))]
    if kind == 1:
        return sp.Pow(_SUMS[rng.integers(len(_SUMS))], _EXPS[rng.integers(len(_EXPS))])
    if kind == 2:
        return _SUMS[rng.integers(len(_SUMS))]
    parts = [_random_operand(rng, depth + 1) for _ in range(rng.integers(2, 4))]
    return sp.Mul(*parts) if kind == 3 else sp.Add(*parts)


@pytest.mark.parametrize("cls", [sp.Add, sp.Mul])
def test_sum_or_product_is_sympys(cls):
    """Sums and products built with their powers of sums stood in for are SymPy's own, argument
    for argument (srepr), on 400 random operand lists: powers that merge (exponents adding up,
    to 1 or 0 included), the sum itself next to its power, a rational times a sum, terms that
    combine or cancel, and powers not stood in for (symbolic or float exponents)."""
    rng = np.random.default_rng(7 if cls is sp.Add else 8)
    for _ in range(400):
        args = [_random_operand(rng) for _ in range(rng.integers(1, 5))]
        assert sp.srepr(sum_or_product(cls, args)) == sp.srepr(cls(*args)), args
    for args in ([1 / (a + x), a + x], [1 / (a + x), (a + x) ** 2], [sp.sqrt(a + x)] * 2,
                 [2, 1 / (a + x)], [3, x + 1 / (a + x)], [1 / (a + x), -1 / (a + x)],
                 [x / (a + x), 2 * x / (a + x)], [(a + x) ** sp.Symbol("n"), 1 / (a + x)]):
        assert sp.srepr(sum_or_product(cls, args)) == sp.srepr(cls(*args)), args
