"""``moesym list {models,hardware,engines}``: what is built in, where each figure comes from, how
each GPU is calibrated, and which engines run where."""

from __future__ import annotations

import warnings

from ..attention.counts import active_params, total_params
from ..engines import builtin_engines, default_engine, load_engine
from ..readers.model import builtin_models, load_model
from ..report.validation import kernel_heldout
from ..specs.hardware import VENDORS, builtin_hardware, load_hardware
from . import COMMANDS
from .common import add_json, emit_json

__all__ = ["register", "calibration_state"]


def register(sub) -> None:
    p = sub.add_parser("list", help=COMMANDS["list"])
    p.add_argument("what", choices=("models", "hardware", "engines"))
    add_json(p)
    p.set_defaults(func=run)


def calibration_state(hw) -> str:
    """``fitted`` (its [kernel] table was fitted on its own measured kernels), ``transferred``
    (copied from another GPU's fit), or ``datasheet only`` (no [kernel] table: peaks and
    efficiency fractions only)."""
    source = str(dict(hw.kernel).get("source", "")) if hw.kernel else ""
    if not source:
        return "datasheet only"
    return "transferred" if source.startswith("transferred") else "fitted"


def _hardware_rows() -> list[dict]:

    table = kernel_heldout()["rows"]  # the held-out medians validate --kernels prints
    rows = []
    for name in builtin_hardware():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hw = load_hardware(name)
        kernel = dict(hw.kernel) if hw.kernel else {}
        state = calibration_state(hw)
        rows.append({"name": name, "description": hw.description if hasattr(hw, "description")
                     else "", "kernel_calibration": state, "calibration": state,
                     "kernel_source": str(kernel.get("source", "")),
                     "source": str(kernel.get("source", "")),
                     "engine": str(kernel.get("engine", "")),
                     "fit_date": str(kernel.get("fit_date", "")),
                     # held-out median |model / measured - 1| per kernel class (fitted GPUs)
                     "kernel_error": _heldout(name, kernel, table) if state == "fitted" else None,
                     "vendor": hw.vendor, "default_engine": default_engine(hw),
                     "serving_efficiency": hw.efficiency.serving,
                     "peaks_TFLOPs": {k: v / 1e12 for k, v in hw.peaks_flops.items()},
                     "hbm_TBps": hw.hbm_bw_Bps / 1e12, "hbm_GB": hw.hbm_capacity_bytes / 1e9})
    return rows


def _heldout(name: str, kernel: dict, table: list[dict]) -> dict | None:
    """Held-out median per kernel class of a fitted GPU, as ``moesym validate --kernels`` prints
    it (bench_data/kernel_heldout.json: GEMM, attention, and each fused-MoE backend the tables
    measure, ``moe BACKEND``); the [kernel] table's own record where the table has no rows."""
    out: dict = {}
    for r in table:
        if r["gpu"] == name and r["class"] in ("gemm", "attention", "moe"):
            key = r["class"] if r["class"] != "moe" else f"moe {r['backend']}"
            out.setdefault(key, float(r["median"]))
    if out:
        return out
    rec = kernel.get("heldout_error")
    return {k: float(v) for k, v in rec.items()} if rec else None


def _model_rows() -> list[dict]:
    rows = []
    for name in builtin_models():
        m = load_model(name)
        rows.append({"name": name, "source": m.source, "attention": m.attention,
                     "experts": m.num_experts, "experts_per_token": m.experts_per_token,
                     "total_params_B": total_params(m) / 1e9,
                     "active_params_B": active_params(m) / 1e9})
    return rows


def _engine_rows() -> list[dict]:
    """Each built-in engine profile: version read, the device makers it runs on, and the
    built-in devices that time it when --engine is not given (their ``default_engine``)."""

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hws = [load_hardware(n) for n in builtin_hardware()]
    rows = []
    for name in builtin_engines():
        p = load_engine(name)
        rows.append({"name": name, "version": p.version, "description": p.description,
                     "runs_on": [VENDORS[v] for v in p.runs_on] or ["any"],
                     "default_on": [h.name for h in hws if default_engine(h) == name]})
    return rows


def run(args) -> int:
    rows = {"hardware": _hardware_rows, "engines": _engine_rows}.get(args.what, _model_rows)()
    if args.json:
        emit_json({args.what: rows})
        return 0
    if args.what == "engines":
        w = max(len(r["name"]) for r in rows)
        for r in rows:
            print(f"{r['name']:<{w}} {r['version']}: {r['description']}")
            print(f"{'':<{w}} runs on {', '.join(r['runs_on'])}; timed without --engine on: "
                  f"{', '.join(r['default_on']) or 'none'}")
        return 0
    if args.what == "hardware":
        for r in rows:
            peaks = ", ".join(f"{k} {v:g}" for k, v in r["peaks_TFLOPs"].items())
            print(f"{r['name']:<13} kernel model: {r['kernel_calibration']:<14} "
                  f"serving efficiency {r['serving_efficiency']:.3f}  {r['hbm_GB']:.0f} GB at "
                  f"{r['hbm_TBps']:.2f} TB/s, {peaks} TFLOP/s; engine {r['default_engine']}")
            if r["calibration"] != "datasheet only":
                fit = ", ".join(x for x in (r["engine"], r["fit_date"]) if x)
                err = ("; held-out error " + ", ".join(f"{k} {v:.0%}" for k, v in
                                                       r["kernel_error"].items())
                       if r["kernel_error"] else "")
                print(f"{'':<13} {r['source']}{f' [{fit}]' if fit else ''}{err}")
        print("fitted: [kernel] table fitted on that GPU's measured kernels (source, engine, "
              "date; held-out error: median |model / measured - 1| on shapes left out of the "
              "fit); transferred: another GPU's fit reused (predict says so); serving "
              "efficiency: the end-to-end fit on published cases, 1 where none lowers it")
        return 0
    for r in rows:
        moe = (f"{r['experts']} experts top-{r['experts_per_token']}" if r["experts"]
               else "dense")
        print(f"{r['name']:<16} {r['total_params_B']:7.1f}B total {r['active_params_B']:6.1f}B "
              f"active  {r['attention']:<3}  {moe:<20}  {r['source']}")
    return 0
