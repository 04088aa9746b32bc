"""Request-length distributions (``--context-dist``, ``--isl-dist``): a distribution given as
text becomes representative lengths of equal weight, at which the model is evaluated and
averaged (every per-request cost of a step, attention and KV, adds over its requests).

* ``fixed:N``; ``uniform:A:B`` (integers A..B); ``lognormal:MEAN:SIGMA`` (the lengths' mean and
  the standard deviation of their logarithm); or a CSV / text file of lengths (one per line, or
  the first column; a header line is skipped).
* Parametric distributions are represented by the midpoints of ``POINTS`` equal-probability
  bins; a file by its own values (or as many quantiles of them when it has more).

>>> representative("fixed:4096")
(4096,)
>>> r = representative("uniform:1000:3000"); len(r), min(r), max(r), round(sum(r) / len(r))
(64, 1016, 2984, 2000)
>>> r = representative("lognormal:2000:0.5"); round(sum(r) / len(r))  # the bins' midpoints
1994
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

from ..errors import SpecError
from ..io.text import read_text

__all__ = ["representative", "POINTS"]

POINTS = 64


def _int(text: str, flag: str, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise SpecError(f"{flag}: {what} must be a positive integer, got {text!r}") from None
    if v <= 0:
        raise SpecError(f"{flag}: {what} must be a positive integer, got {text!r}")
    return v


def representative(text: str, flag: str = "--context-dist") -> tuple[int, ...]:
    """Equal-weight lengths standing for the distribution ``text`` (module docstring)."""
    t = str(text).strip()
    kind, _, rest = t.partition(":")
    mids = [(i + 0.5) / POINTS for i in range(POINTS)]
    if kind == "fixed" and rest:
        return (_int(rest, flag, "the length"),)
    if kind == "uniform" and rest.count(":") == 1:
        a, b = (_int(x, flag, "a bound") for x in rest.split(":"))
        if b < a:
            raise SpecError(f"{flag} {t}: uniform:A:B needs A <= B")
        return tuple(int(round(a + q * (b - a))) for q in mids)
    if kind == "lognormal" and rest.count(":") == 1:
        mean_text, sigma_text = rest.split(":")
        mean = _int(mean_text, flag, "the mean")
        try:
            sigma = float(sigma_text)
        except ValueError:
            sigma = -1.0
        if not (0 <= sigma < 5):
            raise SpecError(f"{flag} {t}: lognormal:MEAN:SIGMA needs 0 <= SIGMA < 5 (of log)")
        mu = math.log(mean) - sigma ** 2 / 2  # so that the lengths' mean is MEAN
        nd = NormalDist(mu, sigma) if sigma else None
        return tuple(max(1, int(round(math.exp(nd.inv_cdf(q)) if nd else mean))) for q in mids)
    p = Path(t)
    if p.is_file():
        vals = []
        for i, line in enumerate(read_text(p).splitlines()):
            cell = line.split(",")[0].strip()
            if not cell:
                continue
            try:
                vals.append(int(float(cell)))
            except ValueError:
                if i == 0:
                    continue  # a header
                raise SpecError(f"{flag} {t}: line {i + 1} is not a length: {line!r}") from None
        if not vals or min(vals) <= 0:
            raise SpecError(f"{flag} {t}: needs positive lengths, one per line")
        vals.sort()
        if len(vals) <= 4 * POINTS:
            return tuple(vals)
        return tuple(vals[int(q * len(vals))] for q in mids)
    if kind not in ("fixed", "uniform", "lognormal") and ("/" in t or "\\" in t or p.suffix):
        raise SpecError(f"{flag} {t}: no such file" + (" (a folder)" if p.is_dir() else "")
                        + "; give a file of lengths, or fixed:N, uniform:A:B, "
                        "lognormal:MEAN:SIGMA")
    raise SpecError(f"{flag} {t!r}: use fixed:N, uniform:A:B, lognormal:MEAN:SIGMA or a file of "
                    "lengths")
