"""Grid sweeps of the compiled step model into pandas, CSV or Parquet, with memory fit per point.

Axes that are symbols of the step model (batch or tokens, context, EP, GPUs, TP, micro-batches)
are broadcast in one compiled call; structural choices (hardware, weight precision, A2A mode)
loop over separately built models. Large grids stream in chunks of the first axis, so memory
stays bounded whatever the grid size.

Both backends share one plan: the grid is cut into blocks of the first axis (blocks with no valid
point are dropped) and each block is evaluated by the same function. :func:`sweep_chunks` compiles
the step model once and yields the blocks in order, in this process. :func:`sweep_dask` (optional
extra ``moesym[dask]``) returns a lazy ``dask.dataframe.DataFrame`` with one partition per block:
the client only plans, and every worker process compiles the model once (cached on the pickled
plan) and evaluates its blocks, so a study larger than one machine runs on a dask cluster.
:func:`write_sweep_dask` writes it as one CSV file (partitions gathered in order on the client)
or as a Parquet directory of parts written by the workers.

>>> import moesym as ms
>>> df = sweep_frame(ms.load_model("qwen3-30b-a3b"), "h20", "decode",
...                  {"batch": [1, 64], "context": [4096], "gpus": [4], "ep": [4]})
>>> list(df.columns)[:4], len(df)
(['hardware', 'weights', 'batch', 'context'], 2)
"""

from __future__ import annotations

import copyreg
import functools
import io
import math
import os
import pickle
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd

from .compile import bind_and_compile
from .errors import MoesymError
from .model.step import build_step
from .specs.deployment import A2AMode, Deployment, Phase, Workload
from .specs.hardware import HardwareSpec, load_hardware
from .specs.model import ModelSpec
from .symbols import S

__all__ = ["parse_list", "sweep_chunks", "sweep_frame", "write_sweep", "sweep_dask",
           "write_sweep_dask", "dask_client", "AXES"]

# grid axis name -> step-model symbol
AXES = {"batch": S.batch, "tokens": S.tokens, "context": S.context, "gpus": S.gpus, "ep": S.ep,
        "tp": S.tp, "micro_batches": S.micro_batches}

_NO_POINT = ("no valid grid point: check that --ep and --tp divide --gpus and the model (DeepEP "
             "--a2a modes need --ep equal to --gpus)")
_NO_DASK = "the dask backend needs the optional extra: pip install 'moesym[dask]'"


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


def _valid_mask(model: ModelSpec, cols: Mapping[str, np.ndarray], redundant: int,
                a2a: A2AMode = A2AMode.AUTO) -> np.ndarray:
    g, ep, tp = cols["gpus"], cols["ep"], cols["tp"]
    ok = (g % ep == 0) & (g % tp == 0) & (model.num_heads % tp == 0)
    if a2a.is_deepep and model.is_moe:
        ok &= ep == g  # DeepEP has no expert tensor parallelism
    if model.is_moe:
        ok &= ((model.num_experts + redundant) % ep == 0)
        ok &= (model.moe_intermediate_size % (g // np.maximum(ep, 1)) == 0)
    return ok


def _memory_model():
    try:
        from .memory import memory_model
    except ImportError:  # pragma: no cover - memory model ships with the package
        return None
    return memory_model


def _fits_fn(model, hw, dep, wl):
    """Compiled per-GPU memory use over the grid axes, and the capacity."""
    memory_model = _memory_model()
    if memory_model is None:  # pragma: no cover
        return None, None, math.inf
    mm = memory_model(model, hw, dep, wl)
    expr = mm.used_expr()
    grid_syms = tuple(s for s in AXES.values() if s in expr.free_symbols)
    fn, args = bind_and_compile(expr, mm.values, grid_syms)
    return fn, args, mm.values[S.hbm_capacity]


def _columns(ax: Mapping[str, Sequence]) -> dict[str, np.ndarray]:
    """Every combination of the axes (the first varies slowest), one int64 column per axis.

    An ``ep`` of None means EP over all the point's GPUs.
    """
    mesh = np.meshgrid(*(np.asarray(v) for v in ax.values()), indexing="ij")
    cols = {n: m.ravel() for n, m in zip(ax, mesh)}
    if "ep" in cols:
        cols["ep"] = np.where(pd.isna(cols["ep"]), cols["gpus"], cols["ep"])
    return {n: c.astype(np.int64) for n, c in cols.items()}


@dataclass(frozen=True)
class _Grid:
    """What every block of a sweep shares; it travels to the dask workers pickled."""

    model: ModelSpec
    hw: HardwareSpec
    base: Deployment
    rep: Deployment  # a representative valid deployment to build the model (numbers are axes)
    wl: Workload
    first: str  # the axis the grid is cut along; each block carries its own values of it
    rest: tuple[tuple[str, tuple], ...]  # the other axes, in column order

    @property
    def names(self) -> list[str]:
        return [self.first, *(n for n, _ in self.rest)]

    @property
    def tok_axis(self) -> str:
        return "batch" if self.wl.phase is Phase.DECODE else "tokens"


class _Compiled(NamedTuple):
    fn: Callable
    args: tuple
    mem_fn: Callable | None
    mem_args: tuple | None
    capacity: float


def _plan(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
          axes: Mapping[str, Sequence[int]], deployment: Deployment | None,
          chunk_points: int) -> tuple[_Grid, list[tuple]]:
    """The shared setup and the blocks (values of the first axis) that hold a valid point."""
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    ph = Phase(phase)
    base = deployment or Deployment()
    ax = {k: list(v) for k, v in axes.items()}
    unknown = sorted(set(ax) - set(AXES))
    if unknown:
        raise MoesymError(f"unknown sweep axis {', '.join(unknown)}: use {', '.join(AXES)}")
    tok_axis = "batch" if ph is Phase.DECODE else "tokens"
    ax.setdefault(tok_axis, [1 if ph is Phase.DECODE else 4096])
    ax.setdefault("context", [4096])
    ax.setdefault("gpus", [base.gpus])
    ax.setdefault("ep", [None])
    ax.setdefault("tp", [base.tp])
    ax.setdefault("micro_batches", [base.micro_batches])
    ax.pop("batch" if ph is Phase.PREFILL else "tokens", None)
    names = list(ax)
    rep_g, rep_ep = ax["gpus"][0], ax["ep"][0] or ax["gpus"][0]
    rep = replace(base, gpus=rep_g, ep=rep_g if rep_g % rep_ep else rep_ep, tp=1, micro_batches=1)
    wl = (Workload(ph, batch=1, context=ax["context"][0]) if ph is Phase.DECODE
          else Workload(ph, tokens=ax["tokens"][0], context=ax["context"][0],
                        chunk=min(ax["tokens"][0], ax["context"][0])))
    first, rest = names[0], names[1:]
    grid = _Grid(model, hw, base, rep, wl, first, tuple((n, tuple(ax[n])) for n in rest))
    if not all(ax.values()):
        return grid, []
    values = ax[first]
    # validity depends on gpus, ep and tp only: test their combinations, not the whole grid
    mask_axes = {n: ax[n] for n in names if n in ("gpus", "ep", "tp")}
    ok = _valid_mask(model, _columns(mask_axes), base.redundant_experts, base.a2a)
    ok = np.broadcast_to(ok.reshape(len(values) if first in mask_axes else 1, -1).any(axis=1),
                         (len(values),))
    step_first = max(1, chunk_points // max(1, math.prod(len(ax[n]) for n in rest)))
    blocks = [tuple(values[i:i + step_first]) for i in range(0, len(values), step_first)
              if ok[i:i + step_first].any()]
    return grid, blocks


def _compile(grid: _Grid, gpus: int, ep: int) -> _Compiled:
    dep = replace(grid.rep, gpus=gpus, ep=ep)
    step = build_step(grid.model, grid.hw, dep, grid.wl)
    syms = tuple(AXES[n] for n in grid.names)
    if grid.wl.phase is Phase.PREFILL:
        syms += (S.chunk,)
    fn, args = bind_and_compile(step.expr, step.values, syms)
    return _Compiled(fn, args, *_fits_fn(grid.model, grid.hw, dep, grid.wl))


class _Models:
    """The compiled step and memory models of a sweep, one per (GPUs, EP) of the grid, built
    on first use: EP = 1 versus EP > 1 (A2A mode, expert layout, fused permute, buffers) and,
    under group-limited routing, the EP value itself change the model's structure."""

    def __init__(self, grid: _Grid):
        self.grid = grid
        self._cache: dict[tuple[int, int], _Compiled] = {}
        self._lock = threading.Lock()

    def get(self, gpus: int, ep: int) -> _Compiled:
        key = (int(gpus), int(ep))
        with self._lock:  # threads of one dask worker wait for the first compile
            if key not in self._cache:
                self._cache[key] = _compile(self.grid, *key)
            return self._cache[key]


def _block_columns(grid: _Grid, block: Sequence) -> dict[str, np.ndarray]:
    """The axis columns of the valid points whose first-axis value is in ``block``."""
    cols = _columns({grid.first: block, **dict(grid.rest)})
    if grid.wl.phase is Phase.PREFILL:
        cols["chunk"] = np.minimum(cols["tokens"], cols["context"])
    ok = _valid_mask(grid.model, cols, grid.base.redundant_experts, grid.base.a2a)
    return {n: c[ok] for n, c in cols.items()}


def _frame(grid: _Grid, cols: Mapping[str, np.ndarray], t: np.ndarray, used: np.ndarray | None,
           capacity: float) -> pd.DataFrame:
    tok = cols[grid.tok_axis] / cols["tp"]
    df = pd.DataFrame({"hardware": grid.hw.name, "weights": grid.base.weights, **cols})
    df["step_time_s"] = t
    df["tokens_per_gpu_s"] = tok / t
    if used is not None:
        df["memory_bytes"] = used
        df["fits"] = used <= capacity
    else:  # pragma: no cover - memory model ships with the package
        df["fits"] = True
    return df


def _block(grid: _Grid, models: _Models, block: Sequence) -> pd.DataFrame:
    """Evaluate one block of the grid: the one code path of both backends."""
    cols = _block_columns(grid, block)
    n = len(cols[grid.first])
    t = np.empty(n)
    used = np.empty(n)
    capacity = math.inf
    pairs = np.stack([cols["gpus"], cols["ep"]], axis=1) if n else np.empty((0, 2), np.int64)
    for gpus, ep in np.unique(pairs, axis=0):
        sel = (cols["gpus"] == gpus) & (cols["ep"] == ep)
        sub = {k: c[sel] for k, c in cols.items()}
        env = {AXES[k]: sub[k].astype(float) for k in grid.names}
        if grid.wl.phase is Phase.PREFILL:
            env[S.chunk] = sub["chunk"].astype(float)
        fn, args, mem_fn, mem_args, capacity = models.get(gpus, ep)
        t[sel] = np.broadcast_to(fn(*(env[a] for a in args)), sub[grid.first].shape)
        if mem_fn is not None:
            menv = dict(env)
            if grid.wl.phase is Phase.PREFILL:  # prompts whose KV is held: ceil(tokens / context)
                menv[S.batch] = np.ceil(sub["tokens"] / sub["context"]).astype(float)
            menv.setdefault(S.batch, np.ones(int(sel.sum())))
            used[sel] = np.broadcast_to(mem_fn(*(menv.get(a, 1.0) for a in mem_args)),
                                        sub[grid.first].shape)
    return _frame(grid, cols, t, used if _memory_model() is not None else None, capacity)


def sweep_chunks(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
                 axes: Mapping[str, Sequence[int]], deployment: Deployment | None = None,
                 chunk_points: int = 2_000_000) -> Iterator[pd.DataFrame]:
    """Yield DataFrames of at most about ``chunk_points`` rows covering the whole grid."""
    grid, blocks = _plan(model, hardware, phase, axes, deployment, chunk_points)
    models = _Models(grid)
    for block in blocks:
        yield _block(grid, models, block)


def sweep_frame(model: ModelSpec, hardware, phase: str, axes: Mapping[str, Sequence[int]],
                deployment: Deployment | None = None) -> pd.DataFrame:
    """The whole grid in one DataFrame (use :func:`write_sweep` for grids that do not fit)."""
    parts = list(sweep_chunks(model, hardware, phase, axes, deployment))
    if not parts:
        raise MoesymError(_NO_POINT)
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
        raise MoesymError(_NO_POINT)
    return n


# ---------------------------------------------------------------- dask backend (moesym[dask])

def _require_dask():
    """``dask.dataframe`` and ``distributed``, or a one-line error naming the extra."""
    try:
        import dask.dataframe as dd
        import distributed
    except ImportError:
        raise MoesymError(_NO_DASK) from None
    return dd, distributed


def _proxy(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


def _dumps(obj) -> bytes:
    """Pickle ``obj``; the read-only mappings of a HardwareSpec travel as dicts."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table,
                              MappingProxyType: lambda m: (_proxy, (dict(m),))}
    pickler.dump(obj)
    return buf.getvalue()


_SETUP_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8)
def _setup(spec: bytes) -> tuple[_Grid, _Models]:
    grid = pickle.loads(spec)
    return grid, _Models(grid)


def _dask_block(block: tuple, spec: bytes) -> pd.DataFrame:
    """One partition, on a worker: each model is built and compiled once per process and plan."""
    with _SETUP_LOCK:
        grid, models = _setup(spec)
    return _block(grid, models, block)


def _moesym_version() -> str:
    from . import __version__
    return __version__


def _check_workers(client) -> None:
    ours = _moesym_version()
    try:
        theirs = client.run(_moesym_version)
    except Exception as exc:  # noqa: BLE001 - a worker that cannot import moesym
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MoesymError(f"dask workers cannot run moesym {ours}: {msg}") from None
    bad = sorted(w for w, v in theirs.items() if v != ours)
    if bad:
        raise MoesymError(f"dask workers {', '.join(bad)} run another moesym than {ours}: "
                          f"install the same version on the cluster")


def sweep_dask(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
               axes: Mapping[str, Sequence[int]], deployment: Deployment | None = None,
               chunk_points: int = 2_000_000, client=None):
    """The grid as a lazy ``dask.dataframe.DataFrame``: a partition per :func:`sweep_chunks` chunk.

    Partitions have the columns, dtypes, rows and order of the chunks (each with its own
    0-based index; divisions are unknown). Only the plan is made here: each task carries the
    first-axis values of its block and the pickled specs and other axes, and each worker process
    builds and compiles each (GPUs, EP) step model it needs once per plan and reuses it.
    ``client`` (a ``dask.distributed.Client``), when given, is asked whether its workers run this version of
    moesym, so that a mismatched cluster fails here rather than at compute time; the frame is
    computed by whichever scheduler is current when it is computed, as for any dask collection.
    Needs the optional extra ``moesym[dask]``.
    """
    dd, _ = _require_dask()
    import dask

    grid, blocks = _plan(model, hardware, phase, axes, deployment, chunk_points)
    if not blocks:
        raise MoesymError(_NO_POINT)
    if client is not None:
        _check_workers(client)
    empty = np.empty(0)
    meta = _frame(grid, _block_columns(grid, ()), empty,
                  empty if _memory_model() is not None else None, math.inf)
    # keep pandas' string dtype (as the local chunks have it) rather than dask's pyarrow strings
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(_dask_block, blocks, spec=_dumps(grid), meta=meta, label="moesym-sweep")


def _threads() -> int:
    try:
        from distributed import default_client
        return max(1, sum(default_client().nthreads().values()))
    except (ImportError, ValueError):
        return os.cpu_count() or 1


def _in_order(frame) -> Iterator[pd.DataFrame]:
    """The partitions of a dask frame, in order, computed a worker-thread's worth at a time."""
    import dask

    parts = frame.to_delayed()
    window = _threads()
    for i in range(0, len(parts), window):
        yield from dask.compute(*parts[i:i + window])


def _part_name(width: int, i: int) -> str:
    return f"part.{i:0{width}d}.parquet"


def write_sweep_dask(path: str | Path, frames) -> int:
    """Write :func:`sweep_dask` frames (one, or a list concatenated in order); return the rows.

    ``.parquet``: a directory of part files written by the workers with ``to_parquet`` (it
    replaces what was at ``path``; the path must be reachable from the workers: a shared file
    system or a URL such as ``s3://``). Any other suffix: one CSV file, identical to the local
    backend's, written on the client as the partitions arrive in order.
    """
    dd, _ = _require_dask()
    frame = frames if isinstance(frames, dd.DataFrame) else dd.concat(list(frames))
    if str(path).endswith(".parquet"):
        import pyarrow.dataset as ds

        if os.path.isfile(path):  # a single-file Parquet of the local backend
            os.remove(path)
        # zero-padded part numbers: readers that sort file names keep the rows in grid order
        name = functools.partial(_part_name, len(str(frame.npartitions - 1)))
        frame.to_parquet(str(path), write_index=False, overwrite=True, name_function=name)
        return ds.dataset(str(path), format="parquet").count_rows()
    return write_sweep(path, _in_order(frame))


# a local cluster without a dashboard, its HTTP server on a free port (not 8787)
_QUIET = {"dashboard_address": None, "scheduler_kwargs": {"dashboard_address": ":0"}}


def dask_client(scheduler: str | None = None):
    """A ``dask.distributed.Client``: connected to ``scheduler`` (an address such as
    ``tcp://host:8786``), or, without one, to a new in-process cluster using every core."""
    _, distributed = _require_dask()
    if scheduler is None:
        return distributed.Client(processes=False, n_workers=1,
                                  threads_per_worker=os.cpu_count() or 1, **_QUIET)
    try:
        return distributed.Client(scheduler)
    except (OSError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MoesymError(f"--scheduler {scheduler}: cannot connect ({msg})") from None
