"""Symbolic solving of composed models: rewrite rules and the regime-enumeration solver."""

from .regimes import (Root, branch_at, branches, numeric_roots, solve_at_root, solve_regimes,
                      solve_smooth)
from .rewrite import RELAX_CEILING, SMOOTH_MAX, Rule, apply_rules

__all__ = ["RELAX_CEILING", "SMOOTH_MAX", "Root", "Rule", "apply_rules", "branch_at", "branches",
           "numeric_roots", "solve_at_root", "solve_regimes", "solve_smooth"]
