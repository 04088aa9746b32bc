"""``moesym derive``: one subcommand per answer of :mod:`moesym.derive`'s registry, printed as
its exact value, closed forms (LaTeX and SymPy) and elasticities.

The registry (:data:`moesym.derive.registry.ANSWERS`) says what each answer takes; here each kind
of input (a decode point, a serving steady state, one step) becomes its flags and its checks,
and each kind of answer (a closed form, elasticities, a mesh table) its printing. An answer's
module, which imports SymPy, is imported only when the answer is solved, not when a stored one
is read back (:func:`answered`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from ..derive.registry import ANSWERS, Answer
from ..errors import MoesymError
from ..io.progress import status
from ..model.predictor import files_of
from ..numeric import cache
from ..plan.rules import check_inputs, check_lengths
from ..report.plots import term_roofline
from ..specs.deployment import Phase, Workload
from . import COMMANDS
from .common import (add_deployment, add_json, add_model_hw, add_serve_lengths, add_workload,
                     deployment_from, emit_json, model_hw_from, plain, positive_float,
                     positive_int, probability, workload_from)

__all__ = ["register", "answered", "show"]


def register(sub) -> None:
    p = sub.add_parser("derive", help=COMMANDS["derive"])
    s = p.add_subparsers(dest="what", parser_class=type(p))
    for a in ANSWERS:
        q = s.add_parser(a.command, help=a.help)
        inputs = _INPUTS[a.inputs]
        inputs.flags(q)
        add_json(q)
        if not inputs.printing_first:
            _own_flags(q, a)
        for name, kw in _VIEWS[a.shows].flags:
            q.add_argument(name, **kw)
        if inputs.printing_first:
            _own_flags(q, a)
        if a.plot:
            q.add_argument("--plot", default=None, metavar="FILE.png",
                           help=f"roofline of each term against batch with the {a.command} "
                                "marked")
        q.set_defaults(func=partial(_ask, a))

    g = s.add_parser("pages", help="regenerate the derivations/ markdown pages")
    g.add_argument("--out", default="derivations", help="folder to write (default: derivations)")
    g.set_defaults(func=_pages, out_is_folder=True)


_TYPES = {"positive_float": positive_float, "positive_int": positive_int}


def _own_flags(p, a: Answer) -> None:
    """The answer's own flags (:class:`moesym.derive.registry.Flag`) as argparse arguments."""
    group = None
    for f in a.flags:
        kw = {k: v for k, v in (("help", f.help), ("default", f.default), ("metavar", f.metavar),
                                ("nargs", f.nargs), ("dest", f.dest)) if v is not None}
        if f.type == "switch":
            kw["action"] = "store_true"
        elif f.type in _TYPES:
            kw["type"] = _TYPES[f.type]
        if f.required:
            kw["required"] = True
        if f.exclusive:
            group = group or p.add_mutually_exclusive_group(required=True)
            group.add_argument(f.name, **kw)
        else:
            p.add_argument(f.name, **kw)


# ------------------------------------------------------------------ inputs: flags and checks

def _decode_flags(p) -> None:
    """A decode point: every model, hardware, workload and deployment flag predict takes (the
    step model an answer solves is the one predict evaluates)."""
    add_model_hw(p)
    add_workload(p, phase=False)
    add_deployment(p)


def _serve_flags(p) -> None:
    """The steady state of aggregated serving: the request lengths and the prefix cache."""
    add_model_hw(p)
    g = p.add_argument_group("workload")
    add_serve_lengths(g, "the mixed steps' chunk (")
    g.add_argument("--prefix-hit", type=probability, default=0.0, metavar="F",
                   help="prefill, serve: share of each prompt found in the prefix cache (not "
                        "recomputed; attention still reads its KV)")
    add_deployment(p)


def _step_flags(p) -> None:
    """One prefill or decode step (--phase, default decode), with every model, hardware,
    workload and deployment flag predict takes."""
    add_model_hw(p)
    add_workload(p, phase=True, required_phase=False)
    add_deployment(p)


def _one_step_only(args) -> None:
    """derive solves one prefill or decode step: the serving steady state, length
    distributions and the prefix cache are predict's, refused here rather than ignored."""
    given = [f for f, on in (("--phase serve", getattr(args, "phase", None) == "serve"),
                             ("--context-dist", getattr(args, "context_dist", None) is not None),
                             ("--isl-dist", getattr(args, "isl_dist", None) is not None),
                             ("--isl", getattr(args, "isl", None) is not None),
                             ("--osl", getattr(args, "osl", None) is not None),
                             ("--prefix-hit", bool(getattr(args, "prefix_hit", 0.0)))) if on]
    if given:
        raise MoesymError(f"{given[0]}: moesym derive solves one prefill or decode step; the "
                          "serving steady state, length distributions and the prefix cache are "
                          "moesym predict's (and sweep's)")


def _decode_question(args, a: Answer) -> tuple:
    """(model, hardware, deployment, workload) of a decode question; prefill flags are said to
    have no effect rather than ignored in silence, and a pinned overlap schedule must run the
    deployment's micro-batch count (the answer's own, where it sets one) in decode."""
    m, h = model_hw_from(args)
    _one_step_only(args)
    for flag in ("tokens", "chunk"):
        if getattr(args, flag, None) is not None:
            warnings.warn(f"--{flag} has no effect: derive {args.what} is a decode question "
                          "(batch, context); derive solve --phase prefill answers prefill "
                          "steps", stacklevel=2)
    dep = deployment_from(args).with_(**dict(a.sets))
    _check(args, dep, m, h)
    dep.check_overlap(Phase.DECODE)
    return m, h, dep, Workload(Phase.DECODE, batch=args.batch or 1, context=args.context)


def _serve_question(args, a: Answer) -> tuple:
    """(model, hardware, deployment, workload) of a serving steady state."""
    for flag in ("isl", "osl"):
        if getattr(args, flag) is None:
            raise MoesymError(f"--{flag} is missing: derive {args.what} needs the request "
                              "lengths (--isl N --osl N)")
    m, h = model_hw_from(args)
    dep = deployment_from(args)
    _check(args, dep, m, h)
    check_lengths(m, "serve", isl=args.isl, osl=args.osl)
    return m, h, dep, Workload(Phase.SERVE, batch=1, isl=args.isl, osl=args.osl,
                               chunk=args.chunk or 0, prefix_hit=args.prefix_hit)


def _step_question(args, a: Answer) -> tuple:
    """(model, hardware, deployment, workload) of one prefill or decode step."""
    _one_step_only(args)
    m, h = model_hw_from(args)
    dep = deployment_from(args)
    _check(args, dep, m, h)
    return m, h, dep, workload_from(args)


def _check(args, dep, model, hw) -> None:
    """The validation stage (:func:`moesym.plan.rules.check_inputs`) on the deployment and
    the lengths given (derive's questions search batch and EP themselves)."""
    check_inputs(model, hw, dep, sharding=False)
    context = getattr(args, "context", None)
    if context:
        check_lengths(model, getattr(args, "phase", None) or "decode", context=context)


@dataclass(frozen=True)
class _Inputs:
    """A kind of input: its flags, its question (the checked model, hardware, deployment and
    workload), and whether --help lists the printing flags before the answer's own."""

    flags: Callable
    question: Callable
    printing_first: bool = False


_INPUTS = {"decode": _Inputs(_decode_flags, _decode_question, printing_first=True),
           "serve": _Inputs(_serve_flags, _serve_question),
           "step": _Inputs(_step_flags, _step_question)}


def _ask(a: Answer, args) -> int:
    """One derive subcommand: its question checked, its answer (solved, or read back from the
    cache), an optional plot, and the answer printed."""
    m, h, dep, wl = _INPUTS[a.inputs].question(args, a)
    status(f"derive {a.command}: " + a.status.format(**vars(args)), not args.json)
    view = _VIEWS[a.shows]
    rec = answered(args, m, h, dep, lambda: a.load().ask(m, h, dep, wl, args), view.record)
    if a.plot and args.plot:
        _plot(a, rec, args, m, h, dep)
    return view.show(rec, args, m, h)


def _plot(a: Answer, rec: dict, args, m, h, dep) -> None:
    """Each term's roofline against batch with the answer marked. The step model (SymPy) and
    the plots (matplotlib) are imported on this path only: a stored answer is read back
    without them."""
    from ..model.step import build_step
    step = build_step(m, h, dep, Workload(Phase.DECODE, batch=1, context=args.context))
    value = rec["answer"]["value"]
    term_roofline(step, args.plot, marks={} if value is None else {a.command: value * dep.tp})


# ------------------------------------------------------------------ answers: stored and printed

_SHORT = 400  # characters of a closed form printed without --show-expr


def _short(text: str, args) -> str:
    if len(text) > _SHORT and not args.show_expr:
        return text[:_SHORT] + f" ... ({len(text)} characters; --show-expr or --json)"
    return text


def _elasticity_rows(rows) -> list[str]:
    """One line per (symbol name, elasticity, meaning)."""
    return [f"{s:>10} {e:+9.4f}  {meaning}" for s, e, meaning in rows]


def _meanings(symbols) -> list[str]:
    # the symbols' table imports SymPy: read on a fresh solve only, never on a read back
    from ..symbolic.symbols import INFO

    return [INFO[s].meaning if s in INFO else "" for s in symbols]


#: what of a derive command's flags says how its answer is printed, not what it is
_PRINTING = ("func", "argv", "json", "show_expr", "all_sensitivities", "plot", "top")


def answered(args, model, hw, dep, solve, record=None) -> dict:
    """The record (``record(solve())``, as plain data; by default :func:`_record` of a closed
    form) of the derive answer for this question, from the disk cache of compiled models
    (:mod:`moesym.numeric.cache`) when the same question was answered before: the same flags,
    model, hardware and deployment, the files the deployment names and the package's source.
    Warnings given while solving are kept with the answer and said again either way; an error
    is never stored."""
    question = {k: v for k, v in sorted(vars(args).items()) if k not in _PRINTING}
    key = cache.key_for(repr(("derive", question, model, hw, dep, *files_of(dep))))
    entry = cache.load(key)
    if entry is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rec = plain((record or _record)(solve()))
        entry = {"derive_answer": rec,
                 "warnings": list(dict.fromkeys(str(w.message) for w in caught))}
        cache.store(key, entry)
    for text in entry["warnings"]:
        warnings.warn(text, stacklevel=2)
    return entry["derive_answer"]


def _record(cf) -> dict:
    """A derive answer as plain data: its JSON (``ClosedForm.as_dict``) and what the text adds
    (the title, the unknown's name, whether it has a closed form, each elasticity's meaning)."""
    f = cf.smooth
    return {"answer": cf.as_dict(), "title": cf.title,
            "variable": str(f.variable) if f is not None else "",
            "has_expr": cf.expr is not None, "meanings": _meanings(s for s, _ in cf.sensitivity)}


def show(rec: dict, args, model=None, hw=None) -> int:
    """The three layers of a derive answer (a :func:`_record`): the exact answer on predict's
    model, the regime's smooth closed form with the target in it (and the gap between them),
    what pins the exact answer on a step; then the answer's top sensitivities and a legend of
    the symbols."""
    a = rec["answer"]
    if args.json:
        emit_json(a)
        return 0
    print(rec["title"])
    value = "none" if a["value"] is None else f"{a['value']:.6g}"  # none in the searched range
    print(f"  exact answer : {value}   (the {a['timing']} model that predict evaluates)")
    f = a["smooth"]
    if f is not None and f["sympy"]:
        print(f"  smooth form  : {rec['variable']}* = {f['skeleton']}   (the regime at the answer, "
              "tile and wave counts continuous)")
        for name, p in f["placeholders"].items():
            print(f"      {name:>4} = {p['value']:.6g} = {_short(p['sympy'], args)}")
        print(f"               = {f['value']:.6g}; gap to the exact answer "
              f"{a['value'] - f['value']:+.4g}: the exact model counts whole tiles, waves and "
              "requests")
    elif f is not None:
        print(f"  smooth form  : none ({f['note']})")
    if rec["has_expr"]:
        print(f"  closed form  : {_short(a['sympy'], args)}")
        if a["closed_form_value"] is not None:
            print(f"               = {a['closed_form_value']:.6g} ({a['kind']}: "
                  f"{_kind_text(a['kind'])})")
    elif f is None:
        print("  closed form  : none")
    for line in a["pin"]:
        print(f"  pinned by    : {line}")
    if a["condition"] != "True" and (len(a["condition"]) <= _SHORT or args.show_expr):
        print(f"  valid        : {a['condition']}")
    if a["regime"]:
        print("  regime       : " + ", ".join(f"{k} {v}" for k, v in a["regime"].items()))
    if a["sensitivity"]:
        rows = [(x["symbol"], x["elasticity"], m)
                for x, m in zip(a["sensitivity"], rec["meanings"])]
        top = rows if getattr(args, "all_sensitivities", False) else rows[:3]
        print("  sensitivity  : d ln answer / d ln x on the smooth form")
        for row in _elasticity_rows(top):
            print("     " + row)
    if a["note"]:
        print(f"  note         : {a['note']}")
    names = a["legend"]
    if names:
        print("  legend       : " + "; ".join(names) if args.show_expr else
              "  legend       : " + ", ".join(n.split(" [")[0] + " " + n.split(": ", 1)[1]
                                             for n in names))
    return 0


def _kind_text(kind: str) -> str:
    return {"smooth": "the regime's root, equal to the exact answer",
            "step": "where the tile or wave count that flips the answer changes",
            "numeric": "no closed form"}.get(kind, kind)


def _elasticity_record(r: dict) -> dict:
    """``derive sensitivity``'s answer as plain data, each elasticity with its meaning."""
    return {"of": r["of"], "value": r["value"],
            "rows": [[str(s), e, meaning] for (s, e), meaning in
                     zip(r["rows"], _meanings(s for s, _ in r["rows"]))]}


def _show_elasticities(r: dict, args, m, h) -> int:
    rows = r["rows"][:args.top] if args.top else r["rows"]
    if args.json:
        emit_json({"of": r["of"], "value": r["value"],
                   "elasticities": [{"symbol": s, "elasticity": e} for s, e, _ in rows]})
        return 0
    print(f"elasticity d ln {r['of']} / d ln x for {m.name} on {h.name} "
          f"({r['of']} = {r['value']:.6g} here; each maximum on its active branch, tile and wave "
          "counts held)")
    for row in _elasticity_rows(rows):
        print("  " + row)
    return 0


def _show_mesh_rows(r: dict, args, m, h) -> int:
    if args.json:
        emit_json(r)
        return 0
    print(f"mesh rows (dispatch axis) for {m.name} on {h.name}: {r['note']}")
    print(f"  value       : {r['value']} rows (fastest MoE layer of the model predict evaluates)")
    print(f"  closed form : {r['sympy']}")
    print(f"                = {r['closed_form_value']:.4g} rows ({r['regime']['experts']})")
    print("  rows   experts      dispatch     combine      MoE layer    step")
    for x in r["rows"]:
        print(f"  {x['rows']:>4}  {x['experts_s'] * 1e6:9.1f} us {x['dispatch_s'] * 1e6:9.1f} us "
              f"{x['combine_s'] * 1e6:9.1f} us {x['moe_layer_s'] * 1e6:9.1f} us "
              f"{x['step_time_s'] * 1e3:8.2f} ms")
    return 0


@dataclass(frozen=True)
class _View:
    """How one kind of answer is stored (``record``: the answer as plain data) and printed
    (``show``), and the flags that only change its printing."""

    record: Callable
    show: Callable
    flags: tuple = ()


_SHOW_EXPR = ("--show-expr", {"action": "store_true", "help": "print the whole closed form "
                                                              "however long (JSON always has it)"})
_VIEWS = {
    "closed_form": _View(_record, show, (_SHOW_EXPR, (
        "--all-sensitivities", {"action": "store_true", "help": "print the answer's elasticity "
                                "to every parameter (default: top three)"}))),
    "elasticities": _View(_elasticity_record, _show_elasticities, (
        ("--top", {"type": positive_int, "default": None,
                   "help": "print only the N largest (default: every parameter)"}),)),
    "mesh_rows": _View(lambda r: r, _show_mesh_rows),
}


def _pages(args) -> int:
    # the pages solve every answer and draw with matplotlib: imported on this path only
    from ..report.pages import write_all

    # --out was checked before any work (moesym.cli._check_outputs: a folder, or where one can be)
    for p in write_all(Path(args.out).expanduser(), progress=True):
        print(p)
    return 0
