"""A fleet of serving replicas behind a router, simulated request by request: fast enough for
a day of traffic (``moesym fleet``; :mod:`.sizing` sizes the fleet with it).

**A replica** (:class:`ReplicaModel`) is one engine instance of a deployment: continuous
batching as SGLang schedules by default (prefill-first: when prompts wait and the engine can
admit them, the step is a prefill step of up to ``chunk`` prompt tokens, first come first
served, a longer prompt chunked over several steps, and the decoding requests sit it out; SGLang
``enable_mixed_chunk`` is off by default). Otherwise every running request advances one token
per decode step. Admission holds at most ``max_running`` requests and reserves each one's
whole KV (prompt + output, as SGLang reserves a request's remaining output when the client sets
ignore_eos), so no request is ever preempted. Step times come from moesym's compiled step
model (:class:`moesym.serving.timer.ModelTimer`) in two tables built once: a decode step by
batch (at the traffic's mean KV length, the batch padded to the engine's captured graph size)
and a prefill step by a rank's prompt tokens (prompts of the traffic's mean length). A
replica of ``dp`` attention data-parallel ranks runs them in lock-step: a decode step is one
rank's at its share of the batch (the ranks evenly loaded); a prefill step takes up to
``chunk`` prompt tokens per rank, one prompt's piece on one rank, and lasts as long as the
busiest rank's prefill (an even share of the tokens, or the largest piece); while ``k``
prompts prefill on fewer than ``dp`` ranks, the other ranks decode in the same step, which
then lasts at least a decode step, and the decoding requests advance ``1 - k / dp`` of a token
on average (those on the prefilling ranks sit it out; the replica keeps one count of decode
steps, so the shares add up until a whole step is counted). With one rank this is SGLang's
prefill-first schedule exactly. An arrival during a step joins a step no sooner than
``recv_lag`` steps after that one (SGLang's overlap scheduler formed the next step already);
an idle replica takes it at once. The one-time first-prefill warm-up of an engine is left out (a
fleet runs warm).

**Events.** A replica counts its decode steps ``D``; a request that finished its prefill when
the count was ``D0`` finishes at ``D0 + osl - 1`` (its first token came from the prefill), held
in a heap by that count. Between events the batch ``B`` is constant, so ``k`` decode steps take
exactly ``k x t_decode(B)``: time advances from event to event (an arrival, a prefill step,
the next finish), never step by step, and a request costs a few heap operations.

**Routers** (:data:`ROUTERS`):

* ``round-robin``: the i-th request to replica ``i mod N``; ``random``: a uniform replica.
  Neither reads the replicas' state, so each replica is simulated on its own stream.
* ``least-outstanding``: the replica with the fewest requests routed to it and not finished
  (SGLang router's ``shortest queue`` load), ties to the replica assigned least recently (so
  equal loads are spread in round-robin order; SGLang takes the first).
* ``cache-aware``: SGLang router's ``cache_aware`` policy (sglang-router 0.3.2,
  ``router_args.py`` defaults): when the load is imbalanced, ``max - min > 64`` requests
  (``balance_abs_threshold``) and ``max > 1.5 min`` (``balance_rel_threshold``), the least
  loaded replica; otherwise, if a replica holds the request's prefix and it is more than 0.3
  of the prompt (``cache_threshold``), that replica (the least loaded of those that hold it);
  otherwise the replica whose cache holds the fewest prefix tokens (SGLang: the smallest
  radix tree), ties to the least loaded. moesym knows prefixes only as a trace names them
  (``prefix_id``, ``prefix_tokens``): without them the policy is least-outstanding.

**Prefix cache.** Every replica (under every router) keeps the prefixes of the requests it
served, least recently used first out, up to its KV capacity in tokens (SGLang's radix cache
lives in the KV pool); a request whose prefix it holds prefills only the rest of its prompt.

**Replicas by hour.** ``schedule[h]`` replicas are in service in hour ``h``: replicas ``0 ..
schedule[h] - 1``; a replica taken out of service gets no new request and drains the ones it
holds. Each replica's busy time is kept per hour (decode and prefill seconds and their
time-weighted batch and tokens) for the power model (:mod:`.sizing`).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from ..errors import MoesymError
from .scheduler import DECODE, PREFILL, _padded
from .traffic import Traffic

__all__ = ["ROUTERS", "ReplicaModel", "FleetRun", "replica_model", "simulate_fleet",
           "HOUR_S", "BALANCE_ABS", "BALANCE_REL", "CACHE_THRESHOLD"]

HOUR_S = 3600.0
ROUTERS = ("round-robin", "least-outstanding", "cache-aware", "random")
#: sglang-router 0.3.2 router_args.py: balance_abs_threshold, balance_rel_threshold,
#: cache_threshold
BALANCE_ABS, BALANCE_REL, CACHE_THRESHOLD = 64, 1.5, 0.3
_INF = math.inf


@dataclass(frozen=True)
class ReplicaModel:
    """What one replica of ``dp`` attention data-parallel ranks sustains: ``max_running``
    requests held, ``kv_tokens`` of KV (both for the whole replica), ``chunk`` prompt tokens
    per rank in a prefill step, an arrival's ``recv_lag`` steps, and the step times (s):
    ``decode_s[B]`` for a decode step of ``B`` requests on the replica (0 <= B <=
    max_running), ``prefill_s[T]`` for a prefill step whose busiest rank holds ``T`` prompt
    tokens (0 <= T <= chunk)."""

    gpus: int
    max_running: int
    kv_tokens: float
    chunk: int
    recv_lag: int
    decode_s: np.ndarray
    prefill_s: np.ndarray
    dp: int = 1
    kv_mean: float = 0.0
    prompt_len: float = 0.0

    def __post_init__(self):
        if self.max_running < 1 or self.chunk < 1 or not self.kv_tokens > 0:
            raise MoesymError("a replica needs max_running >= 1, chunk >= 1 and KV room")
        if len(self.decode_s) < self.max_running + 1 or len(self.prefill_s) < self.chunk + 1:
            raise MoesymError("a replica's step-time tables must cover batch 0..max_running "
                              "and tokens 0..chunk")


def replica_model(sim, isl, osl) -> tuple[ReplicaModel, object, object]:
    """The :class:`ReplicaModel` of a :class:`moesym.serving.Simulation` (model, hardware,
    deployment, engine, launch flags) serving requests of lengths like ``isl`` / ``osl``;
    also its scheduler config and timer (for the power model's busy shares)."""
    isl, osl = np.asarray(isl), np.asarray(osl)
    cfg, timer = sim.configure(isl, osl)
    dp = sim.dep.dp
    max_run = int(min(cfg.max_running, 1 << 20)) * dp
    kv_mean = float(np.mean(isl) + np.mean(osl) / 2)
    prompt_len = float(np.mean(isl))
    b = np.arange(max_run + 1)
    per_rank = -(-b // dp)
    graph = np.array([_padded(int(x), cfg.graph_sizes) if x else 0 for x in per_rank], float)
    dec = timer.times(np.full(len(b), DECODE), graph, np.full(len(b), kv_mean),
                      np.zeros(len(b)), np.full(len(b), prompt_len))
    chunk = int(cfg.chunk_tokens)
    t = np.arange(chunk + 1)
    pre = timer.times(np.full(len(t), PREFILL), np.zeros(len(t)), np.zeros(len(t)),
                      t.astype(float), np.full(len(t), prompt_len))
    dec[0] = pre[0] = 0.0
    m = ReplicaModel(gpus=sim.dep.gpus, max_running=max_run,
                     kv_tokens=float(cfg.kv_capacity_tokens) * dp, chunk=chunk,
                     recv_lag=int(cfg.recv_lag), decode_s=np.asarray(dec, float),
                     prefill_s=np.asarray(pre, float), dp=dp, kv_mean=kv_mean,
                     prompt_len=prompt_len)
    return m, cfg, timer


@dataclass
class FleetRun:
    """Per request: ``replica``, ``first_token_s``, ``finish_s``, ``prefill_tokens`` (after
    prefix hits); per hour (summed over replicas): ``decode_s`` and ``prefill_s`` (busy
    seconds), ``decode_batch_s`` and ``prefill_tokens_s`` (batch and prompt tokens times
    seconds, for their time-weighted means); the ``schedule`` run."""

    replica: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prefill_tokens: np.ndarray
    decode_s: np.ndarray
    decode_batch_s: np.ndarray
    prefill_s: np.ndarray
    prefill_tokens_s: np.ndarray
    schedule: tuple


def _replica(m: ReplicaModel, pre, osl, need, first, finish, acc, hours: int):
    """One replica as a coroutine: ``send((T, extra, i))`` runs every step that starts
    before time ``T`` (``extra`` -1: stop before a run of decode steps that ends after ``T``),
    then queues request ``i`` (-1: none), which a busy replica takes into a step no sooner
    than ``extra`` steps after the one running at ``T``; it answers (requests routed to it and
    not finished, the earliest its next request can finish)."""
    push, pop = heapq.heappush, heapq.heappop
    dec, prf = m.decode_s.tolist(), m.prefill_s.tolist()
    maxrun, cap, chunk, dp = m.max_running, m.kv_tokens, m.chunk, m.dp
    step_tokens = chunk * dp
    last = hours - 1
    t, D, held, kv, out, cur, share = 0.0, 0, 0, 0.0, 0, 0, 0.0
    S = 0  # steps run
    heap: list = []
    wait: deque = deque()
    ready: deque = deque()  # the step count from which each waiting request can be taken
    # this hour's busy seconds and their batch- and token-seconds, added to ``acc`` (per hour)
    # when a step starts in another hour and at the end
    h, h_end, ds, dbs, ps, pts = 0, HOUR_S if last else _INF, 0.0, 0.0, 0.0, 0.0
    T, extra, i = yield None
    while True:
        used = 0  # steps of the arrival's wait already run
        while True:
            while heap and heap[0][0] <= D:  # the last step finished these
                j = pop(heap)[1]
                finish[j] = t
                held -= 1
                kv -= need[j]
                out -= 1
            if t >= T:
                break
            if t >= h_end:
                acc[0][h] += ds
                acc[1][h] += dbs
                acc[2][h] += ps
                acc[3][h] += pts
                ds = dbs = ps = pts = 0.0
                h = min(int(t / HOUR_S), last)
                h_end = (h + 1) * HOUR_S if h < last else _INF
            if wait and (cur or ((ready[0] <= S or not heap) and held < maxrun
                                 and kv + need[wait[0]] <= cap)):
                budget, tokens, done, big, pieces = step_tokens, 0, [], 0, 0
                while wait:
                    j = wait[0]
                    if cur:
                        left = cur
                    else:
                        if ready[0] > S and heap or held >= maxrun or kv + need[j] > cap:
                            break
                        held += 1
                        kv += need[j]
                        left = pre[j]
                    pieces += 1
                    if left > budget or left > chunk:  # one rank takes a chunk of it
                        piece = budget if budget < chunk else chunk
                        cur = left - piece
                        tokens += piece
                        big = big if big > piece else piece
                        break
                    cur = 0
                    tokens += left
                    budget -= left
                    big = big if big > left else left
                    wait.popleft()
                    ready.popleft()
                    done.append(j)
                    if not budget:
                        break
                # the busiest rank's prompt tokens: an even share, or the largest piece
                per_rank = -(-tokens // dp)
                dt = prf[per_rank if per_rank > big else big]
                ps += dt
                pts += tokens * dt
                S += 1
                if heap and pieces < dp:  # the ranks without a prompt decode in the step
                    B = len(heap)
                    if dec[B] > dt:
                        dt = dec[B]
                    share += 1.0 - pieces / dp  # of the decoding requests, on average
                    if share >= 1.0:
                        share -= 1.0
                        D += 1
                t += dt
                for j in done:
                    first[j] = t
                    o = osl[j]
                    if o > 1:
                        push(heap, (D + o - 1, j))
                    else:
                        finish[j] = t
                        held -= 1
                        kv -= need[j]
                        out -= 1
                continue
            if heap:
                B = len(heap)
                s = dec[B]
                k = heap[0][0] - D
                if wait and not cur and S < ready[0] < S + k:  # a request becomes ready
                    k = ready[0] - S
                if t + k * s > T:
                    if extra < 0:
                        break
                    # the step running at T ends after ceil((T - t) / s) steps; the arrival
                    # then waits ``extra`` more, run here while nothing else happens
                    n = int(-((t - T) // s))
                    if n + extra < k:
                        k = n + extra
                    used = k - n
                dt = k * s
                ds += dt
                dbs += B * dt
                t += dt
                D += k
                S += k
                continue
            if T != _INF:  # idle until T
                t = T
            break
        if i >= 0:
            wait.append(i)
            ready.append(S + extra - used if t > T and extra > used else S)
            out += 1
        elif T == _INF:  # the end: this hour's busy time into the table
            acc[0][h] += ds
            acc[1][h] += dbs
            acc[2][h] += ps
            acc[3][h] += pts
            ds = dbs = ps = pts = 0.0
        T, extra, i = yield (out, t + (heap[0][0] - D) * dec[len(heap)] if heap else _INF)


class _PrefixCache:
    """A replica's prefixes, least recently used first out, up to ``cap`` tokens; ``owners``
    (shared by the fleet) maps a prefix to the replicas holding it."""

    __slots__ = ("r", "cap", "held", "tokens", "owners")

    def __init__(self, r: int, cap: float, owners: dict):
        self.r, self.cap, self.held, self.tokens, self.owners = r, cap, OrderedDict(), 0, owners

    def use(self, p: int, n: int) -> bool:
        """Serve a request of prefix ``p`` (``n`` tokens): whether it was held (a hit)."""
        held = self.held
        if p in held:
            held.move_to_end(p)
            return True
        held[p] = n
        self.tokens += n
        self.owners.setdefault(p, set()).add(self.r)
        while self.tokens > self.cap and len(held) > 1:
            q, k = held.popitem(last=False)
            self.tokens -= k
            self.owners[q].discard(self.r)
        return False


def _hours(traffic: Traffic) -> int:
    return max(1, math.ceil(traffic.duration_s / HOUR_S - 1e-9))


def _schedule(schedule, hours: int) -> tuple:
    s = tuple(int(x) for x in schedule)
    if len(s) == 1:
        s = s * hours
    if len(s) != hours or min(s) < 1:
        raise MoesymError(f"a fleet schedule needs one replica count >= 1 per hour ({hours})")
    return s


def simulate_fleet(m: ReplicaModel, traffic: Traffic, schedule, router: str = "round-robin",
                   *, seed: int = 0, replicas: int | None = None) -> FleetRun:
    """Simulate ``traffic`` on ``schedule`` replicas of ``m`` (one count, or one per hour of
    the traffic's period) behind ``router`` (module docstring). ``replicas``: with an
    independent router (round robin, random), simulate only replicas ``0 .. replicas - 1``
    (they are alike, so a few stand for all: the other requests get NaN times)."""
    if router not in ROUTERS:
        raise MoesymError(f"router {router!r}: one of {', '.join(ROUTERS)}")
    hours = _hours(traffic)
    sched = _schedule(schedule, hours)
    n = len(traffic)
    isl = np.asarray(traffic.isl, dtype=np.int64)
    osl = np.asarray(traffic.osl, dtype=np.int64)
    need = (isl + osl).astype(float)
    if n and need.max() > m.kv_tokens:
        i = int(np.argmax(need))
        raise MoesymError(f"a request of {isl[i]} + {osl[i]} tokens does not fit one replica's "
                          f"KV ({m.kv_tokens:.0f} tokens): use a larger replica or --kv fp8")
    hour = np.minimum((traffic.arrival_s // HOUR_S).astype(np.int64), hours - 1)
    acc = [[0.0] * hours for _ in range(4)]
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    pre = isl.copy()
    if router in ("round-robin", "random"):
        if router == "round-robin":
            assign = np.arange(n) % np.asarray(sched)[hour]
        else:
            assign = np.floor(np.random.default_rng(seed).random(n)
                              * np.asarray(sched)[hour]).astype(np.int64)
        _independent(m, traffic, assign, pre, need, first, finish, acc, hours,
                     replicas or max(sched))
    else:
        assign = _routed(m, traffic, sched, hour, router, pre, need, first, finish, acc, hours)
    if replicas is not None and router in ("round-robin", "random"):
        skip = assign >= replicas
        first[skip] = finish[skip] = np.nan
    return FleetRun(assign, first, finish, pre, *(np.asarray(a) for a in
                                                  (acc[0], acc[1], acc[2], acc[3])), sched)


def _independent(m, traffic, assign, pre, need, first, finish, acc, hours, count) -> None:
    """Round robin and random routing: each replica on its own stream of requests."""
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(count + 1))
    arrival, osl = traffic.arrival_s, traffic.osl
    lag = m.recv_lag
    for r in range(count):
        idx = order[bounds[r]:bounds[r + 1]]
        if not len(idx):
            continue
        p = pre[idx]
        if traffic.prefix is not None:
            _hits(m, traffic, idx, p)
            pre[idx] = p
        k = len(idx)
        f, e = array("d", [math.nan]) * k, array("d", [math.nan]) * k
        gen = _replica(m, _ints(p), _ints(osl[idx]), _floats(need[idx]), f, e, acc, hours)
        next(gen)
        send = gen.send
        for j, a in enumerate(arrival[idx].tolist()):
            send((a, lag, j))
        send((_INF, 0, -1))
        first[idx] = np.frombuffer(f, dtype=float)
        finish[idx] = np.frombuffer(e, dtype=float)


def _ints(x) -> array:
    return array("q", np.ascontiguousarray(x, dtype=np.int64).tobytes())


def _floats(x) -> array:
    return array("d", np.ascontiguousarray(x, dtype=float).tobytes())


def _hits(m, traffic, idx, p) -> None:
    """Prefill tokens of one replica's requests ``idx`` after its prefix cache's hits."""
    cache = _PrefixCache(0, m.kv_tokens, {})
    pref, ptok = traffic.prefix[idx].tolist(), traffic.prefix_tokens[idx].tolist()
    for j, (q, k) in enumerate(zip(pref, ptok)):
        if q >= 0 and cache.use(q, k):
            p[j] = max(1, p[j] - k)


def _routed(m, traffic, sched, hour, router, pre, need, first, finish, acc, hours):
    """Least-outstanding and cache-aware routing: the router reads every replica's load at
    each arrival (module docstring); replicas are advanced only as far as their next possible
    finish (a lower bound kept in a heap), so an arrival costs O(log N)."""
    n, R = len(traffic), max(sched)
    push, pop = heapq.heappush, heapq.heappop
    f, e = array("d", [math.nan]) * n, array("d", [math.nan]) * n
    osl, nd, pf = _ints(traffic.osl), _floats(need), _ints(pre)
    gens = []
    for _ in range(R):
        g = _replica(m, pf, osl, nd, f, e, acc, hours)
        next(g)
        gens.append(g.send)
    outs, dues = [0] * R, [_INF] * R
    last = [r - R for r in range(R)]  # least recently assigned first: 0, 1, ...
    owners: dict = {}
    caches = [_PrefixCache(r, m.kv_tokens, owners) for r in range(R)]
    prefixes = traffic.prefix is not None and router == "cache-aware"
    pref = traffic.prefix.tolist() if traffic.prefix is not None else None
    ptok = traffic.prefix_tokens.tolist() if traffic.prefix is not None else None
    isl = traffic.isl.tolist()
    assign = np.empty(n, dtype=np.int64)
    dueheap: list = []
    load: list = []
    lag, cur_h, N = m.recv_lag, -1, 0
    for j, (a, h) in enumerate(zip(traffic.arrival_s.tolist(), hour.tolist())):
        if h != cur_h:
            cur_h, N = h, sched[h]
            load = [(outs[r], last[r], r) for r in range(N)]
            heapq.heapify(load)
        while dueheap and dueheap[0][0] <= a:
            d, r = pop(dueheap)
            if d != dues[r]:
                continue
            o, du = gens[r]((a, -1, -1))
            outs[r], dues[r] = o, du
            if du != _INF:
                push(dueheap, (du, r))
            if r < N:
                push(load, (o, last[r], r))
        while True:  # the least loaded replica in service (stale entries dropped)
            o, lr, r = load[0]
            if r < N and o == outs[r] and lr == last[r]:
                break
            pop(load)
        if prefixes:
            r = _cache_aware(r, N, outs, last, caches, owners, pref[j], ptok[j], isl[j])
        if pref is not None and pref[j] >= 0 and caches[r].use(pref[j], ptok[j]):
            pf[j] = max(1, pf[j] - ptok[j])
        assign[j] = r
        last[r] = j
        o, du = gens[r]((a, lag, j))
        outs[r] = o
        if du != dues[r]:
            dues[r] = du
            if du != _INF:
                push(dueheap, (du, r))
        push(load, (o, j, r))
    for r in range(R):
        gens[r]((_INF, 0, -1))
    first[:] = np.frombuffer(f, dtype=float)
    finish[:] = np.frombuffer(e, dtype=float)
    pre[:] = np.frombuffer(pf, dtype=np.int64)
    return assign


def _cache_aware(least: int, N: int, outs, last, caches, owners, p: int, k: int,
                 isl: int) -> int:
    """SGLang router's cache-aware choice among replicas ``0 .. N - 1`` (module docstring);
    ``least``: the least loaded."""
    mn, mx = outs[least], max(outs[:N])
    if mx - mn > BALANCE_ABS and mx > BALANCE_REL * mn:
        return least
    if p >= 0 and k > CACHE_THRESHOLD * isl:
        holders = [r for r in owners.get(p, ()) if r < N]
        if holders:
            return min(holders, key=lambda r: (outs[r], last[r]))
    return min(range(N), key=lambda r: (caches[r].tokens, outs[r], last[r]))
