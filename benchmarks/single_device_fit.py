"""Fit the one-device kernel parameters (matrix-vector kernels, prompt-processing GEMMs) of the
Apple M2 Ultra and the NVIDIA RTX 4090 to the open llama-bench table, with held-out checks.

    PYTHONPATH=$PWD python benchmarks/single_device_fit.py [--markdown benchmarks/single_device_fit.md]

Data: ``moesym.report.validation.LLAMA_BENCH_TABLE`` (llama.cpp's llama-bench on LLaMA 7B: M2 Ultra Q8_0 /
Q4_0 / Q4_1 from PR #2917, RTX 4090 F16 / Q8_0 / Q4_0 from PR #4766; pp512 and tg128 tokens/s).
Every prediction is moesym's own (``moesym.report.validation.run_case`` on a copy of the hardware file
with the candidate ``[kernel]`` values); the parameters enter the step time linearly, so each is
solved from three model evaluations and checked by a final full evaluation.

Parameters (``[kernel.engines."llama.cpp"]`` of each file) and what each is fitted on (the rest
of ``[kernel]`` and ``[latency_us]`` as the files hold them: kernel launch latencies transferred
from the H800 fit, 500 us host time per step, assumed: this table cannot pin it, see
benchmarks/single_device_host_time.py; ``dequant_pass_rows`` from llama.cpp's
source as stated below):

- M2 Ultra tg128: ``mv_hbm_frac`` (bandwidth of Metal's mul_mv kernels) and
  ``unpack_Gweights_per_s`` (weights per second they unpack from a 4- or 8-bit block, in series
  with the loads): two unknowns, three formats. Held out: each format predicted from a fit on
  the other two; shipped: the least-squares fit on all three.
- M2 Ultra pp512: ``gemm_tensor_frac`` (Metal mul_mm, which dequantizes inside the GEMM) fitted on
  Q8_0; Q4_0 and Q4_1 held out.
- RTX 4090 tg128: ``mv_hbm_frac`` fitted on F16; Q8_0 held out (llama.cpp's mmvq consumes Q8_0
  blocks with int8 dot products: no unpack time, moesym.numbers.bindings).
- RTX 4090 pp512: ``gemm_tensor_frac`` fitted on F16 (cuBLAS FP16 GEMMs); Q8_0 and Q4_0 held out:
  above 32 rows llama.cpp (PR #3776, MMQ_MAX_BATCH_SIZE) dequantizes block formats to F16 in a
  kernel of its own (``dequant_pass_rows`` = 32) at the elementwise bandwidth, then runs cuBLAS.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import replace

import numpy as np

from moesym.model.predictor import predict
from moesym.specs.hardware import load_hardware
from moesym.readers.model import load_model
from moesym.report.validation import single_device_cases

ENGINE = "llama.cpp"  # the fitted values are [kernel.engines."llama.cpp"] of each file
BIG = 1e9  # an unpack rate (G weights / s) high enough to cost nothing


def _cases():
    out = {}
    for c in single_device_cases():
        phase = "tg" if c.workload.phase.value == "decode" else "pp"
        out[(c.hardware, phase, c.name.split("-")[-1])] = c
    return out


def _time_s(case, host_s=None, **kernel) -> float:
    """moesym's step time of ``case`` with ``kernel`` over its hardware file's llama.cpp values
    (and ``host_s`` for the file's per-step host time, ``[latency_us] step``, when given)."""
    hw = load_hardware(case.hardware)
    engines = dict(hw.kernel.get("engines", {}))
    engines[ENGINE] = {**engines.get(ENGINE, {}), **kernel}
    hw = replace(hw, kernel={**hw.kernel, "engines": engines})
    if host_s is not None:
        hw = replace(hw, latency=replace(hw.latency, step_s=host_s))
    r = predict(load_model(case.model), hw, case.deployment, case.workload, memory=False)
    return r["step_time_s"]


def _linear(case, key: str, base: dict, at=(1.0, 0.5)):
    """(t0, b) with step time = t0 + b / x for parameter ``key`` = x (the others at ``base``)."""
    t1, t2 = (_time_s(case, **base, **{key: x}) for x in at)
    b = (t1 - t2) / (1 / at[0] - 1 / at[1])
    return t1 - b / at[0], b


def _measured_s(case) -> float:
    return 1.0 / case.measured * (512 if case.workload.phase.value == "prefill" else 1)


def report(lines, markdown=None) -> int:
    """Print the report's ``lines`` and write them to ``markdown`` when given; exit status 0."""
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown:
        with open(markdown, "w") as fh:
            fh.write(text)
    return 0


def fit_m2_tg(cases):
    """mv_hbm_frac e and unpack rate R on M2 Ultra: t = t0 + b / e + c / R per format."""
    fmts = ["Q8_0", "Q4_0", "Q4_1"]
    rows = {}
    for f in fmts:
        c = cases[("m2-ultra", "tg", f)]
        t0, b = _linear(c, "mv_hbm_frac", {"unpack_Gweights_per_s": BIG})
        t_r = _time_s(c, mv_hbm_frac=1.0, unpack_Gweights_per_s=1.0)
        coef_r = t_r - (t0 + b)  # seconds at 1 G weights / s: c / 1e9
        rows[f] = (t0, b, coef_r, _measured_s(c))

    def solve(use):
        # relative least squares: (t0 + b x + c y) / t = 1, x = 1/e, y = 1/R (R in G weights/s)
        a = np.array([[rows[f][1] / rows[f][3], rows[f][2] / rows[f][3]] for f in use])
        y = np.array([1 - rows[f][0] / rows[f][3] for f in use])
        x, *_ = np.linalg.lstsq(a, y, rcond=None)
        return 1 / x[0], 1 / x[1]

    held = {}
    for f in fmts:
        e, r = solve([g for g in fmts if g != f])
        held[f] = (e, r)
    return solve(fmts), held


def fit_frac(cases, hw, phase, fmt, key, base=None):
    """One parameter x with t = t0 + b / x, fitted on one case."""
    c = cases[(hw, phase, fmt)]
    t0, b = _linear(c, key, base or {})
    return b / (_measured_s(c) - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="write the report here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # the files say "transferred" until this fit is written
    cases = _cases()
    (e_m2, r_m2), held_m2 = fit_m2_tg(cases)
    g_m2 = fit_frac(cases, "m2-ultra", "pp", "Q8_0", "gemm_tensor_frac")
    e_4090 = fit_frac(cases, "rtx-4090", "tg", "F16", "mv_hbm_frac")
    g_4090 = fit_frac(cases, "rtx-4090", "pp", "F16", "gemm_tensor_frac")
    fitted = {
        "m2-ultra": {"mv_hbm_frac": e_m2, "unpack_Gweights_per_s": r_m2, "gemm_tensor_frac": g_m2},
        "rtx-4090": {"mv_hbm_frac": e_4090, "gemm_tensor_frac": g_4090},
    }
    fit_on = {("m2-ultra", "pp", "Q8_0"), ("rtx-4090", "tg", "F16"), ("rtx-4090", "pp", "F16")}
    lines = ["# One-device fit: llama-bench (LLaMA 7B) on M2 Ultra and RTX 4090", "",
             "Written by `PYTHONPATH=$PWD python benchmarks/single_device_fit.py --markdown "
             "benchmarks/single_device_fit.md` (method in its docstring).", "",
             "## Fitted parameters", "", "| device | parameter | value | fitted on |",
             "|---|---|---|---|",
             f"| m2-ultra | mv_hbm_frac | {e_m2:.4f} | tg128 Q8_0, Q4_0, Q4_1 (least squares) |",
             f"| m2-ultra | unpack_Gweights_per_s | {r_m2:.1f} | tg128 Q8_0, Q4_0, Q4_1 (least squares) |",
             f"| m2-ultra | gemm_tensor_frac | {g_m2:.4f} | pp512 Q8_0 |",
             f"| rtx-4090 | mv_hbm_frac | {e_4090:.4f} | tg128 F16 |",
             f"| rtx-4090 | gemm_tensor_frac | {g_4090:.4f} | pp512 F16 |", "",
             "## Every row of the table", "",
             "Held out: predicted with parameters fitted without that row (M2 Ultra tg128: on the "
             "other two formats, e and R in the last column).", "",
             "| device | format | test | measured tok/s | predicted tok/s | error | |",
             "|---|---|---|---|---|---|---|"]
    errors = []
    for (hw, phase, fmt), c in sorted(cases.items()):
        params = dict(fitted[hw])
        note = "fitted on it" if (hw, phase, fmt) in fit_on else "held out"
        if hw == "m2-ultra" and phase == "tg":
            e, r = held_m2[fmt]
            params.update(mv_hbm_frac=e, unpack_Gweights_per_s=r)
            note = f"held out (e {e:.3f}, R {r:.0f} G/s)"
        pred = (512 if phase == "pp" else 1) / _time_s(c, **params)
        err = pred / c.measured - 1
        if note.startswith("held"):
            errors.append(abs(err))
        lines.append(f"| {hw} | {fmt} | {phase}{512 if phase == 'pp' else 128} | {c.measured:.2f} | "
                     f"{pred:.2f} | {err:+.1%} | {note} |")
    lines += ["", f"Held-out rows: {len(errors)}, median |error| {np.median(errors):.1%}, "
              f"worst {max(errors):.1%}."]
    return report(lines, args.markdown)


if __name__ == "__main__":
    raise SystemExit(main())
