"""Plots (optional extra ``moesym[plot]``): roofline of each term against batch with the
crossovers marked, the Pareto front, a step-time breakdown bar chart and a simulated
benchmark's time series."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import MoesymError
from ..model.report import BREAKDOWN_KEYS

__all__ = ["breakdown_bar", "equation_sides", "term_roofline", "pareto_plot", "serving_timeline",
           "timeline_gantt"]


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MoesymError("plots need the optional extra: pip install 'moesym[plot]'") from None
    return plt


def breakdown_bar(report: dict, path: str | Path, title: str = "") -> Path:
    """Bar chart of ``per_layer_s`` (microseconds per layer, before overlap)."""
    plt = _plt()
    keys = [k for k in BREAKDOWN_KEYS if k in report["per_layer_s"]]
    vals = [report["per_layer_s"][k] * 1e6 for k in keys]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(keys[::-1], vals[::-1], color="#4477aa")
    ax.set_xlabel("busy time per layer (us, whole per-GPU batch, before overlap)")
    ax.set_title(title or f"step {report['step_time_s'] * 1e3:.2f} ms, bound: {report['bound']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def term_roofline(step, path: str | Path, batches=None, marks: dict | None = None) -> Path:
    """Each per-layer term against decode batch (log-log), with vertical lines at ``marks``."""
    plt = _plt()
    b = np.asarray(batches if batches is not None else np.unique(np.geomspace(1, 1024, 60).astype(int)),
                   dtype=float)
    fig, ax = plt.subplots(figsize=(8, 5))
    for k in BREAKDOWN_KEYS:
        y = step.evaluate(step.per_layer_s[k], batch=b)
        if np.any(y > 0):
            ax.loglog(b, y * 1e6, label=k)
    ax.loglog(b, step.evaluate(step.layer_s, batch=b) * 1e6, "k--", label="layer (overlapped)")
    for name, x in (marks or {}).items():
        ax.axvline(x, color="grey", lw=0.8)
        ax.text(x, ax.get_ylim()[1], f" {name}", rotation=90, va="top", fontsize=8)
    ax.set_xlabel("decode batch per attention DP rank")
    ax.set_ylabel("time per layer (us)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def pareto_plot(table, front, path: str | Path) -> Path:
    """Throughput per GPU against speed per user, all candidates and the front."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(table["tokens_per_user_s"], table["tokens_per_gpu_s"], s=6, alpha=0.3, label="candidates")
    f = sorted(front, key=lambda r: r["tokens_per_user_s"])
    ax.plot([r["tokens_per_user_s"] for r in f], [r["tokens_per_gpu_s"] for r in f], "r.-",
            label="Pareto front")
    ax.set_xlabel("tokens per user per second")
    ax.set_ylabel("tokens per GPU per second")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def timeline_gantt(timeline: list[dict], path: str | Path, title: str = "") -> Path:
    """Gantt chart of one layer's operations (``predict --timeline``): a lane per stream and
    micro-batch, a bar per operation, microseconds on the x axis."""
    plt = _plt()
    lanes = sorted({(e["stream"], e["micro_batch"]) for e in timeline})
    colors = {}
    palette = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(lanes) + 1.6))
    for y, (stream, mb) in enumerate(lanes):
        for e in (e for e in timeline if (e["stream"], e["micro_batch"]) == (stream, mb)):
            c = colors.setdefault(e["name"], palette[len(colors) % len(palette)])
            width = (e["end_s"] - e["start_s"]) * 1e6
            ax.broken_barh([(e["start_s"] * 1e6, width)], (y - 0.4, 0.8), color=c,
                           edgecolor="black", linewidth=0.4)
            if width > 0:
                ax.text(e["start_s"] * 1e6 + width / 2, y, e["name"], ha="center",
                        va="center", fontsize=7, clip_on=True)
    ax.set_yticks(range(len(lanes)), [f"{s} mb{m}" for s, m in lanes])
    ax.set_xlabel("time within one steady-state layer (us)")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def equation_sides(answers, path: str | Path, xlabel: str = "") -> Path | None:
    """Both sides of a ``derive`` equation against its variable (log-log), one colour per side,
    solid for the first answer (the kernel model) and dashed for the others (the roofline), with
    each answer's value marked. ``answers``: ``[(label, ClosedForm)]``; None when no answer has
    sides to draw."""
    from ..symbolic.compile import evaluate

    drawn = [(label, cf) for label, cf in answers if cf.sides and cf.variable is not None
             and np.isfinite(cf.value)]
    if not drawn:
        return None
    plt = _plt()
    lo = min(cf.value for _, cf in drawn) / 8
    hi = max(cf.value for _, cf in drawn) * 8
    x = np.geomspace(max(lo, 1.0), hi, 200)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = ("tab:blue", "tab:orange")
    for n, (label, cf) in enumerate(drawn):
        style = "-" if n == 0 else "--"
        short = label.split(" (")[0]
        for (side, expr), colour in zip(cf.sides, colours):
            y = np.broadcast_to(evaluate(expr, cf.values, {cf.variable: x}), x.shape)
            ax.loglog(x, y * 1e6, style, color=colour, label=f"{side} ({short})")
        ax.axvline(cf.value, color="grey", ls=style, lw=0.8)
    ax.set_xlabel(xlabel or str(drawn[0][1].variable))
    ax.set_ylabel("time (us)")
    ax.set_title(drawn[0][1].title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def serving_timeline(tl: dict, path: str | Path, title: str = "") -> Path:
    """A simulated benchmark over time (``moesym simulate --plot``): running requests and the
    queue, KV tokens in use, prefill tokens per step."""
    plt = _plt()
    fig, axes = plt.subplots(3, 1, figsize=(8, 6), sharex=True)
    t = tl["time_s"]
    axes[0].plot(t, tl["running"], label="running")
    axes[0].plot(t, tl["waiting"], label="waiting")
    axes[0].set_ylabel("requests")
    axes[0].legend(loc="upper right")
    axes[1].plot(t, np.asarray(tl["kv_used_tokens"]) / 1e3, color="#aa4466")
    axes[1].set_ylabel("KV (k tokens)")
    axes[2].plot(t, tl["prefill_tokens"], ".", ms=2, color="#228833")
    axes[2].set_ylabel("prefill tokens")
    axes[2].set_xlabel("time (s)")
    axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
