"""``moesym report``: one self-contained HTML page of a prediction, to share.

Everything is inline: styles, charts as SVG (:mod:`moesym.report.svg`), formulas as presentation
MathML (SymPy's printer; browsers render it with no script). The page has no script and loads
nothing from the network. Sections: the inputs and the command that reproduces the page, the
prediction, the per-layer breakdown with what bounds each term, the timeline of one steady-state
layer, a sweep over the batch (or prompt tokens) with the routed experts' crossover marked, the
memory stack, and the closed forms of ``moesym derive`` on the model that predicts (with the
roofline's teaching form beside it). ``optimize --report`` adds the Pareto front.
"""

from __future__ import annotations

import datetime as _dt
import shlex
from dataclasses import replace
from html import escape

import numpy as np

from ..derive.crossover import crossover
from ..derive.sensitivity import sensitivity
from ..errors import MoesymError
from ..memory import memory_report
from ..model.predictor import predict
from ..model.step import build_step
from ..numbers.metrics import micro_batches_run
from ..serving import simulate
from ..serving.clients import Client
from ..specs.deployment import Phase
from ..symbolic.symbols import INFO
from . import svg

__all__ = ["report_html"]

_CSS = """
body{font-family:sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;border-bottom:1px solid #ccc;
margin-top:1.6em}table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;
border-bottom:1px solid #eee;text-align:left}td.n{text-align:right;font-variant-numeric:
tabular-nums}code,pre{background:#f4f4f4;padding:.1em .3em;border-radius:3px}pre{padding:.6em;
white-space:pre-wrap;word-break:break-all}.note{color:#555;font-size:.92em}
math{font-size:1.1em}
"""

_BOUND_COLOUR = {"compute": svg.PALETTE[0], "memory": svg.PALETTE[1], "communication": svg.PALETTE[2],
                 "overhead": svg.PALETTE[3], "none": svg.PALETTE[6]}
_MAX_MATHML = 6000  # characters of SymPy text beyond which a formula is given by reference


def _fmt_s(x: float) -> str:
    return f"{x * 1e3:.3f} ms" if x >= 1e-3 else f"{x * 1e6:.1f} us"


def _table(rows) -> str:
    out = ["<table>"]
    for k, v in rows:
        cls = ' class="n"' if isinstance(v, (int, float)) or str(v)[:1].isdigit() else ""
        out.append(f"<tr><th>{escape(str(k))}</th><td{cls}>{escape(str(v))}</td></tr>")
    return "".join(out) + "</table>"


def _mathml(expr) -> str:
    import sympy as sp

    text = sp.mathml(expr, printer="presentation")
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">{text}</math>'


def _prediction(r: dict, phase: Phase) -> str:
    rows = []
    if phase is Phase.SERVE:
        rows += [("output tokens / GPU / s", f"{r['output_tokens_per_gpu_s']:.1f}"),
                 ("input tokens / GPU / s", f"{r['input_tokens_per_gpu_s']:.1f}"),
                 ("TPOT", _fmt_s(r["tpot_s"])), ("TTFT (queueing ignored)", _fmt_s(r["ttft_s"]))]
    else:
        rows += [("step time", _fmt_s(r["step_time_s"])),
                 ("tokens / GPU / s", f"{r['tokens_per_gpu_s']:.1f}")]
        key = "tpot_s" if "tpot_s" in r else "ttft_s"
        rows.append(("TPOT" if key == "tpot_s" else "TTFT", _fmt_s(r[key])))
    rows += [("bound", f"{r['bound']} (term: {r.get('bound_term', '-')})"),
             ("memory per GPU", f"{r['memory_bytes'] / 1e9:.2f} GB, fits: {r['fits']}")]
    if r.get("serving_frac", 1.0) != 1.0:
        rows.append(("serving efficiency", f"{r['serving_frac']:.3f} (end-to-end fit)"))
    return _table(rows)


def _breakdown(r: dict) -> str:
    bounds = r.get("bounds", {})
    items = []
    for k, v in r["per_layer_s"].items():
        b = bounds.get("routed_experts" if k in ("moe_routed", "moe_weight_load") else k, {})
        kind = b.get("roofline", b.get("bound", "none")) if isinstance(b, dict) else "none"
        items.append((f"{k} ({kind})", v * 1e6, _BOUND_COLOUR.get(kind, svg.PALETTE[6])))
    chart = svg.bars(items, "us", "Busy time per layer, whole per-GPU batch, before overlap")
    legend = ", ".join(f'<span style="color:{c}">&#9632;</span> {k}' for k, c in _BOUND_COLOUR.items())
    return chart + f'<p class="note">Colour: what bounds the term ({legend}). Layer time with the ' \
                   f'overlap schedule: {_fmt_s(r["layer_s"])}.</p>'


def _sweep(model, hw, dep, wl) -> tuple[str, list]:
    """Throughput and latency over a geometric grid of the batch (tokens for prefill)."""

    if wl.phase is Phase.PREFILL:
        grid = np.unique(np.geomspace(max(wl.context, 256), max(16 * wl.tokens, 65536), 14).round())
        field, label = "tokens", "prompt tokens per attention-DP rank per step"
    else:
        grid = np.unique(np.geomspace(1, max(4 * wl.batch, 512), 18).round())
        field, label = "batch", "requests per attention-DP rank"
    xs, thr, lat = [], [], []
    for g in grid:
        # a grid point too small to split runs the micro-batches an engine splits it into
        # (the warning is for a batch the user gives, not for the chart's own points)
        d = replace(dep, micro_batches=int(micro_batches_run(dep.micro_batches, int(g))))
        try:
            p = predict(model, hw, d, replace(wl, **{field: int(g)}), memory=False)
        except MoesymError:
            continue
        xs.append(float(g))
        thr.append(p.get("output_tokens_per_gpu_s", p.get("tokens_per_gpu_s")))
        lat.append(p.get("tpot_s", p.get("ttft_s", p.get("step_time_s"))) * 1e3)
    return (field, label), [xs, thr, lat]


def _closed_forms(model, hw, dep, wl) -> tuple[str, list]:
    """derive crossover on the kernel model and the roofline (decode, MoE); '' where none."""
    if wl.phase is not Phase.DECODE or not model.is_moe:
        return ("<p class='note'>The closed forms of <code>moesym derive</code> answer decode "
                "questions on MoE models; this page is for another phase or a dense model.</p>"), []
    out, marks = [], []
    for timing, title in (("kernel", "Kernel model (what predict evaluates)"),
                          ("roofline", "Roofline with the same fitted fractions (teaching form)")):
        try:
            cf = crossover(model, hw, dep.with_(timing=timing), context=wl.context)
        except MoesymError as exc:
            out.append(f"<h3>{escape(title)}</h3><p class='note'>{escape(str(exc))}</p>")
            continue
        if timing == "kernel":
            marks.append((cf.value, f"crossover {cf.value:.0f}"))
        body = (_mathml(cf.expr) if cf.expr is not None and len(str(cf.expr)) <= _MAX_MATHML
                else f"<p class='note'>closed form of {len(str(cf.expr))} characters: "
                     f"<code>moesym derive crossover ... --show-expr</code></p>")
        closed = f" (closed form {cf.closed_value:.4g}, {cf.kind})" if cf.closed_value is not None else ""
        out.append(f"<h3>{escape(title)}</h3><p>Routed experts turn compute-bound at "
                   f"<b>{cf.value:.0f}</b> requests per GPU{closed}.</p>{body}"
                   f"{_layers(cf)}<p class='note'>{escape(cf.assumptions)}</p>")
    return "".join(out), marks


def _layers(cf) -> str:
    """The smooth form, what pins the answer and its top sensitivities, as text."""
    f, out = cf.smooth, []
    if f is not None and f.expr is not None:
        names = ", ".join(f"{k} = {v:.4g}" for k, (v, _) in f.placeholders.items())
        out.append(f"<p>Smooth form of the regime (tile counts continuous): "
                   f"<code>{escape(str(f.variable))}* = {escape(str(f.skeleton))}</code> with "
                   f"{escape(names)}: {f.value:.4g}.</p>")
    elif f is not None:
        out.append(f"<p class='note'>Smooth form: none ({escape(f.note)}).</p>")
    out += [f"<p class='note'>Pinned by {escape(x)}</p>" for x in cf.pin]
    if cf.sensitivity:
        top = ", ".join(f"{s} {e:+.2f}" for s, e in cf.sensitivity[:3])
        out.append(f"<p>Top sensitivities (d ln answer / d ln x): {escape(top)}.</p>")
    return "".join(out)


def _sensitivity(model, hw, dep, wl) -> str:
    """Bar chart of the largest elasticities of TPOT (decode) or TTFT (prefill)."""

    of = "tpot" if wl.phase is Phase.DECODE else "ttft"
    try:
        r = sensitivity(model, hw, dep, wl, of)
    except MoesymError as exc:
        return f"<p class='note'>{escape(str(exc))}</p>"
    rows = [(s, e) for s, e in r["rows"] if e][:14]
    items = [(f"{s} ({INFO[s].name if s in INFO else s})", abs(e),
              svg.PALETTE[0] if e > 0 else svg.PALETTE[1]) for s, e in rows]
    return (svg.bars(items, "", f"|d ln {of} / d ln x|, the largest {len(items)} (blue: "
                                "raises it, red: lowers it)")
            + f"<p class='note'>Exact from the symbolic model at this point (each maximum on "
              f"its active branch, tile counts held): <code>moesym derive sensitivity ... --of "
              f"{of}</code> lists every parameter.</p>")


def _memory(model, hw, dep, wl) -> str:
    m = memory_report(model, hw, dep, wl)
    parts = [("weights", m["weights_bytes"]), ("KV cache", m["kv_bytes"]),
             ("activations", m["activation_bytes"]), ("workspaces", m["workspace_bytes"]),
             ("comm buffers", m["comm_buffer_bytes"]), ("runtime reserve", m["reserve_bytes"]),
             ("free", max(m["free_bytes"], 0.0))]
    items = [(k, v / 1e9, svg.PALETTE[i]) for i, (k, v) in enumerate(parts)]
    note = (f"<p class='note'>{m['hbm_bytes'] / 1e9:.0f} GB per GPU; largest decode batch at "
            f"this context: {m['max_batch']} requests per GPU; fits: {m['fits']}.</p>")
    return svg.stack(items, "GB", "Memory per GPU") + note


def _pareto(result) -> str:
    pts = [(p["tokens_per_user_s"], p["tokens_per_gpu_s"],
            f"tp={p['tp']} ep={p['ep']} mb={p['micro_batches']} "
            + " ".join(f"{k}={p[k]}" for k in ("batch", "tokens", "expert_cache") if k in p),
            svg.PALETTE[1]) for p in result.pareto]
    chart = svg.scatter(pts, "tokens / user / s", "tokens / GPU / s",
                        "Pareto front: throughput per GPU against speed per user")
    rows = "".join(f"<tr><td>{escape(label)}</td><td class='n'>{y:.1f}</td><td class='n'>{x:.2f}"
                   "</td></tr>" for x, y, label, _ in sorted(pts))
    return chart + ("<table><tr><th>deployment</th><th>tokens/GPU/s</th><th>tokens/user/s</th>"
                    f"</tr>{rows}</table>")


def edit_argv(argv, command: str, drop) -> list:
    """``argv`` (a report or optimize command, without ``moesym``) as a ``command`` command:
    the subcommand renamed, each flag of ``drop`` (``{flag: values it takes}``) removed with
    its values."""
    out, skip = [], 0
    for i, a in enumerate(argv):
        if skip:
            skip -= 1
            continue
        key = a.split("=")[0]
        if key in drop:
            skip = drop[key] if "=" not in a else 0
            continue
        out.append(command if i == 0 and a in ("report", "optimize") else a)
    return out


def _simulate_argv(argv, concurrency: int, prompts: int) -> list:
    """The ``moesym simulate`` command of a ``report --phase serve`` command (its workload
    flags that simulate does not take dropped, the client added)."""
    drop = {"--phase": 1, "--batch": 1, "--out": 1, "--context": 1, "--tokens": 1}
    return ["moesym", *edit_argv(argv, "simulate", drop), "--concurrency", str(concurrency),
            "--num-prompts", str(prompts)]


def _under_load(model, hw, dep, wl, argv=()) -> str:
    """A closed-loop benchmark at the workload's requests in flight (every DP rank), simulated
    through the engine's scheduler (``moesym simulate``): percentiles and the time series."""

    c = wl.batch * dep.dp
    n = min(10 * c, 4000)
    r = simulate(model, hw, dep, Client(concurrency=c, num_prompts=n), str(wl.isl),
                 str(wl.osl), timeline_points=200)
    rows = [(k.upper(), *(_fmt_s(r[f"{k}_ms"][p] / 1e3) for p in ("mean", "p50", "p90", "p99")))
            for k in ("ttft", "tpot", "itl", "e2e")]
    table = ("<table><tr><th></th><th>mean</th><th>p50</th><th>p90</th><th>p99</th></tr>"
             + "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in row) + "</tr>"
                       for row in rows) + "</table>")
    e, tl = r["engine"], r["timeline"]
    note = (f"<p class='note'>Concurrency {c}, {r['requests']} requests of {wl.isl}/{wl.osl} "
            f"tokens, all starting at once (the initial burst is measured, as benchmark tools "
            f"do); engine {escape(e['name'])} {escape(e['version'])} ({escape(e['policy'])}, "
            f"chunk {e['chunk_tokens']}). Output {r['output_tokens_per_gpu_s']:.1f} tokens/GPU/s "
            f"(steady state above: queueing ignored). Reproduce: <code>"
            f"{escape(shlex.join(_simulate_argv(list(argv), c, n)))}</code>.</p>")
    t = [max(x, 1e-6) for x in tl["time_s"]]
    chart = svg.lines(t, [("running", tl["running"], svg.PALETTE[0]),
                          ("waiting", tl["waiting"], svg.PALETTE[1])], "time (s)", "requests",
                      "Requests over the run", log_x=False)
    kv = svg.lines(t, [("KV in use", [x / 1e3 for x in tl["kv_used_tokens"]], svg.PALETTE[2])],
                   "time (s)", "k tokens", "KV cache in use", log_x=False)
    return table + note + chart + kv


def _workload_text(wl) -> str:
    if wl.phase is Phase.SERVE:
        return f"serve: {wl.batch} requests in flight per rank, ISL {wl.isl}, OSL {wl.osl}"
    if wl.phase is Phase.PREFILL:
        return f"prefill: {wl.tokens} tokens per rank per step, prompts of {wl.context}"
    return f"decode: {wl.batch} requests per rank, mean KV length {wl.context}"


def report_html(model, hw, dep, wl, argv=(), optimize_result=None, progress=None) -> str:
    """The page for ``model`` on ``hw`` under ``dep`` and ``wl`` (``argv``: the command that
    made it, shown so the page can be reproduced; ``optimize_result``: adds the Pareto front;
    ``progress``: a callable told each section's name as it starts)."""
    say = progress or (lambda name: None)
    say("prediction")
    r = predict(model, hw, dep, wl)
    stages = "".join(f" {k}={getattr(dep, k)}" for k in ("pp", "cp") if getattr(dep, k) > 1)
    title = (f"{model.name} on {dep.gpus} x {hw.name}, {wl.phase.value}, tp={dep.tp} ep={dep.ep}"
             f"{stages} micro-batches={dep.micro_batches} weights={dep.weights}")
    html = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>moesym: "
            f"{escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            f"<p class='note'>Generated by moesym on {_dt.date.today().isoformat()}. Reproduce: "
            f"<code>{escape(shlex.join(['moesym', *argv]))}</code></p>"]
    if optimize_result is not None:
        html += ["<h2>Chosen deployment and Pareto front</h2>", _pareto(optimize_result)]
    inputs = [("model", model.name), ("hardware", f"{hw.name}: {hw.description}"),
              ("deployment", f"{dep.gpus} GPUs, TP {dep.tp}, EP {dep.ep}, {dep.micro_batches} "
                             f"micro-batch(es), A2A {dep.resolved_a2a(wl.phase).value}, weights "
                             f"{dep.weights}, KV {dep.kv}, overlap {dep.overlap}, timing {dep.timing}"),
              ("workload", _workload_text(wl))]
    html += ["<h2>Inputs</h2>", _table(inputs), "<h2>Prediction</h2>", _prediction(r, wl.phase),
             "<h2>Where the time goes</h2>", _breakdown(r)]
    if wl.phase is not Phase.SERVE:
        say("timeline")
        html.append("<h2>One steady-state layer</h2>")
        try:
            events = build_step(model, hw, dep, wl).timeline()
            html += [svg.gantt(events, f"Timeline of one layer (overlap schedule {dep.overlap}), "
                                       "per stream and micro-batch"),
                     "<p class='note'>Hover a bar for its start, end and length.</p>"]
        except MoesymError as exc:  # a dense layer has no overlap schedule to draw
            html.append(f"<p class='note'>{escape(str(exc))}</p>")
    else:  # a steady state of two steps, not one layer: say where its layers are drawn
        html += ["<h2>One steady-state layer</h2>",
                 "<p class='note'>Serving alternates decode steps and mixed steps (a prefill "
                 "chunk beside the decodes), so no one layer stands for it: the report of "
                 "<code>--phase decode</code> or <code>--phase prefill</code> draws each.</p>"]
        if dep.pp == 1 and dep.cp == 1 and dep.mesh is None:
            say("under load")
            html += ["<h2>Under load: a simulated benchmark</h2>", _under_load(model, hw, dep, wl, argv)]
    say("closed forms")
    forms, marks = _closed_forms(model, hw, dep, wl)
    say("sweep")
    (field, label), (xs, thr, lat) = _sweep(model, hw, dep, wl)
    if xs:
        html += [f"<h2>Sweep over the {escape(field)}</h2>",
                 svg.lines(xs, [("throughput", thr, svg.PALETTE[0])], label,
                           "tokens / GPU / s", "Throughput", marks=marks),
                 svg.lines(xs, [("latency", lat, svg.PALETTE[1])], label,
                           "TPOT (ms)" if wl.phase is not Phase.PREFILL else "TTFT (ms)",
                           "Latency", marks=marks)]
    say("memory")
    html += ["<h2>Memory</h2>", _memory(model, hw, dep, wl),
             "<h2>Closed forms (moesym derive crossover)</h2>", forms]
    if wl.phase is not Phase.SERVE:
        say("sensitivities")
        html += ["<h2>Sensitivities</h2>", _sensitivity(model, hw, dep, wl)]
    html.append("</body></html>")
    return "\n".join(html)
