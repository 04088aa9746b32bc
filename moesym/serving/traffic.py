"""A fleet's traffic: when requests arrive and how long they are (``moesym fleet``).

Two sources:

* **A rate** (``--rate R --duration S``): Poisson arrivals at ``R`` requests per second, or, with
  a diurnal shape (``--diurnal P``, the peak rate ``P`` times the trough's), a non-homogeneous
  Poisson process of rate

      lambda(t) = R (1 + a cos(2 pi (t - t_peak) / 86400)),   a = (P - 1) / (P + 1),

  whose mean over a day is ``R``, peak ``R (1 + a)`` at ``t_peak`` (``--peak-hour``, default
  14:00) and trough ``R (1 - a)`` twelve hours away; drawn by thinning a Poisson process at the
  peak rate (Lewis and Shedler, 1979). Lengths as ``moesym simulate`` draws them
  (:func:`moesym.serving.clients.lengths`: ``N``, ``fixed:N``, ``uniform:A:B``,
  ``lognormal:MEAN:SIGMA`` or a file of lengths).
* **A trace** (``--trace FILE``): CSV with a header row, or JSON Lines (one object per line),
  one request per row: its arrival time in seconds from the start of the period
  (``arrival_s``, or ``time`` / ``timestamp``), its prompt tokens (``input_tokens``, or ``isl``
  / ``prompt_tokens``) and output tokens (``output_tokens``, or ``osl`` /
  ``completion_tokens``); optionally a shared prefix: ``prefix_id`` (or ``session_id``: any
  text naming the prefix several requests share, e.g. a system prompt or a conversation) with
  ``prefix_tokens`` (its length, at most the prompt). Rows must be sorted by time; a
  negative or unsorted time, a missing column, a value that is not a number, a length below
  1, an empty file or a file that is not UTF-8 text is a one-line error naming the file, the
  row and the column.

>>> t = poisson_traffic(2.0, 100.0, "1024", "256", seed=1)
>>> bool((np.diff(t.arrival_s) >= 0).all()), int(t.isl[0]), t.duration_s
(True, 1024, 100.0)
>>> [round(float(diurnal_rate(h * 3600, 10.0, 3.0, 14)), 3) for h in (14, 2)]
[15.0, 5.0]
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MoesymError
from .clients import lengths

__all__ = ["Traffic", "poisson_traffic", "read_trace", "diurnal_rate", "DAY_S"]

DAY_S = 86400.0

#: accepted column names, first the canonical one
_COLUMNS = {"arrival_s": ("arrival_s", "time", "timestamp", "arrival_time"),
            "input_tokens": ("input_tokens", "isl", "prompt_tokens"),
            "output_tokens": ("output_tokens", "osl", "completion_tokens"),
            "prefix_id": ("prefix_id", "session_id", "session"),
            "prefix_tokens": ("prefix_tokens",)}


@dataclass(frozen=True)
class Traffic:
    """Requests in arrival order: ``arrival_s`` (s, from the start of the period), ``isl`` and
    ``osl`` (tokens), ``prefix`` (an integer per request naming its shared prefix, -1 none; None
    when no request has one) with ``prefix_tokens``; ``duration_s``: the period they cover."""

    arrival_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    duration_s: float
    prefix: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.arrival_s)

    def take(self, idx) -> "Traffic":
        """The requests ``idx`` (an index array or a slice), in their order."""
        pick = lambda a: None if a is None else a[idx]  # noqa: E731
        return Traffic(self.arrival_s[idx], self.isl[idx], self.osl[idx], self.duration_s,
                       pick(self.prefix), pick(self.prefix_tokens), self.source)


def diurnal_rate(t, rate: float, peak_to_trough: float, peak_hour: float):
    """The arrival rate (per s) at time ``t`` (s) of a day whose mean rate is ``rate``
    (module docstring)."""
    a = (peak_to_trough - 1.0) / (peak_to_trough + 1.0)
    return rate * (1.0 + a * np.cos(2 * np.pi * (np.asarray(t) - peak_hour * 3600.0) / DAY_S))


def poisson_traffic(rate: float, duration_s: float, isl: str, osl: str, *,
                    diurnal: float | None = None, peak_hour: float = 14.0,
                    seed: int = 0) -> Traffic:
    """Poisson arrivals at ``rate`` per second for ``duration_s`` (a diurnal shape when
    ``diurnal``, the peak-to-trough ratio, is given), lengths as ``isl`` / ``osl`` describe."""
    if not (0 < rate < math.inf and 0 < duration_s < math.inf):
        raise MoesymError(f"--rate {rate:g} and --duration {duration_s:g}: both must be positive "
                          "and finite")
    if diurnal is not None and not (1 <= diurnal < math.inf):
        raise MoesymError(f"--diurnal {diurnal:g}: the peak rate over the trough's, at least 1")
    if not 0 <= peak_hour < 24:
        raise MoesymError(f"--peak-hour {peak_hour:g}: an hour of the day in [0, 24)")
    rng = np.random.default_rng(seed)
    top = rate if diurnal is None else rate * 2 * diurnal / (diurnal + 1)  # R (1 + a)
    expected = top * duration_s
    if expected > 5e8:
        raise MoesymError(f"--rate {rate:g} over --duration {duration_s:g} s is about "
                          f"{expected:.3g} requests: more than moesym fleet simulates (5e8)")
    n = int(expected + 10 * math.sqrt(expected) + 10)
    t = np.cumsum(rng.exponential(1.0 / top, n))
    t = t[t <= duration_s]
    if diurnal is not None:  # thinning: keep each arrival with probability lambda(t) / top
        t = t[rng.random(len(t)) * top < diurnal_rate(t, rate, diurnal, peak_hour)]
    if not len(t):
        raise MoesymError("--rate x --duration sends no request; raise either")
    a, b = lengths(len(t), isl, osl, seed=seed)
    shape = "" if diurnal is None else f", diurnal {diurnal:g}:1 peaking at {peak_hour:g} h"
    return Traffic(t, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                   float(duration_s), source=f"Poisson {rate:g} requests/s{shape}")


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MoesymError(f"--trace {path}: no such file") from None
    except IsADirectoryError:
        raise MoesymError(f"--trace {path}: a folder; name a trace file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = data[:exc.start].count(b"\n") + 1
        raise MoesymError(f"--trace {path}: row {row} is not UTF-8 text (byte "
                          f"0x{data[exc.start]:02x} at offset {exc.start})") from None


def _pick(names, path: Path, where: str) -> dict:
    """Canonical column -> the name the file uses (required ones must be there)."""
    got = {}
    for key, accepted in _COLUMNS.items():
        hit = [n for n in accepted if n in names]
        if hit:
            got[key] = hit[0]
        elif key in ("arrival_s", "input_tokens", "output_tokens"):
            raise MoesymError(f"--trace {path}: {where} has no column {key} (or "
                              f"{' / '.join(accepted[1:])}); columns: arrival_s, input_tokens, "
                              "output_tokens[, prefix_id, prefix_tokens]")
    if ("prefix_tokens" in got) != ("prefix_id" in got):
        raise MoesymError(f"--trace {path}: prefix_id and prefix_tokens go together (the shared "
                          "prefix and its length)")
    return got


def _rows_csv(text: str, path: Path) -> tuple[dict, int]:
    """Columns of a CSV trace as arrays of strings, and the file row of the first data row."""
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise MoesymError(f"--trace {path}: empty file (no header, no requests)")
    try:
        rows = [r for r in csv.reader(lines[first:], skipinitialspace=True)]
    except csv.Error as exc:
        raise MoesymError(f"--trace {path}: not CSV ({exc})") from None
    header = [h.strip() for h in rows[0]]
    cols = _pick(header, path, "the header row")
    width = len(header)
    data = [r for r in rows[1:] if r]
    where = None
    if len(data) < len(rows) - 1:  # blank lines: keep each row's line in the file
        where = [first + 1 + i for i, r in enumerate(rows) if r][1:]
    for i, r in enumerate(data):
        if len(r) != width:
            row = where[i] if where else first + 2 + i
            raise MoesymError(f"--trace {path}: row {row} has {len(r)} cells, the header "
                              f"{width}")
    columns = list(zip(*data)) if data else [()] * width
    out = {k: np.asarray(columns[header.index(v)], dtype=object) for k, v in cols.items()}
    if where:
        out["_rows"] = np.asarray(where)
    return out, first + 2


def _rows_jsonl(text: str, path: Path) -> tuple[dict, int]:
    rows, where = [], []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MoesymError(f"--trace {path}: row {i} is not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise MoesymError(f"--trace {path}: row {i} is not a JSON object")
        rows.append(obj)
        where.append(i)
    if not rows:
        raise MoesymError(f"--trace {path}: empty file (no requests)")
    cols = _pick(rows[0].keys(), path, "row 1")
    out = {}
    for key, name in cols.items():
        vals = []
        for obj, i in zip(rows, where):
            if name not in obj:
                raise MoesymError(f"--trace {path}: row {i} has no column {name}")
            v = obj[name]
            if key != "prefix_id" and (isinstance(v, bool) or not isinstance(v, (int, float,
                                                                                str))):
                raise MoesymError(f"--trace {path}: row {i}, column {name}: {v!r} is not a "
                                  "number")
            vals.append(v)
        out[key] = np.asarray(vals, dtype=object)
    out["_rows"] = np.asarray(where)
    return out, 1


def _numbers(vals: np.ndarray, key: str, path: Path, row_of) -> np.ndarray:
    """The column as floats; a cell that is not a finite number is a one-line error."""
    import pandas as pd

    x = pd.to_numeric(pd.Series(vals), errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MoesymError(f"--trace {path}: row {row_of(i)}, column {key}: {vals[i]!r} is not "
                          "a number")
    return x


def read_trace(path: str) -> Traffic:
    """The requests of a trace file (module docstring): CSV, or JSON Lines where the file ends
    in .jsonl / .ndjson / .json or its first character is ``{``."""
    p = Path(path)
    text = _text(p)
    jsonl = p.suffix.lower() in (".jsonl", ".ndjson", ".json") or text.lstrip().startswith("{")
    cols, first_row = (_rows_jsonl if jsonl else _rows_csv)(text, p)
    rows = cols.pop("_rows", None)
    row_of = (lambda i: int(rows[i])) if rows is not None else (lambda i: first_row + i)  # noqa: E731
    n = len(cols["arrival_s"])
    if n == 0:
        raise MoesymError(f"--trace {p}: no requests (a header and no rows)")
    t = _numbers(cols["arrival_s"], "arrival_s", p, row_of)
    if (t < 0).any():
        i = int(np.flatnonzero(t < 0)[0])
        raise MoesymError(f"--trace {p}: row {row_of(i)}, column arrival_s: time {t[i]:g} is "
                          "negative (seconds from the start of the period)")
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise MoesymError(f"--trace {p}: row {row_of(i)}, column arrival_s: time {t[i]:g} is "
                          f"before the previous row's {t[i - 1]:g} (sort the trace by arrival "
                          "time)")
    lens = {}
    for key in ("input_tokens", "output_tokens", "prefix_tokens"):
        if key not in cols:
            continue
        x = _numbers(cols[key], key, p, row_of)
        low = 0 if key == "prefix_tokens" else 1
        bad = (x < low) | (x != np.floor(x))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise MoesymError(f"--trace {p}: row {row_of(i)}, column {key}: {cols[key][i]!r} "
                              f"is not a whole number >= {low}")
        lens[key] = x.astype(np.int64)
    prefix = ptok = None
    if "prefix_id" in cols:
        import pandas as pd

        ids = pd.Series(cols["prefix_id"]).astype(str).str.strip()
        codes, _ = pd.factorize(ids.where(ids != "", None))
        prefix, ptok = codes.astype(np.int64), lens["prefix_tokens"]
        over = np.flatnonzero(ptok > lens["input_tokens"])
        if len(over):
            i = int(over[0])
            raise MoesymError(f"--trace {p}: row {row_of(i)}, column prefix_tokens: "
                              f"{ptok[i]} is longer than the prompt ({lens['input_tokens'][i]} "
                              "input_tokens)")
        ptok = np.where(prefix >= 0, ptok, 0)
    duration = float(t[-1]) if t[-1] > 0 else 1.0
    return Traffic(t, lens["input_tokens"], lens["output_tokens"], duration, prefix, ptok,
                   source=f"trace {p.name}")
