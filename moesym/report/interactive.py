"""``moesym report --interactive``: the step model in the browser, one offline what-if page.

The page carries the compiled step and memory models of the command's configuration as generated
JavaScript (:func:`js_source`: one ``const`` per unique node of the SymPy expression graph, as
:mod:`moesym.symbolic.compile` writes NumPy), the numbers ``predict`` binds to their other symbols, and a
small hand-written runtime (``interactive.js`` beside this module) that turns the outputs into the
report's numbers by the rules of :mod:`moesym.numbers.metrics` (tokens per GPU per second, what
bounds each key, the step's bound) and redraws the charts as plain SVG. Sliders and number boxes
move the workload (batch or prompt tokens, context; serve: requests in flight, ISL and OSL, the
steady state of :mod:`moesym.numbers.metrics` from the mixed and the decode step), the deployment
(GPUs, EP and TP among those of the command's structure class, micro-batches) and the hardware
numbers the expressions take (HBM bandwidth, tensor peaks, link bandwidths and latencies). The
charts: the breakdown coloured by bound, the sweep with the crossover, the timeline of one
steady-state layer (:func:`moesym.schedules.simulate` ported, on the operation and transfer
times of :func:`moesym.model.step.operation_times` that the generated step also returns), the
memory stack, and each hardware number's elasticity of the step time (a central difference of
the generated step in log x). No network, no server, no external script.

Structure the expressions do not carry is pre-generated, a bounded set the page lists: micro-batch
counts 1, 2 and the command's; where the layer has an all-to-all, the built-in schedules at the
counts they run and the A2A modes the deployment accepts (:func:`_variants`; names resolving to
one structure share one model, and a function two models share is written once); and only the
(GPUs, EP, TP) combinations of the command's structure class.

Inputs are checked as the CLI checks them before anything is computed (:func:`_rules`): whole
positive numbers, the deployment's sharding rules, the model's positions, the micro-batch rule
of the schedules, and weights that fit the GPU (derive's ``does_not_fit``); each rule's message
is written into the page by the Python that prints it on the command line, so the page shows
the CLI's one line in place of the numbers, never a NaN or an infinity.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from html import escape
from pathlib import Path
from types import SimpleNamespace

import sympy as sp

from .. import __version__
from ..derive import decode_point
from ..engines import host_overlapped
from ..errors import MoesymError
from ..io.resources import data_dir
from ..memory import memory_model
from ..memory.capacity import device_short
from ..model import overlap
from ..model.predictor import ep_class
from ..model.report import report_expressions
from ..model.step import build_step, operation_times
from ..numbers.bindings import _formats
from ..numbers.metrics import clamp_micro_batches, serve_chunk
from ..plan.rules import check_inputs, check_lengths, position_limit
from ..schedules import load, resolve_name
from ..specs.deployment import TOPOLOGY, VALIDITY, A2AMode, Phase, Workload, prefill_chunk
from ..symbolic.compile import _literal, graph_nodes
from ..symbolic.symbols import S
from ..symbolic.symtab import N
from ..terms.routing import group_var_factor
from .html import _CSS, edit_argv

__all__ = ["CliText", "interactive_html", "js_source", "predict_argv"]

# SymPy node -> JavaScript: n-ary folds and one-argument functions
_JS_REDUCE = {sp.Max: "Math.max", sp.Min: "Math.min"}
_JS_LOGIC = {sp.And: "&&", sp.Or: "||"}
_JS_UNARY = {sp.ceiling: "Math.ceil", sp.floor: "Math.floor", sp.Abs: "Math.abs",
             sp.exp: "Math.exp", sp.log: "Math.log", sp.sign: "Math.sign", sp.sin: "Math.sin",
             sp.cos: "Math.cos", sp.tanh: "Math.tanh"}
# moesym's special functions the runtime ports (moesym.numeric.special's NumPy versions)
_JS_SPECIAL = ("MaxBinomialMean", "erfinv", "loggamma", "LogInterp")
_JS_POW = {sp.Integer(-1): "1.0 / {0}", sp.S.Half: "Math.sqrt({0})",
           -sp.S.Half: "1.0 / Math.sqrt({0})"}
_JS_REL = {"==": "===", "!=": "!==", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _js_literal(x: sp.Basic) -> str:
    t = _literal(x)  # the NumPy printer's literal, in JavaScript's words
    return {"True": "true", "False": "false", "_nan": "NaN", "_inf": "Infinity",
            "(-_inf)": "(-Infinity)"}.get(t, t)


def _js_node(e: sp.Basic, a: list[str]) -> str:
    """JavaScript of one node whose arguments are already the tokens ``a``."""
    if e.is_Add:
        return " + ".join(a)
    if e.is_Mul:
        return " * ".join(a)
    if e.is_Pow:  # the powers the NumPy printer writes as a division or a root, the same way
        form = _JS_POW.get(e.args[1], "Math.pow({0}, {1})")
        return form.format(*a)
    if isinstance(e, sp.Piecewise):  # (value, condition) pairs; no condition true: NaN
        out = "NaN"
        for i in reversed(range(0, len(a), 2)):
            out = a[i] if a[i + 1] == "true" else f"({a[i + 1]} ? {a[i]} : {out})"
        return out
    if e.is_Relational:
        return f"({a[0]} {_JS_REL[e.rel_op]} {a[1]})"
    if isinstance(e, sp.ITE):
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if isinstance(e, sp.Not):
        return f"(!{a[0]})"
    for cls, op in _JS_LOGIC.items():
        if isinstance(e, cls):
            return "(" + f" {op} ".join(a) + ")"
    for cls, fn in _JS_REDUCE.items():
        if isinstance(e, cls):  # NumPy's maximum/minimum propagate NaN, as Math.max/min do
            return f"{fn}({', '.join(a)})"
    for cls, fn in _JS_UNARY.items():
        if isinstance(e, cls) and len(a) == 1:
            return f"{fn}({a[0]})"
    name = type(e).__name__
    if name in _JS_SPECIAL:  # the runtime's ports of moesym.numeric.special
        return f"{name}({', '.join(a)})"
    raise MoesymError(f"--interactive: the step model uses {type(e).__name__}, which the page's "
                      "JavaScript printer does not know; drop --interactive for this model")


def js_source(exprs: dict, name: str) -> tuple[str, list[str]]:
    """(``function name(s)`` returning ``{output: number}`` from ``s``, an object of numbers by
    printed symbol name; the symbol names it reads). One ``const`` per unique node, children
    first, so every shared subexpression is computed once for all outputs (a Piecewise's
    branches are all computed and a conditional picks, as NumPy's ``where`` does)."""
    symbols: list[str] = []

    def symbol(e) -> str:
        symbols.append(str(e))
        return f"s[{json.dumps(str(e))}]"

    tok: dict = {}
    roots = [sp.sympify(e) for e in exprs.values()]
    order, kids_of = graph_nodes(roots, tok, symbol, _js_literal)
    body = [f"const {tok[e]}={_js_node(e, [tok[k] for k in kids_of[e]])};" for e in order]
    outs = ",".join(f"{json.dumps(k)}:{tok[r]}" for k, r in zip(exprs, roots))
    return f"function {name}(s){{\n" + "\n".join(body) + f"\nreturn {{{outs}}};}}", symbols


# ---------------------------------------------------------------- the command of a point

_DROP = {"--out": 1, "--interactive": 0, "--report": 1, "--json": 0, "--tpot-ms": 1,
         "--ttft-ms": 1, "--percentile": 1, "--max-size": 1, "--disaggregate": 1, "--plot": 1,
         "--emit": 1, "--max-points": 1}


def predict_argv(argv, drop=()) -> list:
    """``argv`` (a report or optimize command, without ``moesym``) as ``moesym predict`` flags:
    the page's and the search's own flags dropped, and ``drop`` (flags the caller sets again)
    removed with their values."""
    return edit_argv(argv, "predict", {**_DROP, **{f: 1 for f in drop}})


def _hardware_arg(argv) -> str | None:
    """What the command gives ``--hardware``."""
    for i, a in enumerate(argv):
        if a == "--hardware" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--hardware="):
            return a.split("=", 1)[1]
    return None


def _hardware_file(argv) -> Path | None:
    """The hardware TOML the command names (a built-in one by name, or the given path)."""
    text = _hardware_arg(argv)
    if text is None:
        return None
    p = Path(text)
    if not (text.endswith(".toml") or p.is_file()):
        p = data_dir("hardware") / f"{text.lower()}.toml"
    return p if p.is_file() else None


# ---------------------------------------------------------------- the page's data

def _check(dep, wl) -> None:
    """Refuse what the page does not model, in one line."""
    why = ("a length distribution averages over lengths" if wl.lengths else
           "an expert cache adds a hit-rate model" if dep.expert_cache is not None else
           "a 2D mesh binds per-axis links" if dep.mesh is not None else
           "speculative decoding binds an acceptance model" if dep.mtp else None)
    if why:
        raise MoesymError(f"--interactive: {why}; the interactive page covers one decode, "
                          "prefill or serve configuration (drop --interactive for the static page)")


# ---------------------------------------------------------------- the CLI's checks, as data

@dataclass(frozen=True)
class CliText:
    """What the page takes from the command line to write its messages as ``moesym predict``
    does (given by :mod:`moesym.cli.report`, a later stage): each field's flag and the parser's
    positive-integer type."""

    flag_names: Mapping[str, str]
    positive_int: Callable[[str], int]

    def message(self, exc) -> str:
        """What ``moesym predict`` prints after ``moesym: error:`` for ``exc``: its fields
        named as the command line names them."""
        return MoesymError(str(exc)).named(self.flag_names)


#: sentinels the templates are made with: the Python that writes the CLI's message is run on
#: them, and each is then replaced by its ``{name}`` (numbers no real input reaches)
_SENTINEL = 987650000


def _template(cli: CliText, make, *names, text=()) -> str:
    """The message ``make(**values)`` gives (or raises) at a sentinel for each of ``names``
    (numbers) and ``text`` (strings), with each sentinel replaced by ``{name}``."""
    values = {n: _SENTINEL + 17 * i for i, n in enumerate(names)}
    values.update({n: f"SENTINEL{n.upper()}X" for n in text})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = make(**values)
    except (MoesymError, ValueError) as exc:
        out = exc
    msg = cli.message(out)
    for n, v in sorted(values.items(), key=lambda kv: -len(str(kv[1]))):
        msg = msg.replace(str(v), "{" + n + "}")
    # a number the message writes with decimals: {name:.Nf} (the page writes it so)
    return re.sub(r"\{(\w+)\}\.(0+)(?!\d)", lambda g: f"{{{g[1]}:.{len(g[2])}f}}", msg)


def _positive_template(cli: CliText, flag: str) -> str:
    """argparse's message for a value of ``flag`` that is not a positive integer (the CLI's
    positive-integer type), ``{value}`` for the text given."""
    def make(value):
        try:
            cli.positive_int(value)
        except argparse.ArgumentTypeError as exc:
            return "moesym predict: " + str(argparse.ArgumentError(
                argparse.Action([flag], flag.lstrip("-")), str(exc)))
        raise AssertionError("a sentinel is not a positive integer")

    return _template(cli, make, text=("value",))


def _fake_deployment(dep, **values):
    return SimpleNamespace(gpus=values["gpus"], tp=values["tp"], ep=values["ep"], pp=dep.pp,
                           stage_gpus=values["stage"], expert_tp=values["expert_tp"],
                           gpus_per_node=dep.gpus_per_node, derived=frozenset(), mesh=None,
                           redundant_experts=dep.redundant_experts,
                           a2a=SimpleNamespace(value=values["a2a"]))


def _rules(model, hw, dep, wl, cli: CliText) -> dict:
    """The checks the CLI runs on the page's inputs, each with the message it prints: templates
    the CLI's own Python writes (at sentinels, :func:`_template`), and the numbers the page's
    predicates take (``interactive.js`` holds one predicate per rule name of
    :data:`moesym.specs.deployment.TOPOLOGY` and ``VALIDITY``, in their order)."""

    sizes = ("gpus", "tp", "ep", "stage", "expert_tp")
    m = model

    def fake(**v):
        return _fake_deployment(dep, **v)

    def fake_model(**v):
        return SimpleNamespace(name=m.name, num_heads=v["heads"], o_groups=v["o_groups"],
                               num_experts=v["experts"], moe_intermediate_size=v["inter"])

    topology = [[name, _template(cli, lambda message=message, **v: message(fake(**v)), *sizes,
                                 text=("a2a",))]
                for name, _, message in TOPOLOGY]
    validity = [[name, _template(cli, lambda message=message, **v: message(fake_model(**v), fake(**v)),
                                 *sizes, "heads", "o_groups", "experts", "inter", text=("a2a",))]
                for name, _, message in VALIDITY]
    trained, scaled, _ = position_limit(model)
    serve = wl.phase is Phase.SERVE
    positions = None
    if trained:
        positions = _template(cli, lambda isl, osl, longest: check_lengths(
            model, wl.phase, context=isl, isl=isl, osl=osl), "isl", "osl", "longest")
        if serve:  # the longest sequence: the sentinels' sum, written by check_lengths
            positions = positions.replace(str(2 * _SENTINEL + 17), "{longest}")
        else:
            positions = positions.replace("{isl}", "{context}")

    def unfit(weights, used):  # derive's does_not_fit message at sentinel numbers
        return decode_point.unfit_message(weights * 1e9, device_short(used * 1e9, hw))

    chunk = None
    if wl.phase is Phase.PREFILL:
        chunk = _template(cli, lambda context, chunk: Workload(Phase.PREFILL, tokens=chunk,
                                                          context=context, chunk=chunk),
                          "context", "chunk")
    work_flag = "--tokens" if wl.phase is Phase.PREFILL else "--batch"
    lengths = ("--isl", "--osl") if serve else ("--context",)
    return {
        "positive": {f: _positive_template(cli, f) for f in
                     (work_flag, *lengths, "--gpus", "--ep", "--tp", "--micro-batches")},
        "topology": topology, "validity": validity,
        "model": {"heads": m.num_heads, "o_groups": m.o_groups if m.is_compressed else 0,
                  "moe": bool(m.is_moe), "experts": m.num_experts if m.is_moe else 0,
                  "inter": m.moe_intermediate_size if m.is_moe else 0,
                  "redundant": dep.redundant_experts, "pp": dep.pp,
                  "gpusPerNode": dep.gpus_per_node},
        "deepep": [a.value for a in A2AMode if a.is_deepep],
        "positions": scaled if trained else 0, "positionsMessage": positions,
        "chunkMessage": chunk,
        "unfit": _template(cli, unfit, "weights", "used"),
    }


class _Functions:
    """The page's generated functions, each written once: a function whose JavaScript another
    structure already wrote (the memory of two schedules, say) is that one, by name."""

    def __init__(self):
        self.names: dict = {}  # JavaScript text (unnamed) -> function name
        self.js: list = []

    def add(self, exprs: dict, values) -> tuple[str, dict]:
        """(name of the function of ``exprs``, the numbers of the symbols it reads)."""
        text, used = js_source(exprs, "__F__")
        name = self.names.get(text)
        if name is None:
            name = self.names[text] = f"f{len(self.names)}"
            self.js.append(text.replace("function __F__(", f"function {name}(", 1))
        return name, _numbers(values, used)


def _numbers(values, used) -> dict:
    return {str(s): float(v) for s, v in values.items() if str(s) in set(used)}


def _step_exprs(step) -> tuple[dict, dict | None]:
    """A step model's report expressions and the operation and transfer times of its overlap
    schedule (``tl/...``, and ``tlc/...`` with FP8 GEMMs capped where the layout caps them), and
    the schedule's layout as data; the layout is a note where there is no layer to draw (as
    :meth:`moesym.model.step.StepModel.timeline` refuses)."""

    exprs = {k: v for k, v in report_expressions(step).items()
             if not k.startswith(("kernel/", "work/"))}
    dep, wl = step.deployment, step.workload
    name = resolve_name(dep.overlap, dep.micro_batches, wl.phase.engine)
    sched = load(name)
    if not step.model.is_moe:
        return exprs, {"note": f"{step.model.name} is dense: no MoE layer and no overlap "
                               "schedule to draw"}
    if sched.ideal:
        return exprs, {"note": "this structure runs the ideal bound, not a schedule: no "
                               "operation order to draw (pick --overlap none, sbo or "
                               "tbo-sglang)"}
    lay = sched.layout(wl.phase.engine)
    exprs["tl/phi"] = overlap.sm_share(dep.resolved_a2a(wl.phase))
    sets = {"tl": step.terms}
    if lay.gemm_sms == "reserve_comm" and step.capped_terms is not None:
        sets["tlc"] = step.capped_terms()
    for tag, terms in sets.items():
        if terms is None:
            continue
        for op, e in operation_times(terms, S.micro_batches).items():
            exprs[f"{tag}/op/{op}"] = e
        for k in ("dispatch", "combine"):
            exprs[f"{tag}/tr/{k}"] = terms[k].total_s
    return exprs, {"name": name, "mb": lay.micro_batches, "delta": lay.delta_stages,
                   "stages": [list(s) for s in lay.stages], "capped": "tlc/tr/dispatch" in exprs}


def _variant(model, hw, d, wl, fns: _Functions, cli: CliText) -> dict:
    """The step and memory models of deployment ``d`` (its micro-batch count, schedule and A2A
    mode), as generated functions: the step (serve: the decode step, and the mixed step as
    ``mix``) and the memory, as :func:`moesym.model.predictor.predict` and ``serve_models``
    build them; ``{"refused": message}`` where ``d`` cannot run (a schedule of another
    micro-batch count), the message the CLI prints for it (the page shows it)."""

    try:
        d.check_overlap(wl.phase)
        if wl.phase is Phase.SERVE:
            d.check_overlap(Phase.DECODE)
    except MoesymError as exc:  # the CLI's refusal, as it prints it
        return {"refused": cli.message(exc)}
    out: dict = {"fn": {}}
    if wl.phase is Phase.SERVE:
        chunk = serve_chunk(wl.chunk, hw.hbm_capacity_bytes, d.dp, d.engine)
        mix = build_step(model, hw, d, replace(wl, chunk=chunk))
        out["fn"]["mix"], out["mix"] = fns.add(_step_exprs(mix)[0], mix.values)
        opts = dict(d.memory_options)
        opts.setdefault("prefill_tokens", chunk)  # the chunk's activations beside the decode's
        d = replace(d, memory_options=tuple(sorted(opts.items())))
        wl = Workload(Phase.DECODE, batch=wl.batch, context=wl.context)
    step = build_step(model, hw, d, wl)
    exprs, out["timeline"] = _step_exprs(step)
    out["fn"]["step"], out["step"] = fns.add(exprs, step.values)
    mm = memory_model(model, hw, d, wl)
    e = mm.expressions
    mem = {"memory_bytes": mm.used_expr(), "weights": sum(e["weights"].values()),
           "kv": e["kv"], "activations": sum(e["activation"].values()),
           "workspaces": sum(e["workspace"].values(), sp.Integer(0)),
           "comm buffers": sum(e["comm"].values()), "runtime reserve": e["reserve"]}
    out["fn"]["memory"], out["memory"] = fns.add(mem, mm.values)
    return out


_SCHEDULES = ("auto", "none", "sbo", "tbo-sglang", "ideal")  # the schedules a page may offer
_A2A_MODES = ("auto", "allgather", "deepep-normal", "deepep-ll")  # (a 2D mesh is refused)


def _structures(model, hw, dep, wl) -> tuple[list, list, list]:
    """(micro-batch counts, schedules, A2A modes) the page offers: micro-batches 1, 2 and the
    command's; where the layer has an all-to-all (MoE, EP > 1), the command's schedule and A2A
    mode and the built-in others this deployment accepts."""

    mbs = sorted({1, 2, dep.micro_batches})
    if not model.is_moe or dep.ep == 1:
        return mbs, [dep.overlap], [dep.a2a.value]
    modes = []
    for m in dict.fromkeys((dep.a2a.value, *_A2A_MODES)):
        try:
            check_inputs(model, hw, replace(dep, a2a=A2AMode(m)), wl)
        except (MoesymError, ValueError):
            continue
        modes.append(m)
    return mbs, list(dict.fromkeys((dep.overlap, *_SCHEDULES))), modes


def _variants(model, hw, dep, wl, fns: _Functions, cli: CliText) -> dict:
    """``{"MB/SCHEDULE/A2A": variant}`` of every structure the page offers (one that cannot
    run: the CLI's refusal, :func:`_variant`). Two
    names of one structure (``auto`` and the schedule or mode it resolves to) share one
    variant, built once."""

    mbs, schedules, modes = _structures(model, hw, dep, wl)
    phases = [wl.phase, Phase.DECODE] if wl.phase is Phase.SERVE else [wl.phase]
    built: dict = {}
    out = {}
    for mb in mbs:
        for ov in schedules:
            for a2a in modes:
                d = replace(dep, micro_batches=mb, overlap=ov, a2a=A2AMode(a2a))
                same = (mb, tuple(resolve_name(ov, mb, p.engine) for p in phases),
                        tuple(d.resolved_a2a(p) for p in phases))
                if same not in built:
                    built[same] = _variant(model, hw, d, wl, fns, cli)
                out[f"{mb}/{ov}/{a2a}"] = built[same]
    return out


def _combos(model, hw, dep, wl) -> list:
    """(GPUs, EP, TP) a page of this structure class offers: GPUs the command's times a power of
    two (1/8 to 8), every EP and TP that shards the model and keeps the class."""

    out = []
    for k in range(-3, 4):
        g = dep.gpus * 2 ** k if k >= 0 else dep.gpus // 2 ** -k
        if g < 1 or (k < 0 and dep.gpus % 2 ** -k):
            continue
        for ep in (e for e in range(1, g + 1) if g % e == 0):
            for tp in (t for t in range(1, g + 1) if g % t == 0):
                if (tp == 1) != (dep.tp == 1):
                    continue
                try:
                    d = replace(dep, gpus=g, ep=ep, tp=tp)
                    if ep_class(d) != ep_class(dep):
                        continue
                    check_inputs(model, hw, d, wl)
                except (MoesymError, ValueError):
                    continue
                out.append([g, ep, tp])
    return out


def _hardware_inputs(model, hw, dep, static: dict) -> list:
    """The hardware numbers the step model takes, each with the symbols it sets and where it
    sits in the hardware TOML (section, key, factor from the file's unit to SI)."""

    _, _, compute = _formats(model, hw, dep)
    out = [{"id": "hbm", "label": "HBM bandwidth", "unit": "TB/s", "scale": 1e12,
            "symbols": [N.hbm_bw], "toml": ["", "hbm_bandwidth_TBps"]},
           {"id": "up", "label": "scale-up bandwidth (per direction)", "unit": "GB/s",
            "scale": 1e9, "symbols": [N.bw_up], "toml": ["interconnect", "scale_up_GBps"]},
           {"id": "out", "label": "scale-out bandwidth (per direction)", "unit": "GB/s",
            "scale": 1e9, "symbols": [N.bw_out], "toml": ["interconnect", "scale_out_GBps"]},
           {"id": "lat_up", "label": "scale-up latency", "unit": "us", "scale": 1e-6,
            "symbols": [N.lat_up], "toml": ["latency_us", "scale_up"]},
           {"id": "lat_out", "label": "scale-out latency", "unit": "us", "scale": 1e-6,
            "symbols": [N.lat_out], "toml": ["latency_us", "scale_out"]}]
    peaks: dict = {}
    for sym, fmt in ((N.flops_gemm, compute["attn"]), (N.flops_moe, compute["moe"]),
                     (N.flops_dense, compute["dense"]), (N.flops_attn, "bf16")):
        if sym in static and fmt in hw.peaks_flops and static[sym] == hw.peaks_flops[fmt]:
            peaks.setdefault(fmt, []).append(sym)
    for fmt, syms in sorted(peaks.items()):
        out.append({"id": f"peak_{fmt}", "label": f"{fmt} tensor peak", "unit": "TFLOP/s",
                    "scale": 1e12, "symbols": syms, "toml": ["peak_TFLOPs", fmt]})
    if hw.host_unified:  # its host link is half the HBM bandwidth: one number, not a slider
        out = out[1:]
    return [h for h in out if all(s in static for s in h["symbols"])]


def _data(model, hw, dep, wl, argv, cli: CliText) -> dict:

    _check(dep, wl)
    dep = clamp_micro_batches(dep, wl)
    fns = _Functions()
    variants = _variants(model, hw, dep, wl, fns, cli)
    refused = {k: v["refused"] for k, v in variants.items() if "refused" in v}
    variants = {k: v for k, v in variants.items() if "refused" not in v}
    structures = list({id(v): v for v in variants.values()}.values())
    index = {id(v): i for i, v in enumerate(structures)}
    start = f"{dep.micro_batches}/{dep.overlap}/{dep.a2a.value}"
    static = variants[start]["step"]
    mbs, schedules, modes = _structures(model, hw, dep, wl)
    combos = _combos(model, hw, dep, wl)
    experts = model.num_experts + dep.redundant_experts
    rho = ({e: group_var_factor(model, e) for e in {c[1] for c in combos}}
           if N.group_var in static and experts else {})
    hw_inputs = _hardware_inputs(model, hw, dep, static)
    for h in hw_inputs:
        h["value"] = static[h["symbols"][0]] / h["scale"]
    hw_file = _hardware_file(argv)
    prefill = wl.phase is Phase.PREFILL
    given_chunk = bool(prefill and wl.chunk != prefill_chunk(wl.tokens, wl.context))
    base = predict_argv(argv, drop=("--batch", "--tokens", "--context", "--gpus", "--ep", "--tp",
                                    "--micro-batches", "--hardware", "--chunk", "--phase", "--a2a",
                                    "--overlap", "--pp", "--cp", "--isl", "--osl"))
    serve = {}
    if wl.phase is Phase.SERVE:  # the chunk each (GPUs, TP) runs: given, or the engine's
        serve = {"chunks": [serve_chunk(wl.chunk, hw.hbm_capacity_bytes, g // tp, dep.engine)
                            for g, _, tp in combos],
                 "chunkGiven": wl.chunk, "isl": wl.isl, "osl": wl.osl}
    base += ["--pp", str(dep.pp), "--cp", str(dep.cp)]
    return {
        "version": __version__, "phase": wl.phase.value, "model": model.name, "hw": hw.name,
        "command": shlex.join(["moesym", *argv]), "base": base,
        "calibration": hw.kernel.get("source", "") or "",
        "structures": structures, "variants": {k: index[id(v)] for k, v in variants.items()},
        "mbs": [m for m in mbs if any(k.startswith(f"{m}/") for k in variants)],
        "schedules": schedules, "modes": modes,
        "combos": combos, "rho": {str(k): v for k, v in rho.items()},
        "hardware": hw_inputs, "hwName": _hardware_arg(argv) or hw.name,
        "hwToml": hw_file.read_text(encoding="utf-8") if hw_file else None,
        "layers": model.moe_layers if model.is_moe else model.dense_layers,
        "isMoe": model.is_moe, "pp": dep.pp, "cp": dep.cp,
        "hostOverlapped": bool(host_overlapped(dep)),
        "capacity": hw.hbm_capacity_bytes,
        "chunk": wl.chunk if given_chunk else 0,
        "start": {"work": wl.tokens if prefill else wl.batch, "context": wl.context,
                  "gpus": dep.gpus, "ep": dep.ep, "tp": dep.tp, "mb": dep.micro_batches,
                  "overlap": dep.overlap, "a2a": dep.a2a.value},
        "serve": serve, "refused": refused, "rules": _rules(model, hw, dep, wl, cli),
    }, "\n".join(fns.js)


def interactive_html(model, hw, dep, wl, argv=(), optimize_result=None, *,
                     cli: CliText) -> str:
    """The interactive page of ``model`` on ``hw`` under ``dep`` and ``wl`` (``argv``: the
    command that made it, without ``moesym``; ``cli``: the command line's flag names and
    number type, its messages written as the CLI writes them)."""
    data, js = _data(model, hw, dep, wl, list(argv), cli)
    prefill, serve = wl.phase is Phase.PREFILL, wl.phase is Phase.SERVE
    work = ("prompt tokens per rank per step", "--tokens") if prefill else \
        ("requests in flight per rank (batch)" if serve else "requests per rank (batch)",
         "--batch")
    s = data["start"]
    lengths = (_slider("isl", "prompt tokens (ISL)", wl.isl, 16, max(8 * wl.isl, 32768), 1)
               + _slider("osl", "output tokens (OSL)", wl.osl, 1, max(8 * wl.osl, 32768), 1)
               if serve else
               _slider("context", "context (tokens)", s["context"], 16,
                       max(8 * s["context"], 131072), 1))
    title = f"{model.name} on {hw.name}, {wl.phase.value}: what if"
    hw_rows = "".join(_slider(h["id"], f"{h['label']} ({h['unit']})", h["value"],
                              h["value"] / 4, h["value"] * 4, "any")
                      for h in data["hardware"])
    runs = "; ".join(f"{m} micro-batch{'es' if m > 1 else ''}: " + ", ".join(
        o for o in data["schedules"] if any(k.startswith(f"{m}/{o}/") for k in data["variants"]))
        for m in data["mbs"])
    combos = "; ".join(f"{g}/{e}/{t}" for g, e, t in data["combos"])
    calibration = data["calibration"] or "no [kernel] fit in the hardware file: the defaults"
    provenance = (f"moesym {escape(data['version'])}; made by <code>{escape(data['command'])}"
                  f"</code>; calibration: {escape(calibration)}")
    return f"""<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>
<title>moesym: {escape(title)}</title><style>{_CSS}{_EXTRA_CSS}</style></head><body>
<h1>{escape(title)}</h1>
<p class='note'>{provenance}. The numbers below are <code>moesym predict</code>'s at the point
the inputs give: the compiled step and memory models run here as JavaScript, offline.</p>
<div class='cols'><div class='left'>
<h2>Inputs</h2><div class='grid'>
{_slider("work", work[0], s["work"], 1, max(64 * s["work"], 1024), 1)}
{lengths}
<label>GPUs / EP / TP</label><span><select id='combo'>{"".join(
        f"<option value='{i}'{' selected' if c == [s['gpus'], s['ep'], s['tp']] else ''}>"
        f"{c[0]} GPUs, EP {c[1]}, TP {c[2]}</option>" for i, c in enumerate(data["combos"]))}
</select></span><span></span>
{_select("mb", "micro-batches", data["mbs"], s["mb"])}
{_select("overlap", "overlap schedule", data["schedules"], s["overlap"])}
{_select("a2a", "A2A mode", data["modes"], s["a2a"])}
{hw_rows}</div>
<details class='note'><summary>What the page offers</summary>Pre-generated structure
({len(data["structures"])} models): the overlap
schedules each micro-batch count runs ({escape(runs)}; fewer micro-batches run when the work is
smaller, as predict clamps, and a schedule that cannot is refused, as predict refuses it), with
A2A modes {escape(", ".join(data["modes"]))}; GPUs/EP/TP of this deployment's structure class
({escape(combos)}). Other models, GPUs, phases or a user schedule file: generate another
page.</details>
<p id='error' class='note' style='color:#aa3377'></p>
<h2>Prediction</h2><table>
<tr><th>step time</th><td class='n'><output id='step_time_s'></output></td></tr>
<tr><th>tokens / GPU / s</th><td class='n'><output id='tokens_per_gpu_s'></output></td></tr>
<tr><th>{'TTFT' if prefill else 'TPOT'}</th><td class='n'><output id='latency_s'></output></td></tr>
<tr><th>bound</th><td><output id='bound'></output></td></tr>
<tr><th>memory per GPU</th><td class='n'><output id='memory_bytes'></output></td></tr></table>
<p>Command for this point: <button id='copy' type='button'>copy</button></p>
<pre id='cmd'></pre>
<p class='note'>Redraw: <output id='redraw_ms'></output> ms.</p></div><div class='right'>
<h2>Where the time goes</h2><div id='breakdown'></div>
<h2>Sweep over the {'tokens' if prefill else 'batch'}</h2><div id='sweep'></div>
<h2>One steady-state layer</h2><div id='timeline'></div>
<h2>Memory</h2><div id='memory'></div>
<h2>Sensitivities</h2><div id='sensitivity'></div></div></div>
<script>
{js}
const D = {json.dumps(data)};
const FLAG = {json.dumps(work[1])};
{_runtime()}
</script></body></html>"""


def _select(ident: str, label: str, options, value) -> str:
    opts = "".join(f"<option{' selected' if str(o) == str(value) else ''}>{escape(str(o))}"
                   "</option>" for o in options)
    return (f"<label for='{ident}'>{escape(label)}</label><span><select id='{ident}'>{opts}"
            "</select></span><span></span>")


def _slider(ident: str, label: str, value, lo, hi, step) -> str:
    return (f"<label for='{ident}'>{escape(label)}</label>"
            f"<input type='range' id='{ident}_r' min='{lo!r}' max='{hi!r}' step='{step}' "
            f"value='{value!r}'><input type='number' id='{ident}' min='{lo!r}' step='{step}' "
            f"value='{value!r}'>")


def _runtime() -> str:
    """The page's hand-written JavaScript (``interactive.js`` beside this module)."""
    return Path(__file__).with_name("interactive.js").read_text(encoding="utf-8")


_EXTRA_CSS = """
.grid{display:grid;grid-template-columns:13em 1fr 7em;gap:.3em .6em;align-items:center}
input[type=number]{width:6.5em}input[type=range]{width:100%}
output{font-variant-numeric:tabular-nums}
@media (min-width:1240px){body{max-width:1260px}.cols{display:grid;gap:1.5em;
grid-template-columns:minmax(0,1fr) 730px}.left{position:sticky;top:0;align-self:start;
max-height:100vh;overflow-y:auto}}
"""

