"""Simulate every open InferenceX run and write the tables of docs/explanation/validation.md.

    python benchmarks/serving_open_set.py [--json OUT.json] [--from OUT.json] [--write]
                                          [--conc-max N --above-every K] [--shard I/N]

Runs ``moesym.report.inferencex.validate_runs`` over bench_data/serving/'s table (each run
simulated as the benchmark ran it, what ``moesym validate --serving --rows`` prints), and with
``--write`` replaces the section between the markers ``<!-- serving-open-set -->`` and
``<!-- /serving-open-set -->`` of docs/explanation/validation.md with the summary per GPU and
framework and every run, and the one between ``<!-- serving-cases -->`` markers with the table
of ``moesym validate``'s serving section. The README's ``<!-- serving-open-set-summary -->`` section gets the summary per GPU and
framework. ``--json`` keeps the rows; ``--from`` writes from kept rows without
simulating again. The whole set is 5.5 million simulated requests (10 x concurrency per run,
as the benchmark sends); ``--conc-max N --above-every K`` runs every run up to concurrency N
and every K-th of the rest (by id), and the tables say so; ``--shard I/N`` runs the I-th of N
interleaved parts (one process per core), and ``--from A.json,B.json`` joins the parts. The wall
time is printed beside the time of ``python -c "import numpy"``
measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "explanation" / "validation.md"
START, END = "<!-- serving-open-set -->", "<!-- /serving-open-set -->"
LABELS = {"tpot_mean_ms": "TPOT mean", "ttft_mean_ms": "TTFT mean",
          "ttft_median_ms": "TTFT median", "tput_per_gpu": "tokens/s/GPU"}


def _reference_s() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import numpy"], check=True)
    return time.perf_counter() - t


def summary_table(summary: dict) -> list[str]:
    """Median |error| per GPU and framework, and over every run, as markdown lines."""
    out = ["| GPU, framework | runs | not run | " + " | ".join(LABELS.values()) + " |",
           "|---|---|---|" + "---|" * len(LABELS)]
    for g in summary["groups"] + [{"group": "all", **summary["all"]}]:
        out.append(f"| {g['group']} | {g['runs']} | {g['skipped']} | "
                   + " | ".join(f"{g['median_abs_error'][k]:.1%}" for k in LABELS) + " |")
    return out


def markdown(rows: list, summary: dict) -> str:
    out = summary_table(summary)
    out += ["", "Median |error| per GPU and framework. Every run (measured / moesym, signed "
            "error):", "",
            "| id | configuration | date, version | conc | "
            + " | ".join(LABELS.values()) + " |",
            "|---|---|---|---|" + "---|" * len(LABELS)]
    for r in rows:
        head = f"| {r['id']} | {r['config']} | {r['date']} {r['version'] or '-'} | {r['conc']} | "
        if "skipped" in r:
            out.append(head + f"not run: {r['skipped']} |" + " |" * (len(LABELS) - 1))
            continue
        out.append(head + " | ".join(
            f"{r[k]['measured']:.1f} / {r[k]['predicted']:.1f} ({r[k]['error']:+.0%})"
            for k in LABELS) + " |")
    reasons = [f"- {n} not run: {why}" for why, n in summary["skip_reasons"].items()]
    return "\n".join(out + ([""] + reasons if reasons else []))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--from", dest="source", default=None)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--conc-max", type=int, default=None,
                    help="run every run up to this concurrency, and every K-th above it")
    ap.add_argument("--above-every", type=int, default=1, metavar="K")
    ap.add_argument("--shard", default="0/1", metavar="I/N")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from moesym.report.inferencex import serving_summary, validate_runs

    if args.source:
        rows = sorted((r for f in args.source.split(",") for r in json.loads(Path(f).read_text())),
                      key=lambda r: r["id"])
    else:
        from moesym.report.inferencex import load_runs

        ref = _reference_s()
        t = time.perf_counter()
        rows = []
        runs = load_runs()
        if args.conc_max is not None:
            above = [r for r in runs if r.conc > args.conc_max][::args.above_every]
            runs = tuple(r for r in runs if r.conc <= args.conc_max or r in above)
        i, n = (int(x) for x in args.shard.split("/"))
        runs = runs[i::n]
        for i, run in enumerate(runs):
            rows += validate_runs([run])
            print(f"{i + 1}/{len(runs)} {run.config} c{run.conc} "
                  f"{time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows))
        wall = time.perf_counter() - t
        print(f"{len(rows)} runs in {wall:.0f} s ({wall / ref:.0f}x python -c 'import numpy', "
              f"{ref:.2f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    summary = serving_summary(rows)
    text = markdown(rows, summary)
    if args.conc_max is not None:
        from moesym.report.inferencex import load_runs

        text = (f"{len(rows)} of the {len(load_runs())} open runs simulated: every run up to "
                f"concurrency {args.conc_max} and every {args.above_every}-th of those above "
                f"(by id; `python benchmarks/serving_open_set.py --conc-max {args.conc_max} "
                f"--above-every {args.above_every}`).\n\n" + text)
    a = summary["all"]["median_abs_error"]
    print("all: " + ", ".join(f"{LABELS[k]} {a[k]:.1%}" for k in LABELS)
          + f" over {summary['all']['runs']} runs ({summary['all']['skipped']} not run)")
    if args.write:
        from moesym.report.validation import validate_serving

        cases = ["| case | metric | measured | moesym | error |", "|---|---|---|---|---|"]
        cases += [f"| {c['name']} | {c['metric']} | {c['measured']:.1f} | {c['predicted']:.1f} | "
                  f"{c['error']:+.1%} |" for c in validate_serving()]
        readme = ROOT / "README.md"
        for path, parts in ((DOC, ((START, END, text),
                                   ("<!-- serving-cases -->", "<!-- /serving-cases -->",
                                    "\n".join(cases)))),
                            (readme, (("<!-- serving-open-set-summary -->",
                                       "<!-- /serving-open-set-summary -->",
                                       "\n".join(summary_table(summary))),))):
            doc = path.read_text(encoding="utf-8")
            for start, end, body in parts:
                i, j = doc.index(start), doc.index(end)
                doc = doc[:i + len(start)] + "\n" + body + "\n" + doc[j:]
            path.write_text(doc, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
