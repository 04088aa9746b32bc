"""``moesym validate``: predicted against published end-to-end measurements."""

from __future__ import annotations

from ..validate import validate
from .common import add_json, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("validate", help="error against published end-to-end measurements")
    p.add_argument("--timing", choices=("default", "roofline", "kernel"), default="default",
                   help="time model: the step model's default, the plain roofline, or the "
                        "calibrated analytical kernel model")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    factory = None
    if args.timing == "kernel":
        from ..kernels.timing import KernelTiming

        factory = KernelTiming.from_hardware
    elif args.timing == "roofline":
        from ..timing import RooflineTiming

        factory = lambda hw: RooflineTiming()  # noqa: E731
    cases = validate(factory)
    if args.json:
        emit_json({"cases": cases})
        return 0
    print(f"{'case':<34} {'measured':>9} {'predicted':>10} {'error':>8} {'InferSim':>9}")
    for c in cases:
        inf = f"{c['infersim_error']:+.0%}" if c["infersim_error"] is not None else "-"
        print(f"{c['name']:<34} {c['measured']:9.0f} {c['predicted']:10.0f} {c['error']:+8.1%} {inf:>9}")
    within5 = sum(abs(c["error"]) <= 0.05 for c in cases)
    within10 = sum(abs(c["error"]) <= 0.10 for c in cases)
    print(f"within 5%: {within5}/{len(cases)}   within 10%: {within10}/{len(cases)}")
    return 0
