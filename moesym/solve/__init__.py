"""Symbolic solving of composed models: rewrite rules, the regime-enumeration solver, and roots
over the full model with the closed form of their regime (:mod:`moesym.solve.model_root`)."""

from .regimes import Root, branch_at, branches, solve_regimes, solve_smooth
from .rewrite import RELAX_CEILING, SMOOTH_MAX, Rule, apply_rules

__all__ = ["RELAX_CEILING", "SMOOTH_MAX", "Root", "Rule", "apply_rules", "branch_at", "branches",
           "solve_regimes", "solve_smooth"]
