"""Grid sweeps of the compiled step model into pandas, CSV or Parquet, with memory fit per point.

Axes that are symbols of the step model (batch or tokens, context, EP, GPUs, TP, micro-batches)
are broadcast in one compiled call; structural choices (hardware, weight precision, A2A mode,
pipeline depth ``pp``, context-parallel degree ``cp``) loop over separately built models. A
length distribution (``dist``: ``--context-dist`` for decode, ``--isl-dist`` for prefill and
serve) evaluates every point at its representative lengths and averages, as ``moesym predict``
does. Large grids stream in chunks of the first axis, so memory stays bounded whatever the grid
size.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from .. import __version__
from ..errors import MoesymError
from ..io.progress import progress_bar, status
from ..memory.capacity import host_expert_bytes, host_fits
from ..model.predictor import compiled_predict_model, ep_class, serve_models
from ..numbers.metrics import (accepted_tokens, evaluate_at_lengths, fits, length_symbol,
                               micro_batches_run, prefill_memory_values, serve_chunk,
                               serve_memory_values, serve_point, serve_rates, serve_step_times,
                               step_rates)
from ..specs.deployment import Deployment, Phase, Workload, prefill_chunk, valid_mask
from ..specs.hardware import HardwareSpec, load_hardware
from ..specs.lengths import representative
from ..specs.model import ModelSpec
from ..symbolic.symtab import N

if TYPE_CHECKING:  # pandas is imported where a DataFrame is made: the CLI streams Arrow
    import pandas as pd

__all__ = ["parse_list", "list_size", "sweep_chunks", "sweep_columns", "sweep_frame", "write_sweep", "sweep_dask",
           "write_sweep_dask", "dask_client", "AXIS_NAMES"]

# grid axis -> printed name of its step-model symbol
AXIS_NAMES = {"batch": N.batch, "tokens": N.tokens, "context": N.context, "gpus": N.gpus,
              "ep": N.ep, "tp": N.tp, "micro_batches": N.micro_batches, "isl": N.isl,
              "osl": "osl", "chunk": N.chunk,  # serve's output length is no model symbol
              "pp": N.pp, "cp": N.cp}  # fixed in each model: one model per value
# axes of every phase: the deployment's (pp and cp change the model's structure, so they loop
# over models as GPUs and EP do; the rest are bound per point)
_DEPLOY_AXES = ("gpus", "ep", "tp", "micro_batches", "pp", "cp")
_LOOP_AXES = ("gpus", "ep", "micro_batches", "pp", "cp")
_VALIDITY_AXES = ("gpus", "ep", "tp", "pp", "cp")
# axes of each phase's workload (the deployment axes apply to every phase)
_PHASE_AXES = {Phase.DECODE: ("batch", "context"), Phase.PREFILL: ("tokens", "context"),
               Phase.SERVE: ("batch", "isl", "osl", "chunk")}

_NO_POINT = ("no valid grid point: check that --pp divides --gpus, --ep and --tp the GPUs of a "
             "stage (--gpus / --pp) and the model, and --cp the attention data-parallel ranks "
             "(DeepEP --a2a modes need --ep equal to a stage's GPUs)")
_NO_DASK = "the dask backend needs the optional extra: pip install 'moesym[dask]'"


def parse_list(text: str, flag: str) -> list[int]:
    """``a,b,c`` | ``start:stop`` (powers of two) | ``start:stop:step``.

    Every value must be a positive integer.

    >>> parse_list("1:16", "--batch"), parse_list("8,16", "--ep"), parse_list("5:15:5", "--x")
    ([1, 2, 4, 8, 16], [8, 16], [5, 10, 15])
    """
    kind, vals = _parse_list(text, flag)
    if kind == "pow":
        a, b = vals
        out = []
        while a <= b:
            out.append(a)
            a *= 2
        return out
    if kind == "step":
        a, b, step = vals
        return list(range(a, b + 1, step))
    return vals


def list_size(text: str, flag: str) -> int:
    """How many values :func:`parse_list` gives for ``text``, without listing them (a sweep
    sizes its grid before it builds one).

    >>> list_size("1:100000000:1", "--batch"), list_size("1:1024", "--batch")
    (100000000, 11)
    """
    kind, vals = _parse_list(text, flag)
    if kind == "pow":
        return (vals[1] // vals[0]).bit_length()  # start x 2^k <= stop for k < this
    if kind == "step":
        return (vals[1] - vals[0]) // vals[2] + 1
    return len(vals)


def _parse_list(text: str, flag: str) -> tuple:
    """(kind, values): ("pow", (start, stop)), ("step", (start, stop, step)) or ("list",
    values); every value checked positive."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) == 2:
                a, b = parts
                if a <= 0 or b < a:
                    raise ValueError
                return "pow", (a, b)
            a, b, step = parts
            if step <= 0 or b < a:
                raise ValueError
            kind, vals = "step", (a, b, step)
        else:
            parts = text.split(",")
            if any(not p.strip() for p in parts):
                raise ValueError
            kind, vals = "list", list(dict.fromkeys(int(p) for p in parts))  # each once, in order
    except ValueError:
        raise MoesymError(f"{flag} {text!r}: use a,b,c or start:stop (powers of two) or "
                          f"start:stop:step with positive integers") from None
    low = vals[0] if kind == "step" else min(vals)
    if low <= 0:
        raise MoesymError(f"{flag} {text!r}: {low} is not a positive integer; every value "
                          "must be >= 1")
    return kind, vals


def _valid_mask(model: ModelSpec, cols: Mapping[str, np.ndarray], base: Deployment) -> np.ndarray:
    """The points a :class:`Deployment` accepts and that shard the model: ``pp`` divides the
    GPUs, EP and TP are checked on a stage's GPUs (:func:`valid_mask`), ``cp`` divides the
    stage's attention data-parallel ranks (gpus / pp / tp)."""
    g = np.asarray(cols["gpus"])
    pp = np.asarray(cols.get("pp", base.pp))
    cp = np.asarray(cols.get("cp", base.cp))
    whole = g % pp == 0
    stage = np.where(whole, g // pp, g)
    ok = whole & valid_mask(model, stage, cols["ep"], cols["tp"], base.redundant_experts,
                            base.a2a, base.gpus_per_node)
    return ok & ((stage // np.asarray(cols["tp"])) % cp == 0)


def _columns(ax: Mapping[str, Sequence]) -> dict[str, np.ndarray]:
    """Every combination of the axes (the first varies slowest), one int64 column per axis.

    An ``ep`` of None means EP over all the GPUs of the point's pipeline stage.
    """
    arrays = {n: np.asarray([-1 if x is None else x for x in v], dtype=np.int64)
              for n, v in ax.items()}
    mesh = np.meshgrid(*arrays.values(), indexing="ij", copy=False)
    cols = {n: m.ravel() for n, m in zip(ax, mesh)}
    if "ep" in cols:  # -1 stands for None: EP over all the GPUs of the point's stage
        stage = cols["gpus"] // cols["pp"] if "pp" in cols else cols["gpus"]
        cols["ep"] = np.where(cols["ep"] < 0, stage, cols["ep"])
    return {n: c.astype(np.int64, copy=False) for n, c in cols.items()}


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
    hidden: tuple[str, ...] = ()  # axes not written (pp, cp where the sweep does not vary them)
    dist: str = ""  # a length distribution's text ("" for the one length of each point)
    lengths: tuple = ()  # its representative lengths

    @property
    def names(self) -> list[str]:
        return [self.first, *(n for n, _ in self.rest)]

    @property
    def dist_column(self) -> str:
        """The column naming the distribution: decode KV lengths or prompt lengths."""
        return "context_dist" if self.wl.phase is Phase.DECODE else "isl_dist"

    @property
    def length_symbol(self) -> str:
        """The symbol the representative lengths are bound to (predict's)."""
        return length_symbol(self.wl.phase)

    @property
    def tok_axis(self) -> str:
        return "tokens" if self.wl.phase is Phase.PREFILL else "batch"


def _plan(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
          axes: Mapping[str, Sequence[int]], deployment: Deployment | None,
          chunk_points: int, prefix_hit: float = 0.0,
          dist: str | None = None) -> tuple[_Grid, list[tuple]]:
    """The shared setup and the blocks (values of the first axis) that hold a valid point.
    ``prefix_hit``: share of each prompt found in the prefix cache (prefill and serve).
    ``dist``: a length distribution (:mod:`moesym.specs.lengths`) standing for the decode KV
    length or the prompt length (prefill: ``context``; serve: ``isl``), as predict's
    ``--context-dist`` / ``--isl-dist``: that axis is then the distribution's mean."""
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    ph = Phase(phase)
    base = deployment or Deployment()
    ax = {k: list(v) for k, v in axes.items()}
    unknown = sorted(set(ax) - set(AXIS_NAMES))
    if unknown:
        raise MoesymError(f"unknown sweep axis {', '.join(unknown)}: use {', '.join(AXIS_NAMES)}")
    wanted = _PHASE_AXES[ph]
    other = sorted(set(ax) & (set(AXIS_NAMES) - set(wanted) - set(_DEPLOY_AXES)))
    if other:
        raise MoesymError(f"--{other[0]} is no axis of a {ph.value} sweep: it takes "
                          f"{', '.join('--' + a for a in wanted)}")
    lengths = ()
    if dist is not None:
        flag, single = (("--context-dist", "context") if ph is Phase.DECODE else
                        ("--isl-dist", "isl" if ph is Phase.SERVE else "context"))
        if single in ax:
            raise MoesymError(f"--{single} and {flag} both give the "
                              f"{'KV' if ph is Phase.DECODE else 'prompt'} lengths; keep one")
        lengths = representative(dist, flag)
        ax[single] = [max(1, round(sum(lengths) / len(lengths)))]  # predict's: the mean
    if ph is Phase.SERVE and not {"isl", "osl"} <= set(ax):
        raise MoesymError("a serve sweep needs --isl (or --isl-dist) and --osl (lists of prompt "
                          "and output lengths)")
    for a, default in zip(wanted, {Phase.DECODE: (1, 4096), Phase.PREFILL: (4096, 4096),
                                   Phase.SERVE: (1, 0, 0, 0)}[ph]):
        ax.setdefault(a, [default])
    hidden = tuple(n for n in ("pp", "cp") if n not in ax and getattr(base, n) == 1)
    ax.setdefault("gpus", [base.gpus])
    ax.setdefault("ep", [None])
    ax.setdefault("tp", [base.tp])
    ax.setdefault("micro_batches", [base.micro_batches])
    ax.setdefault("pp", [base.pp])
    ax.setdefault("cp", [base.cp])
    names = list(ax)
    if ph is not Phase.PREFILL and any(c > 1 for c in ax["cp"]):
        raise MoesymError(f"--cp {max(ax['cp'])} splits prompts across GPUs in prefill; a "
                          f"{ph.value} sweep takes --cp 1 (predict refuses it too)")
    rep_g, rep_ep = ax["gpus"][0], ax["ep"][0] or ax["gpus"][0]
    rep = replace(base, gpus=rep_g, ep=rep_g if rep_g % rep_ep else rep_ep, tp=1, micro_batches=1,
                  pp=1, cp=1)
    if prefix_hit and ph is Phase.DECODE:
        raise MoesymError("--prefix-hit skips prompt tokens: a decode sweep has none (use "
                          "--phase prefill or serve)")
    if ph is Phase.DECODE:
        wl = Workload(ph, batch=1, context=ax["context"][0])
    elif ph is Phase.PREFILL:
        wl = Workload(ph, tokens=ax["tokens"][0], context=ax["context"][0], prefix_hit=prefix_hit)
    else:  # chunk: the deployment's --chunk, else the engine's default per point
        wl = Workload(ph, batch=1, isl=ax["isl"][0], osl=ax["osl"][0],  # chunk 0: the default
                      prefix_hit=prefix_hit)
    first, rest = names[0], names[1:]
    grid = _Grid(model, hw, base, rep, wl, first, tuple((n, tuple(ax[n])) for n in rest),
                 hidden, dist or "", lengths)
    if not all(ax.values()):
        return grid, []
    values = ax[first]
    # validity depends on gpus, ep, tp, pp and cp only: test their combinations, not the grid
    mask_axes = {n: ax[n] for n in names if n in _VALIDITY_AXES}
    ok = _valid_mask(model, _columns(mask_axes), base)
    ok = np.broadcast_to(ok.reshape(len(values) if first in mask_axes else 1, -1).any(axis=1),
                         (len(values),))
    step_first = max(1, chunk_points // max(1, math.prod(len(ax[n]) for n in rest)))
    blocks = [tuple(values[i:i + step_first]) for i in range(0, len(values), step_first)
              if ok[i:i + step_first].any()]
    return grid, blocks


def _compile(grid: _Grid, gpus: int, ep: int, pp: int = 1, cp: int = 1):
    """The compiled predict model (step and memory) of one (GPUs, EP, PP, CP): the one ``moesym
    predict`` uses, from the disk cache when present; for serve the mixed step's and the decode
    step's (:func:`moesym.model.predictor.serve_models`)."""
    dep = replace(grid.rep, gpus=gpus, ep=ep, pp=pp, cp=cp)
    if grid.wl.phase is Phase.SERVE:
        return serve_models(grid.model, grid.hw, dep, replace(grid.wl, chunk=grid.wl.chunk or 1))[1:]
    return compiled_predict_model(grid.model, grid.hw, dep, grid.wl)


class _Models:
    """The compiled step and memory models of a sweep, one per pipeline depth, context-parallel
    degree and structure class of (GPUs, EP) (:func:`moesym.model.predictor.ep_class`: EP = 1
    or not, EP below a stage's GPU count or not), built on first use; GPUs, EP and the numbers
    that depend on EP are bound per point."""

    def __init__(self, grid: _Grid):
        self.grid = grid
        self._cache: dict = {}
        self._lock = threading.Lock()

    def get(self, gpus: int, ep: int, pp: int = 1, cp: int = 1):
        dep = replace(self.grid.rep, gpus=int(gpus), ep=int(ep), pp=int(pp), cp=int(cp))
        key = (ep_class(dep), int(pp), int(cp))
        with self._lock:  # threads of one dask worker wait for the first compile
            if key not in self._cache:
                status(f"sweep: building the model for {gpus} GPUs, EP {ep}"
                       + (f", PP {pp}" if pp > 1 else "") + (f", CP {cp}" if cp > 1 else ""))
                self._cache[key] = _compile(self.grid, int(gpus), int(ep), int(pp), int(cp))
            return self._cache[key]


def _with_names(grid: _Grid, arrays: Mapping[str, np.ndarray]) -> dict:
    """The block's columns with the hardware and weight-precision columns (and the length
    distribution's) in front, each a :class:`Constant` (one value for the whole block)."""
    n = len(next(iter(arrays.values())))
    dist = {grid.dist_column: Constant(grid.dist, n)} if grid.dist else {}
    return {"hardware": Constant(grid.hw.name, n), "weights": Constant(grid.base.weights, n),
            **dist, **arrays}


class Constant(NamedTuple):
    """A column holding one value ``n`` times (written dictionary-encoded, never expanded
    until a DataFrame needs it)."""

    value: str
    n: int

    def __array__(self, dtype=None, copy=None):
        return np.full(self.n, self.value, dtype=object if dtype is None else dtype)

    def __len__(self) -> int:
        return self.n


def _arrow_column(pa, v):
    """One Arrow array from a NumPy column or a :class:`Constant`, built from its buffers
    (zero-copy for numbers; ``pyarrow.array`` would import pandas to inspect its input)."""
    if isinstance(v, Constant):  # one dictionary entry, n zero indices
        text = v.value.encode()
        values = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(
            np.array([0, len(text)], np.int32)), pa.py_buffer(text)])
        idx = pa.Array.from_buffers(pa.int8(), v.n, [None, pa.py_buffer(np.zeros(v.n, np.int8))])
        return pa.DictionaryArray.from_arrays(idx, values)
    x = np.ascontiguousarray(v)
    if x.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), len(x), [None, pa.py_buffer(
            np.packbits(x, bitorder="little"))])
    kind = {np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}[x.dtype]
    return pa.Array.from_buffers(kind, len(x), [None, pa.py_buffer(x)])


def _arrow_table(block):
    import pyarrow as pa

    if not isinstance(block, Mapping):  # a DataFrame
        return pa.Table.from_pandas(block, preserve_index=False)
    return pa.Table.from_arrays([_arrow_column(pa, v) for v in block.values()],
                                names=list(block))


def _frame(grid: _Grid, arrays: Mapping[str, np.ndarray]) -> "pd.DataFrame":
    import pandas as pd

    dist = {grid.dist_column: grid.dist} if grid.dist else {}
    return pd.DataFrame({"hardware": grid.hw.name, "weights": grid.base.weights, **dist,
                         **arrays})


def _block(grid: _Grid, models: _Models, block: Sequence) -> dict[str, np.ndarray]:
    """Evaluate one block of the grid (the one code path of both backends): the axis columns,
    step time, tokens per GPU per second, per-GPU memory and whether it fits, for the valid
    points in grid order.

    The compiled model is evaluated on the axes broadcast against each other, the EPs that share
    a compiled model in one call, one (PP, CP, GPUs, micro-batch count) at a time, so every
    subexpression is computed only over the axes it depends on (attention over batch x context
    once for all EPs, the load-imbalance order statistic over batch x EP) and only the overlap
    schedule of that micro-batch count runs. A length distribution adds a last axis (its
    representative lengths) that is averaged over, as predict averages."""
    ax = {grid.first: list(block), **{n: list(v) for n, v in grid.rest}}
    names = list(ax)
    shape = tuple(len(v) for v in ax.values())
    res: dict = {}  # result name -> array over the grid
    gi, ei, mi, pi, ci = (names.index(n) for n in ("gpus", "ep", "micro_batches", "pp", "cp"))
    others = [n for n in names if n not in _LOOP_AXES]
    sub_shape = tuple(len(ax[n]) for n in others)
    env0 = {}
    for i, n in enumerate(others):  # each remaining axis along its own dimension
        view = [1] * len(others)
        view[i] = len(ax[n])
        env0[AXIS_NAMES[n]] = np.asarray(ax[n], dtype=float).reshape(view)
    prefill, serve = grid.wl.phase is Phase.PREFILL, grid.wl.phase is Phase.SERVE
    if grid.wl.prefix_hit:
        env0[N.prefix_hit] = np.asarray(float(grid.wl.prefix_hit)).reshape((1,) * len(others))
    if prefill:  # the chunk at the prompt length (a distribution's: its mean, as predict's)
        env0[N.chunk] = prefill_chunk(env0[N.tokens], env0[N.context], np.minimum)
    tp = np.asarray(ax["tp"], dtype=np.int64)
    extra = (1,) * len(others)  # the EP axis goes last, after the broadcast axes
    env0 = {k: v.reshape(v.shape + (1,)) for k, v in env0.items()}

    def evaluate(cm, i, env):  # at each representative length, averaged (none: as is)
        return evaluate_at_lengths(cm, i, env, grid.length_symbol, grid.lengths)

    for p_i, pp in enumerate(ax["pp"]):
        for c_i, cp in enumerate(ax["cp"]):
            for a, g in enumerate(ax["gpus"]):
                if g % pp:
                    continue
                stage = g // pp  # GPUs of one pipeline stage: the model's GPU count
                groups: dict = {}  # EPs that share one compiled model, evaluated in one call
                for b, e in enumerate(ax["ep"]):
                    e = stage if e is None else e
                    cols = {"gpus": np.full(len(tp), g), "ep": np.full(len(tp), e), "tp": tp,
                            "pp": np.full(len(tp), pp), "cp": np.full(len(tp), cp)}
                    if _valid_mask(grid.model, cols, grid.base).any():
                        cm = models.get(int(g), int(e), int(pp), int(cp))
                        groups.setdefault(id(cm), (cm, []))[1].append((b, e))
                for cm, members in groups.values():
                    eps = np.asarray([float(e) for _, e in members]).reshape(extra + (-1,))
                    per_ep = [(cm[0] if serve else cm).ep_values(e) for _, e in members]
                    ep_env = {k: np.asarray([d[k] for d in per_ep]).reshape(eps.shape)
                              for k in per_ep[0]}
                    full = sub_shape + (len(members),)
                    # one micro-batch count at a time: the overlap schedule of that count runs
                    for c, mb in enumerate(ax["micro_batches"]):
                        # no more micro-batches than requests (tokens): as predict times it
                        split = (float(mb) if serve else micro_batches_run(  # an array only
                            float(mb), env0[N.tokens if prefill else N.batch]))  # if needed
                        env = {**env0, **ep_env, N.gpus: float(stage), N.ep: eps,
                               N.micro_batches: split}
                        if serve:
                            got = _serve_point(cm, env, grid.hw, float(stage), grid.base,
                                               grid.wl.prefix_hit, pp, grid.lengths)
                        else:
                            got = {"step_time_s": evaluate(cm, 0, env)["step_time_s"]}
                            if prefill:  # the prompts whose KV is held, 1 / cp on a GPU
                                env.update(prefill_memory_values(env[N.tokens], env[N.context],
                                                                 cp, np.ceil, np.maximum))
                            got["memory_bytes"] = evaluate(cm, 1, env)["memory_bytes"]
                        for k, v in got.items():
                            v = np.broadcast_to(v, full)
                            dest = res.setdefault(k, np.full(shape, np.nan))
                            for j, (b, _) in enumerate(members):
                                at = [slice(None)] * len(names)
                                at[gi], at[ei], at[mi], at[pi], at[ci] = a, b, c, p_i, c_i
                                dest[tuple(at)] = v[..., j]
    cols = _columns(ax)
    # validity depends on GPUs, EP, TP, PP and CP only: test their combinations, broadcast
    small = {n: (ax[n] if n in _VALIDITY_AXES else ax[n][:1]) for n in names}
    ok_small = _valid_mask(grid.model, _columns(small), grid.base)
    ok = np.broadcast_to(ok_small.reshape(tuple(len(v) for v in small.values())), shape).ravel()
    everything = bool(ok_small.all())  # no copies when every point is valid
    out = {n: (c if everything else c[ok]) for n, c in cols.items()}
    if prefill:
        out["chunk"] = prefill_chunk(out["tokens"], out["context"], np.minimum)
    flat = {k: (v.ravel() if everything else v.ravel()[ok]) for k, v in res.items()}
    if serve:
        out["chunk"] = flat.pop("chunk").astype(np.int64)
        out["step_time_s"] = flat.pop("step_time_s")
        out["tokens_per_gpu_s"] = flat["output_tokens_per_gpu_s"]
        out.update(flat)
    else:
        out["step_time_s"] = flat["step_time_s"]
        # per GPU: a DP rank's tokens over its TP x PP GPUs (x CP in prefill)
        out["tokens_per_gpu_s"] = step_rates(
            grid.wl.phase, out[grid.tok_axis], flat["step_time_s"], out["tp"], out["pp"],
            out["cp"], accepted_tokens(grid.base))["tokens_per_gpu_s"]
        out["memory_bytes"] = flat["memory_bytes"]
    out["fits"] = fits(out["memory_bytes"], grid.hw.hbm_capacity_bytes)
    if grid.base.expert_cache is not None and grid.model.is_moe:  # and the host tier's
        out["fits"] = out["fits"] & host_fits(grid.hw, grid.base, out["memory_bytes"],
                                              host_expert_bytes(grid.model, grid.hw, grid.base))
    for n in grid.hidden:  # pp, cp where the sweep does not vary them
        del out[n]
    return out


def _serve_point(cms, env, hw: HardwareSpec, gpus: float, dep: Deployment, hit: float = 0.0,
                 pp: int = 1, lengths: tuple = ()) -> dict:
    """Serve quantities at broadcast grid arrays (``env``: batch, ISL, OSL, chunk (0: the
    engine's default for the point's DP size), TP, ...) from the mixed-step and decode-step
    models: :func:`moesym.numbers.metrics.serve_point` and ``serve_rates`` on arrays. ``gpus``: one
    pipeline stage's, of ``pp``; ``lengths``: an ISL distribution's representative lengths (the
    mixed step's prompts; ``env``'s ISL is their mean), as predict's."""
    cm_dec = cms[1]
    env = dict(env)
    isl, osl, tp, batch = env.pop(N.isl), env.pop("osl"), env[N.tp], env[N.batch]
    chunk = serve_chunk(env.pop(N.chunk), hw.hbm_capacity_bytes, np.maximum(1, gpus // tp),
                        dep.engine)
    a = accepted_tokens(dep)
    p = serve_point(batch, isl, osl, chunk, a, minimum=np.minimum, maximum=np.maximum, exp=np.exp,
                    hit=hit)
    held = serve_memory_values(batch, isl, osl, chunk)
    mem = cm_dec.evaluate(1, {**env, **held})["memory_bytes"]
    t_mix, t_dec = serve_step_times(cms, env, p, isl, osl, chunk, lengths)
    r = serve_rates(p, t_mix, t_dec, chunk, tp * pp, a, ceil=np.ceil)  # per GPU of TP x PP
    return {"step_time_s": r["step_time_s"], "chunk": chunk,
            "output_tokens_per_gpu_s": r["output_tokens_per_gpu_s"],
            "input_tokens_per_gpu_s": r["input_tokens_per_gpu_s"], "tpot_s": r["tpot_s"],
            "ttft_s": r["ttft_s"], "memory_bytes": mem}


def sweep_columns(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
                  axes: Mapping[str, Sequence[int]], deployment: Deployment | None = None,
                  chunk_points: int = 2_000_000, prefix_hit: float = 0.0,
                  dist: str | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Yield the grid as blocks of at most about ``chunk_points`` rows, each a dict of NumPy
    columns (what :func:`write_sweep` streams without building DataFrames)."""
    for grid, arrays in _blocks(model, hardware, phase, axes, deployment, chunk_points, prefix_hit,
                                dist):
        yield _with_names(grid, arrays)


def _blocks(model, hardware, phase, axes, deployment, chunk_points, prefix_hit=0.0, dist=None):
    grid, blocks = _plan(model, hardware, phase, axes, deployment, chunk_points, prefix_hit, dist)
    models = _Models(grid)
    for block in progress_bar(blocks, "sweep: blocks", len(blocks) > 1):
        yield grid, _block(grid, models, block)


def sweep_chunks(model: ModelSpec, hardware: str | HardwareSpec, phase: str,
                 axes: Mapping[str, Sequence[int]], deployment: Deployment | None = None,
                 chunk_points: int = 2_000_000, prefix_hit: float = 0.0,
                 dist: str | None = None) -> Iterator["pd.DataFrame"]:
    """Yield DataFrames of at most about ``chunk_points`` rows covering the whole grid."""
    for grid, arrays in _blocks(model, hardware, phase, axes, deployment, chunk_points, prefix_hit,
                                dist):
        yield _frame(grid, arrays)


def sweep_frame(model: ModelSpec, hardware, phase: str, axes: Mapping[str, Sequence[int]],
                deployment: Deployment | None = None, prefix_hit: float = 0.0,
                dist: str | None = None) -> "pd.DataFrame":
    """The whole grid in one DataFrame (use :func:`write_sweep` for grids that do not fit).
    ``dist``: a length distribution (``fixed:N``, ``uniform:A:B``, ``lognormal:MEAN:SIGMA`` or
    a file) for the decode KV length or the prompt length, averaged over as predict does."""
    parts = list(sweep_chunks(model, hardware, phase, axes, deployment, prefix_hit=prefix_hit,
                              dist=dist))
    if not parts:
        raise MoesymError(_NO_POINT)
    import pandas as pd

    return pd.concat(parts, ignore_index=True)


def write_sweep(path: str | Path, frames: Iterator) -> int:
    """Stream blocks (DataFrames, or dicts of columns from :func:`sweep_columns`) to CSV
    (appending) or Parquet (one row group per block, written from Arrow arrays); return the rows
    written."""
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
        pending = None
        # Arrow encodes and compresses with the GIL released: block k is written on a second
        # thread while block k + 1 is evaluated
        with ThreadPoolExecutor(max_workers=1) as pool:
            for block in frames:
                table = _arrow_table(block)
                if writer is None:  # dictionary-encode only the text columns
                    text = [f.name for f in table.schema
                            if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)
                            or pa.types.is_large_string(f.type)]
                    writer = pq.ParquetWriter(path, table.schema, use_dictionary=text)
                if pending is not None:
                    pending.result()
                pending = pool.submit(writer.write_table, table)
                n += table.num_rows
            if pending is not None:
                pending.result()
        if writer is None:
            raise MoesymError(_NO_POINT)
        writer.close()
        return n
    first = True
    for block in frames:
        import pandas

        df = block if isinstance(block, pandas.DataFrame) else pandas.DataFrame(
            {k: (v.value if isinstance(v, Constant) else v) for k, v in block.items()})
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


def _dask_block(block: tuple, spec: bytes) -> "pd.DataFrame":
    """One partition, on a worker: each model is built and compiled once per process and plan."""
    with _SETUP_LOCK:
        grid, models = _setup(spec)
    return _frame(grid, _block(grid, models, block))


def _moesym_version() -> str:
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
               chunk_points: int = 2_000_000, prefix_hit: float = 0.0, client=None,
               dist: str | None = None):
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

    grid, blocks = _plan(model, hardware, phase, axes, deployment, chunk_points, prefix_hit, dist)
    if not blocks:
        raise MoesymError(_NO_POINT)
    if client is not None:
        _check_workers(client)
    empty = np.empty(0)
    cols = {n: np.empty(0, np.int64) for n in grid.names if n not in grid.hidden}
    if grid.wl.phase is Phase.PREFILL:
        cols["chunk"] = np.empty(0, np.int64)
    meta = _frame(grid, {**cols, "step_time_s": empty, "tokens_per_gpu_s": empty,
                         "memory_bytes": empty, "fits": np.empty(0, bool)})
    # keep pandas' string dtype (as the local chunks have it) rather than dask's pyarrow strings
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(_dask_block, blocks, spec=_dumps(grid), meta=meta, label="moesym-sweep")


def _threads() -> int:
    try:
        from distributed import default_client
        return max(1, sum(default_client().nthreads().values()))
    except (ImportError, ValueError):
        return os.cpu_count() or 1


def _in_order(frame) -> Iterator["pd.DataFrame"]:
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
