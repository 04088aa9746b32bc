"""A serving benchmark, simulated request by request through an engine's scheduler.

The scheduler (:mod:`moesym.serving.scheduler`) decides each step's contents in step space; a
timer (:class:`moesym.serving.timer.ModelTimer`, moesym's compiled step models) gives each
rank's step time, and the ranks of one step wait for the slowest (their MoE layers and
communication run together). Only an open-loop client's arrivals depend on the clock, so the
run advances in epochs: from the present state, the scheduler runs ahead up to the next timed
arrival (every step of a closed-loop run), the steps are timed in one bulk evaluation, and the
steps that started before the arrival are kept (the rest are rolled back and rerun with the
arrival in the queue). Step times are exact at every step; the cost is one bulk evaluation
per arrival at most.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ..io.progress import counter
from .clients import Client
from .scheduler import STEP_FIELDS, EngineState, SchedulerConfig

__all__ = ["Run", "Side", "replicate", "run"]

_AHEAD = 4096  # steps run ahead when no timed arrival bounds the epoch


@dataclass
class Run:
    """What a simulated benchmark measured: per request ``arrival_s``, ``first_token_s``,
    ``finish_s``, ``isl``, ``osl``, token emission times (``token_times``, a list of arrays),
    and per step ``step_start_s``, ``step_s`` and the per-rank contents (arrays of shape
    steps x ranks: ``kind``, ``batch``, ``kv_mean``, ``tokens``, ``prompt_len``) with the
    scheduler's ``running``, ``waiting`` and ``kv_used`` after each step (sums over ranks)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    token_times: list
    step_start_s: np.ndarray
    step_s: np.ndarray
    contents: dict
    running: np.ndarray
    waiting: np.ndarray
    kv_used: np.ndarray
    preemptions: int
    # per request: when the engine took it into a queue (the start of the step it was received
    # for) and when its prefill began (the start of the step that holds its first piece); the
    # components of the TTFT (:func:`moesym.serving.stats.ttft_components`)
    received_s: np.ndarray | None = None
    started_s: np.ndarray | None = None
    # disaggregated: when its prefill ended and when its KV reached the decode replica
    prefilled_s: np.ndarray | None = None
    at_decode_s: np.ndarray | None = None
    # per request (n x 2): the window of the one-time extra of the first prefill step (first
    # use of the prefill kernels) on the replica that prefilled it (inf, inf: none)
    cold_window_s: np.ndarray | None = None


class Side:
    """One engine replica on its own clock: its scheduler, the arrivals pushed to it (time,
    request) and the steps it has committed. :meth:`advance` runs ahead in one bulk timing
    and keeps the steps that start before a horizon (and before the next pushed arrival)."""

    def __init__(self, st: EngineState, times_fn):
        self.st, self.times_fn, self._heap = st, times_fn, heapq
        self.t = 0.0               # end of the last committed step (or idle until)
        self.last_end = -math.inf  # end of the last committed step
        self.last_start = -math.inf
        self.pending: list = []    # (time, sequence, request)
        self._seq = 0
        self.blocks, self.starts, self.durs = [], [], []
        self.last_step_s = 0.0
        self.late = 0              # arrivals pushed before a committed step's start
        # an overlap scheduler's host: when it finished launching the last step, and the end of
        # the step before the last (it launches step i once step i - 2's results are in)
        self.launched = -math.inf
        self.end_before = -math.inf
        # the one-time extra seconds of the engine's first step that prefills (first use of its
        # prefill kernels), while still to come; then the window it took
        self.cold_left = st.cfg.cold_prefill_s
        self.cold_window = (math.inf, math.inf)

    def push(self, time: float, rid: int) -> None:
        if time < self.last_start:
            self.late += 1
        self._heap.heappush(self.pending, (time, self._seq, rid))
        self._seq += 1

    def next_arrival(self) -> float:
        return self.pending[0][0] if self.pending else math.inf

    def busy(self) -> bool:
        return self.st.busy()

    def advance(self, horizon: float = math.inf) -> range:
        """Commit the steps that start before ``horizon`` and the next pushed arrival; the
        indices of the steps committed (empty when the side is idle: its clock then moves to
        the next arrival or the horizon, whichever comes first)."""
        st = self.st
        s0 = st.step_index
        if self.t >= horizon:  # a step starting now might miss an arrival still to come
            return range(s0, s0)
        while self.pending and self.pending[0][0] <= self.t:
            # it arrived while the last committed step ran (or while the engine was idle)
            during = st.step_index - 1 if st.step_index and self.last_end >= self.t else None
            st.arrive(self._heap.heappop(self.pending)[2], during)
            self.last_start = max(self.last_start, self.t)  # what arrives later is late
        if not st.busy():
            target = min(self.next_arrival(), horizon)
            if math.isfinite(target):
                self.t = max(self.t, target)
            return range(s0, s0)
        bound = min(horizon, self.next_arrival())
        if self.t >= bound:
            return range(s0, s0)
        if math.isfinite(bound) and self.last_step_s > 0:
            ahead = int(min(_AHEAD, max(1, (bound - self.t) / self.last_step_s * 1.5 + 1)))
        else:
            ahead = _AHEAD if not math.isfinite(bound) else 1
        snap = st.snapshot() if math.isfinite(bound) else None
        block = []
        for _ in range(ahead):
            if not st.busy():
                break
            block.append(st.step())
        arr = np.array(block, dtype=float)  # steps x ranks x STEP_FIELDS
        timed = _timed(self.times_fn, arr).max(axis=1)
        cold = self._cold(arr, timed)
        state = (self.launched, self.end_before)
        step_s = self._overlapped(timed, *state) if timed.ndim == 2 else timed
        start = self.t + np.concatenate(([0.0], np.cumsum(step_s)[:-1]))
        keep = len(block)
        if math.isfinite(bound):
            keep = max(1, int(np.searchsorted(start, bound, side="left")))
            if keep < len(block):  # the step that starts past the bound is rerun later
                st.restore(snap)
                for _ in range(keep):
                    st.step()
        if timed.ndim == 2:  # the host's state after the kept steps
            self._overlapped(timed[:keep], *state, commit=True)
        if cold is not None and cold < keep:
            end = float(start[cold] + step_s[cold])
            self.cold_window, self.cold_left = (end - self.cold_left, end), 0.0
        self.blocks.append(arr[:keep])
        self.starts.append(start[:keep])
        self.durs.append(step_s[:keep])
        self.last_start = float(start[keep - 1])
        self.t = self.last_end = float(start[keep - 1] + step_s[keep - 1])
        self.last_step_s = float(np.mean(step_s[:keep]))
        return range(s0, s0 + keep)

    def _cold(self, arr: np.ndarray, timed: np.ndarray) -> int | None:
        """The block's first step that prefills while the engine's one-time first-prefill
        time is still to come, that time added to its GPU time (a kernel compiled on first use
        runs once compiled; the steps after it wait): the index, or None."""
        if not self.cold_left:
            return None
        prefills = np.flatnonzero((arr[..., _TOKENS] > 0).any(axis=1))
        if not len(prefills):
            return None
        i = int(prefills[0])
        if timed.ndim == 2:
            timed[i, 0] += self.cold_left
        else:
            timed[i] += self.cold_left
        return i

    def _overlapped(self, gpu_host: np.ndarray, launched: float, end_before: float,
                    commit: bool = False) -> np.ndarray:
        """Step durations under an overlap scheduler from each step's GPU and host time: the
        host launches step i once it has launched step i - 1 and step i - 2 has ended (SGLang's
        event_loop_overlap launches batch i, then waits for batch i - 1's results), and step i
        ends when its GPU work, started after step i - 1, is done and its last kernel launched:
        E_i = max(E_{i-1} + gpu_i, max(E_{i-2}, L_{i-1}) + host_i), L_i = max(E_{i-2},
        L_{i-1}) + host_i. After an idle spell the host is free at once."""
        end = self.t
        if self.last_end < self.t:  # idle (or before the first step): nothing in flight
            launched = end_before = end
        out = np.empty(len(gpu_host))
        for i, (g, h) in enumerate(gpu_host):
            start_launch = max(end_before, launched) + h
            new_end = max(end + g, start_launch)
            out[i] = new_end - end
            launched, end_before, end = start_launch, end, new_end
        if commit:
            self.launched, self.end_before = launched, end_before
        return out

    def steps(self) -> tuple:
        """(start, duration, contents steps x ranks x STEP_FIELDS) of the committed steps."""
        ranks = len(self.st.ranks)
        if not self.starts:
            return np.zeros(0), np.zeros(0), np.zeros((0, ranks, len(STEP_FIELDS)))
        return (np.concatenate(self.starts), np.concatenate(self.durs),
                np.concatenate(self.blocks))


def run(cfg: SchedulerConfig, ranks: int, client: Client, isl, osl, times_fn,
        arrivals_s=None, itl: bool = True, progress: bool = False) -> Run:
    """Simulate ``client`` sending requests of lengths ``isl``/``osl`` (arrays, one entry
    per request in sending order) to an engine of ``ranks`` attention DP ranks scheduled by
    ``cfg``; ``times_fn(kind, batch, kv_mean, tokens, prompt_len)`` times rank steps (arrays,
    steps x ranks). ``arrivals_s``: an open-loop client's arrival times. ``itl`` False: no
    per-token times kept (no ITL; a long run's memory). ``progress``: a bar of the requests
    finished on a terminal (:func:`moesym.io.progress.counter`)."""
    n = len(isl)
    st = EngineState(cfg, ranks, isl, osl)
    side = Side(st, times_fn)
    arrival = np.zeros(n)
    arrival_step = np.full(n, -1)  # closed loop: arrives at the end of this step (-1: at 0)
    sent = 0
    if client.closed:
        def replace(rid, s):  # sent as step s ends, it reaches the engine during step s + 1
            nonlocal sent
            if sent < n:
                arrival_step[sent] = s
                st.arrive(sent, s + 1)
                sent += 1

        st.on_finish = replace
        for _ in range(min(client.concurrency, n)):
            st.arrive(sent)
            sent += 1
    else:
        arrival[:] = arrivals_s
        for rid, t in enumerate(arrivals_s):
            side.push(float(t), rid)
    bar = counter("simulate", n, progress, unit="req")
    while side.busy() or side.pending:
        done = side.advance()
        if progress:
            bar.update(sum(len(st.finished_at[s]) for s in done))
    bar.close()
    start, dur, allsteps = side.steps()
    end = start + dur
    if client.closed:
        arrival = np.where(arrival_step >= 0, end[np.maximum(arrival_step, 0)], 0.0)
    first = end[np.asarray(st.first_step)]
    r = _result(arrival, first, end[np.asarray(st.finish_step)], isl, osl,
                _token_times(st, end, first) if itl else [], start, dur, allsteps,
                st.preemptions)
    r.received_s = start[np.asarray(st.received_step)]
    r.started_s = start[np.asarray(st.started_step)]
    r.cold_window_s = np.tile(side.cold_window, (n, 1))
    return r


def replicate(r: Run, ranks: int) -> Run:
    """The run of one rank as that of ``ranks`` ranks running the same load in lock-step: the
    requests sent together, one to each rank, finish together, so each request of ``r`` stands
    for ``ranks`` consecutive ones; each step's contents are the same on every rank (read-only
    broadcast views) and its totals ``ranks`` times one rank's."""
    rep = lambda a: np.repeat(a, ranks)  # noqa: E731
    contents = {k: np.broadcast_to(v, (v.shape[0], ranks)) for k, v in r.contents.items()}
    opt = lambda a: None if a is None else rep(a)  # noqa: E731
    return Run(rep(r.arrival_s), rep(r.first_token_s), rep(r.finish_s), rep(r.isl), rep(r.osl),
               [t for t in r.token_times for _ in range(ranks)], r.step_start_s, r.step_s,
               contents, r.running * ranks, r.waiting * ranks, r.kv_used * ranks,
               r.preemptions * ranks, opt(r.received_s), opt(r.started_s), opt(r.prefilled_s),
               opt(r.at_decode_s),
               None if r.cold_window_s is None else np.repeat(r.cold_window_s, ranks, axis=0))


def _result(arrival, first, finish, isl, osl, token_times, start, dur, allsteps,
            preemptions) -> Run:
    contents = {k: allsteps[..., i] for i, k in enumerate(STEP_FIELDS)}
    total = {k: contents[k].sum(axis=1) for k in ("held", "waiting", "kv_used")}
    return Run(arrival, first, finish, np.asarray(isl), np.asarray(osl), token_times, start, dur,
               contents, total["held"], total["waiting"], total["kv_used"], preemptions)


def _token_times(st: EngineState, end: np.ndarray, first: np.ndarray, rids=None) -> list:
    """Each request's (of ``rids``, default all) token emission times: its first token, each
    decode step it took part in, and a recompute's token after a preemption."""
    steps = [np.asarray(rk.decode_steps, dtype=np.int64) for rk in st.ranks]
    out = []
    for rid in (range(st.n) if rids is None else rids):
        parts = [first[rid:rid + 1]]
        for r, d0, d1 in st.segments[rid]:
            parts.append(end[steps[r][d0:d1]])
        if st.extra_emits[rid]:
            parts.append(end[np.asarray(st.extra_emits[rid])])
        tt = np.concatenate(parts)
        if st.extra_emits[rid]:
            tt.sort()
        out.append(tt)
    return out


_TOKENS = STEP_FIELDS.index("tokens")
_TIMED = [STEP_FIELDS.index(k) for k in ("kind", "graph_batch", "kv_mean", "tokens", "prompt_len")]


def _timed(times_fn, arr: np.ndarray) -> np.ndarray:
    """Each rank step's time (steps x ranks), or its GPU and host time (steps x ranks x 2) from
    a ``times_fn`` that gives both; a step whose ranks all run the same content (a symmetric
    load over attention DP ranks) is evaluated once."""
    x = arr[..., _TIMED]
    same = (x == x[:, :1]).all(axis=(1, 2))
    parts = None
    out = None
    if same.any():
        v = np.asarray(times_fn(*x[same, 0].T))
        parts = v.shape[1:]
        out = np.empty(arr.shape[:2] + parts)
        out[same] = v[:, None]
    if not same.all():
        rest = x[~same].reshape(-1, len(_TIMED))
        v = np.asarray(times_fn(*rest.T))
        if out is None:
            out = np.empty(arr.shape[:2] + v.shape[1:])
        out[~same] = v.reshape((-1, arr.shape[1]) + v.shape[1:])
    return out
