"""Step times of a simulation from moesym's own compiled step models, in bulk.

A step of one attention data-parallel rank is a decode step (``B`` requests at mean KV ``L``),
a prefill step (``T`` prompt tokens of prompts of mean length ``L``, chunk ``C``, the
engine's chunk or the prompt when shorter) or a mixed
step (both; the prompts' length is ``L_in``): the three compiled models of
:func:`moesym.model.predictor.compiled_predict_model` (decode, prefill and serve phase), each
built once and evaluated on arrays of steps, never rebuilt per step. With micro-batches, a
decode step of fewer requests than micro-batches runs as that many micro-batches (an engine
cannot split further), from the model built at that count.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..model.predictor import compiled_predict_model
from ..numbers.economics import busy_share
from ..numbers.metrics import report_from_numbers
from ..specs.deployment import Deployment, Phase, Workload
from ..symbolic.symtab import N
from .scheduler import DECODE, MIXED, PREFILL

__all__ = ["ModelTimer", "STEP_OUTPUTS"]

#: what a simulation reads of a step model: its time, and its GPU and host sides
STEP_OUTPUTS = ("step_time_s", "gpu_s", "host_s")


class ModelTimer:
    """``times(kind, batch, kv_mean, tokens, prompt_len)`` (arrays of equal shape) -> step
    seconds of each rank's step; idle steps take 0."""

    def __init__(self, model, hw, dep: Deployment, chunk: int):
        self.model, self.hw, self.dep, self.chunk = model, hw, dep, chunk
        self._cms: dict = {}
        self.overrides: dict = {}  # symbol -> value over the bound numbers (a fit's trial)

    def _workload(self, phase: Phase) -> Workload:
        return {Phase.DECODE: Workload(Phase.DECODE, batch=1, context=1),
                Phase.PREFILL: Workload(Phase.PREFILL, tokens=self.chunk, context=self.chunk,
                                        chunk=self.chunk),
                Phase.SERVE: Workload(Phase.SERVE, batch=1, isl=1, osl=1,
                                      chunk=self.chunk)}[phase]

    def _cm(self, phase: Phase, mb: int, outputs=STEP_OUTPUTS):
        key = (phase, mb, outputs)
        if key not in self._cms:
            dep = replace(self.dep, micro_batches=mb)
            dep.check_overlap(phase)
            self._cms[key] = compiled_predict_model(self.model, self.hw, dep,
                                                    self._workload(phase), memory=False,
                                                    outputs=outputs)
        return self._cms[key]

    def busy_share(self, kind: int, batch: float, kv_mean: float, tokens: float,
                   prompt_len: float) -> float:
        """The utilization (:func:`moesym.numbers.economics.busy_share`) of one rank step of
        these contents: the compute and memory seconds of its kernels, from the whole report
        model of its phase (built or loaded once), over its time."""

        phase = {DECODE: Phase.DECODE, PREFILL: Phase.PREFILL, MIXED: Phase.SERVE}[kind]
        mb = min(self.dep.micro_batches, max(1, int(batch if kind == DECODE else tokens)))
        cm = self._cm(phase, mb, None)
        env = {N.chunk: min(float(self.chunk), prompt_len)}
        if kind == DECODE:
            env.update({N.batch: batch, N.context: kv_mean})
        elif kind == PREFILL:
            env.update({N.tokens: tokens, N.context: prompt_len})
        else:
            env.update({N.batch: batch, N.context: kv_mean, N.tokens: tokens, N.isl: prompt_len})
        values = {**cm.parts[0]["static"], **self.overrides, **env, N.micro_batches: mb}
        nums = {k: float(v) for k, v in cm.evaluate(0, values).items()}
        dep = replace(self.dep, micro_batches=mb)
        return busy_share(report_from_numbers(nums, values, self.model, dep,
                                              self._workload(phase)))

    def prepare(self, phases=(Phase.DECODE, Phase.PREFILL, Phase.SERVE)) -> None:
        """Build (or load) the models a run needs before the run starts (a disaggregated
        prefill replica runs prefill steps only, a decode replica decode steps only)."""
        for phase in phases:
            self._cm(phase, self.dep.micro_batches)

    def times(self, kind, batch, kv_mean, tokens, prompt_len) -> np.ndarray:
        """Each rank step's time, the steady state's (its GPU and host time's longer, or their
        sum without an overlap scheduler)."""
        return self._evaluate(("step_time_s",), kind, batch, kv_mean, tokens, prompt_len)[..., 0]

    def gpu_host(self, kind, batch, kv_mean, tokens, prompt_len) -> np.ndarray:
        """Each rank step's GPU time and host time (last axis), for an overlap scheduler's
        steps timed one from the next (:class:`moesym.serving.simulator.Side`)."""
        return self._evaluate(("gpu_s", "host_s"), kind, batch, kv_mean, tokens, prompt_len)

    def _evaluate(self, keys, kind, batch, kv_mean, tokens, prompt_len) -> np.ndarray:
        kind = np.asarray(kind)
        out = np.zeros(kind.shape + (len(keys),))
        mb = self.dep.micro_batches
        f = lambda a, m: np.asarray(a, dtype=float)[m]  # noqa: E731
        for k, phase in ((DECODE, Phase.DECODE), (PREFILL, Phase.PREFILL), (MIXED, Phase.SERVE)):
            sel = kind == k
            if not sel.any():
                continue
            for m in range(1, mb + 1):
                # a step splits into min(micro-batches, its decode requests or its tokens)
                work = np.asarray(batch if k == DECODE else tokens)
                use = sel & (np.minimum(work, mb) == m) if mb > 1 else sel
                if not use.any():
                    continue
                # a prompt shorter than the chunk is prefilled in one piece of its length
                env = {N.chunk: np.minimum(float(self.chunk), f(prompt_len, use))}
                if k == DECODE:
                    env.update({N.batch: f(batch, use), N.context: f(kv_mean, use)})
                elif k == PREFILL:
                    env.update({N.tokens: f(tokens, use), N.context: f(prompt_len, use)})
                else:
                    env.update({N.batch: f(batch, use), N.context: f(kv_mean, use),
                                N.tokens: f(tokens, use), N.isl: f(prompt_len, use)})
                cm = self._cm(phase, m)
                r = cm.evaluate(0, {**cm.parts[0]["static"], **self.overrides, **env})
                for i, key in enumerate(keys):
                    out[use, i] = r[key]
                if mb == 1:
                    break
        return out
