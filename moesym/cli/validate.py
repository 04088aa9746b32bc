"""``moesym validate``: predicted against published end-to-end measurements."""

from __future__ import annotations

from statistics import median

from ..errors import MoesymError
from ..report.inferencex import SOURCE, load_runs, serving_summary, validate_runs
from ..report.validation import (CASES, kernel_heldout, load_cases, serving_fits, validate,
                                 validate_serving)
from . import COMMANDS
from .common import add_json, add_no_cache, add_timing, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("validate", help=COMMANDS["validate"])
    add_timing(p)
    p.add_argument("--cases", default=None, metavar="FILE.json",
                   help="validate your own measurements instead of the built-in published cases "
                        "(a JSON list; see moesym.report.validation.load_cases)")
    p.add_argument("--fit-serving", action="store_true",
                   help="also fit each GPU's serving efficiency on all of its cases (the value a "
                        "hardware file's [efficiency] serving should hold)")
    p.add_argument("--kernels", action="store_true",
                   help="print instead the kernel model's held-out error per GPU and kernel class "
                        "(median and 90th percentile of |model / measured - 1| on the measured "
                        "kernel shapes held out of each GPU's fit; from bench_data/"
                        "kernel_heldout.json, written by benchmarks/kernel_fit_aic.py --heldout)")
    p.add_argument("--no-serving", action="store_true",
                   help="skip the serving section (published benchmarks at a concurrency, "
                        "simulated with moesym simulate)")
    p.add_argument("--serving", action="store_true",
                   help="print instead the open set of published serving runs (InferenceX, "
                        "DeepSeek-R1 1024/1024 on nine GPUs, aggregated and disaggregated), each "
                        "simulated as the benchmark ran it: TPOT, TTFT (mean and median) and "
                        "tokens/s per GPU against the measured, per GPU and framework (minutes: "
                        "narrow it with --gpu / --framework / --max-concurrency)")
    p.add_argument("--gpu", action="append", default=None, metavar="NAME",
                   help="with --serving: only this GPU's runs (repeatable)")
    p.add_argument("--framework", action="append", default=None, metavar="NAME",
                   help="with --serving: only this framework's runs (sglang, trt, dynamo-trt, "
                        "dynamo-sglang, mori-sglang, atom; repeatable)")
    p.add_argument("--max-concurrency", type=int, default=None, metavar="C",
                   help="with --serving: only runs at concurrency C or below")
    p.add_argument("--rows", action="store_true",
                   help="with --serving: every run, not only the per-group summary")
    add_json(p)
    add_no_cache(p)
    p.set_defaults(func=run)


def _shown(case: dict, key: str) -> str:
    """A throughput as a whole number of tokens/s, a time in ms."""
    v = case[key]
    return f"{v:.0f}" if case["metric"] == "tokens_per_gpu_s" else f"{v * 1e3:.3f}ms"


def run(args) -> int:
    if args.kernels:
        return _kernels(args)
    if args.serving:
        return _open_serving(args)
    for flag in ("gpu", "framework", "max_concurrency"):
        if getattr(args, flag):
            raise MoesymError(f"--{flag.replace('_', '-')} narrows --serving's runs: add "
                              "--serving")
    cases = validate(args.timing, load_cases(args.cases) if args.cases else CASES)
    fits = serving_fits(cases) if args.fit_serving else None
    serving = [] if args.cases or args.no_serving else validate_serving()
    if args.json:
        out = {"cases": cases}
        if fits is not None:
            out["serving_fits"] = fits
        if serving:
            out["serving"] = serving
        emit_json(out)
        return 0
    print(f"{'case':<34} {'measured':>9} {'predicted':>10} {'error':>8} {'eta_sv':>7} "
          f"{'uncalib.':>9} {'InferSim':>9}")
    for c in cases:
        inf = f"{c['infersim_error']:+.0%}" if c["infersim_error"] is not None else "-"
        print(f"{c['name']:<34} {_shown(c, 'measured'):>9} {_shown(c, 'predicted'):>10} {c['error']:+8.1%} "
              f"{c['serving_frac']:7.3f} {c['error_uncalibrated']:+9.1%} {inf:>9}")
    for key, label in (("error", "leave-one-out eta_sv"), ("error_uncalibrated", "eta_sv = 1")):
        errs = [abs(c[key]) for c in cases]
        print(f"{label:<22} within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}   within 10%: "
              f"{sum(e <= 0.10 for e in errs)}/{len(errs)}   mean |error|: "
              f"{sum(errs) / len(errs):.1%}")
    print("eta_sv: serving efficiency fitted on the other cases of the same GPU (never on the case "
          "itself); uncalib.: the kernel model alone")
    if fits is not None:
        for hw, f in fits.items():
            print(f"fit on all {len(f['cases'])} {hw} case(s): serving = {f['serving_frac']:.3f} "
                  f"(hardware file: {f['shipped']:.3f})")
    if serving:
        _print_serving(serving)
    return 0


def _print_serving(rows: list[dict]) -> None:
    print("\nserving under load (moesym simulate; closed loop, 10 x concurrency prompts, lengths "
          "in [0.8 N, N]; host launch time and random-prompt acceptance fitted on InferenceX's "
          "other runs; moesym validate --serving for all of them):")
    print(f"{'case':<36} {'metric':<24} {'measured':>9} {'predicted':>10} {'error':>8}")
    for r in rows:
        print(f"{r['name']:<36} {r['metric']:<24} {r['measured']:>9.1f} {r['predicted']:>10.1f} "
              f"{r['error']:+8.1%}")
    for kind in ("tpot", "ttft", "output"):
        errs = [abs(r["error"]) for r in rows if r["metric"].startswith(kind)]
        if errs:
            print(f"{kind:<7} median |error| {median(errs):.1%} over {len(errs)}")


_CLASS_ORDER = {"gemm": 0, "moe": 1, "attention": 2, "allreduce": 3}


def _kernels(args) -> int:
    doc = kernel_heldout()
    rows = sorted(doc["rows"] + doc.get("amd_rows", []),
                  key=lambda r: (r["gpu"], _CLASS_ORDER.get(r["class"], 9)))
    if args.json:
        emit_json(doc)
        return 0
    print(f"held-out kernel error (|model / measured - 1| on shapes left out of the fit; data: "
          f"{doc['source']}; written {doc['written']})")
    print(f"{'GPU':<6} {'class':<10} {'kernel':<28} {'measured on':<24} {'dtype':<10} "
          f"{'held out':>8} {'excl.':>6} {'median':>7} {'p90':>7}")
    for r in rows:
        kernel = r.get("backend", "")
        if r.get("calibration", "").startswith("[kernel.engines."):
            kernel = r["calibration"]
        if r["class"] == "moe" and not r["used"]:
            kernel += " ([kernel])"
            med, p90 = r["kernel_median"], r["kernel_p90"]
        else:
            med, p90 = r["median"], r["p90"]
        print(f"{r['gpu']:<6} {r['class']:<10} {kernel:<28} {r['engine']:<24} {r['dtype']:<10} "
              f"{r['rows_held_out']:>8} {r['excluded']:>6} {med:>7.1%} {p90:>7.1%}")
    print("moe: each backend's own fitted mechanisms ([moe_kernels]: tensor and HBM fractions, "
          "M block, N and K blocks, fixed, per-expert and per-row time, load/MMA overlap, EP "
          "masked-row passes, memory-bound kernels and time per kernel where its source fixes "
          "them); "
          "'([kernel])': "
          "the tables do not show it apart, the GPU's [kernel] times it. excl.: rows faster "
          "than physics (FLOPs at peak or bytes at peak HBM bandwidth), left out of the fit; "
          "gemm '[kernel.engines.trtllm]': TensorRT-LLM's own GEMM fit (its FP8 input cast timed "
          "apart), what --engine trtllm runs; the default [kernel] keeps DeepGEMM's load rate")
    return 0


def _open_serving(args) -> int:
    """``validate --serving``: the open serving runs simulated, a table per GPU and framework."""
    runs = [r for r in load_runs()
            if (not args.gpu or r.hardware in args.gpu)
            and (not args.framework or r.framework in args.framework)
            and (args.max_concurrency is None or r.conc <= args.max_concurrency)]
    if not runs:
        raise MoesymError("validate --serving: no run matches --gpu / --framework / "
                          "--max-concurrency (moesym list hardware; frameworks: sglang, trt, "
                          "dynamo-trt, dynamo-sglang, mori-sglang, atom)")
    rows = validate_runs(runs, progress=not args.json)
    summary = serving_summary(rows)
    if args.json:
        emit_json({"source": SOURCE, "runs": rows, "summary": summary})
        return 0
    print(f"published serving runs ({SOURCE}), each simulated as the benchmark ran it; "
          "median |error| per GPU and framework")
    head = f"{'GPU framework':<22} {'runs':>5} {'skip':>5}"
    labels = {"tpot_mean_ms": "TPOT", "ttft_mean_ms": "TTFT mean", "ttft_median_ms": "TTFT p50",
              "tput_per_gpu": "tok/s/GPU"}
    print(head + "".join(f" {v:>10}" for v in labels.values()))
    for g in summary["groups"]:
        print(f"{g['group']:<22} {g['runs']:>5} {g['skipped']:>5}"
              + "".join(f" {g['median_abs_error'][k]:>10.1%}" for k in labels))
    a = summary["all"]
    print(f"{'all':<22} {a['runs']:>5} {a['skipped']:>5}"
          + "".join(f" {a['median_abs_error'][k]:>10.1%}" for k in labels))
    if args.rows:
        print(f"\n{'id':>4} {'configuration':<52} {'conc':>5}" + "".join(
            f" {v + ' meas/pred':>22}" for v in labels.values()))
        for r in rows:
            if "skipped" in r:
                print(f"{r['id']:>4} {r['config']:<52} {r['conc']:>5}  skipped: {r['skipped']}")
                continue
            print(f"{r['id']:>4} {r['config']:<52} {r['conc']:>5}" + "".join(
                f" {r[k]['measured']:>9.1f}/{r[k]['predicted']:>8.1f}{r[k]['error']:+5.0%}"
                for k in labels))
    for reason, n in summary["skip_reasons"].items():
        print(f"skipped {n}: {reason}")
    return 0
