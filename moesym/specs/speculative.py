"""Speculative decoding (DeepSeek MTP, EAGLE-style drafts): what a verify step emits.

A decode step with ``N`` draft tokens runs the draft ``N`` times on one token per request
(autoregressive), then the target model verifies ``N + 1`` tokens per request in one pass.
With each draft token accepted with probability ``p`` given that the previous ones were (a
chain, as the engines' top-1 drafts are verified), the tokens one step emits per request are
the bonus token plus the accepted prefix:

    E[accepted] = 1 + p + p^2 + ... + p^N = (1 - p^(N + 1)) / (1 - p)

>>> round(accepted_length(1, 0.85), 12)  # DeepSeek-V3 MTP, one draft token: 1.85 per step
1.85
>>> accepted_length(3, 0.0), accepted_length(3, 1.0)
(1.0, 4.0)
>>> import sympy as sp
>>> sp.simplify(accepted_length(2, sp.Symbol("p")) - (1 + sp.Symbol("p") + sp.Symbol("p")**2))
0
"""

from __future__ import annotations

from ..errors import SpecError

__all__ = ["accept_from_length", "accepted_length", "DEFAULT_ACCEPT", "DEFAULT_ACCEPT_SOURCE"]

#: Acceptance of a draft token when none is given: DeepSeek-V3 technical report, section 5.4.3
#: ("the acceptance rate of the second token prediction ranges between 85% and 90%"), the lower
#: end. Other drafts (EAGLE heads of other models) accept less; give --accept for them.
DEFAULT_ACCEPT = 0.85
DEFAULT_ACCEPT_SOURCE = ("DeepSeek-V3 technical report sec. 5.4.3: 85-90% acceptance of the "
                         "second token; the lower end")


def accepted_length(draft_tokens, accept):
    """Expected tokens a verify step emits per request (module docstring); numbers or SymPy."""
    n, p = draft_tokens, accept
    if p == 1:
        return 1.0 + n
    return (1 - p ** (n + 1)) / (1 - p)


def accept_from_length(draft_tokens: int, length: float) -> float:
    """The acceptance ``p`` of each draft token that gives ``length`` tokens per verify step
    (the "accept length" engines log: accepted drafts plus the bonus token), the inverse of
    :func:`accepted_length` (increasing in ``p``), solved by bisection.

    >>> round(accept_from_length(1, 1.85), 9), accept_from_length(3, 1.0), accept_from_length(3, 4.0)
    (0.85, 0.0, 1.0)
    """
    n = int(draft_tokens)
    if n < 1:
        raise SpecError("`accept_length` needs `mtp` N (the draft tokens per step)")
    if not 1 <= length <= n + 1:
        raise SpecError(f"`accept_length` {length:g}: tokens per verify step lie between 1 (no "
                        f"draft accepted) and {n + 1} (all {n} drafts and the bonus token)")
    if length >= n + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if accepted_length(n, mid) < length:
            lo = mid
        else:
            hi = mid
    return lo if length > 1 else 0.0
