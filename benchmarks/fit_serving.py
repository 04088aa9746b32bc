"""Fit the two serving constants that published benchmarks pin and no kernel table shows.

    python benchmarks/fit_serving.py host-launch [--engine sglang-0.5.9 ...] [--write]
    python benchmarks/fit_serving.py accept [--write]
    python benchmarks/fit_serving.py cold-prefill ROWS.json [--write]
    python benchmarks/fit_serving.py pd-handoff ROWS.json [--write]

Both are fitted on InferenceX's open DeepSeek-R1 runs (bench_data/serving/, simulated as the
benchmark ran them by ``moesym.report.inferencex``), one value over many runs, and each launch
configuration (GPU, framework, weights, speculation, layout) is held out in turn: the value fitted
on the other configurations predicts its runs, and those held-out errors are what is reported.

* ``host-launch``: an engine's host time per eagerly launched kernel. A step the engine does not
  replay as a CUDA graph (a prefill in SGLang 0.5.9; TensorRT-LLM without piecewise graphs)
  launches its kernels one by one from Python; at a short prompt the host's launches, not the
  GPU, set the step's time (moesym.model.step._host_s: ``t_step`` + kernels x
  ``t_host_launch``, the longer of that and the GPU time under an overlap scheduler). Fitted per
  engine profile and device maker on the aggregated runs with eager prefill (at the profile's
  version where it names one), on both numbers such a step moves: the median time to first
  token (the prompt's own prefill) and the mean TPOT (every prefill a request's decode waits
  through in a mixed step); fitted on the TTFT alone, the value also took in whatever else a
  first token waits for and slowed every decode step that shares a batch with a prompt.
  ``--write`` stores it as the profile's ``host_launch_us`` in moesym/engines/builtin.toml.
* ``accept``: the acceptance of a draft token in these benchmarks. Their prompts are random
  tokens, on which DeepSeek's MTP module accepts far less than its published 85% on text;
  fitted on the mean TPOT of every aggregated MTP run (one value for all engines: the
  acceptance is the model's on the benchmark's prompts; what differs by engine is the step's
  cost); ``--write`` stores it as ``RANDOM_PROMPT_ACCEPT`` in moesym/report/inferencex.py, the
  ``--accept`` the validation passes for these runs.

* ``cold-prefill``: an engine's one-time first prefill. The benchmark sends one request to test
  the server, then its first wave of prompts at once: the engine's first large prefill runs
  kernels at shapes its startup never ran (Triton and aiter compile per configuration on first
  use, TensorRT-LLM's autotuner tries its tactics), and every prompt of the first wave waits
  through it. The median TTFT does not see it; the mean takes it in once per first-wave request
  (a tenth of the requests). Fitted per engine profile and device maker on what the simulation
  without it leaves unexplained of each run's mean-over-median TTFT gap,
  10 x ((measured mean - measured median) - (simulated mean - simulated median)), the median
  over the runs (robust to the high-concurrency runs where the first wave also queues), from
  the rows ``benchmarks/serving_open_set.py --json`` wrote (the simulated mean taken without
  the one-time time the rows ran with: their ``first_use`` TTFT component);
  ``--write`` stores it as the profile's ``cold_prefill_ms`` where, held out by configuration,
  the mean TTFT it predicts (simulated mean + a tenth of the value) is closer than without it
  (elsewhere the engine keeps 0).

* ``pd-handoff``: a disaggregated request's hand-off from prefill to decode beyond its KV's
  transfer: the engine's path between the two servers (SGLang's prefill-side transfer queue and
  decode-side pre-allocation and transfer queues, each polled once per scheduler loop with a CPU
  all-reduce over the TP ranks; the router's second hop), which no kernel or link table times.
  At low load it adds the same seconds to every request's TTFT, so it is fitted per engine
  profile and device maker on the median TTFT of the disaggregated runs the simulation shows
  without queueing (its mean queue under a tenth of its mean TTFT): the median over those runs
  of measured median - (simulated median - the hand-off it was simulated with), at least 0.
  ``--write`` stores it as the profile's ``pd_handoff_ms`` where, held out by configuration, it
  predicts the median TTFT of all the engine's disaggregated runs better than none (elsewhere
  0).

Each run is simulated once per grid value; the fit interpolates each run's prediction linearly
between them and minimises the sum of squared log errors.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: the run version a versioned profile is fitted on
VERSIONS = {"sglang-0.5.9": "sglang 0.5.9"}
#: profiles that take a fitted profile's host launch time (the same runtime launches the
#: kernels; the newer version captures its prefill steps in graphs where it can)
TRANSFERS = {"sglang-0.5.9": ("sglang",)}


@dataclass(frozen=True)
class Parameter:
    name: str
    grid: tuple
    metrics: tuple

    def fine(self) -> np.ndarray:
        return np.linspace(self.grid[0], self.grid[-1], 2001)


HOST_LAUNCH = Parameter("host_launch_us", (0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 130.0),
                        ("ttft_median_ms", "tpot_mean_ms"))
ACCEPT = Parameter("accept", (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), ("tpot_mean_ms",))


def _known(name: str, vendor: str | None = None) -> bool:
    from moesym.errors import SpecError
    from moesym.specs.hardware import load_hardware

    try:
        hw = load_hardware(name)
    except SpecError:
        return False
    return vendor is None or hw.vendor == vendor


def host_launch_runs(engine: str, vendor: str) -> list:
    """The engine's aggregated runs with eager prefill on ``vendor``'s GPUs, at the profile's
    version where it names one (runs of earlier, unrecorded versions are held out of every
    fit)."""
    from moesym.report.inferencex import load_runs

    version = VERSIONS.get(engine)
    return [r for r in load_runs() if not r.disagg and r.engine == engine
            and r.prefill_graphs is not True and _known(r.hardware, vendor)
            and (version is None or r.version == version)]


def accept_runs() -> list:
    """Every aggregated MTP run on a GPU moesym has a file for."""
    from moesym.report.inferencex import load_runs

    return [r for r in load_runs() if not r.disagg and r.spec == "mtp" and _known(r.hardware)]


def simulated(run, param: Parameter, value: float) -> dict:
    """The run's simulated ``param.metrics`` with the parameter at ``value``."""
    from moesym.report.inferencex import simulate_run
    from moesym.serving import timer
    from moesym.symbolic.symtab import N

    if param is ACCEPT:
        out = simulate_run(run, accept=value)
    else:
        original = timer.ModelTimer._evaluate

        def evaluate(self, *args):
            self.overrides = {N.t_host_launch: value * 1e-6}
            return original(self, *args)

        timer.ModelTimer._evaluate = evaluate
        try:
            out = simulate_run(run)
        finally:
            timer.ModelTimer._evaluate = original
    return {m: out[m] for m in param.metrics}


def _fit(param: Parameter, curves: dict, measured: dict, keys) -> float:
    """The grid value (interpolated) with the least sum of squared log errors over ``keys``
    (run, metric)."""
    fine = param.fine()
    loss = np.zeros_like(fine)
    for k in keys:
        loss += np.log(np.interp(fine, param.grid, curves[k]) / measured[k]) ** 2
    return float(fine[int(np.argmin(loss))])


def _errors(param: Parameter, curves: dict, measured: dict, keys, value: float) -> dict:
    """Relative errors at ``value`` per metric."""
    out = {m: [] for m in param.metrics}
    for k in keys:
        out[k[1]].append(float(np.interp(value, param.grid, curves[k])) / measured[k] - 1)
    return out


def fit(param: Parameter, runs: list, label: str, progress: bool = True) -> dict | None:
    """The value over ``runs`` (every metric of ``param`` at once), each launch configuration
    held out in turn; errors reported per metric and over all."""
    if not runs:
        return None
    curves, measured, config = {}, {}, {}
    for i, run in enumerate(runs):
        values = [simulated(run, param, v) for v in param.grid]
        for m in param.metrics:
            curves[run.id, m] = [v[m] for v in values]
            measured[run.id, m] = getattr(run, m)
        config[run.id] = run.config
        if progress:
            print(f"  {label}: {i + 1}/{len(runs)} {run.config} c{run.conc}", file=sys.stderr)
    keys = list(curves)
    value = _fit(param, curves, measured, keys)
    held = {m: [] for m in param.metrics}
    per_config = {}
    for cfg in sorted(set(config.values())):
        inside = [k for k in keys if config[k[0]] != cfg]
        if not inside:
            continue
        v = _fit(param, curves, measured, inside)
        errs = _errors(param, curves, measured, [k for k in keys if config[k[0]] == cfg], v)
        for m in param.metrics:
            held[m] += errs[m]
        flat = [e for m in param.metrics for e in errs[m]]
        per_config[cfg] = {"fit": v, "runs": len(errs[param.metrics[0]]),
                           "median_abs_error": median(abs(e) for e in flat)}
    train = _errors(param, curves, measured, keys, value)
    flat = lambda d: [abs(e) for m in param.metrics for e in d[m]]  # noqa: E731
    return {"label": label, "value": value, "runs": len(config), "configs": len(per_config),
            "train_median_abs_error": median(flat(train)),
            "heldout_median_abs_error": median(flat(held)) if per_config else float("nan"),
            "heldout_by_metric": {m: median(abs(e) for e in held[m]) for m in param.metrics
                                  if held[m]},
            "per_config": per_config}


def _provenance(r: dict, what: str) -> str:
    return (f"written {datetime.date.today()} by benchmarks/fit_serving.py, fitted on the {what} "
            f"({r['runs']} InferenceX open runs, {r['configs']} launch configurations, each held "
            f"out in turn: held-out median |error| {r['heldout_median_abs_error']:.1%}, in fit "
            f"{r['train_median_abs_error']:.1%}"
            + "".join(f"; {m} held out {e:.1%}" for m, e in r.get("heldout_by_metric",
                                                                   {}).items()
                      if len(r["heldout_by_metric"]) > 1) + ")")


def write_per_vendor(results: list, key: str, what: str, fitted_on: str, digits: int,
                     note=lambda r: "") -> None:
    """Each engine's fits (one per device maker) as its profile's ``key`` table, with the
    fit's provenance; the profiles of :data:`TRANSFERS` take their source's values."""
    path = ROOT / "moesym" / "engines" / "builtin.toml"
    text = path.read_text(encoding="utf-8")
    targets = {}
    for name in dict.fromkeys(r["engine"] for r in results):
        targets[name] = (name, False)
        for other in TRANSFERS.get(name, ()):
            targets[other] = (name, True)
    for name, (source, transferred) in targets.items():
        mine = [r for r in results if r["engine"] == source]
        header = f'["{name}"]' if "." in name or "-" in name else f"[{name}]"
        start = text.index(header + "\n")
        end = text.find("\n[", start + 1)
        block = text[start:end if end >= 0 else len(text)]
        whose = f"{source}'s" if transferred else "this engine's"
        comment = "".join(f"# {r['vendor']}: "
                          + (f"transferred from {source}'s fit: " if transferred else "")
                          + _provenance(r, fitted_on.format(whose=whose, vendor=r["vendor"]))
                          + note(r) + "\n" for r in mine)
        table = ", ".join(f"{r['vendor']} = {r['value']:.{digits}f}" for r in mine)
        line = f"# {what}\n" + comment + f"{key} = {{ {table} }}"
        new, found = re.subn(rf"(# {re.escape(what)}\n(#[^\n]*\n)*)?{key} = [^\n]*",
                             lambda m: line, block, count=1)
        if not found:  # after the table's last key, before the next table's leading comments
            lines = block.split("\n")
            last = max(i for i, x in enumerate(lines) if x.strip() and not x.startswith("#"))
            new = "\n".join(lines[:last + 1] + line.split("\n") + lines[last + 1:])
        text = text[:start] + new + text[start + len(block):]
    path.write_text(text, encoding="utf-8")


def write_host_launch(results: list) -> None:
    """Each engine's fits (one per device maker) as its profile's ``host_launch_us`` table."""
    write_per_vendor(results, "host_launch_us",
                     "host time per kernel of an eagerly launched (prefill) step, per device maker",
                     "median time to first token and mean TPOT of {whose} aggregated runs on "
                     "{vendor} GPUs", 1)


#: a run's requests that wait through the one-time first prefill: the first wave, concurrency of
#: the benchmark's 10 x concurrency prompts
FIRST_WAVE = 0.1


def _engine_groups(rows: list, keep, item) -> dict:
    """The simulated rows ``keep`` accepts (not skipped), as ``item(row, run)`` grouped by
    (engine, device maker)."""
    from moesym.report.inferencex import load_runs
    from moesym.specs.hardware import load_hardware

    runs = {r.id: r for r in load_runs()}
    groups: dict = {}
    for row in rows:
        run = runs[row["id"]]
        if "skipped" not in row and keep(run):
            groups.setdefault((run.engine, load_hardware(run.hardware).vendor), []).append(
                (run.config, *item(row, run)))
    return groups


def _held_out_fits(groups: dict, value, err) -> list:
    """Per (engine, maker): ``value(items)`` fitted on every launch configuration but one and
    tried on that one (``err(items, value)``: relative errors), each configuration in turn
    (:func:`fit`'s result keys, plus the error without the value, ``err(items, 0)``)."""
    out = []
    for (engine, vendor), items in sorted(groups.items()):
        held, per_config = [], {}
        for cfg in sorted({it[0] for it in items}):
            inside = [it for it in items if it[0] != cfg]
            if not inside:
                continue
            v = value(inside)
            e = err([it for it in items if it[0] == cfg], v)
            held += e
            per_config[cfg] = {"fit": v, "runs": len(e),
                               "median_abs_error": median(abs(x) for x in e)}
        v = value(items)
        out.append({"label": f"{engine} on {vendor}", "engine": engine, "vendor": vendor,
                    "value": v, "runs": len(items), "configs": len(per_config),
                    "train_median_abs_error": median(abs(x) for x in err(items, v)),
                    "heldout_median_abs_error": median(abs(x) for x in held) if held
                    else float("nan"),
                    "without_median_abs_error": median(abs(x) for x in err(items, 0.0)),
                    "per_config": per_config})
    return out


def cold_prefill_fits(rows: list) -> list:
    """Each engine's one-time first prefill per device maker from simulated rows, each launch
    configuration held out in turn (:func:`fit`'s result keys)."""
    def item(row, run):
        # the mean as simulated without the one-time time (the rows may carry one: its share
        # of the mean is the first_use component, a tenth of it)
        mean = dict(row["ttft_mean_ms"])
        mean["predicted"] -= row.get("ttft_components_ms", {}).get("first_use", 0.0)
        gap = lambda side: mean[side] - row["ttft_median_ms"][side]  # noqa: E731
        return (gap("measured") - gap("predicted")) / FIRST_WAVE, mean

    return _held_out_fits(
        _engine_groups(rows, lambda run: True, item),
        lambda its: max(0.0, median(u for _, u, _ in its)),
        lambda its, ms: [(m["predicted"] + FIRST_WAVE * ms) / m["measured"] - 1
                         for _, _, m in its])


def pd_handoff_fits(rows: list) -> list:
    """Each engine's prefill-to-decode hand-off per device maker from simulated disaggregated
    rows, each launch configuration held out in turn (:func:`fit`'s result keys)."""
    def item(row, run):
        med = dict(row["ttft_median_ms"])
        med["predicted"] -= row.get("pd_handoff_ms", 0.0)  # as simulated without a hand-off
        low = row["ttft_components_ms"].get("queue", 0.0) < 0.1 * row["ttft_mean_ms"]["predicted"]
        return low, med["measured"] - med["predicted"], med

    return _held_out_fits(
        _engine_groups(rows, lambda run: run.disagg, item),
        lambda its: max(0.0, median([u for _, low, u, _ in its if low] or [0.0])),
        lambda its, ms: [(m["predicted"] + ms) / m["measured"] - 1 for *_, m in its])


def kept(r: dict) -> bool:
    """A fit is kept where, held out by configuration, it predicts its TTFT better than none
    at all (as the kernel fits keep a backend's own fit only where it lowers the held-out
    error)."""
    return r["configs"] > 0 and r["heldout_median_abs_error"] < r["without_median_abs_error"]


def write_ttft_fit(results: list, key: str, what: str, fitted_on: str, metric: str) -> None:
    """Each fit where kept, else 0 (so that a profile does not inherit its base's), as the
    profiles' ``key``, with both held-out errors of the ``metric`` TTFT said."""
    out = [{**r, "fitted": r["value"], "value": r["value"] if kept(r) else 0.0}
           for r in results if r["configs"]]
    write_per_vendor(out, key, what, fitted_on, 0,
                     lambda r: (f"; {metric} TTFT held out {r['heldout_median_abs_error']:.1%} "
                                f"against {r['without_median_abs_error']:.1%} without it"
                                + ("" if kept(r) else f": the fit ({r['fitted']:.0f} ms) is not "
                                   "kept, 0")))


#: the fits on simulated rows: what, the profile key, its comment, what it is fitted on and the
#: TTFT statistic it is judged by
TTFT_FITS = {
    "cold-prefill": (cold_prefill_fits, "cold_prefill_ms",
                     "one-time first prefill (first use of the prefill kernels), per device maker",
                     "mean-over-median TTFT gap of {whose} runs on {vendor} GPUs", "mean"),
    "pd-handoff": (pd_handoff_fits, "pd_handoff_ms",
                   "prefill-to-decode hand-off beyond the KV transfer (disaggregated), per "
                   "device maker",
                   "median TTFT of {whose} disaggregated runs on {vendor} GPUs (the value: "
                   "those without queueing)", "median"),
}


def write_accept(r: dict) -> None:
    path = ROOT / "moesym" / "report" / "inferencex.py"
    text = path.read_text(encoding="utf-8")
    line = (f"#: {_provenance(r, 'mean TPOT of the aggregated MTP runs')}\n"
            f"RANDOM_PROMPT_ACCEPT = {r['value']:.3f}")
    new = re.sub(r"#: written [^\n]*\n(#:? [^\n]*\n)*RANDOM_PROMPT_ACCEPT = [0-9.]+",
                 lambda m: line, text, count=1)
    if new == text:
        raise SystemExit(f"{path}: RANDOM_PROMPT_ACCEPT and its provenance line not found")
    path.write_text(new, encoding="utf-8")


def _print(r: dict, unit: str) -> None:
    print(f"{r['label']}: {r['value']:.3f}{unit} over {r['runs']} runs ({r['configs']} "
          f"configurations): median |error| {r['train_median_abs_error']:.1%} in fit, "
          f"{r['heldout_median_abs_error']:.1%} held out by configuration"
          + "".join(f"; {m} {e:.1%}" for m, e in r.get("heldout_by_metric", {}).items()))
    for cfg, c in r["per_config"].items():
        print(f"  held out {cfg:<46} {c['runs']:>3} runs  fit on the rest {c['fit']:8.3f}  "
              f"median |error| {c['median_abs_error']:.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("host-launch", "accept", *TTFT_FITS))
    ap.add_argument("rows", nargs="?", default=None,
                    help="cold-prefill, pd-handoff: the rows (comma-separated files) "
                         "benchmarks/serving_open_set.py --json wrote")
    ap.add_argument("--engine", action="append", default=None)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.what in TTFT_FITS:
        import json

        if not args.rows:
            raise SystemExit(f"{args.what} needs the ROWS.json of "
                             "benchmarks/serving_open_set.py")
        rows = [r for f in args.rows.split(",") for r in json.loads(Path(f).read_text())]
        fits, key, what, fitted_on, metric = TTFT_FITS[args.what]
        results = fits(rows)
        for r in results:
            _print(r, " ms")
            print(f"  {metric} TTFT median |error| without it: "
                  f"{r['without_median_abs_error']:.1%} -> "
                  f"{'kept' if kept(r) else 'not kept (0)'}")
        if args.write:
            write_ttft_fit(results, key, what, fitted_on, metric)
        return 0
    if args.what == "accept":
        r = fit(ACCEPT, accept_runs(), "accept (random prompts)")
        _print(r, "")
        if args.write:
            write_accept(r)
        return 0
    results = []
    for engine in args.engine or ["sglang-0.5.9", "trtllm"]:
        for vendor in ("nvidia", "amd"):
            r = fit(HOST_LAUNCH, host_launch_runs(engine, vendor), f"{engine} on {vendor}")
            if r is not None:
                results.append({**r, "engine": engine, "vendor": vendor})
                _print(r, " us")
    if args.write:
        write_host_launch(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
