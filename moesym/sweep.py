"""Grid sweeps of the compiled step model into pandas, CSV or Parquet, with memory fit per point.

Axes that are symbols of the step model (batch or tokens, context, EP, GPUs, TP, micro-batches)
are broadcast in one compiled call; structural choices (hardware, weight precision, A2A mode)
loop over separately built models. Large grids stream in chunks of the first axis, so memory
stays bounded whatever the grid size.

>>> import moesym as ms
>>> df = sweep_frame(ms.load_model("qwen3-30b-a3b"), "h20", "decode",
...                  {"batch": [1, 64], "context": [4096], "gpus": [4], "ep": [4]})
>>> list(df.columns)[:4], len(df)
(['hardware', 'weights', 'batch', 'context'], 2)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from .compile import bind_and_compile
from .errors import MoesymError
from .model.step import build_step
from .specs.deployment import Deployment, Phase, Workload
from .specs.hardware import HardwareSpec, load_hardware
from .specs.model import ModelSpec
from .symbols import S

__all__ = ["parse_list", "sweep_chunks", "sweep_frame", "write_sweep", "AXES"]

# grid axis name -> step-model symbol
AXES = {"batch": S.batch, "tokens": S.tokens, "context": S.context, "gpus": S.gpus, "ep": S.ep,
        "tp": S.tp, "micro_batches": S.micro_batches}


def parse_list(text: str, flag: str) -> list[int]:
    """``a,b,c`` | ``start:stop`` (powers of two) | ``start:stop:step``.

    >>> parse_list("1:16", "--batch"), parse_list("8,16", "--ep"), parse_list("0:10:5", "--x")
    ([1, 2, 4, 8, 16], [8, 16], [0, 5, 10])
    """
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) == 2:
                a, b = parts
                if a <= 0 or b < a:
                    raise ValueError
                out, v = [], a
                while v <= b:
                    out.append(v)
                    v *= 2
                return out
            a, b, s = parts
            if s <= 0 or b < a:
                raise ValueError
            return list(range(a, b + 1, s))
        vals = [int(p) for p in text.split(",") if p.strip()]
        if not vals:
            raise ValueError
        return vals
    except ValueError:
        raise MoesymError(f"{flag} {text!r}: use a,b,c or start:stop (powers of two) or "
                          f"start:stop:step with positive integers") from None


def _valid_mask(model: ModelSpec, cols: Mapping[str, np.ndarray], redundant: int) -> np.ndarray:
    g, ep, tp = cols["gpus"], cols["ep"], cols["tp"]
    ok = (g % ep == 0) & (g % tp == 0) & (model.num_heads % tp == 0)
    if model.is_moe:
        ok &= ((model.num_experts + redundant) % ep == 0)
        ok &= (model.moe_intermediate_size % (g // np.maximum(ep, 1)) == 0)
    return ok


def _fits_fn(model, hw, dep, wl):
    """Compiled per-GPU memory use over the grid axes, and the capacity."""
    try:
        from .memory import memory_model
    except ImportError:  # pragma: no cover - memory model ships with the package
        return None, None, math.inf
    mm = memory_model(model, hw, dep, wl)
    expr = mm.used_expr()
    grid_syms = tuple(s for s in AXES.values() if s in expr.free_symbols)
    fn, args = bind_and_compile(expr, mm.values, grid_syms)
    return fn, args, mm.values[S.hbm_capacity]


def sweep_chunks(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
                 axes: Mapping[str, Sequence[int]], deployment: Deployment | None = None,
                 chunk_points: int = 2_000_000) -> Iterator[pd.DataFrame]:
    """Yield DataFrames of at most about ``chunk_points`` rows covering the whole grid."""
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    ph = Phase(phase)
    base = deployment or Deployment()
    ax = {k: list(v) for k, v in axes.items()}
    tok_axis = "batch" if ph is Phase.DECODE else "tokens"
    ax.setdefault(tok_axis, [1 if ph is Phase.DECODE else 4096])
    ax.setdefault("context", [4096])
    ax.setdefault("gpus", [base.gpus])
    ax.setdefault("ep", [None])
    ax.setdefault("tp", [base.tp])
    ax.setdefault("micro_batches", [base.micro_batches])
    ax.pop("batch" if ph is Phase.PREFILL else "tokens", None)
    names = list(ax)
    # a representative valid deployment to build the model (the numbers are grid axes)
    rep_g, rep_ep = ax["gpus"][0], ax["ep"][0] or ax["gpus"][0]
    rep = replace(base, gpus=rep_g, ep=rep_g if rep_g % rep_ep else rep_ep, tp=1, micro_batches=1)
    wl = (Workload(ph, batch=1, context=ax["context"][0]) if ph is Phase.DECODE
          else Workload(ph, tokens=ax["tokens"][0], context=ax["context"][0],
                        chunk=min(ax["tokens"][0], ax["context"][0])))
    step = build_step(model, hw, rep, wl)
    syms = tuple(AXES[n] for n in names)
    fn, args = bind_and_compile(step.expr, step.values, syms)
    mem_fn, mem_args, capacity = _fits_fn(model, hw, rep, wl)
    first, rest = names[0], names[1:]
    rest_grid = list(itertools.product(*(ax[n] for n in rest)))
    per_first = max(1, len(rest_grid))
    step_first = max(1, chunk_points // per_first)
    values_first = ax[first]
    for i in range(0, len(values_first), step_first):
        block = values_first[i:i + step_first]
        rows = list(itertools.product(block, *(ax[n] for n in rest)))
        cols = {n: np.array([r[j] for r in rows]) for j, n in enumerate(names)}
        if ph is Phase.PREFILL:
            cols["chunk"] = np.minimum(cols["tokens"], cols["context"])
        cols["ep"] = np.where(pd.isna(cols["ep"]), cols["gpus"], cols["ep"]).astype(np.int64)
        for n in names:
            cols[n] = cols[n].astype(np.int64)
        ok = _valid_mask(model, cols, base.redundant_experts)
        cols = {n: c[ok] for n, c in cols.items()}
        if not len(cols[first]):
            continue
        env = {AXES[n]: cols[n].astype(float) for n in names}
        if ph is Phase.PREFILL:
            env[S.chunk] = cols["chunk"].astype(float)
        t = np.broadcast_to(fn(*(env[a] for a in args)), cols[first].shape)
        tok = cols[tok_axis] / cols["tp"]
        df = pd.DataFrame({"hardware": hw.name, "weights": base.weights, **cols})
        df["step_time_s"] = t
        df["tokens_per_gpu_s"] = tok / t
        if mem_fn is not None:
            menv = dict(env)
            menv.setdefault(S.batch, np.ones_like(t))
            used = np.broadcast_to(mem_fn(*(menv.get(a, 1.0) for a in mem_args)), t.shape)
            df["memory_bytes"] = used
            df["fits"] = used <= capacity
        else:
            df["fits"] = True
        yield df


def sweep_frame(model: ModelSpec, hardware, phase: str, axes: Mapping[str, Sequence[int]],
                deployment: Deployment | None = None) -> pd.DataFrame:
    """The whole grid in one DataFrame (use :func:`write_sweep` for grids that do not fit)."""
    parts = list(sweep_chunks(model, hardware, phase, axes, deployment))
    if not parts:
        raise MoesymError("no valid grid point: check that --ep and --tp divide --gpus and the model")
    return pd.concat(parts, ignore_index=True)


def write_sweep(path: str | Path, frames: Iterator[pd.DataFrame]) -> int:
    """Stream frames to CSV (appending) or Parquet (row groups); return the rows written."""
    path = Path(path)
    n = 0
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise MoesymError("Parquet output needs the optional extra: pip install 'moesym[parquet]'") \
                from None
        writer = None
        for df in frames:
            table = pa.Table.from_pandas(df, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            n += len(df)
        if writer is not None:
            writer.close()
        return n
    first = True
    for df in frames:
        df.to_csv(path, mode="w" if first else "a", header=first, index=False)
        first = False
        n += len(df)
    if first:
        raise MoesymError("no valid grid point: check that --ep and --tp divide --gpus and the model")
    return n
