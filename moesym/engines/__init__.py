"""Engine scheduler profiles as data: what SGLang, vLLM and TensorRT-LLM do by default step by
step (who gets the step, the token budget and chunking, the request cap, KV blocks and the
share of memory, what happens when KV is full, the CUDA-graph batch sizes, routing over
attention data-parallel ranks), for a request-level simulation.

``builtin.toml`` beside this file holds one table per engine, each value with the engine
source file, setting and version it was read from; a user TOML of the same layout (one table)
is loaded the same way. Every key is validated: a bad one is a one-line
:class:`~moesym.errors.SpecError` naming the file, the key and the fix.

Counts are per attention data-parallel rank (each runs its own scheduler). Where an engine
derives a default rather than fixing it, the profile says how: ``chunk_tokens = "by-memory"``
is :func:`moesym.numbers.metrics.default_chunk_tokens`; ``max_running_requests = "by-kv"`` and
``kv_memory_fraction = "by-rule"`` carry their rule as a sub-table, evaluated by
:meth:`EngineProfile.running_requests` and :meth:`EngineProfile.memory_fraction`.

>>> p = load_engine("vllm")
>>> p.policy, p.step_token_budget, p.kv_full
('decode-first', 8192, 'preempt-recompute')
>>> load_engine("sglang").running_requests(kv_tokens=1_000_000, context_tokens=163_840)
3125
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from ..io.toml import load_toml
from ..errors import SpecError
from ..specs.hardware import VENDORS
from ..specs.deployment import ENGINE_ALIASES, Phase
from ..specs.kernel_calib import DTYPES_KEY, ENGINES_KEY, parse_kernel_calib
from ..terms.names import SAME_INPUT_GEMMS

__all__ = ["EngineKernels", "EngineProfile", "KvMemoryRule", "RunningRequestsRule",
           "SharedExpertFusion", "builtin_engines", "check_runs_on", "default_engine",
           "host_overlapped", "runs_on", "load_engine", "POLICIES", "KV_FULL", "KV_BASES",
           "DP_ROUTING", "PREFILL_ORDERS"]

MIB = 2**20
GIB = 2**30

POLICIES = ("prefill-first", "decode-first")
KV_FULL = ("retract", "preempt-recompute", "hold")
KV_BASES = ("weights-kv", "weights-kv-activations", "free-after-weights")
DP_ROUTING = ("round-robin", "shortest-queue")
PREFILL_ORDERS = ("fcfs", "lpm")
CHUNK_RULES = ("by-memory", "off")
RUNNING_RULES = ("by-kv",)
FRACTION_RULES = ("by-rule",)
# keys that only the "retract" admission reserve reads (SGLang)
RETRACT_KEYS = ("new_token_ratio_init", "new_token_ratio_min", "new_token_ratio_decay_steps",
                "schedule_conservativeness", "dp_attention_conservativeness_factor",
                "reserve_clip_tokens", "retract_decode_steps", "ignore_eos_full_reserve")


@dataclass(frozen=True)
class RunningRequestsRule:
    """SGLang's default request cap per rank: min(clamp(int(kv / context x per_context),
    min, max), kv // kv_tokens_per_request)."""

    requests_per_context: int
    min_requests: int
    max_requests: int
    kv_tokens_per_request: int

    def at(self, kv_tokens: int, context_tokens: int) -> int:
        estimate = int(kv_tokens / context_tokens * self.requests_per_context)
        estimate = max(min(estimate, self.max_requests), self.min_requests)
        return min(estimate, int(kv_tokens) // self.kv_tokens_per_request)


@dataclass(frozen=True)
class KvMemoryRule:
    """SGLang's default share of GPU memory for weights + KV pool: what its activation, CUDA
    graph and communication reserve leaves (the rule in ``builtin.toml``'s comment)."""

    base_bytes: float
    activation_bytes_per_token: float
    activation_min_tokens: int
    parallel_bytes_per_8_gpus: float
    decode_graph_bytes_per_batch: float
    dp_graph_bytes_per_batch_rank: float
    dp_graph_large_batch: int
    dp_graph_large_bytes_per_batch_rank: float
    prefill_graph_bytes_per_size: float
    prefill_graph_mla_bytes: float
    floor_bytes: float
    floor_above_bytes: float
    deepep_bytes: float
    prefill_graph_grid: tuple[tuple[int, int, int], ...]

    def prefill_graph_sizes(self, max_tokens: int) -> list[int]:
        """The prefill token counts captured up to ``max_tokens``."""
        return [s for first, last, step in self.prefill_graph_grid
                for s in range(first, last + 1, step) if s <= max_tokens]

    def reserved_bytes(self, hbm_bytes: float, *, chunk_tokens: int, decode_graph_max_batch: int,
                       tp: int, pp: int = 1, attn_dp: int = 1, mla: bool = False,
                       deepep: bool = False) -> float:
        """Memory kept out of the static pool. ``chunk_tokens``: before the attention-DP division;
        ``decode_graph_max_batch``: 0 when decode graphs are off."""
        r = self.base_bytes + self.activation_bytes_per_token * max(chunk_tokens,
                                                                     self.activation_min_tokens)
        r += self.parallel_bytes_per_8_gpus * tp * pp / 8
        b = decode_graph_max_batch
        r += self.decode_graph_bytes_per_batch * b
        if attn_dp > 1:
            r += self.dp_graph_bytes_per_batch_rank * b * attn_dp
            if b > self.dp_graph_large_batch:
                r += self.dp_graph_large_bytes_per_batch_rank * b * attn_dp
        r += (self.prefill_graph_mla_bytes if mla else
              self.prefill_graph_bytes_per_size * len(self.prefill_graph_sizes(chunk_tokens)))
        if hbm_bytes > self.floor_above_bytes:
            r = max(r, self.floor_bytes)
        return r + (self.deepep_bytes if deepep else 0.0)

    def fraction(self, hbm_bytes: float, **kw) -> float:
        """round((memory - reserved) / memory, 3), as the engine rounds it."""
        return round((hbm_bytes - self.reserved_bytes(hbm_bytes, **kw)) / hbm_bytes, 3)


@dataclass(frozen=True)
class SharedExpertFusion:
    """Where an engine runs a model's shared experts as more experts of its fused-MoE kernel
    (every token routed to them beside its top-k; no dense GEMMs of their own):
    ``[ENGINE.kernels] shared_expert_fusion``. It applies to a model of one of
    ``architectures`` with ``routed_experts`` routed and ``shared_experts`` shared experts; under
    expert parallelism only on the device makers in ``expert_parallel_vendors``; never with an
    all-to-all in ``off_with_a2a`` ("deepep": the DeepEP modes); and not on the architectures in
    ``off_arch`` (a hardware file's ``arch``) where the experts compute in one of
    ``off_arch_formats`` (the engine runs a MoE kernel there that does not fuse them); nor with
    expert weights in one of ``off_formats`` (a recipe's format name)."""

    architectures: tuple[str, ...]
    routed_experts: int
    shared_experts: int
    expert_parallel_vendors: tuple[str, ...] = ()
    off_with_a2a: tuple[str, ...] = ()
    off_arch: tuple[str, ...] = ()
    off_arch_formats: tuple[str, ...] = ()
    off_formats: tuple[str, ...] = ()

    def applies(self, *, architecture: str, routed: int, shared: int, vendor: str, arch: str,
                ep: int, deepep: bool, expert_format: str, expert_compute: str) -> bool:
        """Whether the engine fuses the shared experts of this model on this deployment
        (``expert_format``: the experts' weight format; ``expert_compute``: the tensor-core
        format they compute in)."""
        if (architecture not in self.architectures or routed != self.routed_experts
                or shared != self.shared_experts or expert_format in self.off_formats):
            return False
        if ep > 1 and vendor not in self.expert_parallel_vendors:
            return False
        if deepep and "deepep" in self.off_with_a2a:
            return False
        return not (arch in self.off_arch and expert_compute in self.off_arch_formats)


_FUSION_KEYS = {"architectures": "names", "routed_experts": "count", "shared_experts": "count",
                "expert_parallel_vendors": "names", "off_with_a2a": "names", "off_arch": "names",
                "off_arch_formats": "names", "off_formats": "names"}


@dataclass(frozen=True)
class EngineKernels:
    """Which kernels an engine runs (``[ENGINE.kernels]``): fused-MoE backends in the engine's
    order of preference (the first one a GPU's ``[moe_kernels]`` has fitted runs, fitted apart
    under expert parallelism as ``NAME_ep``, its grouped-GEMM fields replacing ``[kernel]``'s;
    a GPU with none of them runs its ``[kernel]``), with expert parallelism
    (``moe_ep``) and with a DeepEP all-to-all (``moe_deepep``) where the engine picks others;
    the attention kernel by name (no table times another engine's attention); the custom
    all-reduce by name: a GPU's ``[allreduce.NAME]`` where it has that engine's fit, else its
    ``[allreduce]`` (:meth:`EngineProfile.hardware`)."""

    moe: tuple[str, ...]
    moe_ep: tuple[str, ...] | None = None
    moe_deepep: tuple[str, ...] | None = None
    attention: str = ""
    allreduce: str = ""
    # fused-MoE backends the engine autotunes at warmup (their tactic timed and the fastest
    # kept): their fits' untuned-fallback fields (UNTUNED_MOE_FIELDS) do not apply to its steps
    moe_autotuned: tuple[str, ...] = ()
    # groups of GEMMs reading the same input that the engine's model code runs as one GEMM
    # (moesym.terms.attention.fuse_gemms; names from SAME_INPUT_GEMMS)
    fused_gemms: tuple[tuple[str, ...], ...] = ()
    # where the engine runs the shared experts inside the fused-MoE kernel (None: never)
    shared_expert_fusion: SharedExpertFusion | None = None
    # device architectures (a hardware file's arch) on which the engine casts MLA's absorbed
    # FP8 weights to BF16 and scales them at every decode step (moesym.terms.elementwise.
    # absorbed_weight_cast)
    absorbed_weight_cast_arch: tuple[str, ...] = ()

    def moe_kernel(self, fitted: Mapping[str, float], *, ep: int, deepep: bool) -> str | None:
        """The fused-MoE fit that times the engine's kernel on a GPU whose ``[moe_kernels]`` is
        ``fitted``: the first listed kernel the GPU has, its ``NAME_ep`` fit (measured under
        expert parallelism) when ep > 1."""
        order = (self.moe_deepep if deepep and self.moe_deepep is not None else
                 self.moe_ep if ep > 1 and self.moe_ep is not None else self.moe)
        keys = (f"{k}_ep" if ep > 1 else k for k in order)
        return next((k for k in keys if k in fitted), None)


@dataclass(frozen=True)
class EngineProfile:
    """One engine's scheduler defaults (see ``builtin.toml`` for each key's meaning)."""

    name: str
    version: str
    description: str
    policy: str
    mixed_chunk: bool
    chunk_tokens: int | str
    max_running_requests: int | str
    kv_block_tokens: int
    kv_memory_fraction: float | str
    kv_memory_basis: str
    kv_full: str
    cuda_graph_batch_sizes: tuple[int, ...]
    cuda_graph_padding: bool
    dp_routing: str
    overlap_scheduler: bool
    prefill_order: str
    step_token_budget: int | None = None
    max_prefill_tokens: int | None = None
    running_requests_rule: RunningRequestsRule | None = None
    kv_memory_rule: KvMemoryRule | None = None
    new_token_ratio_init: float | None = None
    new_token_ratio_min: float | None = None
    new_token_ratio_decay_steps: int | None = None
    schedule_conservativeness: float | None = None
    dp_attention_conservativeness_factor: float | None = None
    reserve_clip_tokens: int | None = None
    retract_decode_steps: int | None = None
    ignore_eos_full_reserve: bool | None = None
    cuda_graph_max_batch_size_tp_below_4: int | None = None
    long_prefill_token_threshold: int | None = None
    host_step_s: float | None = None
    # host time per kernel launched from the engine's runtime in a step it does not replay as a
    # graph, per device maker (fitted per engine on published time to first token; none: 0)
    host_launch_s: Mapping[str, float] = field(default_factory=dict)
    # one-time seconds the engine's first prefill step takes beyond its time (the first use of
    # its prefill kernels at shapes startup did not run: JIT compilation, autotuning), per
    # device maker (fitted per engine on the first wave of published benchmark runs; none: 0)
    cold_prefill_s: Mapping[str, float] = field(default_factory=dict)
    # seconds a disaggregated request spends between its prefill's end and its decode rank
    # beyond the KV's own transfer (the engine's hand-off path: the prefill and decode servers'
    # transfer queues, their polling, the router's second hop), per device maker (fitted per
    # engine on published disaggregated runs at low load; none: 0)
    pd_handoff_s: Mapping[str, float] = field(default_factory=dict)
    # disaggregated prefill: a request its busy loop receives joins a prefill batch only at
    # the next loop, once the KV handshake with the decode side is polled complete
    pd_bootstrap_lag: bool = False
    # prefill and mixed steps replayed as (piecewise) CUDA graphs, not launched kernel by kernel
    prefill_graphs: bool = False
    # the scheduler receives new requests once its counter reaches this (decode step 1, a step
    # that prefills the whole interval: SGLang's --scheduler-recv-interval); 1: every step
    recv_interval: int = 1
    # the overlap scheduler also runs with speculative decoding (SGLang 0.5.9 turns it off
    # unless SGLANG_ENABLE_SPEC_V2)
    overlap_with_speculative: bool = True
    # requests held when speculative decoding runs and the cap is not given (SGLang: 48)
    max_running_requests_speculative: int | None = None
    kernels: EngineKernels | None = None
    # [ENGINE.kernel]: kernel-model switches of this engine's kernels over the hardware file's
    # [kernel] (moesym.specs.kernel_calib keys; e.g. llama.cpp's per-expert matrix-vector kernels)
    kernel: Mapping[str, object] = field(default_factory=dict)
    # the device makers (moesym.specs.hardware.VENDORS) whose devices it runs on; (): any
    runs_on: tuple[str, ...] = ()
    # this profile's name and the profiles it is based on, nearest first ("base" keys): the
    # names a hardware file's [kernel.engines.NAME] may give this engine's kernels under
    lineage: tuple[str, ...] = ()

    def hardware(self, hw):
        """``hw`` with its ``[kernel.engines.<this engine>]`` values (this engine's kernels
        fitted on that device), this profile's ``kernel`` switches over its ``[kernel]``, and
        the custom all-reduce this engine runs (``[allreduce.NAME]`` for the name in
        ``[ENGINE.kernels] allreduce``, where the GPU has that fit). An engine that does not run
        on ``hw`` is refused (:func:`check_runs_on`)."""
        check_runs_on(self, hw)

        name = self.kernels.allreduce if self.kernels is not None else ""
        if name in hw.allreduce_kernels:
            hw = replace(hw, allreduce=hw.allreduce_kernels[name])
        tuned = self.kernels.moe_autotuned if self.kernels is not None else ()
        if any(k.removesuffix("_ep") in tuned for k in hw.moe_kernels):
            hw = replace(hw, moe_kernels={
                k: ({f: v for f, v in fit.items() if f not in UNTUNED_MOE_FIELDS}
                    if k.removesuffix("_ep") in tuned else fit)
                for k, fit in hw.moe_kernels.items()})
        fits = dict(hw.kernel.get(ENGINES_KEY, {}) or {})
        own = next((dict(fits[n]) for n in (self.lineage or (self.name,)) if n in fits), {})
        if not own and not self.kernel:
            return hw
        base = {k: v for k, v in hw.kernel.items() if k != ENGINES_KEY}
        if DTYPES_KEY in own:  # per-format values over the device's own, format by format
            formats = dict(base.get(DTYPES_KEY, {}) or {})
            for fmt, values in dict(own.pop(DTYPES_KEY)).items():
                formats[fmt] = {**dict(formats.get(fmt, {}) or {}), **dict(values)}
            base[DTYPES_KEY] = formats
        return replace(hw, kernel={**base, **own, **self.kernel})

    def eager(self, phase, dep) -> bool:
        """Whether a step of ``phase`` launches its kernels one by one from the engine's runtime
        (no CUDA graph replay) on deployment ``dep``: a prefill or mixed step unless the engine
        captures those (its profile's default, or the deployment's ``prefill_graphs``), a
        decode step when the engine captures none or the deployment runs without graphs."""
        if Phase(phase) is Phase.DECODE:
            return not (dep.cuda_graphs and self.cuda_graph_batch_sizes)
        graphs = self.prefill_graphs if dep.prefill_graphs is None else dep.prefill_graphs
        return not (dep.cuda_graphs and graphs)

    def host_launch(self, vendor: str) -> float:
        """Seconds of host time per eagerly launched kernel on ``vendor``'s devices: the fitted
        value, another maker's (said in a warning) where this one has none, else 0."""
        return self._by_vendor(self.host_launch_s, vendor, "host launch time",
                                "us per eagerly launched kernel", 1e6)

    def cold_prefill(self, vendor: str) -> float:
        """Seconds of the one-time first prefill on ``vendor``'s devices: the fitted value,
        another maker's (said in a warning) where this one has none, else 0."""
        return self._by_vendor(self.cold_prefill_s, vendor, "one-time first prefill", "s", 1)

    def pd_handoff(self, vendor: str) -> float:
        """Seconds of a disaggregated request's hand-off from prefill to decode beyond the KV
        transfer on ``vendor``'s devices: the fitted value, another maker's (said in a warning)
        where this one has none, else 0."""
        return self._by_vendor(self.pd_handoff_s, vendor, "prefill-to-decode hand-off", "s", 1)

    def _by_vendor(self, table: Mapping[str, float], vendor: str, what: str, unit: str,
                    scale: float) -> float:
        if vendor in table or not table:
            return table.get(vendor, 0.0)
        other, value = next(iter(table.items()))
        warnings.warn(f"{self.name}: no {what} fitted on {vendor or 'this'} devices; "
                      f"{other}'s {value * scale:.3g} {unit} used", stacklevel=3)
        return value

    def overlapped(self, speculative: bool = False) -> bool:
        """Whether the overlap scheduler runs (step i+1 formed while step i runs)."""
        return self.overlap_scheduler and (self.overlap_with_speculative or not speculative)

    def graph_batch_sizes(self, tp: int) -> tuple[int, ...]:
        """The decode batch sizes captured at tensor-parallel size ``tp``."""
        cap = self.cuda_graph_max_batch_size_tp_below_4
        if cap is not None and tp < 4:
            return tuple(b for b in self.cuda_graph_batch_sizes if b <= cap)
        return self.cuda_graph_batch_sizes

    def running_requests(self, kv_tokens: int, context_tokens: int) -> int:
        """The request cap per rank with ``kv_tokens`` of KV capacity on it."""
        if self.running_requests_rule is None:
            return int(self.max_running_requests)
        return self.running_requests_rule.at(kv_tokens, context_tokens)

    def memory_fraction(self, hbm_bytes: float, **rule_inputs) -> float:
        """``kv_memory_fraction`` (of what ``kv_memory_basis`` says); a rule is evaluated with
        :meth:`KvMemoryRule.reserved_bytes`'s inputs, the decode graph size from the profile."""
        if self.kv_memory_rule is None:
            return float(self.kv_memory_fraction)
        sizes = self.graph_batch_sizes(rule_inputs.get("tp", 1))
        rule_inputs.setdefault("decode_graph_max_batch", sizes[-1] if sizes else 0)
        return self.kv_memory_rule.fraction(hbm_bytes, **rule_inputs)


# --- validation --------------------------------------------------------------------------------

class _Checker:
    """Typed reads of one table's keys, each failure a one-line error naming file and key."""

    def __init__(self, where: str, table: str, raw: Mapping):
        self.where, self.table, self.raw = where, table, raw

    def fail(self, key: str, problem: str, fix: str):
        value = self.raw.get(key, None)
        shown = "" if value is None else f" = {value!r}"
        raise SpecError(f"{self.where} [{self.table}].{key}{shown}: {problem}; {fix}")

    def text(self, key: str) -> str:
        v = self.raw[key]
        if not isinstance(v, str) or not v.strip() or "\n" in v:
            self.fail(key, "expected a one-line string", "write it in quotes on one line")
        return v

    def flag(self, key: str) -> bool:
        if not isinstance(self.raw[key], bool):
            self.fail(key, "expected true or false", "write true or false (no quotes)")
        return self.raw[key]

    def word(self, key: str, allowed: tuple[str, ...]) -> str:
        v = self.raw[key]
        if v not in allowed:
            self.fail(key, "unknown value", f"use {' or '.join(repr(a) for a in allowed)}")
        return v

    def _rule_word(self, key: str, words: tuple[str, ...], expected: str) -> tuple[str | None, str]:
        """(the rule word the value is, or None for a value to read as a number; the fix)."""
        v = self.raw[key]
        fix = f"write {expected}" + "".join(f" or {w!r}" for w in words)
        if isinstance(v, str) and v in words:
            return v, fix
        if isinstance(v, str) and words:
            self.fail(key, "unknown value", fix)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(key, f"expected {expected}", fix)
        return None, fix

    def count(self, key: str, minimum: int = 1, words: tuple[str, ...] = ()) -> int | str:
        word, fix = self._rule_word(key, words, f"a whole number >= {minimum}")
        if word is not None:
            return word
        v = self.raw[key]
        if v != int(v):
            self.fail(key, "not a whole number", fix)
        if v < minimum:
            self.fail(key, f"must be at least {minimum}", fix)
        return int(v)

    def number(self, key: str, *, share: bool = False, words: tuple[str, ...] = ()) -> float | str:
        word, fix = self._rule_word(key, words, "a number in (0, 1]" if share else "a number >= 0")
        if word is not None:
            return word
        v = self.raw[key]
        if share and not 0 < v <= 1:
            self.fail(key, "a share must be in (0, 1]", fix)
        if v < 0:
            self.fail(key, "must not be negative", fix)
        return float(v)

    def sizes(self, key: str) -> tuple[int, ...]:
        v = self.raw[key]
        fix = "write ascending whole numbers >= 1 without repeats ([] for no graphs)"
        if not isinstance(v, list) or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                          for b in v):
            self.fail(key, "expected a list of whole numbers >= 1", fix)
        if any(b >= c for b, c in zip(v, v[1:])):
            self.fail(key, "not strictly ascending (unsorted or repeated)", fix)
        return tuple(v)

    def keys(self, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        known = required + optional
        for key in self.raw:
            if key not in known:
                raise SpecError(f"{self.where} [{self.table}].{key}: unknown key; use "
                                f"{', '.join(known)}")
        for key in required:
            if key not in self.raw:
                raise SpecError(f"{self.where} [{self.table}]: missing key {key}; add it "
                                "(see moesym/engines/builtin.toml)")


_REQUIRED = ("version", "description", "policy", "mixed_chunk", "chunk_tokens",
             "max_running_requests", "kv_block_tokens", "kv_memory_fraction", "kv_memory_basis",
             "kv_full", "cuda_graph_batch_sizes", "cuda_graph_padding", "dp_routing",
             "overlap_scheduler", "prefill_order")
_OPTIONAL = ("runs_on", "step_token_budget", "max_prefill_tokens", "running_requests_rule",
             "kv_memory_rule", *RETRACT_KEYS, "cuda_graph_max_batch_size_tp_below_4",
             "long_prefill_token_threshold", "host_step_us", "host_launch_us", "cold_prefill_ms",
             "pd_handoff_ms", "pd_bootstrap_lag",
             "prefill_graphs",
             "recv_interval", "overlap_with_speculative", "max_running_requests_speculative",
             "base", "kernel", "kernels")
_KERNEL_KEYS = ("moe", "moe_ep", "moe_deepep", "attention", "allreduce", "moe_autotuned",
                "fused_gemms", "shared_expert_fusion", "absorbed_weight_cast_arch")
# [moe_kernels] fields that describe a backend's untuned fallback, as the kernel tables time it
# (collected without the engines' warmup autotuning): FlashInfer-TRTLLM's M tile chosen from
# the launch's assignments per local expert (moesym.kernels.analytical.grouped_launch_block);
# an autotuned engine's steps take the tile by the rank's own rows instead
UNTUNED_MOE_FIELDS = ("grouped_launch_tile_max_rows",)
_RUNNING_KEYS = ("requests_per_context", "min_requests", "max_requests", "kv_tokens_per_request")
_MIB_KEYS = ("base_mib", "parallel_mib_per_8_gpus", "decode_graph_mib_per_batch",
             "dp_graph_mib_per_batch_rank", "dp_graph_large_mib_per_batch_rank",
             "prefill_graph_mib_per_size", "prefill_graph_mla_mib", "floor_mib", "deepep_mib")
_MEMORY_KEYS = (*_MIB_KEYS, "activation_mib_per_token", "activation_min_tokens",
                "dp_graph_large_batch", "floor_above_gib", "prefill_graph_grid")


def _sub(c: _Checker, key: str, keys: tuple[str, ...]) -> _Checker:
    raw = c.raw[key]
    if not isinstance(raw, Mapping):
        c.fail(key, "expected a table", f"write it as [{c.table}.{key}]")
    sub = _Checker(c.where, f"{c.table}.{key}", raw)
    sub.keys(keys, ())
    return sub


def _kernels(c: _Checker) -> EngineKernels:
    raw = c.raw["kernels"]
    if not isinstance(raw, Mapping):
        c.fail("kernels", "expected a table", f"write it as [{c.table}.kernels]")
    s = _Checker(c.where, f"{c.table}.kernels", raw)
    s.keys(("moe",), _KERNEL_KEYS[1:])

    def names(key):
        if key not in raw:
            return None
        v = raw[key]
        if (not isinstance(v, list) or not v
                or any(not isinstance(x, str) or not x.strip() for x in v)):
            s.fail(key, "expected a list of kernel names", 'write e.g. ["triton"]')
        return tuple(v)

    def groups(key):
        v = raw.get(key, [])
        fix = (f'write e.g. {key} = [["q_a_proj", "kv_a_proj"]] (GEMMs: '
               f'{", ".join(SAME_INPUT_GEMMS)})')
        if (not isinstance(v, list) or any(
                not isinstance(g, list) or len(g) < 2 or len(set(g)) != len(g)
                or any(x not in SAME_INPUT_GEMMS for x in g) for g in v)):
            s.fail(key, "expected a list of groups of two or more GEMMs that read the same input",
                   fix)
        return tuple(tuple(g) for g in v)

    return EngineKernels(names("moe"), names("moe_ep"), names("moe_deepep"),
                         s.text("attention") if "attention" in raw else "",
                         s.text("allreduce") if "allreduce" in raw else "",
                         names("moe_autotuned") or (), groups("fused_gemms"),
                         _fusion(s) if "shared_expert_fusion" in raw else None,
                         tuple(x.lower() for x in names("absorbed_weight_cast_arch") or ()))


def _fusion(s: _Checker) -> SharedExpertFusion:
    """``[ENGINE.kernels] shared_expert_fusion`` (:class:`SharedExpertFusion`)."""
    raw = s.raw["shared_expert_fusion"]
    fix = ('write e.g. shared_expert_fusion = { architectures = ["DeepseekV3ForCausalLM"], '
           'routed_experts = 256, shared_experts = 1 }')
    if not isinstance(raw, Mapping):
        s.fail("shared_expert_fusion", "expected a table", fix)
    where = "shared_expert_fusion"
    unknown = sorted(set(raw) - set(_FUSION_KEYS))
    missing = [k for k in ("architectures", "routed_experts", "shared_experts") if k not in raw]
    if unknown or missing:
        s.fail(where, f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}",
               f"keys: {', '.join(_FUSION_KEYS)}")
    out = {}
    for k, kind in _FUSION_KEYS.items():
        if k not in raw:
            continue
        v = raw[k]
        if kind == "count":
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                s.fail(f"{where}.{k}", f"expected a positive whole number, got {v!r}", fix)
            out[k] = v
        else:
            if not isinstance(v, list) or any(not isinstance(x, str) or not x.strip() for x in v):
                s.fail(f"{where}.{k}", f"expected a list of names, got {v!r}", fix)
            out[k] = tuple(x.strip().lower() if k != "architectures" else x.strip() for x in v)
    return SharedExpertFusion(**out)


def _running_rule(c: _Checker) -> RunningRequestsRule:
    s = _sub(c, "running_requests_rule", _RUNNING_KEYS)
    rule = RunningRequestsRule(*(s.count(k) for k in _RUNNING_KEYS))
    if rule.min_requests > rule.max_requests:
        s.fail("min_requests", "larger than max_requests", "make min_requests <= max_requests")
    return rule


def _memory_rule(c: _Checker) -> KvMemoryRule:
    s = _sub(c, "kv_memory_rule", _MEMORY_KEYS)
    mib = {k: s.number(k) * MIB for k in _MIB_KEYS}
    grid = s.raw["prefill_graph_grid"]
    fix = "write [[first, last, step], ...] with whole numbers 1 <= first <= last, step >= 1"
    if not isinstance(grid, list) or not all(
            isinstance(r, list) and len(r) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in r)
            and r[0] <= r[1] for r in grid):
        s.fail("prefill_graph_grid", "expected [first, last, step] ranges", fix)
    return KvMemoryRule(
        base_bytes=mib["base_mib"],
        activation_bytes_per_token=s.number("activation_mib_per_token") * MIB,
        activation_min_tokens=s.count("activation_min_tokens", 0),
        parallel_bytes_per_8_gpus=mib["parallel_mib_per_8_gpus"],
        decode_graph_bytes_per_batch=mib["decode_graph_mib_per_batch"],
        dp_graph_bytes_per_batch_rank=mib["dp_graph_mib_per_batch_rank"],
        dp_graph_large_batch=s.count("dp_graph_large_batch", 0),
        dp_graph_large_bytes_per_batch_rank=mib["dp_graph_large_mib_per_batch_rank"],
        prefill_graph_bytes_per_size=mib["prefill_graph_mib_per_size"],
        prefill_graph_mla_bytes=mib["prefill_graph_mla_mib"],
        floor_bytes=mib["floor_mib"],
        floor_above_bytes=s.number("floor_above_gib") * GIB,
        deepep_bytes=mib["deepep_mib"],
        prefill_graph_grid=tuple(tuple(r) for r in grid))


def _parse(name: str, raw: Mapping, where: str) -> EngineProfile:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} [{name}]: expected a table of engine settings")
    c = _Checker(where, name, raw)
    c.keys(_REQUIRED, _OPTIONAL)

    def opt(key, read, *args):
        return read(key, *args) if key in raw else None

    kv_full = c.word("kv_full", KV_FULL)
    if kv_full != "retract":
        extra = [k for k in RETRACT_KEYS if k in raw]
        if extra:
            c.fail(extra[0], "only the 'retract' admission reserve reads it",
                   "remove it or set kv_full = \"retract\"")
    else:
        for k in RETRACT_KEYS[:3]:
            if k not in raw:
                raise SpecError(f"{where} [{name}]: kv_full = \"retract\" needs {k}; add it")
    policy = c.word("policy", POLICIES)
    chunk = c.count("chunk_tokens", words=CHUNK_RULES)
    budget = opt("step_token_budget", c.count)
    if budget is None and (policy == "decode-first" or chunk == "off"):
        raise SpecError(f"{where} [{name}]: policy {policy!r} with chunk_tokens {chunk!r} needs "
                        "step_token_budget; add it")
    running = c.count("max_running_requests", words=RUNNING_RULES)
    if (running == "by-kv") != ("running_requests_rule" in raw):
        c.fail("max_running_requests", "a 'by-kv' cap and a running_requests_rule table go "
               "together", f"add [{name}.running_requests_rule] or give a number")
    fraction = c.number("kv_memory_fraction", share=True, words=FRACTION_RULES)
    if (fraction == "by-rule") != ("kv_memory_rule" in raw):
        c.fail("kv_memory_fraction", "a 'by-rule' share and a kv_memory_rule table go together",
               f"add [{name}.kv_memory_rule] or give a share")
    ratio = {}
    if kv_full == "retract":
        ratio = {"new_token_ratio_init": c.number("new_token_ratio_init", share=True),
                 "new_token_ratio_min": c.number("new_token_ratio_min", share=True),
                 "new_token_ratio_decay_steps": c.count("new_token_ratio_decay_steps")}
        if ratio["new_token_ratio_min"] > ratio["new_token_ratio_init"]:
            c.fail("new_token_ratio_min", "larger than new_token_ratio_init",
                   "make it <= new_token_ratio_init")
    return EngineProfile(
        name=name,
        version=c.text("version"),
        description=c.text("description"),
        policy=policy,
        mixed_chunk=c.flag("mixed_chunk"),
        chunk_tokens=chunk,
        max_running_requests=running,
        kv_block_tokens=c.count("kv_block_tokens"),
        kv_memory_fraction=fraction,
        kv_memory_basis=c.word("kv_memory_basis", KV_BASES),
        kv_full=kv_full,
        cuda_graph_batch_sizes=c.sizes("cuda_graph_batch_sizes"),
        cuda_graph_padding=c.flag("cuda_graph_padding"),
        dp_routing=c.word("dp_routing", DP_ROUTING),
        overlap_scheduler=c.flag("overlap_scheduler"),
        prefill_order=c.word("prefill_order", PREFILL_ORDERS),
        step_token_budget=budget,
        max_prefill_tokens=opt("max_prefill_tokens", c.count),
        running_requests_rule=_running_rule(c) if running == "by-kv" else None,
        kv_memory_rule=_memory_rule(c) if fraction == "by-rule" else None,
        **ratio,
        schedule_conservativeness=opt("schedule_conservativeness", c.number),
        dp_attention_conservativeness_factor=opt("dp_attention_conservativeness_factor", c.number),
        reserve_clip_tokens=opt("reserve_clip_tokens", c.count),
        retract_decode_steps=opt("retract_decode_steps", c.count, 0),
        ignore_eos_full_reserve=opt("ignore_eos_full_reserve", c.flag),
        cuda_graph_max_batch_size_tp_below_4=opt("cuda_graph_max_batch_size_tp_below_4", c.count),
        long_prefill_token_threshold=opt("long_prefill_token_threshold", c.count, 0),
        host_step_s=None if "host_step_us" not in raw else c.number("host_step_us") * 1e-6,
        host_launch_s=_per_vendor(c, "host_launch_us", 1e-6) if "host_launch_us" in raw else {},
        cold_prefill_s=_per_vendor(c, "cold_prefill_ms", 1e-3) if "cold_prefill_ms" in raw
        else {},
        pd_handoff_s=_per_vendor(c, "pd_handoff_ms", 1e-3) if "pd_handoff_ms" in raw else {},
        pd_bootstrap_lag=bool(opt("pd_bootstrap_lag", c.flag)),
        prefill_graphs=bool(opt("prefill_graphs", c.flag)),
        recv_interval=opt("recv_interval", c.count) or 1,
        overlap_with_speculative=True if "overlap_with_speculative" not in raw
        else c.flag("overlap_with_speculative"),
        max_running_requests_speculative=opt("max_running_requests_speculative", c.count),
        kernel=_kernel(c) if "kernel" in raw else {},
        kernels=_kernels(c) if "kernels" in raw else None,
        runs_on=_runs_on(c) if "runs_on" in raw else ())


def _per_vendor(c: _Checker, key: str, scale: float) -> dict:
    """A ``{maker = number}`` table (a plain number: every maker's) scaled to SI."""
    v = c.raw[key]
    if not isinstance(v, Mapping):
        return {m: c.number(key) * scale for m in VENDORS}
    out = {}
    for m, x in v.items():
        if m not in VENDORS or isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
            c.fail(key, f"{m} = {x!r} is not a device maker and a number >= 0",
                   f"write {{{', '.join(f'{k} = ...' for k in VENDORS)}}}")
        out[m] = float(x) * scale
    return out


def _runs_on(c: _Checker) -> tuple[str, ...]:
    v = c.raw["runs_on"]
    if not isinstance(v, list) or not v or any(x not in VENDORS for x in v):
        c.fail("runs_on", "expected a list of device makers",
               f"write some of {', '.join(repr(x) for x in VENDORS)}, or leave it out (any device)")
    return tuple(v)


def _kernel(c: _Checker) -> dict:
    """The ``[ENGINE.kernel]`` switches, checked as a hardware file's ``[kernel]`` keys."""
    raw = c.raw["kernel"]
    if not isinstance(raw, Mapping):
        c.fail("kernel", "expected a table", f"write it as [{c.table}.kernel]")
    parse_kernel_calib(raw, f"{c.where} [{c.table}.kernel]")
    return dict(raw)


_BUILTIN: dict[str, EngineProfile] = {}


def _based(name: str, table: Mapping, tables: Mapping, where: str) -> dict:
    """``table`` over the table its ``base`` names (an engine at another version, or behind
    another front end): the base's keys, its sub-tables merged key by key, then this table's."""
    if "base" not in table:
        return dict(table)
    base = table["base"]
    if base == name or base not in tables or not isinstance(tables[base], Mapping):
        raise SpecError(f"{where} [{name}].base = {base!r}: names no other engine table; use "
                        f"one of {', '.join(n for n in tables if n != name)}")
    out = _based(base, tables[base], tables, where)
    for k, v in table.items():
        if k == "base":
            continue
        out[k] = {**out[k], **v} if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) \
            else v
    return out


def _profile(name: str, tables: Mapping, where: str) -> EngineProfile:
    """The profile of table ``name`` among ``tables``, over its bases (:func:`_based`), with its
    lineage: its name and the tables its ``base`` keys lead to, nearest first."""
    lineage = [name]
    while isinstance(tables.get(lineage[-1]), Mapping) and "base" in tables[lineage[-1]]:
        lineage.append(tables[lineage[-1]]["base"])
    profile = _parse(name, _based(name, tables[name], tables, where), where)
    return replace(profile, lineage=tuple(lineage))


def _builtin() -> dict[str, EngineProfile]:
    if not _BUILTIN:
        raw = load_toml(Path(__file__).with_name("builtin.toml"))
        _BUILTIN.update({n: _profile(n, raw, "builtin.toml") for n in raw})
    return _BUILTIN


def builtin_engines() -> list[str]:
    """The names of the shipped engine profiles."""
    return list(_builtin())


def runs_on(profile: EngineProfile, hw) -> bool:
    """Whether ``profile``'s engine runs on ``hw`` (its ``runs_on`` makers hold the hardware
    file's ``vendor``; a profile without ``runs_on`` or a file without ``vendor``: yes)."""
    return not profile.runs_on or not hw.vendor or hw.vendor in profile.runs_on


def check_runs_on(profile: EngineProfile, hw, flag: str = "--engine",
                  choices: tuple[str, ...] | None = None) -> None:
    """Refuse, in one line naming the engines among ``choices`` (default: every built-in one)
    that do run there, an engine on a device it does not run on (TensorRT-LLM on a Mac,
    tt-metal on an NVIDIA GPU)."""
    if runs_on(profile, hw):
        return
    ok = [n for n, p in _builtin().items() if runs_on(p, hw) and (choices is None or n in choices)]
    makers = [VENDORS[v] for v in profile.runs_on]
    fix = f"use {flag} {_listed(ok, 'or')}" if ok else f"{flag} has no engine for {hw.name}"
    raise SpecError(f"{flag} {profile.name}: it does not run on {hw.name} "
                    f"({VENDORS[hw.vendor]}), only on {_listed(makers, 'and')} devices; {fix}")


def _listed(words: list[str], last: str) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def default_engine(hw) -> str:
    """The engine timed when none is named: the hardware file's ``default_engine`` (llama.cpp
    on Apple silicon and AMD's APUs, tt-metal on Tenstorrent), else SGLang."""
    name = hw.default_engine or "sglang"
    if name not in _builtin():
        raise SpecError(f"{hw.path} default_engine {name!r}: unknown; use one of "
                        f"{', '.join(_builtin())}")
    return name


def host_overlapped(dep) -> bool:
    """Whether the deployment's engine schedules step i+1 on the host while the GPU runs step i
    (its ``overlap_scheduler``; SGLang, vLLM and TensorRT-LLM all do by default, SGLang 0.5.9
    not with speculative decoding): then a step takes the longer of the GPU's and the host's
    time, not their sum."""
    return load_engine(dep.engine).overlapped(bool(dep.mtp))


def load_engine(name_or_path: str) -> EngineProfile:
    """A built-in engine profile by name, or the one profile table in a TOML file."""
    shipped = _builtin()
    name_or_path = ENGINE_ALIASES.get(name_or_path, name_or_path)
    if name_or_path in shipped:
        return shipped[name_or_path]
    p = Path(name_or_path)
    if p.suffix != ".toml":
        raise SpecError(f"engine {name_or_path!r}: unknown; use {', '.join(shipped)} or a "
                        "profile .toml")
    if not p.is_file():
        raise SpecError(f"engine {name_or_path}: no such file; give {', '.join(shipped)} or an "
                        "existing profile .toml")
    raw = load_toml(p)
    if len(raw) != 1 or not isinstance(next(iter(raw.values())), Mapping):
        raise SpecError(f"{p}: expected exactly one engine table, found {len(raw)} top-level "
                        "entries; keep one [name] table")
    (name, table), = raw.items()
    tables = {**load_toml(Path(__file__).with_name("builtin.toml")), name: table}
    return _profile(name, tables, str(p))
