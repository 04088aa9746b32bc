"""``moesym derive``: planner questions answered on the model that ``predict`` evaluates.

Every answer builds the step model of its arguments exactly as ``predict`` does (same time
model, ``--timing kernel`` by default: the calibrated kernel model; same overlap schedule,
routing and flags), forms its equation from the step model's own expressions, and answers in
two parts (:mod:`moesym.solve.model_root`), held in a :class:`~moesym.derive.closed_form.ClosedForm`:

- ``value``: the root of the full model, found by evaluating the compiled model (every integer
  batch, or a fine scan refined by bisection): what ``predict`` shows on either side of it;
- ``expr``: the closed form of the regime that holds there, with the tile and wave counts of that
  regime frozen and each maximum on its active branch (``kind = smooth``: equal to ``value``),
  or, where the answer is a step of the model (a tile or wave count, or a change of form),
  where that step happens (``kind = step``); ``closed_value`` is its number.

``--timing roofline`` runs the same code on the roofline (peaks x the [kernel] fractions), the
teaching form of the same equations (derivations/ shows both).

One module per answer (:data:`~moesym.derive.registry.ANSWERS` lists them, in the order of
``moesym derive --help``): its function (e.g. :func:`moesym.derive.crossover.crossover`), ``ask``
(the answer from the command's flags; the command line asks whether the deployment can hold the
model first) and ``PAGES`` (its derivation pages). The generic machinery (regimes, roots,
rewrites, elasticities) is :mod:`moesym.solve`'s. This package's root imports the registry
only: the command line reads it without SymPy, and imports an answer's module when it is asked.
"""

from .registry import ANSWERS, Answer, Flag, Page

__all__ = ["ANSWERS", "Answer", "Flag", "Page"]
