"""The one exception type users see for bad input: a one-line message naming the field.

A message names a field of a :class:`moesym.specs.deployment.Deployment` or ``Workload`` by
its Python name in backquotes, as a Python user gives it (```micro_batches` must be ...``);
``fields`` lists them. The command line writes each as its flag (``--micro-batches must be
...``) through its one table, :data:`moesym.cli.flags.FLAGS`:

>>> e = SpecError("`micro_batches` must be a positive integer, got 0")
>>> e.fields
('micro_batches',)
>>> e.named({"micro_batches": "--micro-batches"})
'--micro-batches must be a positive integer, got 0'
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["MoesymError", "SpecError"]

_FIELD = re.compile(r"`(\w+)`")


class MoesymError(ValueError):
    """Bad input. The message is one line that names the field and what would fix it; a field
    of a deployment or workload in backquotes (``fields`` lists them)."""

    @property
    def fields(self) -> tuple:
        """The fields the message names, by their Python names, in order."""
        return tuple(dict.fromkeys(_FIELD.findall(str(self))))

    def named(self, names: Mapping[str, str]) -> str:
        """The message with each field written as ``names`` writes it (the command line: its
        flag), a field ``names`` lacks by its name."""
        return _FIELD.sub(lambda m: names.get(m.group(1), m.group(1)), str(self))


class SpecError(MoesymError):
    """A model, hardware or deployment specification is missing a field or is inconsistent."""
