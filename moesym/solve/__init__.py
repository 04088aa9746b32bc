"""Symbolic solving of composed models: rewrite rules and the regime-enumeration solver."""

from .regimes import Root, branches, numeric_roots, solve_at_root, solve_regimes
from .rewrite import RELAX_CEILING, SMOOTH_MAX, Rule, apply_rules

__all__ = ["RELAX_CEILING", "SMOOTH_MAX", "Root", "Rule", "apply_rules", "branches", "numeric_roots",
           "solve_at_root", "solve_regimes"]
