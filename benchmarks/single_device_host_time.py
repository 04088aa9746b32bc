"""Does the open llama-bench table pin llama.cpp's per-token host time (``[latency_us] step``)?

    PYTHONPATH=$PWD python benchmarks/single_device_host_time.py [--markdown benchmarks/single_device_host_time.md]

Every tg128 row of the table (``moesym.report.validation.LLAMA_BENCH_TABLE``) is LLaMA 7B, so
the host time h enters every row as the same constant. Per row, moesym's step time is linear in
h, in 1 / e (``mv_hbm_frac``) and in 1 / R (``unpack_Gweights_per_s``): t = t0 + h + b / e + c / R,
with t0, b, c read from three model evaluations each (benchmarks/single_device_fit.py's helpers).

- RTX 4090 (F16, Q8_0; no unpack: mmvq's int8 dot products): two rows, two unknowns (h, e):
  solved exactly, nothing held out; the report gives how far a 1% change of one measurement
  moves h.
- M2 Ultra (Q8_0, Q4_0, Q4_1): every format unpacks the same number of weights (c is one
  number), so c / R is a per-token constant like h: the table fits their sum, not each.

A held-out fit of h needs tg128 of models of different sizes on one device (a tiny model's
tokens/s are host-bound); the table has none, so h stays assumed.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from single_device_fit import BIG, _cases, _measured_s, _time_s, report


def _row(case, unpack: bool):
    """(t0, b, c, measured) of t = t0 + h + b / e + c / R (R in G weights / s)."""
    base = {} if not unpack else {"unpack_Gweights_per_s": BIG}
    t1 = _time_s(case, host_s=0.0, mv_hbm_frac=1.0, **base)
    b = _time_s(case, host_s=0.0, mv_hbm_frac=0.5, **base) - t1
    c = _time_s(case, host_s=0.0, mv_hbm_frac=1.0, unpack_Gweights_per_s=1.0) - t1 if unpack else 0.0
    return t1 - b, b, c, _measured_s(case)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="write the report here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cases = _cases()
    lines = ["# Per-token host time: what the open llama-bench table says", "",
             "Written by `PYTHONPATH=$PWD python benchmarks/single_device_host_time.py --markdown "
             "benchmarks/single_device_host_time.md` (method in its docstring).", "",
             "## RTX 4090 tg128: h and e from F16 and Q8_0 (two rows, two unknowns)", "",
             "| row | t0 ms | b ms | measured ms |", "|---|---|---|---|"]
    rtx = {f: _row(cases[("rtx-4090", "tg", f)], unpack=False) for f in ("F16", "Q8_0")}
    for f, (t0, b, _, m) in rtx.items():
        lines.append(f"| {f} | {t0 * 1e3:.3f} | {b * 1e3:.3f} | {m * 1e3:.3f} |")

    def solve(meas):
        a = np.array([[1.0, rtx[f][1]] for f in rtx])
        h, x = np.linalg.solve(a, np.array([meas[f] - rtx[f][0] for f in rtx]))
        return h, 1 / x

    meas = {f: r[3] for f, r in rtx.items()}
    h, e = solve(meas)
    lines += ["", f"Exact solution: h = {h * 1e6:.0f} us, e = {e:.4f} (the file: h = 500 us "
              "assumed, e fitted on F16).", "", "| measurement moved | h us | e |", "|---|---|---|"]
    spread = []
    for f in rtx:
        for s in (-0.01, 0.01):
            h2, e2 = solve({**meas, f: meas[f] * (1 + s)})
            spread.append(h2)
            lines.append(f"| {f} tg128 {s:+.0%} | {h2 * 1e6:.0f} | {e2:.4f} |")
    m2 = {f: _row(cases[("m2-ultra", "tg", f)], unpack=True) for f in ("Q8_0", "Q4_0", "Q4_1")}
    cs = [r[2] for r in m2.values()]
    lines += ["", "## M2 Ultra tg128: unpack time and h", "",
              "| row | t0 ms | b ms | c (s at 1 G weights/s) | measured ms |", "|---|---|---|---|---|"]
    for f, (t0, b, c, m) in m2.items():
        lines.append(f"| {f} | {t0 * 1e3:.3f} | {b * 1e3:.3f} | {c:.4f} | {m * 1e3:.3f} |")
    lines += ["", f"c is the same in every row (spread {max(cs) / min(cs) - 1:.1e}): the unpack "
              "time c / R is a per-token constant, as h is, so the table fits h + c / R "
              "(the file's R = 2197 G/s carries "
              f"{cs[0] / 2197 * 1e3:.2f} ms per token of it) and cannot split them.", "",
              f"Verdict: a 1% change of one RTX 4090 measurement moves h between "
              f"{min(spread) * 1e6:.0f} and {max(spread) * 1e6:.0f} us, with no row left to "
              "check it; on the M2 Ultra h is not separable at all. h stays assumed (500 us)."]
    return report(lines, args.markdown)


if __name__ == "__main__":
    raise SystemExit(main())
