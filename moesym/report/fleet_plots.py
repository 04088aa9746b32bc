"""The plot of a fleet answer (``moesym fleet --plot``, optional extra ``moesym[plot]``): per
candidate, the replicas, the cost and the power over the period's hours; and every candidate's
cost per million output tokens against its p-th percentile TPOT."""

from __future__ import annotations

from pathlib import Path

from .plots import _plt

__all__ = ["fleet_plot"]


def _held(values) -> list:
    """Hourly values with the last one repeated: a step plot drawn to the period's end."""
    v = list(values)
    return v + v[-1:]


def fleet_plot(answer: dict, path: str | Path) -> Path:
    """Four panels from a ``moesym fleet`` answer (its JSON object)."""
    plt = _plt()
    q = f"p{answer['limits']['percentile']:g}"
    sized = [c for c in answer["candidates"] if c.get("replicas_by_hour")]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    (rep, cost), (power, front) = ax
    for c in sized:
        # each hour drawn over its span: the last value held to the period's end
        hours = [row["hour"] for row in c["hours"]] + [len(c["hours"])]
        rep.step(hours, _held(c["replicas_by_hour"]), where="post", label=c["name"])
        price = c.get("usd_per_gpu_hour")
        if price is not None:
            cost.step(hours, _held(n * c["deployment"]["gpus"] * price
                                  for n in c["replicas_by_hour"]), where="post", label=c["name"])
        if c["hours"] and c["hours"][0].get("mw") is not None:
            power.step(hours, _held(row["mw"] for row in c["hours"]), where="post",
                       label=c["name"])
        if c.get("usd_per_million_output_tokens") is not None:
            front.scatter(c["tpot_ms"][q], c["usd_per_million_output_tokens"],
                          marker="o" if c["meets"] else "x")
            front.annotate(c["name"], (c["tpot_ms"][q], c["usd_per_million_output_tokens"]),
                           textcoords="offset points", xytext=(4, 4), fontsize=8)
    rep.set_ylabel("replicas in service")
    cost.set_ylabel("USD per hour")
    power.set_ylabel("all-in MW (with PUE)")
    for a in (rep, cost, power):
        a.set_xlabel("hour of the period")
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    lim = answer["limits"]["tpot_ms"]
    if lim is not None:
        front.axvline(lim, color="grey", lw=0.8, ls="--")
    front.set_xlabel(f"{q} TPOT (ms)")
    front.set_ylabel("USD per million output tokens")
    best = answer.get("best")
    fig.suptitle(f"{answer['model']}: {answer['traffic']['source']}"
                 + (f"; cheapest meeting the limits: {best}" if best else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
