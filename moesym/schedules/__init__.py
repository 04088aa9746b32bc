"""Overlap schedules as data: which operations of each micro-batch run in which stage, and the
layer time they give, built as a max-plus SymPy expression.

A schedule (``builtin.toml`` beside this file, or a user TOML of the same layout) gives, per
phase, the number of micro-batches, the stages of one micro-batch's MoE layer (lists of
operations) and how many stages micro-batch A runs ahead of B (``delta_stages``). The stages of
the micro-batches then alternate on the GPU's compute stream, across layer boundaries, as
SGLang's ``execute_overlapped_operations`` runs them. A ``*_send`` operation starts a transfer
that runs on the network in the background (one transfer at a time: a transfer sent while
another is in flight starts when that one has arrived); the matching
``*_wait`` holds the compute stream until it has arrived. With communication that holds a share
phi of the SMs (DeepEP normal mode, NCCL), compute that runs while a transfer is in flight is
slowed: the wait ends at max(arrival, now + phi x transfer).

:func:`layer_ends` walks that sequence symbolically: the stream time after each operation is a
sum of operation times and of one maximum per transfer (max-plus), so the layer time stays a
small SymPy expression that compiles and can be solved; :func:`simulate` runs the same sequence
with numbers and records every operation (the timeline). The per-layer time of the step model is the steady-state period
(between the ends of layers 2 and 3 of a four-layer run) and the pipeline's fill and drain are paid once per
step. ``ideal`` is not a schedule but the bound it is checked against
(:mod:`moesym.model.overlap`: every microsecond of communication hidden that can be).

>>> import sympy as sp
>>> lay = load("tbo-sglang").layout("decode")
>>> lay.micro_batches, lay.delta_stages, len(lay.stages)
(2, 2, 5)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..io.toml import load_toml
from ..errors import SpecError

__all__ = ["OPS", "COMPUTE_OPS", "Layout", "Schedule", "builtin", "load", "resolve_name",
           "simulate", "layer_ends", "steady_state", "NAMES", "STEADY_LAYERS"]
STEADY_LAYERS = 4  # layers run to find the period: fill, two steady layers, drain

OPS = ("attn_prep", "attn_core", "router", "shared", "experts", "output",
       "dispatch_send", "dispatch_wait", "combine_send", "combine_wait")
COMPUTE_OPS = ("attn_prep", "attn_core", "router", "shared", "experts", "output")
_TRANSFERS = ("dispatch", "combine")
NAMES = ("none", "sbo", "tbo-sglang", "deepseek", "ideal")
GEMM_SMS = ("all", "reserve_comm")


@dataclass(frozen=True)
class Layout:
    """One phase of a schedule."""

    micro_batches: int
    delta_stages: int
    stages: tuple[tuple[str, ...], ...]
    # "all": GEMMs use every SM and compute beside a transfer that holds a share phi of the SMs
    # is slowed by it; "reserve_comm": the engine caps its FP8 GEMMs (DeepGEMM) at N_SM - N_SM_comm
    # SMs for the whole layer, so they never compete with the transfers' SMs
    gemm_sms: str = "all"

    def order(self, layers: int) -> list[tuple[int, int, int]]:
        """(micro-batch, layer, stage) in the order the compute stream runs them."""
        per = [[(mb, l_, s) for l_ in range(layers) for s in range(len(self.stages))]
               for mb in range(self.micro_batches)]
        if self.micro_batches == 1:
            return per[0]
        a, b = per
        d = self.delta_stages
        out = a[:d]
        for i in range(len(a) - d):
            out += [a[d + i], b[i]]
        return out + b[len(a) - d:]


@dataclass(frozen=True)
class Schedule:
    name: str
    description: str
    source: str
    layouts: Mapping[str, Layout] = field(default_factory=dict)

    @property
    def ideal(self) -> bool:
        return self.name == "ideal"

    def layout(self, phase: str) -> Layout:
        try:
            return self.layouts[phase]
        except KeyError:
            raise SpecError(f"`overlap` {self.name}: the schedule has no {phase} layout") from None


IDEAL = Schedule("ideal", "every microsecond of communication hidden that can be "
                 "(the upper bound every schedule is checked against)",
                 "moesym.model.overlap (the BLIS MoE roofline design, section 5.3)")


def _layout(where: str, raw) -> Layout:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a table with micro_batches, delta_stages and stages")
    for key in ("micro_batches", "stages"):
        if key not in raw:
            raise SpecError(f"{where}: missing key '{key}'")
    for key in ("micro_batches", "delta_stages"):
        v = raw.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{where}.{key} = {v!r}: must be an integer")
    mb, delta, stages = raw["micro_batches"], raw.get("delta_stages", 0), raw["stages"]
    unknown = set(raw) - {"micro_batches", "delta_stages", "stages", "gemm_sms"}
    if unknown:
        raise SpecError(f"{where}: unknown key '{sorted(unknown)[0]}'; allowed: micro_batches, "
                        "delta_stages, stages, gemm_sms")
    if mb not in (1, 2):
        raise SpecError(f"{where}.micro_batches = {mb}: schedules run 1 or 2 micro-batches")
    if not isinstance(stages, list) or not stages or not all(isinstance(s, list) for s in stages):
        raise SpecError(f"{where}.stages: expected a list of lists of operation names")
    flat = [op for s in stages for op in s]
    bad = [op for op in flat if op not in OPS]
    if bad:
        raise SpecError(f"{where}.stages: unknown operation {bad[0]!r}; use {', '.join(OPS)}")
    for t in _TRANSFERS:
        if flat.count(f"{t}_send") != 1 or flat.count(f"{t}_wait") != 1 \
                or flat.index(f"{t}_send") > flat.index(f"{t}_wait"):
            raise SpecError(f"{where}.stages: {t}_send must appear once, before {t}_wait once")
    twice = [op for op in COMPUTE_OPS if flat.count(op) > 1]
    if twice:
        raise SpecError(f"{where}.stages: operation {twice[0]!r} appears {flat.count(twice[0])} "
                        "times; each runs once per micro-batch")
    missing = [op for op in COMPUTE_OPS if op not in flat]
    if missing:
        raise SpecError(f"{where}.stages: operation {missing[0]!r} is missing")
    if not 0 <= delta < len(stages) or (mb == 1 and delta):
        raise SpecError(f"{where}.delta_stages = {delta}: between 0 and the number of stages - 1 "
                        "(0 with one micro-batch)")
    gemm_sms = str(raw.get("gemm_sms", "all"))
    if gemm_sms not in GEMM_SMS:
        raise SpecError(f"{where}.gemm_sms = {gemm_sms!r}: use {' or '.join(GEMM_SMS)}")
    return Layout(mb, delta, tuple(tuple(s) for s in stages), gemm_sms)


def _parse(table: Mapping, name: str, where: str, everything: Mapping) -> Schedule:
    if "same_as" in table:
        base = _parse(everything[table["same_as"]], table["same_as"], where, everything)
        return Schedule(name, str(table.get("description", base.description)),
                        str(table.get("source", base.source)), base.layouts)
    layouts = {ph: _layout(f"{where} [{name}.{ph}]", table[ph])
               for ph in ("decode", "prefill") if ph in table}
    if not layouts:
        raise SpecError(f"{where} [{name}]: needs a [{name}.decode] or [{name}.prefill] table")
    return Schedule(name, str(table.get("description", "")), str(table.get("source", "")), layouts)


_BUILTIN: dict[str, Schedule] = {}


def builtin() -> dict[str, Schedule]:
    """The shipped schedules by name (``ideal`` included)."""
    if not _BUILTIN:
        raw = load_toml(Path(__file__).with_name("builtin.toml"))
        _BUILTIN.update({n: _parse(t, n, "builtin.toml", raw) for n, t in raw.items()})
        _BUILTIN["ideal"] = IDEAL
    return _BUILTIN


def load(name_or_path: str) -> Schedule:
    """A built-in schedule by name, or the one schedule in a TOML file."""
    shipped = builtin()
    if name_or_path in shipped:
        return shipped[name_or_path]
    p = Path(name_or_path)
    if not p.suffix == ".toml":
        raise SpecError(f"`overlap` {name_or_path!r}: use {', '.join(NAMES)} or a schedule .toml")
    if not p.is_file():
        raise SpecError(f"`overlap` {name_or_path}: no such file")
    try:
        raw = load_toml(p)
    except Exception as exc:  # noqa: BLE001 - any parse error is the user's file
        raise SpecError(f"`overlap` {p}: not valid TOML ({str(exc).splitlines()[0]})") from None
    tables = {k: v for k, v in raw.items() if isinstance(v, Mapping)}
    if len(tables) != 1:
        raise SpecError(f"`overlap` {p}: expected exactly one schedule table, found "
                        f"{len(tables)}")
    (name, table), = tables.items()
    return _parse(table, name, str(p), tables)


# what --overlap auto runs, per phase and micro-batch count (beyond the table: the ideal bound)
AUTO = {"decode": {1: "sbo", 2: "tbo-sglang"}, "prefill": {1: "sbo"}}


def resolve_name(overlap: str, micro_batches: int, phase: str) -> str:
    """The schedule a deployment runs. ``auto``: in decode what SGLang runs for the micro-batch
    count (one: the shared expert under the dispatch; two: its two-batch overlap, whose
    published gains on 72 H100 it reproduces); in prefill with more than one micro-batch the
    ideal bound (with ``tbo-sglang`` the held-out serving efficiency fitted on the open H800
    prefill case, 6.8% fast, would pull the H800 decode case to -14%: see the README); beyond
    two micro-batches, which no engine ships, the ideal bound."""
    if overlap != "auto":
        return overlap
    return AUTO[phase].get(int(micro_batches), "ideal")


@dataclass
class Event:
    """One operation of a simulated run (times in seconds from the run's start)."""

    name: str
    stream: str  # 'compute' or 'network'
    micro_batch: int
    layer: int
    start: float
    end: float


def simulate(layout: Layout, op_s: Mapping[str, float], transfer_s: Mapping[str, float],
             phi: float = 0.0, layers: int = STEADY_LAYERS) -> tuple[list[float], list[Event]]:
    """Event simulation of ``layers`` MoE layers with numbers: (time at which each layer's
    last stage ends, every operation as an :class:`Event`). A transfer starts when its send
    runs and the network is free (one transfer at a time, first come first served) and takes
    ``transfer_s``; its wait holds the compute stream until it has arrived, or ``phi x
    transfer`` longer than the compute in between, whichever is later."""
    t = 0.0
    link = 0.0
    arrive: dict = {}
    ends = [0.0] * layers
    events: list[Event] = []
    last = len(layout.stages) - 1
    for mb, layer, s in layout.order(layers):
        for op in layout.stages[s]:
            if op in COMPUTE_OPS:
                start, t = t, t + float(op_s.get(op, 0.0))
                events.append(Event(op, "compute", mb, layer, start, t))
            elif op.endswith("_send"):
                kind = op[:-5]
                start = max(t, link)
                link = arrive[mb, kind] = start + float(transfer_s[kind])
                events.append(Event(kind, "network", mb, layer, start, link))
            else:
                kind = op[:-5]
                start = t
                t = max(arrive[mb, kind], t + phi * float(transfer_s[kind]))
                events.append(Event(op, "compute", mb, layer, start, t))
        if s == last and mb == layout.micro_batches - 1:
            ends[layer] = t
    return ends, events


def layer_ends(layout: Layout, op_s, transfer_s, phi=0, layers: int = STEADY_LAYERS,
               smax=max) -> list:
    """The run of :func:`simulate`, symbolically: the time at which each layer's last stage
    ends, as a sum of operation times and of each wait's exposed communication

        exposed = max(phi d, d' - (what the stream did between the send and the wait))
        d'      = d + max(0, d'_prev - (what the stream did since the previous send))

    where d' is the transfer's time including its wait for the network (``d'_prev``: the
    transfer sent before it, when that one has not been waited for yet). Max-plus with one
    maximum per transfer and no nesting of the stream time, so the expression stays small."""
    total = 0
    since: dict = {}  # transfer -> steps of the stream since its send
    eff: dict = {}  # transfer -> its time including the wait for the network
    prev = None  # the transfer sent last, while it has not been waited for
    ends = [0] * layers
    last = len(layout.stages) - 1
    for mb, layer, s in layout.order(layers):
        for op in layout.stages[s]:
            key = (mb, layer, op.rsplit("_", 1)[0])
            if op in COMPUTE_OPS:
                step = op_s.get(op, 0)
            elif op.endswith("_send"):
                d = transfer_s[key[2]]
                if prev is not None:
                    d = d + smax(0, eff[prev] - sum(since[prev]))
                since[key], eff[key], prev = [], d, key
                continue
            else:
                window = since.pop(key)
                step = smax(phi * transfer_s[key[2]], eff.pop(key) - sum(window))
                if prev == key:
                    prev = None
            total = total + step
            for w in since.values():
                w.append(step)
        if s == last and mb == layout.micro_batches - 1:
            ends[layer] = total
    return ends


def steady_state(layout: Layout, op_s, transfer_s, phi=0, smax=max):
    """(per-layer period, once-per-step fill and drain) of the schedule. A four-layer run: the
    period is layer 3's end minus layer 2's (the first layer fills the pipeline, the last
    drains it: micro-batch B's last stages run alone), the edges what the run takes beyond four
    periods, so that N layers take N period + edges (exact for N = 4, and for any N >= 2 once
    the pipeline reaches its steady state within its first layer)."""
    ends = layer_ends(layout, op_s, transfer_s, phi, STEADY_LAYERS, smax)
    period = ends[2] - ends[1]
    return period, ends[-1] - STEADY_LAYERS * period
