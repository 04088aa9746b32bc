"""What every ``derive`` answer is: the :class:`ClosedForm` record and how its three layers are
built (package :mod:`moesym.derive`): the full model's root, the closed form of the regime there
(:mod:`moesym.solve.model_root`), the regime's smooth form with the target in it, what pins the
exact answer on a step (:mod:`moesym.solve.regime_form`) and the answer's elasticities
(:mod:`moesym.solve.sensitivity`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import sympy as sp

from ..model.step import StepModel
from ..numbers.metrics import key_bounds
from ..solve.model_root import ModelRoot
from ..solve.regime_form import RegimeForm, legend, pin, printed, regime_form, tidy
from ..solve.sensitivity import root_elasticities
from ..symbolic.expr import restrict, symbols_of
from ..symbolic.printing import latex, session, text

__all__ = ["ClosedForm", "B_MAX", "answer", "regime_at", "root_sensitivity"]

B_MAX = 1 << 16  # widest decode batch per attention-DP rank scanned


def _finite_or_none(v):
    """``v``, or None where it is a number that is not finite (JSON has no infinity)."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclass(frozen=True)
class ClosedForm:
    """An answer of ``derive``: the full model's root ``value``, the closed form ``expr`` of the
    regime at it (None where there is none), its number ``closed_value``, and how they relate.

    ``equation``: the expression whose root is sought (in ``variable``, the other symbols bound
    by ``values``); ``kind``: smooth, step or numeric (:class:`~moesym.solve.model_root.ModelRoot`),
    or none (:meth:`unanswered`);
    ``regime``: per breakdown key, what limits it at the root (the rule ``predict`` reports).
    """

    name: str
    title: str
    expr: sp.Expr | None
    values: Mapping[sp.Symbol, float] = field(repr=False)
    value: float
    condition: sp.Basic = sp.true
    assumptions: str = ""
    equation: sp.Expr = sp.Integer(0)
    variable: sp.Symbol | None = None
    closed_value: float | None = None
    kind: str = "smooth"
    regime: Mapping[str, str] = field(default_factory=dict)
    timing: str = "kernel"
    # the two sides of the equation (label, expression in ``variable``), for the pages' plots
    sides: tuple = field(default=(), repr=False, compare=False)
    # the regime's smooth closed form with the target in it (moesym.solve.regime_form), what
    # pins the exact answer on a step (one line each), and the answer's elasticities
    # ((symbol, d ln answer / d ln symbol), largest first) on that smooth form
    smooth: RegimeForm | None = field(default=None, repr=False, compare=False)
    pin: tuple = field(default=(), compare=False)
    sensitivity: tuple = field(default=(), repr=False, compare=False)
    # the targets that give this same answer [low, high) (the TPOT answer), else None
    target_range: tuple | None = field(default=None, compare=False)

    @classmethod
    def unanswered(cls, name: str, title: str, why: str, timing: str) -> "ClosedForm":
        """No answer, and why (a deployment that cannot hold the model): the value is not a
        number (null in JSON, none in the text)."""
        return cls(name, title, None, {}, float("nan"), assumptions=why, kind="none",
                   timing=timing)

    @property
    def latex(self) -> str:
        return latex(tidy(self.expr)) if self.expr is not None else ""

    def as_dict(self) -> dict:
        with session():  # one printer for the answer's forms, which share subexpressions
            return self._as_dict()

    def _as_dict(self) -> dict:
        return {"name": self.name, "latex": self.latex,
                "sympy": printed(self.expr) if self.expr is not None else "",
                # no answer within the searched range ("hidden at every batch up to ..."): null
                # in JSON, the note says why (the text prints inf)
                "value": _finite_or_none(self.value),
                "closed_form_value": _finite_or_none(self.closed_value), "kind": self.kind,
                "regime": dict(self.regime), "condition": text(self.condition),
                "timing": self.timing, "note": self.assumptions,
                "smooth": self.smooth.as_dict() if self.smooth is not None else None,
                "pin": list(self.pin),
                # the contract's names: the closed form with the target in it (the regime's
                # smooth form where one exists, else the answer's own form) and what pins it
                "closed_form": (printed(self.smooth.expr) if self.smooth is not None
                                and self.smooth.expr is not None else
                                printed(self.expr) if self.expr is not None else None),
                "pinned_by": list(self.pin) or None,
                "target_range": list(self.target_range) if self.target_range else None,
                "sensitivity": [{"symbol": str(s), "elasticity": e} for s, e in self.sensitivity],
                "legend": legend([self.expr, self.smooth.expr if self.smooth else None])}



def regime_at(step: StepModel, overrides: Mapping[sp.Symbol, float]) -> dict:
    """What limits each breakdown key of ``step`` with ``overrides`` bound (``predict``'s
    ``bounds`` rule): ``{key: compute | memory | communication | overhead}``, the routed
    experts by their roofline (compute or memory)."""
    cm = step.compiled
    known = set(cm.parts[0]["args"]) | set(cm.parts[0]["static"])
    nums = cm.evaluate(0, {str(k): float(v) for k, v in overrides.items() if str(k) in known})
    out = {}
    for k, b in key_bounds(nums, step.model, step.deployment).items():
        if b["bound"] != "none":
            out[k] = b.get("roofline", b["bound"]) if k == "routed_experts" else b["bound"]
    return out


def _layers(lhs: sp.Expr, rhs: sp.Expr, var: sp.Symbol, values: Mapping, exact: float,
            bracket: tuple[float, float] | None, span: tuple[float, float],
            where: Mapping | None = None, scale: sp.Expr | None = None) -> tuple:
    """(smooth regime form, pin lines, top sensitivities) of an answer ``exact`` of
    ``lhs = rhs`` in ``var`` (module :mod:`moesym.solve.regime_form`): the pin lists the tile
    and wave counts that change across ``bracket`` (an integer answer's two sides)."""
    form = regime_form(lhs, rhs, var, values, max(exact, span[0]), span, scale)
    lines = ()
    if bracket is not None:
        lines = tuple(pin(lhs - rhs, var, values, bracket[0], bracket[1], where))
    return form, lines, root_sensitivity(form.equation, var, values, form.relaxed_root)


def root_sensitivity(eq: sp.Expr, var: sp.Symbol, values: Mapping, x: float | None) -> tuple:
    """The elasticities of a closed form's root ``x`` of ``eq`` (() where there is none)."""
    if x is None:
        return ()
    try:  # a derivative unbounded at the point (a kink of the relaxed model) is left out
        return tuple((s, e) for s, e in root_elasticities(eq, var, values, x)
                     if math.isfinite(e) and abs(e) < 1e6)
    except (ValueError, KeyError):
        return ()


def answer(name: str, title: str, root: ModelRoot, eq: sp.Expr, values: Mapping, note: str,
            step: StepModel | None, var: sp.Symbol, timing: str, sides: tuple = (),
            span: tuple[float, float] = (1.0, float(B_MAX)), pin_note: str = "",
            target_range: tuple | None = None, regime: Mapping | None = None,
            where: Mapping | None = None, scale: sp.Expr | None = None) -> ClosedForm:
    """The answer's three layers; ``regime`` and ``where`` (the expressions by breakdown key
    that own the tile counts a pin names) default to ``step``'s; ``scale``: the regime form's
    (:func:`~moesym.solve.regime_form.regime_form`)."""
    if regime is None:
        regime = regime_at(step, {var: root.exact}) if step is not None else {}
    vals = restrict(values, eq, var)
    used = set().union(*(symbols_of(sp.sympify(e)) for _, e in sides)) if sides else set()
    vals.update({k: v for k, v in values.items() if k != var and k in used})
    lhs, rhs = (sides[0][1], sides[1][1]) if len(sides) == 2 else (eq, sp.Integer(0))
    integer = float(root.exact).is_integer() and root.bracket[1] - root.bracket[0] <= 1
    form, lines, sens = _layers(lhs, rhs, var, vals, float(root.exact),
                                root.bracket if integer else None, span,
                                step.per_layer_s if step is not None and where is None else where,
                                scale)
    if pin_note:
        lines = lines + (pin_note,)
    return ClosedForm(name, title, root.expr, vals, float(root.exact), root.condition,
                      f"{note} Closed form: {root.note}.", eq, var, root.value, root.kind,
                      regime, timing, tuple(sides), form, lines, sens, target_range)

