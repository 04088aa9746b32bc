"""Disaggregated serving simulated: prefill replicas and decode replicas, each on its own
clock, with the KV of each prompt sent from one to the other.

A request is routed (round robin) to a prefill replica, which runs prefill-only steps (its
engine's chunking and request cap); when its prompt is done, the KV travels to a decode replica
(round robin) over the scale-out link: ``isl x`` the KV bytes per token one GPU of the prefill
rank holds, over the link's per-GPU bandwidth times its efficiency, plus its latency (every
GPU of the rank sends its own share at once). The decode replica admits it when its request
cap and KV allow, delivers the first token then (the prefill computed it; TTFT counts the
transfer and any wait for KV there) and decodes the rest. A closed-loop client replaces a
request when the decode side finishes it.

The replicas advance by conservative synchronization: a replica commits only the steps that
start before the earliest time another replica could still send it a request. Those bounds
come from the other replicas' clocks, the steps their scheduled requests still need (a decode
replica's next finish is at least its fewest remaining decode steps away) and the shortest
step each side can take (its step model at one request, one token: the least work), so every
arrival reaches a replica before it commits a step that should have seen it (``late`` counts
any that did not; a test holds it at 0).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..io.progress import counter
from .scheduler import DECODE, PREFILL, EngineState
from .simulator import Side, _result, _token_times

__all__ = ["run_disaggregated"]


def _next_finish_steps(st: EngineState) -> float:
    """Fewest decode steps until a request of this decode replica finishes (inf: none held).
    A waiting (or arrived, not yet received) request finishes in the step it joins (1), or as
    it joins when it has no token left to decode (0: a one-token output)."""
    best = math.inf
    for rk in st.ranks:
        if rk.heap:
            best = min(best, max(1, rk.heap[0][0] - rk.D))
        for rid in rk.waiting:
            best = min(best, 1 if st.left[rid] else 0)
    for _, _, rid in st.inbox:  # arrived, not yet received: joins no earlier
        best = min(best, 1 if st.left[rid] else 0)
    return best


def run_disaggregated(cfgs: tuple, ranks: tuple, replicas: tuple, client, isl, osl,
                      times_fns: tuple, transfer_s, arrivals_s=None, itl: bool = True,
                      progress: bool = False) -> tuple:
    """``cfgs``, ``ranks``, ``replicas``, ``times_fns``: (prefill, decode) pairs;
    ``transfer_s``: each request's KV transfer time. Returns (the :class:`Run` as the client
    sees it, with the decode replicas' steps concatenated; per-replica prefill and decode
    step counts; arrivals that came late, 0 by construction). ``progress``: a bar of the
    requests finished on a terminal."""
    n = len(isl)
    (cfg_p, cfg_d), (rp, rd), (np_, nd), (t_p, t_d) = cfgs, ranks, replicas, times_fns
    P = [Side(EngineState(cfg_p, rp, isl, [1] * n), t_p) for _ in range(np_)]
    D = [Side(EngineState(cfg_d, rd, isl, osl, prefilled=True), t_d) for _ in range(nd)]
    # the least step of each side (a step is never shorter than its GPU time)
    tmin_p = 0.999 * float(np.ravel(t_p(*np.array([[PREFILL], [0], [0], [1], [1]],
                                                  dtype=float)))[0])
    tmin_d = 0.999 * float(np.ravel(t_d(*np.array([[DECODE], [1], [1], [0], [0]],
                                                  dtype=float)))[0])
    xfer_min = float(np.min(transfer_s))
    # a request of one output token finishes as it joins a decode replica (no decode step)
    tmin_join = tmin_d if int(np.min(osl)) > 1 else 0.0
    arrival = np.zeros(n)
    at_decode = np.full(n, np.nan)
    route = {"p": 0, "d": 0}
    where_d = np.full(n, -1)
    sent = 0

    where_p = np.full(n, -1)

    def send_to_prefill(rid, t):
        arrival[rid] = t
        where_p[rid] = route["p"] % np_
        P[route["p"] % np_].push(t, rid)
        route["p"] += 1

    if client.closed:
        for _ in range(min(client.concurrency, n)):
            send_to_prefill(sent, 0.0)
            sent += 1
    else:
        for rid, t in enumerate(arrivals_s):
            send_to_prefill(rid, float(t))
        sent = n

    def prefill_out(side: Side) -> float:
        """Earliest time this prefill replica can finish a prompt not yet committed."""
        if side.busy():
            return side.t + tmin_p
        if side.pending:
            return max(side.t, side.next_arrival()) + tmin_p
        return math.inf

    def decode_out(side: Side) -> float:
        """Earliest time this decode replica can finish a request not yet committed."""
        st = side.st
        k = _next_finish_steps(st)
        out = side.t + k * tmin_d if math.isfinite(k) else math.inf
        for t, _, rid in side.pending:
            out = min(out, max(side.t, t) + (tmin_d if st.left[rid] else 0.0))
        return out


    bar = counter("simulate", n, progress, unit="req")
    # finished prompts and requests, released in time order once no replica can still finish
    # one earlier (routing is round robin in time order, the client's next request too)
    prompts_done: list = []
    requests_done: list = []
    def release(prompts_upto: float, requests_upto: float) -> None:
        nonlocal sent
        while prompts_done and prompts_done[0][0] < prompts_upto:
            end, rid = heapq.heappop(prompts_done)
            at_decode[rid] = end + transfer_s[rid]
            j = route["d"] % nd
            route["d"] += 1
            where_d[rid] = j
            D[j].push(float(at_decode[rid]), rid)
        while requests_done and requests_done[0][0] < requests_upto:
            end, rid = heapq.heappop(requests_done)
            bar.update(1)
            if client.closed and sent < n:  # a finished request is replaced
                send_to_prefill(sent, float(end))
                sent += 1

    def bounds() -> tuple:
        """Lower bounds: Pb on any prompt finishing (and leaving for a decode replica), Db on
        any request finishing (and, in a closed loop, replaced): each replica's own next step,
        the finished ones not yet released, and what one causes in the other (a finish
        replaced at once, prefilled in one step; a prompt sent, then joined); and whether the
        client has requests left to send."""
        po = min(prefill_out(s) for s in P)
        do = min(decode_out(s) for s in D)
        pd = prompts_done[0][0] if prompts_done else math.inf
        rd = requests_done[0][0] if requests_done else math.inf
        Db = min(do, rd, po + xfer_min + tmin_join, pd + xfer_min + tmin_join)
        more = client.closed and sent < n
        return min(po, pd, Db + tmin_p if more else math.inf), Db, more, pd, rd

    while True:
        release(*bounds()[:2])
        Pb, Db, more, pd, rd = bounds()  # what was released moved them
        to_p = Db if more else math.inf
        to_d = Pb + xfer_min
        live = [(s.t, 0, i) for i, s in enumerate(P) if s.busy() or s.pending] + \
               [(s.t, 1, i) for i, s in enumerate(D) if s.busy() or s.pending]
        if not live:
            if prompts_done or requests_done:  # nothing runs: the earliest finished goes on
                release(math.nextafter(pd, math.inf) if pd <= rd else -math.inf,
                        math.nextafter(rd, math.inf) if rd < pd else -math.inf)
                continue
            break
        moved = False
        for _, kind, i in sorted(live):
            side = (P if kind == 0 else D)[i]
            before = (side.t, side.st.step_index)
            done = side.advance(to_p if kind == 0 else to_d)
            for s in done:
                end = side.starts[-1][s - done.start] + side.durs[-1][s - done.start]
                for rid in side.st.finished_at[s]:
                    heapq.heappush(prompts_done if kind == 0 else requests_done,
                                   (float(end), rid))
            if (side.t, side.st.step_index) != before:
                moved = True
                break
        if not moved:
            if not (prompts_done or requests_done):
                raise RuntimeError("disaggregated simulation made no progress")  # pragma: no cover
            release(math.nextafter(pd, math.inf) if pd <= rd else -math.inf,
                    math.nextafter(rd, math.inf) if rd < pd else -math.inf)

    bar.close()
    first = np.zeros(n)
    finish = np.zeros(n)
    token_times = [None] * n
    parts = []
    for j, side in enumerate(D):
        start, dur, steps = side.steps()
        mine = np.flatnonzero(where_d == j)
        st = side.st
        first[mine] = start[np.asarray(st.first_step)[mine]]
        finish[mine] = (start + dur)[np.asarray(st.finish_step)[mine]]
        if itl:
            for rid, tt in zip(mine, _token_times(st, start + dur, first, mine)):
                token_times[rid] = tt
        parts.append((start, dur, steps))
    order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
    start = np.concatenate([p[0] for p in parts])[order]
    dur = np.concatenate([p[1] for p in parts])[order]
    width = max(p[2].shape[1] for p in parts)
    steps = np.concatenate([np.pad(p[2], ((0, 0), (0, width - p[2].shape[1]), (0, 0)))
                            for p in parts])[order]
    r = _result(arrival, first, finish, isl, osl, token_times if itl else [], start, dur, steps,
                sum(s.st.preemptions for s in D))
    r.received_s, r.started_s = np.zeros(n), np.zeros(n)
    for j, side in enumerate(P):
        p_start = side.steps()[0]
        mine = np.flatnonzero(where_p == j)
        r.received_s[mine] = p_start[np.asarray(side.st.received_step)[mine]]
        r.started_s[mine] = p_start[np.asarray(side.st.started_step)[mine]]
    r.at_decode_s = at_decode
    r.prefilled_s = at_decode - np.asarray(transfer_s, dtype=float)
    r.cold_window_s = np.array([P[j].cold_window for j in where_p], dtype=float).reshape(n, 2)
    info = {"prefill_steps": [s.st.step_index for s in P],
            "decode_steps": [s.st.step_index for s in D],
            "kv_transfer_ms": {"mean": float(np.mean(transfer_s)) * 1e3,
                               "max": float(np.max(transfer_s)) * 1e3},
            "late_arrivals": sum(s.late for s in P + D)}
    return r, info
