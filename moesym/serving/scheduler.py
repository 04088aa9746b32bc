"""An engine's scheduler, step by step, in step space: which requests each attention
data-parallel rank runs in each step (prefill pieces, decode requests, their KV), with no clock.

Time enters only through :meth:`EngineState.admit`, which makes requests visible to the
scheduler; a closed-loop client's requests arrive on completions, which this module raises
itself (:attr:`EngineState.on_finish`), so a closed-loop benchmark is scheduled entirely in
step space and its steps are timed afterwards in bulk (:mod:`moesym.serving.simulator`).

A rank holds a waiting queue, the requests being prefilled (a prompt longer than the step's
budget is chunked over several steps) and the decoding requests. Two policies, read from the
engine profile (:class:`SchedulerConfig`):

* ``prefill-first`` (SGLang): a step with prompts waiting, and room for them, is a prefill step
  of at most ``chunk_tokens`` prompt tokens (first-come first-served, the last prompt chunked);
  the decoding requests sit it out unless ``mixed_chunk``, when they ride in the same step;
  otherwise the step decodes every running request.
* ``decode-first`` (vLLM V1, TensorRT-LLM in-flight batching): every decoding request takes its
  token(s) from the step's ``step_tokens`` budget; what is left goes to prompts being prefilled,
  then to new prompts, first-come first-served, each chunked to what is left.

Decoding requests advance together: a rank counts its decode steps ``D``, a request that
started decoding at count ``D0`` holds ``isl + a (D - D0)`` tokens of KV (``a``: tokens a decode
step emits per request, speculative decoding's accepted length) and finishes at ``D0 + m`` with
``m = ceil((osl - 1) / a)`` (the prefill's last chunk emits the first token), so a step costs
O(log n) per finishing request, not O(n) per running one.

Arrivals reach a rank's queue when the engine's loop receives them, not when they are sent
(:meth:`EngineState.admit`): a request that arrives while the engine runs step ``k`` can join
step ``k + 1`` at the earliest, or step ``k + 2`` under an overlap scheduler (``recv_lag`` 1:
the engine formed step ``k + 1`` while step ``k`` ran, before the request was there; SGLang
0.5.9 managers/scheduler.py event_loop_overlap receives, forms and launches batch ``k + 1``
while batch ``k`` runs); a closed-loop client's replacement for a request that finished in
step ``s`` arrives during step ``s + 1`` (the client's round trip is not instantaneous). With
``recv_interval`` K > 1 the engine looks for new requests only once its counter reaches K: a
decode step adds 1, a step that prefills adds K (SGLang's ``--scheduler-recv-interval``,
managers/scheduler_recv_skipper.py: decode 1, extend 1000), so arrivals wait up to K decode
steps. An idle engine's loop spins and receives at once.

Attention-DP balance (``dp_balance_steps`` N > 0, TensorRT-LLM's ``attention_dp_config``
``enable_balance`` with ``timeout_iters`` N): with several ranks, new prompts wait until every
rank has one waiting (so the ranks prefill together and no rank's decodes wait for another's
prefill), unless a rank has nothing to decode, or for at most N steps.

KV admission (``kv_reserve``): a prompt is admitted when the KV in use, plus ``kv_reserve``
times the decoding requests' remaining output, plus the new prompt and ``kv_reserve`` times its
output, fits the rank's KV capacity; ``kv_reserve = 1`` never runs out (TensorRT-LLM's
guaranteed-no-evict), ``0`` allocates on demand (vLLM). When a decode step would overflow, the
newest decoding requests are preempted: they go back to the front of the queue and later
prefill their prompt and the tokens they had emitted again (recompute), which emits their next
token.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

__all__ = ["SchedulerConfig", "EngineState", "STEP_FIELDS", "IDLE", "DECODE", "PREFILL", "MIXED"]

IDLE, DECODE, PREFILL, MIXED = 0, 1, 2, 3


@dataclass(frozen=True)
class SchedulerConfig:
    """An engine's scheduling rules as numbers (resolved from an engine profile, the hardware
    and the deployment by :func:`moesym.serving.engine.scheduler_config`)."""

    policy: str = "decode-first"           # or "prefill-first"
    mixed_chunk: bool = True               # prefill-first: decode requests ride in prefill steps
    chunk_tokens: int = 8192               # prompt tokens per step (per rank)
    step_tokens: int = 8192                # decode-first: all tokens of a step (per rank)
    max_running: int = 1 << 30             # requests held at once per rank (prefilling + decoding)
    kv_capacity_tokens: float = math.inf   # per rank
    kv_reserve: float = 0.0                # share of future output reserved at admission
    accepted: float = 1.0                  # tokens one decode step emits per request
    graph_sizes: tuple = ()                # captured decode batch sizes (ascending)
    dp_routing: str = "round-robin"        # or "shortest-queue"
    recv_lag: int = 0                      # 1: an overlap scheduler formed the next step already
    recv_interval: int = 1                 # the engine receives once its counter reaches this
    dp_balance_steps: int = 0              # attention-DP balance: hold new prompts up to this
    cold_prefill_s: float = 0.0            # one-time extra of the first step that prefills
    bootstrap_lag: int = 0                 # 1: a busy loop's received request joins a queue
    # only at the next loop (a disaggregated prefill's KV handshake, polled once per loop)

    def __post_init__(self):
        if self.policy not in ("prefill-first", "decode-first"):
            raise ValueError(f"policy {self.policy!r}: prefill-first or decode-first")
        if self.recv_lag not in (0, 1) or self.recv_interval < 1:
            raise ValueError("recv_lag is 0 or 1 and recv_interval at least 1")
        if self.bootstrap_lag not in (0, 1):
            raise ValueError("bootstrap_lag is 0 or 1")


#: the fields of one rank's step, in the order :meth:`EngineState.step` gives them: its kind
#: (IDLE, DECODE, PREFILL, MIXED), decode requests, the captured graph batch they replay at,
#: their mean KV length, prefill tokens, the token-weighted mean length of the prompts those
#: belong to; then, after the step, the requests held (prefilling and decoding), the requests
#: waiting and the KV tokens in use
STEP_FIELDS = ("kind", "batch", "graph_batch", "kv_mean", "tokens", "prompt_len", "held",
               "waiting", "kv_used")


@dataclass
class _Rank:
    waiting: deque = field(default_factory=deque)
    prefilling: list = field(default_factory=list)   # request ids, oldest first
    heap: list = field(default_factory=list)         # (finish count, admission stamp, id)
    decoding: dict = field(default_factory=dict)     # id -> admission stamp (insertion = age)
    D: int = 0                                       # decode steps run
    A: float = 0.0                                   # sum of (isl_i - a D0_i) over decoding
    rem: float = 0.0                                 # sum of (D0_i + m_i) over decoding
    decode_steps: list = field(default_factory=list)  # global step index of each decode step
    prefill_kv: float = 0.0                           # KV held by the requests in prefill


class EngineState:
    """The scheduler of ``ranks`` attention data-parallel ranks over requests with prompt
    lengths ``isl`` and output lengths ``osl`` (lists of ints). Call :meth:`admit` to make
    requests visible, :meth:`step` to run one step; the results are the per-request records
    (``first_step``, ``finish_step``, ``segments``, ``extra_emits``) and ``steps``."""

    def __init__(self, cfg: SchedulerConfig, ranks: int, isl, osl, prefilled: bool = False):
        self.cfg, self.n, self.prefilled = cfg, len(isl), prefilled
        self.ranks = [_Rank() for _ in range(ranks)]
        self.osl = [int(x) for x in osl]
        a = cfg.accepted
        self.prompt = [int(x) for x in isl]    # tokens to prefill (grows when preempted)
        self.done = [0] * self.n               # prompt tokens prefilled so far
        self.left = [max(0, math.ceil((o - 1) / a - 1e-9)) for o in self.osl]  # decode steps
        self.rank_of = [-1] * self.n
        self.first_step = [-1] * self.n
        self.finish_step = [-1] * self.n
        self.segments: list[list] = [[] for _ in range(self.n)]   # (rank, D0, D1)
        self.extra_emits: list[list] = [[] for _ in range(self.n)]  # steps of re-prefill tokens
        self.d0 = [0] * self.n
        self.stamp = [0] * self.n
        self.preemptions = 0
        self.step_index = 0
        self.on_finish = None    # callback(request id, step index): a closed-loop client
        self.inbox: list = []    # (first step it can join, sequence, request): sent, not received
        self.bootstrapping: list = []  # received by a busy loop, joining at the next one
        self._seq = 0
        self._recv_count = 0     # the receive counter (recv_interval > 1)
        self._held = 0           # steps new prompts have been held for the DP balance
        self._hold = False
        self.received_step = [-1] * self.n   # the step whose formation received each request
        self.started_step = [-1] * self.n    # the step that began its prefill (or, prefilled,
        # the step it joined the decoding requests)
        self._rr = 0
        self._finished: list = []
        self.finished_at: list[list] = []   # per step: the requests it finished

    # -- arrivals --------------------------------------------------------------------------
    def arrive(self, rid: int, during_step: int | None = None) -> None:
        """Request ``rid`` reaches the engine while step ``during_step`` runs (None: the engine
        is idle, or the step about to be formed has not started): it can join the step after
        that one, or one step later under an overlap scheduler, once the engine receives."""
        if during_step is None:
            first = self.step_index
        else:
            first = during_step + 1 + self.cfg.recv_lag
        heapq.heappush(self.inbox, (first, self._seq, rid))
        self._seq += 1

    def _receive(self, s: int) -> None:
        """The engine's receive before forming step ``s``: every request it can see joins a
        rank's queue in arrival order. An idle engine receives every request that has
        arrived at once (its loop spins); a busy one only when its counter allows. Under a
        bootstrap lag (a disaggregated prefill: SGLang 0.5.9 disaggregation/prefill.py:362-384
        polls each received request's KV handshake once per loop, :269-309) a request received
        by a loop that has a batch to run (earlier requests queued or just bootstrapped) joins
        a queue at the next loop's poll, before that loop's receive; a loop with nothing to
        run spins through the handshake and it joins at once."""
        idle = not self._holding()
        for rid in self.bootstrapping:  # polled again: the handshake has completed
            self.admit(rid)
        self.bootstrapping = []
        if not idle and self.cfg.recv_interval > 1:
            if self._recv_count < self.cfg.recv_interval:
                return
        self._recv_count = 0
        ready = []
        while self.inbox and (idle or self.inbox[0][0] <= s):
            ready.append(heapq.heappop(self.inbox))
        # a loop with a batch to run (of requests already queued or bootstrapped just now)
        # runs it first; one without spins through the handshake
        lag = self.cfg.bootstrap_lag and self._holding()
        for _, _, rid in sorted(ready, key=lambda x: x[1]):
            self.received_step[rid] = s
            if lag:
                self.bootstrapping.append(rid)
            else:
                self.admit(rid)

    def admit(self, rid: int) -> None:
        """Request ``rid`` is received: route it to a rank's queue."""
        if self.cfg.dp_routing == "shortest-queue":
            r = min(range(len(self.ranks)), key=lambda i: self._load(self.ranks[i]))
        else:
            r = self._rr % len(self.ranks)
            self._rr += 1
        self.rank_of[rid] = r
        self.ranks[r].waiting.append(rid)

    @staticmethod
    def _load(rk: _Rank) -> int:
        return len(rk.waiting) + len(rk.prefilling) + len(rk.decoding)

    def _holding(self) -> bool:
        """Some rank holds a request (queued, prefilling or decoding)."""
        return any(rk.waiting or rk.prefilling or rk.decoding for rk in self.ranks)

    def busy(self) -> bool:
        return bool(self.inbox or self.bootstrapping) or self._holding()

    # -- KV --------------------------------------------------------------------------------
    def _kv_decoding(self, rk: _Rank) -> float:
        return rk.A + self.cfg.accepted * len(rk.decoding) * rk.D

    def kv_used(self, rk: _Rank) -> float:
        return self._kv_decoding(rk) + rk.prefill_kv

    def _reserved(self, rk: _Rank) -> float:
        """Future output of the decoding requests, times the admission reserve."""
        if not self.cfg.kv_reserve:
            return 0.0
        return self.cfg.kv_reserve * self.cfg.accepted * (rk.rem - len(rk.decoding) * rk.D)

    def _fits(self, rk: _Rank, rid: int) -> bool:
        need = self.prompt[rid] + self.cfg.kv_reserve * self.cfg.accepted * self.left[rid]
        return self.kv_used(rk) + self._reserved(rk) + need <= self.cfg.kv_capacity_tokens

    # -- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple]:
        """Run one step on every rank: per rank a tuple of :data:`STEP_FIELDS` (step index
        ``self.step_index``)."""
        s = self.step_index
        self._receive(s)
        self._hold = self._balance_hold()
        out = [self._rank_step(rk, r, s) for r, rk in enumerate(self.ranks)]
        if self.cfg.recv_interval > 1:  # decode (or idle) counts 1, a step that prefills K
            prefills = any(o[0] in (PREFILL, MIXED) for o in out)
            self._recv_count += self.cfg.recv_interval if prefills else 1
        self.step_index += 1
        finished, self._finished = self._finished, []
        self.finished_at.append(finished)
        if self.on_finish is not None:  # after every rank has stepped: a request that a
            for rid in finished:        # finish releases arrives for the next step
                self.on_finish(rid, s)
        return out

    def _rank_step(self, rk: _Rank, r: int, s: int) -> tuple:
        cfg = self.cfg
        if self.prefilled:  # a disaggregated decode side: prompts arrive with their KV
            self._join_waiting(rk, s)
            pieces, decode = (), True
        elif not rk.waiting and not rk.prefilling:  # no prompt to schedule: decode (or idle)
            pieces, decode = (), True
        elif cfg.policy == "prefill-first":
            pieces = self._pieces(rk, cfg.chunk_tokens, len(rk.decoding))
            decode = not pieces or cfg.mixed_chunk
        else:
            b = len(rk.decoding)
            budget = cfg.step_tokens - math.ceil(b * cfg.accepted)
            pieces = self._pieces(rk, max(0, min(budget, cfg.chunk_tokens)), b)
            decode = True
        b = len(rk.decoding) if decode else 0
        a = cfg.accepted
        if b and rk.A + a * b * rk.D + rk.prefill_kv + a * b > cfg.kv_capacity_tokens:
            self._make_room(rk)
            b = len(rk.decoding)
        kv_mean = (rk.A + a * b * rk.D) / b if b else 0.0
        graph = (_padded(b, cfg.graph_sizes) if not pieces else b) if b else 0
        tokens = prompt_len = 0
        if pieces:
            tokens = sum(t for _, t in pieces)
            prompt_len = sum(self.prompt[i] * t for i, t in pieces) / tokens
        kind = (MIXED if b else PREFILL) if pieces else (DECODE if b else IDLE)
        if b:
            self._decode(rk, r, s)
        for rid, t in pieces:
            self._prefilled(rk, r, rid, t, s)
        nd = len(rk.decoding)
        return (kind, b, graph, kv_mean, tokens, prompt_len, nd + len(rk.prefilling),
                len(rk.waiting), rk.A + a * nd * rk.D + rk.prefill_kv)

    def _balance_hold(self) -> bool:
        """Whether this step holds new prompts back for the attention-DP balance."""
        if not self.cfg.dp_balance_steps or len(self.ranks) == 1:
            return False
        if not any(rk.waiting for rk in self.ranks):
            self._held = 0
            return False
        if (all(rk.waiting for rk in self.ranks) or not all(rk.decoding for rk in self.ranks)
                or self._held >= self.cfg.dp_balance_steps):
            self._held = 0
            return False
        self._held += 1
        return True

    def _pieces(self, rk: _Rank, budget: int, decoding: int) -> list:
        """Prompt pieces of this step: the prompts in prefill first, then new ones (first come,
        first served) while the budget, the request limit and the KV allow."""
        pieces = []
        for rid in rk.prefilling:
            if budget <= 0:
                break
            t = min(self.prompt[rid] - self.done[rid], budget)
            pieces.append((rid, t))
            budget -= t
        held = decoding + len(rk.prefilling)
        while budget > 0 and rk.waiting and held < self.cfg.max_running and not self._hold:
            rid = rk.waiting[0]
            if not self._fits(rk, rid):
                break
            rk.waiting.popleft()
            rk.prefilling.append(rid)
            rk.prefill_kv += self.prompt[rid]
            if self.started_step[rid] < 0:
                self.started_step[rid] = self.step_index
            held += 1
            t = min(self.prompt[rid] - self.done[rid], budget)
            pieces.append((rid, t))
            budget -= t
        return pieces

    def _join_waiting(self, rk: _Rank, s: int) -> None:
        """Prefilled mode: waiting requests join the decoding ones, first come first served,
        while the request cap and the KV allow (their first token was emitted by the prefill
        side and is delivered now)."""
        while rk.waiting and len(rk.decoding) < self.cfg.max_running:
            rid = rk.waiting[0]
            if not self._fits(rk, rid):
                break
            rk.waiting.popleft()
            if self.first_step[rid] < 0:
                self.first_step[rid] = s
                self.started_step[rid] = s
            if self.left[rid] == 0:
                self._finish(rid, s)
            else:
                self._join(rk, rid)

    def _prefilled(self, rk: _Rank, r: int, rid: int, t: int, s: int) -> None:
        self.done[rid] += t
        if self.done[rid] < self.prompt[rid]:
            return
        rk.prefilling.remove(rid)
        rk.prefill_kv -= self.prompt[rid]
        if self.first_step[rid] < 0:
            self.first_step[rid] = s
        else:  # a preempted request's recompute emits its next token
            self.extra_emits[rid].append(s)
            self.left[rid] = max(0, self.left[rid] - 1)
        if self.left[rid] == 0:
            self._finish(rid, s)
            return
        self._join(rk, rid)

    def _join(self, rk: _Rank, rid: int) -> None:
        """``rid`` starts decoding at this rank's next decode step."""
        self.d0[rid] = rk.D
        self.stamp[rid] += 1
        rk.decoding[rid] = self.stamp[rid]
        rk.A += self.prompt[rid] - self.cfg.accepted * rk.D
        rk.rem += rk.D + self.left[rid]
        heapq.heappush(rk.heap, (rk.D + self.left[rid], self.stamp[rid], rid))

    def _decode(self, rk: _Rank, r: int, s: int) -> None:
        rk.D += 1
        rk.decode_steps.append(s)
        while rk.heap and rk.heap[0][0] <= rk.D:
            _, stamp, rid = heapq.heappop(rk.heap)
            if rk.decoding.get(rid) != stamp:
                continue  # preempted since
            self._leave(rk, rid)
            self.segments[rid].append((r, self.d0[rid], rk.D))
            self.left[rid] = 0
            self._finish(rid, s)

    def _leave(self, rk: _Rank, rid: int) -> None:
        del rk.decoding[rid]
        rk.A -= self.prompt[rid] - self.cfg.accepted * self.d0[rid]
        rk.rem -= self.d0[rid] + self.left[rid]

    def _make_room(self, rk: _Rank) -> None:
        """Preempt the newest decoding requests while this decode step's new tokens would
        overflow the KV (each goes back to the queue's front, to recompute)."""
        a = self.cfg.accepted
        while rk.decoding and (self.kv_used(rk) + a * len(rk.decoding)
                               > self.cfg.kv_capacity_tokens):
            rid = next(reversed(rk.decoding))
            r = self.rank_of[rid]
            steps = rk.D - self.d0[rid]
            self._leave(rk, rid)
            if steps:
                self.segments[rid].append((r, self.d0[rid], rk.D))
            self.left[rid] -= steps
            self.prompt[rid] += math.floor(a * steps)  # KV of the tokens emitted so far
            self.done[rid] = 0
            rk.waiting.appendleft(rid)
            self.preemptions += 1

    def _finish(self, rid: int, s: int) -> None:
        self.finish_step[rid] = s
        self._finished.append(rid)

    # -- speculation -----------------------------------------------------------------------
    _PER_REQUEST = ("prompt", "done", "left", "rank_of", "first_step", "finish_step", "d0",
                    "stamp", "received_step", "started_step")

    def snapshot(self):
        """Everything :meth:`step` and :meth:`admit` change, to roll back a speculative run:
        the ranks' state, and the per-request records of the requests a step can touch (those
        queued, prefilling or decoding on a rank, or arrived and not yet received: nothing
        reaches the engine during a speculative run, so the others stay as they are)."""
        ranks = [(deque(rk.waiting), list(rk.prefilling), list(rk.heap), dict(rk.decoding), rk.D,
                  rk.A, rk.rem, len(rk.decode_steps), rk.prefill_kv) for rk in self.ranks]
        live = {rid for rk in self.ranks for rid in (*rk.waiting, *rk.prefilling, *rk.decoding)}
        live.update(rid for _, _, rid in self.inbox)
        live.update(self.bootstrapping)
        per_req = {rid: (tuple(getattr(self, a)[rid] for a in self._PER_REQUEST),
                         len(self.segments[rid]), len(self.extra_emits[rid])) for rid in live}
        return (ranks, per_req, self.preemptions, self.step_index, self._rr, list(self.inbox),
                self._seq, self._recv_count, self._held, list(self.bootstrapping))

    def restore(self, snap) -> None:
        (ranks, per_req, self.preemptions, self.step_index, self._rr, inbox, self._seq,
         self._recv_count, self._held, booting) = snap
        self.inbox = list(inbox)
        self.bootstrapping = list(booting)
        del self.finished_at[self.step_index:]
        for rk, (w, p, h, d, D, A, rem, nsteps, pkv) in zip(self.ranks, ranks):
            rk.waiting, rk.prefilling, rk.heap, rk.decoding = deque(w), list(p), list(h), dict(d)
            rk.D, rk.A, rk.rem, rk.prefill_kv = D, A, rem, pkv
            del rk.decode_steps[nsteps:]
        for rid, (values, nseg, nemit) in per_req.items():
            for a, v in zip(self._PER_REQUEST, values):
                getattr(self, a)[rid] = v
            del self.segments[rid][nseg:]
            del self.extra_emits[rid][nemit:]


def _padded(b: int, sizes: tuple) -> int:
    """The captured graph batch a decode batch of ``b`` replays at (``b`` itself when it is
    larger than every captured size: run eagerly)."""
    if not sizes or b > sizes[-1]:
        return b
    return sizes[bisect.bisect_left(sizes, b)]
