"""The one exception type users see for bad input: a one-line message naming the field."""

from __future__ import annotations

__all__ = ["MoesymError", "SpecError"]


class MoesymError(ValueError):
    """Bad input. The message is one line that names the field and what would fix it."""


class SpecError(MoesymError):
    """A model, hardware or deployment specification is missing a field or is inconsistent."""
