"""Grid-evaluation speed of the DeepSeek-V3 decode step model (H800, FP8, two micro-batches).

Reports grid points per second over a 10^6-point grid (batch x context x EP, 100 x 100 x 100,
broadcast), and the ratio to evaluating one point at a time through the same compiled function
and through SymPy ``evalf``. Run: ``python benchmarks/bench_grid.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp

import moesym as ms
from moesym.symbolic.compile import bind_and_compile, evaluate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=100, help="points per axis (grid = n^3)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    step = ms.build_step(ms.load_model("deepseek-v3"), ms.load_hardware("h800"),
                         ms.Deployment(gpus=128, ep=128, weights="fp8", micro_batches=2),
                         ms.Workload("decode", batch=128, context=4989))
    n = args.n
    batch = np.linspace(1, 512, n)[:, None, None]
    context = np.geomspace(256, 131072, n)[None, :, None]
    ep = np.array([8, 16, 32, 64, 128, 256] * (n // 6 + 1))[:n][None, None, :].astype(float)
    grid = {ms.S.batch: batch, ms.S.context: context, ms.S.ep: ep, ms.S.gpus: ep}

    t0 = time.perf_counter()
    evaluate(step.expr, step.values, grid)  # first call compiles
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = evaluate(step.expr, step.values, grid)
        best = min(best, time.perf_counter() - t0)
    points = out.size
    grid_pps = points / best

    # one point at a time: the same compiled function called with scalars, and the full
    # evaluate() path (binding + cache lookup) per point
    fn, fargs = bind_and_compile(step.expr, step.values, tuple(grid))
    k = 20000
    t0 = time.perf_counter()
    for i in range(k):
        fn(*[float(1 + i % 512) if a is ms.S.batch else 4096.0 if a is ms.S.context else 128.0
             for a in fargs])
    single_pps = k / (time.perf_counter() - t0)
    k2 = 200
    t0 = time.perf_counter()
    for i in range(k2):
        evaluate(step.expr, step.values, {ms.S.batch: float(1 + i), ms.S.context: 4096.0,
                                          ms.S.ep: 128.0, ms.S.gpus: 128.0})
    single_eval_pps = k2 / (time.perf_counter() - t0)

    # SymPy evalf, one point
    t0 = time.perf_counter()
    m = 5
    for i in range(m):
        vals = dict(step.values)
        vals[ms.S.batch] = 1 + i
        step.expr.xreplace({s: sp.Float(v) for s, v in vals.items()}).evalf()
    evalf_pps = m / (time.perf_counter() - t0)

    # numbers substituted into the expression before compiling (fold=True): slower to compile,
    # faster per point
    t0 = time.perf_counter()
    ffn, fa = bind_and_compile(step.expr, step.values, tuple(grid), fold=True)
    fold_compile_s = time.perf_counter() - t0
    fold_best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ffn(*(grid[a] for a in fa))
        fold_best = min(fold_best, time.perf_counter() - t0)
    fold_pps = points / fold_best

    print(f"grid points           {points:,}")
    print(f"first call (compile)  {compile_s:.2f} s")
    print(f"grid evaluation       {best:.3f} s  ->  {grid_pps:,.0f} points/s")
    print(f"folded (fold=True)    compile {fold_compile_s:.2f} s, grid {fold_best:.3f} s  ->  "
          f"{fold_pps:,.0f} points/s")
    print(f"one point at a time   {single_pps:,.0f} points/s  (compiled scalar calls; grid is "
          f"{grid_pps / single_pps:,.0f}x faster)")
    print(f"one point, evaluate() {single_eval_pps:,.0f} points/s  (grid is "
          f"{grid_pps / single_eval_pps:,.0f}x faster)")
    print(f"sympy evalf           {evalf_pps:,.1f} points/s  (ratio {grid_pps / evalf_pps:,.0f}x)")


if __name__ == "__main__":
    main()
