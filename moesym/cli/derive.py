"""``moesym derive``: closed forms printed as LaTeX and SymPy, with their value."""

from __future__ import annotations

from pathlib import Path

from ..errors import MoesymError
from . import COMMANDS
from .common import (add_deployment, add_json, add_model_hw, add_serve_lengths, add_workload,
                     deployment_from, emit_json, model_hw_from, plain, positive_float,
                     positive_int, probability)

__all__ = ["register"]


def _closed_form(s, name: str, help: str, func):
    """A ``derive`` subcommand taking every model, hardware, workload and deployment flag
    ``predict`` takes (the step model it solves is the one ``predict`` evaluates)."""
    p = s.add_parser(name, help=help)
    add_model_hw(p)
    add_workload(p, phase=False)
    add_deployment(p)
    add_json(p)
    p.add_argument("--show-expr", action="store_true",
                   help="print the whole closed form however long (JSON always has it)")
    p.add_argument("--all-sensitivities", action="store_true",
                   help="print the answer's elasticity to every parameter (default: top three)")
    p.set_defaults(func=func)
    return p


def _step_parser(s, name: str, help: str):
    """A subcommand on one prefill or decode step (--phase, default decode), with every
    model, hardware, workload and deployment flag predict takes."""
    p = s.add_parser(name, help=help)
    add_model_hw(p)
    add_workload(p, phase=True, required_phase=False)
    add_deployment(p)
    add_json(p)
    return p


def register(sub) -> None:
    p = sub.add_parser("derive", help=COMMANDS["derive"])
    s = p.add_subparsers(dest="what", parser_class=type(p))

    c = _closed_form(s, "crossover", "decode batch per GPU where routed experts turn compute-bound",
                     _crossover)
    c.add_argument("--no-lazy", action="store_true", help="every local expert is read each step")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="roofline of each term against batch with the crossover marked")

    _closed_form(s, "attention", "batch where attention's KV read overtakes the MoE layer",
                 _attention)

    t = _closed_form(s, "tpot", "largest decode batch that meets a TPOT target", _tpot)
    t.add_argument("--tpot-ms", type=positive_float, required=True)

    c = s.add_parser("concurrency", help="largest serving concurrency per rank whose "
                                         "steady-state TPOT (and TTFT) meets the targets")
    add_model_hw(c)
    g = c.add_argument_group("workload")
    add_serve_lengths(g, "the mixed steps' chunk (")
    g.add_argument("--prefix-hit", type=probability, default=0.0, metavar="F",
                   help="prefill, serve: share of each prompt found in the prefix cache (not "
                        "recomputed; attention still reads its KV)")
    add_deployment(c)
    add_json(c)
    c.add_argument("--tpot-ms", type=positive_float, default=None,
                   help="mean TPOT target of the steady state")
    c.add_argument("--ttft-ms", type=positive_float, default=None,
                   help="mean TTFT target of the steady state (no queueing)")
    c.add_argument("--percentile", type=positive_float, default=None, metavar="P",
                   help="refused: the steady state gives means; moesym optimize --percentile P "
                        "simulates percentile SLAs")
    c.add_argument("--show-expr", action="store_true",
                   help="print the whole closed form however long (JSON always has it)")
    c.add_argument("--all-sensitivities", action="store_true",
                   help="print the answer's elasticity to every parameter (default: top three)")
    c.set_defaults(func=_concurrency)

    _closed_form(s, "memory-batch", "largest decode batch whose memory per GPU fits in HBM",
                 _memory_batch)

    o = _closed_form(s, "optimal-ep", "EP degree where more EP stops shortening the MoE layer",
                     _optimal_ep)
    o.add_argument("--max-ep", type=positive_int, default=None)
    o.add_argument("--no-memory-limit", action="store_true",
                   help="ignore whether the deployment fits in GPU memory")

    _closed_form(s, "comm-hidden", "batch where communication stops hiding behind compute",
                 _comm_hidden)

    _closed_form(s, "micro-batches", "batch from which two micro-batches beat one",
                 _micro_batches)

    m = _closed_form(s, "ep-min-tpot",
                     "EP that minimizes TPOT for a fixed number of requests (square-root form)",
                     _ep_min_tpot)
    m.add_argument("--total-batch", type=positive_int, required=True,
                   help="decode requests in flight across the whole instance")
    m.add_argument("--max-ep", type=positive_int, default=None)

    x = _closed_form(s, "gpus-for-throughput",
                     "smallest instance (GPUs = EP) reaching a decode throughput at a TPOT",
                     _gpus_for_throughput)
    x.add_argument("--tokens-per-s", type=positive_float, required=True,
                   help="decode throughput target of the instance (tokens/s)")
    x.add_argument("--tpot-ms", type=positive_float, required=True)
    x.add_argument("--max-gpus", type=positive_int, default=4096)

    _closed_form(s, "expert-cache",
                 "smallest expert cache (experts per layer on the device) whose tier traffic "
                 "hides under the layer's compute", _expert_cache)

    _closed_form(s, "mesh-rows",
                 "devices along a mesh's dispatch axis where the longer ring costs more than "
                 "fewer experts per device save (--mesh RxC)", _mesh_rows)

    v = _step_parser(s, "solve", "any equation over the step model: TERM_A = TERM_B, or the "
                                 "minimum of a TERM, as one variable varies")
    what = v.add_mutually_exclusive_group(required=True)
    what.add_argument("--equal", nargs=2, metavar=("TERM_A", "TERM_B"),
                      help="a term name (step, tpot, layer, layer_compute, exposed_comm, a "
                           "breakdown key, routed_compute, routed_memory, tokens_per_gpu_s, "
                           "memory_used, memory_free), a number, or a SymPy expression over "
                           "terms and symbols")
    what.add_argument("--minimize", metavar="TERM")
    v.add_argument("--for", dest="var", required=True, metavar="VAR",
                   help="batch, tokens, context, chunk, ep, tp, gpus, micro_batches, "
                        "rdma_bandwidth, nvlink_bandwidth, hbm_bandwidth, flops, or any symbol "
                        "(attribute or printed name, e.g. bw_out or W_out)")
    v.add_argument("--range", default=None, metavar="LO:HI",
                   help="where to look (default: the variable's natural range, or 1/1000 to "
                        "1000 times its value)")
    v.add_argument("--show-expr", action="store_true",
                   help="print the whole closed form however long (JSON always has it)")
    v.set_defaults(func=_solve)

    e = _step_parser(s, "sensitivity", "elasticity d ln y / d ln x of a quantity (or a derive "
                                       "answer) to every parameter, ranked")
    e.add_argument("--of", default="step_time", metavar="QUANTITY",
                   help="step_time (default), tokens_per_gpu_s, tpot (decode), ttft (prefill), "
                        "a derive solve term, or a derive answer: crossover, attention, "
                        "comm-hidden, micro-batches, memory-batch")
    e.add_argument("--top", type=positive_int, default=None,
                   help="print only the N largest (default: every parameter)")
    e.set_defaults(func=_sensitivity)

    g = s.add_parser("pages", help="regenerate the derivations/ markdown pages")
    g.add_argument("--out", default="derivations", help="folder to write (default: derivations)")
    g.set_defaults(func=_pages, out_is_folder=True)


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


def _deployment(args):
    """The deployment of the flags; closed forms are decode questions, so a pinned overlap
    schedule must run the deployment's micro-batch count in decode, and prefill flags are said
    to have no effect rather than ignored in silence."""
    from ..specs.deployment import Phase

    _one_step_only(args)

    for flag in ("tokens", "chunk"):
        if getattr(args, flag, None) is not None:
            import warnings

            warnings.warn(f"--{flag} has no effect: derive {args.what} is a decode question "
                          "(batch, context); derive solve --phase prefill answers prefill "
                          "steps", stacklevel=2)

    dep = deployment_from(args)
    _check(args, dep)
    dep.check_overlap(Phase.DECODE)
    from ..io.progress import status

    status(f"derive {args.what}: building and solving the step model", not args.json)
    return dep


def _check(args, dep, model=None, hw=None) -> None:
    """The validation stage (:func:`moesym.specs.checks.check_inputs`) on the deployment and
    the lengths given (derive's questions search batch and EP themselves)."""
    from ..specs.checks import check_inputs, check_lengths

    if model is None:
        model, hw = model_hw_from(args)
    check_inputs(model, hw, dep, sharding=False)
    context = getattr(args, "context", None)
    if context:
        check_lengths(model, getattr(args, "phase", None) or "decode", context=context)


_SHORT = 400  # characters of a closed form printed without --show-expr


def _short(text: str, args) -> str:
    if len(text) > _SHORT and not args.show_expr:
        return text[:_SHORT] + f" ... ({len(text)} characters; --show-expr or --json)"
    return text


def _elasticity_rows(rows) -> list[str]:
    """One line per (symbol name, elasticity, meaning)."""
    return [f"{s:>10} {e:+9.4f}  {meaning}" for s, e, meaning in rows]


def _dv():
    """moesym.solve.derive, imported when an answer is solved (not when it is read back)."""
    from ..solve import derive

    return derive


def _meanings(symbols) -> list[str]:
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
    import warnings

    from ..model.predictor import files_of
    from ..numeric import cache

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


def show(rec: dict, args) -> int:
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


def _mesh_rows(args) -> int:
    from ..solve.mesh_rows import mesh_rows
    from ..specs.deployment import Phase, Workload

    m, h = model_hw_from(args)
    dep = _deployment(args)
    r = mesh_rows(m, h, dep, Workload(Phase.DECODE, batch=args.batch or 1, context=args.context))
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


def _crossover(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    rec = answered(args, m, h, dep,
                   lambda: _dv().crossover(m, h, dep, lazy=not args.no_lazy, context=args.context))
    if args.plot:
        from ..model.step import build_step
        from ..report.plots import term_roofline
        from ..specs.deployment import Phase, Workload

        step = build_step(m, h, dep, Workload(Phase.DECODE, batch=1, context=args.context))
        term_roofline(step, args.plot, marks={"crossover": rec["answer"]["value"] * dep.tp})
    return show(rec, args)


def _attention(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep,
                         lambda: _dv().attention_overtakes_moe(m, h, dep, args.context)), args)


def _tpot(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().max_batch_for_tpot(
        m, h, dep, args.context, args.tpot_ms / 1e3)), args)


def _concurrency(args) -> int:
    if args.percentile is not None:
        raise MoesymError(f"--percentile {args.percentile:g}: derive concurrency solves the "
                          "steady state, which gives mean TPOT and TTFT; for a percentile SLA "
                          "run moesym optimize --phase serve --percentile P (a simulation)")
    for flag in ("isl", "osl"):
        if getattr(args, flag) is None:
            raise MoesymError(f"--{flag} is missing: derive concurrency needs the request "
                              "lengths (--isl N --osl N)")
    if args.tpot_ms is None and args.ttft_ms is None:
        raise MoesymError("no target: give --tpot-ms and/or --ttft-ms")
    m, h = model_hw_from(args)
    dep = deployment_from(args)
    _check(args, dep, m, h)
    from ..specs.checks import check_lengths

    check_lengths(m, "serve", isl=args.isl, osl=args.osl)
    from ..io.progress import status

    status("derive concurrency: building and solving the serve model", not args.json)
    return show(answered(args, m, h, dep, lambda: _dv().max_concurrency(
        m, h, dep, args.isl, args.osl, args.tpot_ms / 1e3 if args.tpot_ms else None,
        args.ttft_ms / 1e3 if args.ttft_ms else None, chunk=args.chunk or 0,
        prefix_hit=args.prefix_hit)), args)


def _memory_batch(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep,
                         lambda: _dv().max_batch_for_memory(m, h, dep, args.context)), args)


def _optimal_ep(args) -> int:
    from ..specs.deployment import Phase, Workload

    m, h = model_hw_from(args)
    wl = Workload(Phase.DECODE, batch=args.batch or 1, context=args.context)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().optimal_ep(
        m, h, wl, dep, max_ep=args.max_ep, memory_limit=not args.no_memory_limit)), args)


def _micro_batches(args) -> int:
    m, h = model_hw_from(args)
    dep = deployment_from(args).with_(micro_batches=2)  # --overlap names the two-batch schedule
    return show(answered(args, m, h, dep, lambda: _dv().micro_batches_pay(m, h, dep, args.context)),
                args)


def _expert_cache(args) -> int:
    from ..specs.deployment import Phase, Workload

    m, h = model_hw_from(args)
    wl = Workload(Phase.DECODE, batch=args.batch or 1, context=args.context)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().expert_cache_hides(m, h, dep, wl)), args)


def _comm_hidden(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().comm_hidden(m, h, dep, args.context)), args)


def _ep_min_tpot(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().ep_min_tpot(
        m, h, args.total_batch, args.context, dep, max_ep=args.max_ep)), args)


def _gpus_for_throughput(args) -> int:
    m, h = model_hw_from(args)
    dep = _deployment(args)
    return show(answered(args, m, h, dep, lambda: _dv().gpus_for_throughput(
        m, h, args.tokens_per_s, args.tpot_ms / 1e3, args.context, dep,
        max_gpus=args.max_gpus)), args)


def _solve(args) -> int:
    from .common import workload_from

    span = None
    if args.range is not None:
        try:
            lo, hi = (float(x) for x in args.range.split(":"))
        except ValueError:
            raise MoesymError(f"--range {args.range!r}: use LO:HI, e.g. 1e9:1e12") from None
        span = (lo, hi)
    _one_step_only(args)
    m, h = model_hw_from(args)
    dep = deployment_from(args)
    _check(args, dep, m, h)
    from ..io.progress import status

    status(f"derive solve: building the step model and solving for {args.var}", not args.json)
    return show(answered(args, m, h, dep, lambda: _dv().solve(
        m, h, dep, workload_from(args), args.var, equal=args.equal, minimize=args.minimize,
        span=span)), args)


def _sensitivity(args) -> int:
    from ..io.progress import status
    from .common import workload_from

    _one_step_only(args)
    m, h = model_hw_from(args)
    dep = deployment_from(args)
    status(f"derive sensitivity: building the step model and differentiating {args.of}",
           not args.json)
    r = answered(args, m, h, dep,
                 lambda: _dv().sensitivity(m, h, dep, workload_from(args), args.of),
                 lambda r: {"of": r["of"], "value": r["value"],
                            "rows": [[str(s), e, meaning] for (s, e), meaning in
                                     zip(r["rows"], _meanings(s for s, _ in r["rows"]))]})
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


def _pages(args) -> int:
    from ..report.pages import write_all

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MoesymError(f"--out {out} is not a folder")
    for p in write_all(out, progress=True):
        print(p)
    return 0
