"""Benchmark clients as the engines' own benchmark tools run them, and request lengths.

* Closed loop (``concurrency`` C, ``num_prompts`` N): C requests start at once (the initial
  burst, which benchmarks measure); each finished request is replaced by the next prompt until
  N have been sent (SGLang ``bench_serving --max-concurrency``, vLLM ``benchmark_serving``,
  genai-perf's concurrency mode). No warm-up is excluded: the tools exclude none by default.
* Open loop (``request_rate`` R per second): Poisson arrivals (exponential gaps, as
  ``bench_serving --request-rate`` draws them) for ``duration`` seconds or ``num_prompts``
  requests.

Lengths: ``fixed:N`` (or a plain number), ``uniform:A:B`` (integers A..B inclusive),
``lognormal:MEAN:SIGMA``, a file of lengths (drawn with replacement), or for both lengths at
once a CSV of ``isl,osl`` pairs (in order, repeated as needed). SGLang's and vLLM's
``--random-range-ratio R`` differ; :func:`range_ratio` gives each as a ``uniform:A:B``.

>>> isl, osl = lengths(4, "uniform:10:12", "fixed:5", seed=0)
>>> all(10 <= x <= 12 for x in isl), osl.tolist()
(True, [5, 5, 5, 5])
>>> range_ratio(1024, 0.8, "sglang"), range_ratio(1024, 0.2, "vllm")
('uniform:819:1024', 'uniform:819:1229')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MoesymError
from ..io.text import read_text

__all__ = ["Client", "lengths", "range_ratio", "pairs_file"]


@dataclass(frozen=True)
class Client:
    """How requests arrive: closed loop at ``concurrency`` or Poisson at ``request_rate``
    (per second), for ``num_prompts`` requests (or, open loop, ``duration`` seconds)."""

    concurrency: int | None = None
    request_rate: float | None = None
    num_prompts: int | None = None
    duration_s: float | None = None

    def __post_init__(self):
        closed, rate = self.concurrency is not None, self.request_rate is not None
        if closed == rate:
            raise MoesymError("simulate: give --concurrency C --num-prompts N (closed loop) or "
                              "--request-rate R with --duration S or --num-prompts N (open loop)")
        for name, v in (("--concurrency", self.concurrency), ("--num-prompts", self.num_prompts)):
            if v is not None and (not float(v).is_integer() or v <= 0):
                raise MoesymError(f"{name} {v}: must be a positive integer")
        for name, v in (("--request-rate", self.request_rate), ("--duration", self.duration_s)):
            if v is not None and not (0 < v < math.inf):
                raise MoesymError(f"{name} {v}: must be a positive finite number")
        if closed and self.duration_s is not None:
            raise MoesymError("--duration is for --request-rate (open loop); a closed loop "
                              "runs --num-prompts requests")
        if rate and (self.num_prompts is None) == (self.duration_s is None):
            raise MoesymError("--request-rate needs one of --duration S or --num-prompts N")

    @property
    def closed(self) -> bool:
        return self.concurrency is not None

    def count(self, rng: np.random.Generator) -> int:
        """Number of requests the run sends (closed loop: ``num_prompts``, default 10 x
        the concurrency as benchmark scripts commonly use)."""
        if self.closed:
            return int(self.num_prompts or 10 * self.concurrency)
        if self.num_prompts is not None:
            return int(self.num_prompts)
        return 0  # drawn with the arrival times

    def arrival_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Open loop: Poisson arrival times (s) of ``n`` requests, or of those within
        ``duration`` when ``n`` is 0."""
        if n:
            return np.cumsum(rng.exponential(1.0 / self.request_rate, n))
        expected = self.request_rate * self.duration_s
        gaps = rng.exponential(1.0 / self.request_rate, int(expected + 10 * math.sqrt(expected)
                                                             + 10))
        t = np.cumsum(gaps)
        return t[t <= self.duration_s]


def range_ratio(n: int, ratio: float, tool: str = "sglang") -> str:
    """``--random-range-ratio`` as the tool draws lengths: SGLang's ``bench_serving`` draws
    uniformly from ``[max(int(n R), 1), n]``; vLLM's ``benchmark_serving`` (random dataset)
    from ``[floor(n (1 - R)), ceil(n (1 + R))]``."""
    if not 0 <= ratio <= 1:
        raise MoesymError(f"--random-range-ratio {ratio}: must be between 0 and 1")
    if tool == "vllm":
        return f"uniform:{max(1, math.floor(n * (1 - ratio)))}:{math.ceil(n * (1 + ratio))}"
    return f"uniform:{max(int(n * ratio), 1)}:{n}"


def _sample(text: str, n: int, rng: np.random.Generator, flag: str) -> np.ndarray:
    t = str(text).strip()
    if t.isdigit():
        t = f"fixed:{t}"
    kind, _, rest = t.partition(":")
    try:
        if kind == "fixed":
            v = int(rest)
            if v > 0:
                return np.full(n, v, dtype=np.int64)
        elif kind == "uniform":
            a, b = (int(x) for x in rest.split(":"))
            if 0 < a <= b:
                return rng.integers(a, b + 1, n)
        elif kind == "lognormal":
            mean, sigma = rest.split(":")
            mean, sigma = float(mean), float(sigma)
            if mean >= 1 and 0 <= sigma < 5:
                mu = math.log(mean) - sigma ** 2 / 2
                return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)
    except ValueError:
        pass
    if kind not in ("fixed", "uniform", "lognormal") and Path(t).is_file():
        vals = _column(Path(t), 0, flag)
        return rng.choice(vals, n)
    if kind not in ("fixed", "uniform", "lognormal") and ("/" in t or Path(t).suffix):
        raise MoesymError(f"{flag} {t}: no such file; give a file of lengths, or N, fixed:N, "
                          "uniform:A:B, lognormal:MEAN:SIGMA")
    raise MoesymError(f"{flag} {text!r}: use N, fixed:N, uniform:A:B (0 < A <= B), "
                      "lognormal:MEAN:SIGMA (0 <= SIGMA < 5) or a file of lengths")


def _column(path: Path, col: int, flag: str) -> np.ndarray:
    vals = []
    for i, line in enumerate(read_text(path).splitlines()):
        cells = [c.strip() for c in line.split(",")]
        if not cells[0]:
            continue
        try:
            vals.append(int(float(cells[col])))
        except (ValueError, IndexError):
            if i == 0 and not vals:
                continue  # a header
            raise MoesymError(f"{flag} {path}: line {i + 1} is not a length: {line!r}") from None
    if not vals or min(vals) <= 0:
        raise MoesymError(f"{flag} {path}: needs positive lengths, one per line")
    return np.asarray(vals, dtype=np.int64)


def pairs_file(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(isl, osl) arrays of a CSV of ``isl,osl`` pairs (a header line is skipped)."""
    p = Path(path)
    if not p.is_file():
        raise MoesymError(f"--lengths-file {path}: no such file")
    return _column(p, 0, "--lengths-file"), _column(p, 1, "--lengths-file")


def lengths(n: int, isl: str, osl: str, seed: int = 0, pairs: str | None = None) -> tuple:
    """Prompt and output lengths of ``n`` requests (module docstring)."""
    rng = np.random.default_rng(seed)
    if pairs:
        a, b = pairs_file(pairs)
        idx = np.arange(n) % len(a)
        return a[idx], b[idx]
    return _sample(isl, n, rng, "--isl"), _sample(osl, n, rng, "--osl")
