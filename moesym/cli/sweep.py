"""``moesym sweep``: evaluate the compiled step model over a grid into CSV or Parquet."""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import MoesymError
from ..plan.rules import check_inputs, check_lengths, check_pipeline
from ..readers.model import load_model
from ..search.sweep import (dask_client, list_size, parse_list, sweep_columns, sweep_dask,
                            write_sweep, write_sweep_dask)
from ..specs.lengths import representative
from . import COMMANDS
from .common import (add_deployment, add_no_cache, deployment_from, engine_from, node_gpus,
                     positive_int, probability)

__all__ = ["register"]

_DEPLOY_AXES = ("gpus", "ep", "tp", "micro_batches", "pp", "cp")
MAX_POINTS = 10_000_000  # grid points a sweep builds without --max-points

def register(sub) -> None:
    p = sub.add_parser("sweep", help=COMMANDS["sweep"])
    p.add_argument("model")
    p.add_argument("--hardware", required=True, help="GPU name, or a comma list of them")
    p.add_argument("--phase", choices=("prefill", "decode", "serve"), required=True)
    for name in ("batch", "tokens", "context", "isl", "osl", "chunk"):
        p.add_argument(f"--{name}", dest=f"{name}_list", default=None, metavar="LIST",
                       help=("a,b,c; A:B (powers of two from A to B); A:B:S (A to B in steps "
                             "of S)" if name == "batch" else "as --batch")
                       + ("; serve axis" if name in ("isl", "osl") else "")
                       + ("; serve axis (default: the engine's chunk per point)"
                          if name == "chunk" else ""))
    add_deployment(p)
    add_no_cache(p)
    # list-valued deployment axes replace the single-valued shared flags
    for action in p._actions:
        if action.dest in _DEPLOY_AXES:
            action.type = str
            action.default = None
            action.metavar = "LIST"
        if action.dest == "ep":
            action.help = "default: the GPUs of a pipeline stage (--gpus / --pp)"
        elif action.dest == "pp":
            action.help = ("pipeline-parallel depths: each stage holds gpus / pp GPUs (--ep and "
                           "--tp per stage) and 1 / pp of the layers; column pp")
        elif action.dest == "cp":
            action.help = ("prefill: context-parallel degrees (GPUs sharing each prompt, ring "
                           "attention; must divide gpus / pp / tp); column cp")
    p.add_argument("--context-dist", default=None, metavar="DIST",
                   help="decode: KV lengths as a distribution (fixed:N, uniform:A:B, "
                        "lognormal:MEAN:SIGMA or a file of lengths) instead of --context: each "
                        "point averaged over its representative lengths, as predict's; column "
                        "context_dist (context holds the mean)")
    p.add_argument("--isl-dist", default=None, metavar="DIST",
                   help="prefill, serve: prompt lengths as a distribution (as --context-dist) "
                        "instead of --context (prefill) or --isl (serve); column isl_dist")
    p.add_argument("--weights-list", default=None,
                   help="comma list of weight precisions (per-component recipes: a semicolon "
                        "list, e.g. 'moe=fp4,attn=fp8;fp8')")
    p.add_argument("--chunk-points", type=int, default=None,
                   help="rows per streamed chunk (default 131072 for the local backend: the "
                        "Parquet writer encodes one chunk while the next is evaluated; "
                        "2000000 per dask partition)")
    p.add_argument("--prefix-hit", type=probability, default=0.0, metavar="F",
                   help="prefill, serve: share of each prompt found in the prefix cache (as "
                        "predict's)")
    p.add_argument("--out", required=True, help="output .csv or .parquet")
    p.add_argument("--max-points", type=positive_int, default=MAX_POINTS, metavar="N",
                   help=f"refuse a grid of more points than N before building it (default "
                        f"{MAX_POINTS:,}, about {MAX_POINTS * _ROW_BYTES / 1e9:.2g} GB of CSV)")
    p.add_argument("--backend", choices=("local", "dask"), default="local",
                   help="local: stream chunks from this process; dask: one partition per chunk "
                        "on a dask cluster (needs moesym[dask]; .parquet is then a directory)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --backend dask: scheduler to connect to (default: an in-process "
                        "cluster using every core)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.mesh is not None or args.a2a == "ring-mcast":
        raise MoesymError("--mesh / --a2a ring-mcast: sweep does not grid mesh deployments yet; "
                          "run moesym predict --mesh RxC per point")
    if args.scheduler is not None and args.backend != "dask":
        raise MoesymError("--scheduler needs --backend dask")
    if not args.out.endswith((".csv", ".parquet")):
        raise MoesymError(f"--out {args.out}: name a .csv or a .parquet file (the suffix picks "
                          "the format)")
    if args.chunk_points is None:
        args.chunk_points = 2_000_000 if args.backend == "dask" else 1 << 17
    if args.chunk_points < 1:
        raise MoesymError(f"--chunk-points must be a positive number of rows, got "
                          f"{args.chunk_points}")
    given = {f"--{name}": getattr(args, f"{name}_list")
             for name in ("batch", "tokens", "context", "isl", "osl", "chunk")}
    given.update({"--" + name.replace("_", "-"): getattr(args, name) for name in _DEPLOY_AXES})
    given = {flag: text for flag, text in given.items() if text is not None}
    _bound(args, given)
    model = load_model(args.model)
    axes = {flag[2:].replace("-", "_"): parse_list(text, flag) for flag, text in given.items()}
    dist = _distribution(args)
    args.gpus = axes["gpus"][0] if "gpus" in axes else 1
    args.tp = 1
    args.micro_batches = 1
    args.ep = None
    args.pp = args.cp = 1  # axes (one model per value), not the base deployment's
    base = deployment_from(args)
    _check_axes(model, axes, args.phase, base, dist)
    if args.weights_list is not None and (not args.weights_list.strip() or args.weights != "bf16"):
        raise MoesymError(f"--weights-list {args.weights_list!r}: name one or more formats, and "
                          "give them there rather than beside --weights")
    # formats separated by commas, or recipes (which hold commas) by semicolons
    sep = ";" if args.weights_list and "=" in args.weights_list else ","
    weights = args.weights_list.split(sep) if args.weights_list else [base.weights]
    def frames():
        for hw, dep in _bases(args, base, weights):
            yield from sweep_columns(model, hw, args.phase, axes, dep, args.chunk_points,
                                     args.prefix_hit, dist)

    if args.backend == "dask":
        total = _write_dask(args, model, axes, base, weights, dist)
    else:
        total = write_sweep(args.out, frames())
    print(f"wrote {total} rows to {args.out}")
    return 0


#: bytes a CSV row takes: 86 for a decode grid, 172 for a serve grid (measured on this
#: version's sweeps of qwen3-30b-a3b and deepseek-v3); the larger stands for any
_ROW_BYTES = 172


def _bound(args, given: dict) -> None:
    """Refuse a grid of more points than ``--max-points`` before any is built, naming the
    axes as given, the points and the bytes of the CSV they would make."""
    sizes = {flag: list_size(text, flag) for flag, text in given.items()}
    points = math.prod(sizes.values()) * len({h.strip() for h in args.hardware.split(",")}) \
        * max(1, len((args.weights_list or "x").split(";" if "=" in (args.weights_list or "")
                                                        else ",")))
    if points > args.max_points:
        axes = " x ".join(f"{flag} {given[flag]} ({n:,})" for flag, n in sizes.items() if n > 1)
        size = points * _ROW_BYTES
        raise MoesymError(f"{axes or 'the grid'} gives {points:,} points, about "
                          + (f"{size / 1e9:.3g} GB" if size >= 1e9 else f"{size / 1e6:.3g} MB")
                          + " of CSV, beyond --max-points "
                          f"{args.max_points:,}; narrow the axes or raise --max-points")


def _check_axes(model, axes: dict, phase: str, base, dist) -> None:
    """The validation stage over the grid: the base deployment, the deepest pipeline and the
    longest lengths of the axes (each point's sharding is masked by the sweep itself)."""

    check_inputs(model, None, base, sharding=False)
    for pp in sorted(set(axes.get("pp", ())), reverse=True)[:1]:
        check_pipeline(model, pp)
    top = {k: max(axes[k]) for k in ("context", "isl", "osl") if k in axes}
    lengths = representative(dist, "--context-dist" if phase == "decode" else "--isl-dist") \
        if dist else ()
    if phase == "serve" and ("isl" in top or lengths) and "osl" in top:
        check_lengths(model, phase, isl=top.get("isl", 0), osl=top["osl"], lengths=lengths)
    elif phase != "serve" and ("context" in top or lengths):
        check_lengths(model, phase, context=top.get("context", 0), lengths=lengths)


def _distribution(args) -> str | None:
    """The phase's length distribution (--context-dist for decode, --isl-dist for prefill and
    serve, as predict takes them); the other phase's flag is refused in one line."""
    own, other = ("context_dist", "isl_dist") if args.phase == "decode" else ("isl_dist",
                                                                            "context_dist")
    if getattr(args, other) is not None:
        what = ("KV lengths (decode)" if other == "context_dist" else
                "prompt lengths (prefill, serve)")
        raise MoesymError(f"--{other.replace('_', '-')} describes {what}: a {args.phase} sweep "
                          f"takes --{own.replace('_', '-')}")
    return getattr(args, own)


def _bases(args, base, weights):
    """(hardware, base deployment) per hardware file (each once, its own node size and, without
    --engine, its own default engine) and weight format, in the order the rows are written."""
    for hw in dict.fromkeys(h.strip() for h in args.hardware.split(",")):
        engine = engine_from(args, hw)
        for w in weights:
            yield hw, replace(base, weights=w.strip(), gpus_per_node=node_gpus(args, hw),
                              engine=engine)


def _write_dask(args, model, axes, base, weights, dist=None) -> int:
    """The same grid, one dask partition per chunk, in the same order as the local backend."""
    with dask_client(args.scheduler) as client:
        frames = [sweep_dask(model, hw, args.phase, axes, dep, args.chunk_points,
                             args.prefix_hit, client=client, dist=dist)
                  for hw, dep in _bases(args, base, weights)]
        return write_sweep_dask(args.out, frames)
