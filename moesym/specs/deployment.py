"""Deployment (how the model is laid out on GPUs) and workload (what one step processes).

>>> from moesym.specs.deployment import Deployment, Workload, Phase
>>> dep = Deployment(gpus=128, ep=128, weights="fp8", micro_batches=2)
>>> dep.dp, dep.expert_tp
(128, 1)
>>> Workload(Phase.DECODE, batch=128, context=4989).tokens_per_rank
128
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from ..errors import SpecError
from ..io.text import read_text
from .precision import FORMATS, WeightRecipe
from .time_models import name_problem

__all__ = ["Phase", "A2AMode", "Routing", "Deployment", "Workload", "serve_kv_tokens", "eplb_slots",
           "DTYPE_BYTES", "TOPOLOGY", "VALIDITY", "valid_mask",
           "activation_dispatch_bytes"]


class Phase(str, Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    # aggregated serving: in-flight batching, decode steps and mixed steps that also prefill a
    # chunk of new prompts (moesym.numbers.metrics); a step model of this phase is the mixed step
    SERVE = "serve"

    @property
    def engine(self) -> str:
        """The mode an engine runs a step of this phase in: a mixed step (prefill chunk beside
        decode requests) runs as an extend / prefill batch in SGLang and vLLM (DeepEP normal
        mode, the prefill overlap layout)."""
        return "decode" if self is Phase.DECODE else "prefill"


class A2AMode(str, Enum):
    """How routed tokens reach their experts."""

    AUTO = "auto"  # deepep-normal for prefill, deepep-ll for decode (EP > 1)
    ALLGATHER = "allgather"  # all-gather tokens, reduce-scatter outputs (no all-to-all)
    DEEPEP_NORMAL = "deepep-normal"  # node-deduplicated: once per node over RDMA, then NVLink
    DEEPEP_LL = "deepep-ll"  # low latency: one message per selected expert, no SMs held
    # 2D device mesh (seed 004): sparse multicast both ways round the dispatch axis's ring,
    # point-to-point combine with local reduction (moesym.terms.mesh)
    RING_MCAST = "ring-mcast"

    @property
    def is_deepep(self) -> bool:
        """A DeepEP mode: EP must span every GPU (DeepEP has no expert tensor parallelism)."""
        return self in (A2AMode.DEEPEP_NORMAL, A2AMode.DEEPEP_LL)


DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0}  # activations and KV cache (weights: moesym.specs.precision)


def activation_dispatch_bytes(fmt: str) -> float:
    """Bytes per dispatched activation element: fp8 with one fp32 scale per 128 (DeepEP), or bf16.

    >>> activation_dispatch_bytes("fp8")
    1.03125
    """
    return DTYPE_BYTES[fmt] + (4.0 / 128 if fmt == "fp8" else 0.0)


# --layout values: the grouped-GEMM layouts (one kernel for every expert) and seed 003's
# dispatch granularities (fused = contiguous; grouped; per-token)
LAYOUTS = ("auto", "contiguous", "masked", "batched", "fused", "grouped", "per-token")


@dataclass(frozen=True)
class Routing:
    """Routing distribution: 'uniform', 'balanced', 'zipf' with exponent ``s``, or 'freq': the
    measured share of token-expert assignments of each expert (``freqs``, from a file)."""

    kind: str = "uniform"
    s: float = 0.0
    freqs: tuple = ()
    source: str = ""

    @staticmethod
    def parse(text: str) -> "Routing":
        t = text.strip().lower()
        if t in ("uniform", "balanced"):
            return Routing(t)
        if t.startswith("zipf:"):
            try:
                s = float(t.split(":", 1)[1])
            except ValueError:
                raise SpecError(f"`routing` {text!r}: zipf needs a number, e.g. zipf:1.0") from None
            if not (s >= 0 and math.isfinite(s)):
                raise SpecError(f"`routing` {text!r}: the Zipf exponent must be >= 0")
            return Routing("zipf", s)
        if t.startswith("freq:"):
            path = text.strip()[len("freq:"):]
            return Routing("freq", freqs=read_expert_frequencies(path), source=path)
        raise SpecError(f"`routing` {text!r}: use uniform, balanced, zipf:S or freq:FILE.csv")

    @property
    def skew(self):
        """What the numeric routing estimators take: the Zipf exponent, the measured
        frequencies (a tuple), or 0.0 (uniform)."""
        return {"zipf": self.s, "freq": self.freqs}.get(self.kind, 0.0)

    @property
    def numeric(self) -> bool:
        """Skewed routing, timed by the numeric estimators of :mod:`moesym.routing.zipf`."""
        return self.kind in ("zipf", "freq")

    def check_experts(self, experts: int, topk: int) -> None:
        """A frequency file must list one value per routed expert of the model, none above
        1/k of the assignments (a token picks an expert at most once)."""
        if self.kind != "freq":
            return
        if len(self.freqs) != experts:
            raise SpecError(f"`routing` freq:{self.source}: {len(self.freqs)} experts in the file, "
                            f"the model routes over {experts}; give one value per expert")
        top = max(self.freqs)
        if top * topk > 1 + 1e-9:
            raise SpecError(f"`routing` freq:{self.source}: expert {self.freqs.index(top)} takes "
                            f"{top:.3f} of the assignments, more than 1/k = {1 / topk:.3f}: not a "
                            f"top-{topk} routing count")

    def __str__(self) -> str:
        if self.kind == "freq":
            return f"freq:{self.source}"
        return f"zipf:{self.s:g}" if self.kind == "zipf" else self.kind


def read_expert_frequencies(path: str) -> tuple:
    """Per-expert routing counts or shares from a text/CSV file: one value per line (in expert
    order), or ``expert,count`` rows naming each expert id 0..n-1 once, in any order (an
    optional header row is skipped); normalised to sum 1."""
    where = f"`routing` freq:{path}"
    p = Path(path).expanduser()
    try:
        lines = [ln.strip() for ln in read_text(p).splitlines() if ln.strip()]
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    rows = {}  # expert id -> (line, count)
    for n, ln in enumerate(lines):
        cells = [c.strip() for c in ln.split(",")]
        try:
            v = float(cells[-1])
        except ValueError:
            if n == 0:  # a header row
                continue
            raise SpecError(f"{where}: line {n + 1} {ln!r} is not a number") from None
        if not (math.isfinite(v) and v >= 0):
            raise SpecError(f"{where}: line {n + 1}: counts must be finite and >= 0")
        if len(cells) > 2:
            raise SpecError(f"{where}: line {n + 1} {ln!r}: give COUNT or EXPERT,COUNT")
        key = len(rows)
        if len(cells) == 2:
            try:
                key = int(cells[0])
            except ValueError:
                raise SpecError(f"{where}: line {n + 1}: expert id {cells[0]!r} is not an "
                                "integer") from None
            if key < 0:
                raise SpecError(f"{where}: line {n + 1}: expert id {key} is negative")
            if key in rows:
                raise SpecError(f"{where}: line {n + 1}: expert {key} is listed twice (first on "
                                f"line {rows[key][0]})")
        rows[key] = (n + 1, v)
    missing = [i for i in range(len(rows)) if i not in rows]
    if missing:
        raise SpecError(f"{where}: expert ids run 0..{len(rows) - 1} once each: id "
                        f"{max(rows)} is out of that range and {missing[0]} is missing")
    vals = [rows[i][1] for i in range(len(rows))]
    if len(vals) < 2 or sum(vals) <= 0:
        raise SpecError(f"{where}: needs one count per expert (at least 2, not all 0)")
    total = sum(vals)
    return tuple(v / total for v in vals)


#: the built-in engine profiles (moesym/engines/builtin.toml; a test keeps the two in step)
ENGINES = ("sglang", "sglang-0.5.9", "vllm", "trtllm", "dynamo-trt", "dynamo-sglang",
           "mori-sglang", "atom", "llama.cpp", "mlx", "tt-metal")


#: other names of built-in engines (InferenceX's framework names)
ENGINE_ALIASES = {"trt": "trtllm"}


def _pos_int(name: str, v) -> int:
    """``v``, a positive integer, else an error naming the field ``name``."""
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise SpecError(f"`{name}` must be a positive integer, got {v!r}")
    return v


@dataclass(frozen=True)
class Deployment:
    """One serving instance: ``gpus`` GPUs, attention TP x DP, MoE EP x expert-TP.

    Attention runs tensor-parallel over ``tp`` GPUs and data-parallel over ``gpus / tp`` groups.
    Routed experts are sharded over ``ep`` ranks; when ``ep < gpus`` each expert is further split
    ``gpus / ep`` ways by tensor parallelism (SGLang's moe_tp_size = tp_size / ep_size).
    """

    gpus: int = 1
    gpus_per_node: int = 8
    tp: int = 1
    ep: int | None = None
    micro_batches: int = 1
    weights: str = "bf16"
    kv: str = "bf16"
    a2a: A2AMode = A2AMode.AUTO
    routing: Routing = field(default_factory=Routing)
    redundant_experts: int = 0
    # expert activation layout: auto, contiguous, masked, batched (one grouped-GEMM kernel for
    # every expert; fused = contiguous), or seed 003's dispatch granularities grouped (one GEMM
    # kernel per active expert) and per-token (one GEMV per token and expert)
    layout: str = "auto"
    overlap: str = "auto"  # overlap schedule: auto, a built-in name, or a schedule .toml path
    timing: str = "kernel"  # time model: kernel (calibrated kernel model), roofline or tables:DIR
    # serving-engine memory settings (moesym.memory.MemoryOptions fields), as (name, value) pairs
    memory_options: tuple = ()
    group_size: int = 0  # weight-scale group of grouped formats (0: the format's default)
    # expert tiers (one device): experts per MoE layer resident in device memory (None: all),
    # how the resident set is chosen, whether copies overlap compute, where cold experts run
    expert_cache: int | None = None
    cache_policy: str = "static-top"
    prefetch: bool = False
    expert_placement: str = "stream"
    # weight-only (w4a16, ...) GEMMs: dequantize inside the GEMM (Marlin-style, "fused") or in a
    # kernel of their own before a plain BF16 GEMM ("separate")
    dequant: str = "fused"
    mtp: int = 0  # speculative decoding: draft tokens per decode step (DeepSeek MTP, EAGLE)
    pp: int = 1  # pipeline-parallel stages (each holds gpus / pp GPUs and 1 / pp of the layers)
    cp: int = 1  # context parallelism: GPUs sharing each prompt (prefill, ring attention)
    accept: float | None = None  # acceptance of each draft token (None: the default, with --mtp)
    # 2D device mesh (hardware [mesh]): (rows, cols), and the axis that dispatches (DP / EP);
    # TP runs along the other axis (seed 004: DP / EP over the rows, TP over the 8 columns)
    mesh: tuple | None = None
    dispatch_axis: str = "rows"
    # the serving engine (moesym.engines): its scheduler, defaults (prompt tokens per step) and
    # kernels; one that does not run on the hardware is refused when the step is built. The CLI
    # takes the hardware file's default_engine when --engine is not given
    # (moesym.engines.default_engine: llama.cpp on Apple silicon, tt-metal on Tenstorrent)
    engine: str = "sglang"
    # decode steps replayed as CUDA graphs where the engine profile captures them; False: every
    # kernel launched by the host (SGLang --disable-decode-cuda-graph, vLLM --enforce-eager, llama.cpp
    # GGML_CUDA_DISABLE_GRAPHS=1, or a build before the engine had graphs)
    cuda_graphs: bool = True
    # prefill and mixed steps replayed as (piecewise) CUDA graphs: None, the engine's default
    # (its profile's prefill_graphs); True or False as the server is launched (SGLang
    # --enable-piecewise-cuda-graph, TensorRT-LLM's piecewise torch_compile_config)
    prefill_graphs: bool | None = None
    # sizes the user did not give, derived from another flag ("ep" from --gpus, "tp" from
    # --mesh): an error names them as derived (:func:`given_as`); not part of the identity
    derived: frozenset = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        _pos_int("gpus", self.gpus)
        if self.engine in ENGINE_ALIASES:
            object.__setattr__(self, "engine", ENGINE_ALIASES[self.engine])
        if not str(self.engine).endswith(".toml") and self.engine not in ENGINES:
            raise SpecError(f"`engine` {self.engine!r}: use one of {', '.join(ENGINES)} or an "
                            "engine profile .toml")
        if not isinstance(self.cuda_graphs, bool):
            raise SpecError(f"`cuda_graphs` must be true or false, got {self.cuda_graphs!r}")
        if self.prefill_graphs is not None and not isinstance(self.prefill_graphs, bool):
            raise SpecError(f"`prefill_graphs` must be true, false or unset, got "
                            f"{self.prefill_graphs!r}")
        _pos_int("gpus_per_node", self.gpus_per_node)
        _pos_int("tp", self.tp)
        _pos_int("micro_batches", self.micro_batches)
        _pos_int("pp", self.pp)
        if self.gpus % self.pp:
            raise SpecError(f"`pp` {self.pp} does not divide `gpus` {self.gpus}: each pipeline "
                            "stage holds gpus / pp GPUs")
        _pos_int("cp", self.cp)
        if (self.stage_gpus // self.tp) % self.cp if self.stage_gpus % self.tp == 0 else False:
            raise SpecError(f"`cp` {self.cp} does not divide the attention data-parallel ranks "
                            f"(gpus / pp / tp = {self.stage_gpus // self.tp})")
        if self.ep is None:
            object.__setattr__(self, "ep", self.stage_gpus)
            object.__setattr__(self, "derived", frozenset(self.derived) | {"ep"})
        _pos_int("ep", self.ep)
        for _, ok, message in TOPOLOGY:
            if not bool(ok(self.stage_gpus, self.ep, self.tp, self.gpus_per_node)):
                raise SpecError(message(self))
        recipe = WeightRecipe.parse(self.weights)  # a one-line error for a bad value
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) \
                or self.group_size < 0:
            raise SpecError(f"`group_size` must be a positive integer, got {self.group_size!r}")
        if self.group_size and not any(FORMATS[f].grouped for f in recipe.formats()):
            grouped = ", ".join(k for k, f in FORMATS.items() if f.grouped)
            raise SpecError(f"`group_size` sets the scale group of {grouped} weights; "
                            f"`weights` {self.weights} has none")
        if self.kv not in ("bf16", "fp8"):
            raise SpecError(f"`kv` {self.kv!r}: use bf16 or fp8")
        if not isinstance(self.a2a, A2AMode):
            try:
                object.__setattr__(self, "a2a", A2AMode(self.a2a))
            except ValueError:
                raise SpecError(f"`a2a` {self.a2a!r}: use auto, allgather, deepep-normal, "
                                f"deepep-ll or ring-mcast") from None
        if isinstance(self.routing, str):
            object.__setattr__(self, "routing", Routing.parse(self.routing))
        if isinstance(self.redundant_experts, bool) or not isinstance(self.redundant_experts, int) \
                or self.redundant_experts < 0:
            raise SpecError(f"`redundant_experts` must be a non-negative integer, "
                            f"got {self.redundant_experts!r}")
        if self.layout not in LAYOUTS:
            raise SpecError(f"`layout` {self.layout!r}: use {', '.join(LAYOUTS)}")
        timing_problem = name_problem(self.timing)
        if timing_problem is not None:
            raise SpecError(f"`timing` {timing_problem}")
        if self.expert_cache is not None and (isinstance(self.expert_cache, bool) or not isinstance(
                self.expert_cache, int) or self.expert_cache < 0):
            raise SpecError(f"`expert_cache` must be a number of experts per layer (>= 0), got "
                            f"{self.expert_cache!r}")
        if self.cache_policy not in ("static-top", "lfu", "lru"):
            raise SpecError(f"`cache_policy` {self.cache_policy!r}: use static-top, lfu or lru")
        if self.dequant not in ("fused", "separate"):
            raise SpecError(f"`dequant` {self.dequant!r}: use fused or separate")
        if self.expert_placement not in ("stream", "host-compute"):
            raise SpecError(f"`expert_placement` {self.expert_placement!r}: use stream or "
                            "host-compute")
        if self.expert_cache is not None and self.ep != 1:
            raise SpecError("`expert_cache` models one device's expert tiers (experts in host "
                            f"memory): it needs `ep` 1, got `ep` {self.ep}")
        if isinstance(self.mtp, bool) or not isinstance(self.mtp, int) or self.mtp < 0:
            raise SpecError(f"`mtp` must be a non-negative integer (draft tokens per step), "
                            f"got {self.mtp!r}")
        if self.accept is not None:
            if not self.mtp:
                raise SpecError("`accept` sets the draft tokens' acceptance and needs `mtp` N")
            if not (isinstance(self.accept, (int, float)) and 0 <= self.accept <= 1):
                raise SpecError(f"`accept` must be a probability in [0, 1], got {self.accept!r}")
        self._check_mesh()
        if self.overlap != "auto":
            from ..schedules import load

            load(self.overlap)  # a one-line error for an unknown name or a bad file

    def _check_mesh(self) -> None:
        """A mesh deployment: gpus = R x C, TP = the length of the non-dispatch axis, EP over
        every device, ring-mcast (or auto) dispatch; ring-mcast needs a mesh."""
        if self.mesh is None:
            if self.a2a is A2AMode.RING_MCAST:
                raise SpecError("`a2a` ring-mcast dispatches along a mesh axis: give `mesh` RxC "
                                "on a hardware file with a [mesh] section")
            return
        if self.dispatch_axis not in ("rows", "cols"):
            raise SpecError(f"`dispatch_axis` {self.dispatch_axis!r}: use rows or cols")
        r, c = self.mesh
        if self.gpus != r * c:
            raise SpecError(f"`mesh` {r}x{c} has {r * c} devices, `gpus` is {self.gpus}")
        tp_len = c if self.dispatch_axis == "rows" else r
        if self.tp != tp_len:
            raise SpecError(f"`tp` {self.tp}: on `mesh` {r}x{c} with `dispatch_axis` "
                            f"{self.dispatch_axis} TP runs along the other axis ({tp_len} devices)")
        if self.pp != 1 or self.cp != 1:
            raise SpecError("`mesh`: pipeline and context parallelism are not modelled on a mesh")
        if self.ep != self.gpus:
            raise SpecError(f"`ep` {self.ep}: on a mesh the experts spread over every device "
                            f"(`ep` {self.gpus})")
        if self.redundant_experts:
            raise SpecError("`redundant_experts`: expert replicas are not modelled on a mesh "
                            "(its dispatch statistics assume each expert on one device)")
        if self.a2a not in (A2AMode.AUTO, A2AMode.RING_MCAST):
            raise SpecError(f"`a2a` {self.a2a.value}: a mesh dispatches with ring-mcast (or auto)")

    @property
    def mesh_axes(self) -> tuple:
        """(dispatch axis length, TP axis length) of a mesh deployment."""
        r, c = self.mesh
        return (r, c) if self.dispatch_axis == "rows" else (c, r)

    def resolved_a2a(self, phase: "Phase") -> A2AMode:
        """auto -> deepep-ll for decode, deepep-normal for prefill when EP spans every GPU of the
        instance; all-gather when the experts are also tensor-parallel (ep < gpus: DeepEP has no
        expert tensor parallelism, so every GPU gathers the tokens). Other modes unchanged."""
        if self.a2a is A2AMode.AUTO:
            if self.mesh is not None:
                return A2AMode.RING_MCAST
            if self.ep < self.stage_gpus:
                return A2AMode.ALLGATHER
            return A2AMode.DEEPEP_LL if Phase(phase) is Phase.DECODE else A2AMode.DEEPEP_NORMAL
        return self.a2a

    def resolved_layout(self, phase: "Phase") -> str:
        """Expert activation layout (vLLM's FusedMoE modular-kernel formats). auto: DeepEP
        low-latency dispatch hands the experts a batched (num_local_experts x max_tokens) buffer
        that DeepGEMM's masked grouped GEMM computes up to each expert's count ('masked'); every
        other path is contiguous.

        - contiguous: real rows, each expert padded to the M tile
        - masked: batched buffer, rows computed up to each expert's count (tile-padded)
        - batched: batched buffer computed in full (num_local_experts x max_tokens rows)
        - fused: all experts in one kernel, the Metal Marlin study's name for contiguous
        - grouped: one GEMM kernel per active expert (Metal Marlin), each on the whole GPU
        - per-token: one GEMV kernel per (token, expert) assignment, each reading the expert's
          weights (the Metal Marlin study's baseline)
        """
        if self.layout == "fused":
            return "contiguous"
        if self.layout != "auto":
            return self.layout
        if self.ep > 1 and self.resolved_a2a(phase) is A2AMode.DEEPEP_LL:
            return "masked"
        return "contiguous"

    @property
    def dp(self) -> int:
        """Attention data-parallel degree (within one pipeline stage; a context-parallel group
        of ``cp`` GPUs is one rank)."""
        return self.stage_gpus // self.tp // self.cp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage (all of them without pipeline parallelism)."""
        return self.gpus // self.pp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel split of each routed expert (stage GPUs / ep)."""
        return self.stage_gpus // self.ep

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    def check_overlap(self, phase: "Phase") -> None:
        """Raise if the pinned overlap schedule runs another number of micro-batches."""
        if self.overlap == "auto":
            return
        from ..schedules import load

        sched = load(self.overlap)
        if sched.ideal:
            return
        lay = sched.layout(Phase(phase).engine)
        if lay.micro_batches != self.micro_batches:
            raise SpecError(f"`overlap` {self.overlap} runs {lay.micro_batches} micro-batch(es) "
                            f"in {Phase(phase).engine}; set `micro_batches` {lay.micro_batches}")

    def weight_recipe(self, is_moe: bool = True):
        """The weight format of each GEMM component (:class:`moesym.specs.precision.WeightRecipe`)."""
        return WeightRecipe.parse(self.weights, is_moe)

    @property
    def acceptance(self) -> float:
        """The draft tokens' acceptance (``accept``, else the documented default)."""
        from .speculative import DEFAULT_ACCEPT

        return DEFAULT_ACCEPT if self.accept is None else float(self.accept)

    def with_(self, **changes) -> "Deployment":
        return replace(self, derived=frozenset(self.derived) - set(changes), **changes)

    def check_model(self, model) -> None:
        """Raise if this deployment cannot shard ``model`` (the first of :data:`VALIDITY` that
        fails, with its message)."""
        for _, ok, message in VALIDITY:
            if not bool(ok(model, self.stage_gpus, self.ep, self.tp, self.redundant_experts, self.a2a)):
                raise SpecError(message(model, self))
        if model.is_moe:
            self.routing.check_experts(model.num_experts, model.experts_per_token)
        if self.expert_cache is not None and model.is_moe and self.expert_cache > model.num_experts:
            warnings.warn(f"--expert-cache {self.expert_cache} has no effect beyond the "
                          f"{model.num_experts} experts per layer of {model.name}: all of them are "
                          "resident, nothing is offloaded", stacklevel=2)


def given_as(d, size: str) -> str:
    """How an error names ``size`` ("ep" or "tp") of ``d``: the field as given (```ep` 3``)
    or, where it was derived, what it was derived from (```gpus` 16 gives EP 16, which``).

    >>> given_as(Deployment(gpus=16), "ep")
    '`gpus` 16 gives EP 16, which'
    """
    value = getattr(d, size)
    if size not in d.derived:
        return f"`{size}` {value}"
    if d.mesh is not None:
        src = f"`mesh` {d.mesh[0]}x{d.mesh[1]}"
    else:
        src = f"`gpus` {d.gpus}" + (f" / `pp` {d.pp}" if d.pp > 1 else "")
    return f"{src} gives {size.upper()} {value}, which"


def _stage(d) -> str:
    """The GPUs the rules apply to, in words: ``--gpus N``, or a pipeline stage's."""
    if d.pp == 1:
        return f"`gpus` {d.gpus}"
    return f"the {d.stage_gpus} GPUs of a pipeline stage (`gpus` {d.gpus} / `pp` {d.pp})"


#: The rules on GPU counts alone, once: (name, vectorised predicate over GPUs, EP, TP and GPUs
#: per node, message). ``Deployment`` checks them on construction (on a pipeline stage's GPUs);
#: :func:`valid_mask` too.
TOPOLOGY = (
    ("tp_divides_gpus", lambda g, ep, tp, gpn: g % tp == 0,
     lambda d: f"{given_as(d, 'tp')} does not divide {_stage(d)}"),
    ("ep_divides_gpus", lambda g, ep, tp, gpn: g % ep == 0,
     lambda d: f"{given_as(d, 'ep')} does not divide {_stage(d)}"),
    ("whole_nodes", lambda g, ep, tp, gpn: (g <= gpn) | (g % gpn == 0),
     lambda d: (f"`gpus` {d.gpus} over nodes of `gpus_per_node` {d.gpus_per_node}: use a "
                f"multiple of {d.gpus_per_node} (whole nodes) or fewer GPUs than a node")
     if d.pp == 1 else
     (f"{_stage(d)} over nodes of `gpus_per_node` {d.gpus_per_node}: a stage takes a "
      f"multiple of {d.gpus_per_node} GPUs (whole nodes) or fewer than a node")),
)


def _moe(model, cond):
    return cond if model.is_moe else True


#: Every rule a deployment must meet to shard a model, once: (name, vectorised predicate over
#: GPUs, EP and TP (NumPy arrays or numbers), message). ``Deployment.check_model``, ``sweep`` and
#: ``optimize`` all read it (:func:`valid_mask`).
VALIDITY = (
    ("tp_divides_heads", lambda m, g, ep, tp, r, a2a: m.num_heads % tp == 0,
     lambda m, d: f"{given_as(d, 'tp')} does not divide the {m.num_heads} attention heads of "
                  f"{m.name}; choose a divisor"),
    ("tp_divides_output_groups",  # DeepSeek-V4's grouped output projection splits by group
     lambda m, g, ep, tp, r, a2a: (m.o_groups % tp == 0) if m.is_compressed else True,
     lambda m, d: f"{given_as(d, 'tp')} does not divide the {m.o_groups} output-projection "
                  f"groups of {m.name}; choose a divisor"),
    ("ep_divides_experts",
     lambda m, g, ep, tp, r, a2a: _moe(m, (m.num_experts + r) % ep == 0),
     lambda m, d: (f"{given_as(d, 'ep')} does not divide the {m.num_experts} experts"
                   + (f" (+{d.redundant_experts} redundant)" if d.redundant_experts else "")
                   + f" of {m.name}; choose "
                   + ("a mesh of a divisor" if d.mesh is not None else
                      "a divisor" + (" with `ep`" if "ep" in d.derived else "")))),
    ("deepep_spans_every_gpu",
     lambda m, g, ep, tp, r, a2a: _moe(m, (ep == g) if a2a.is_deepep else True),
     lambda m, d: f"`a2a` {d.a2a.value} needs `ep` equal to "
                  + (f"`gpus` ({d.gpus})" if d.pp == 1 else _stage(d))
                  + f": DeepEP has no expert tensor parallelism; use `a2a` allgather or auto "
                    f"for EP {d.ep}"),
    ("expert_tp_divides_intermediate",
     lambda m, g, ep, tp, r, a2a: _moe(m, m.moe_intermediate_size % (g // ep) == 0),
     lambda m, d: f"gpus / ep = {d.expert_tp} does not divide the expert intermediate size "
                  f"{m.moe_intermediate_size} of {m.name}"),
)


def eplb_slots(model, dep: Deployment) -> Deployment:
    """``dep`` with the redundant expert slots an engine's expert-parallel load balancer adds
    where EP does not divide the model's routed experts and the user gave none: the fewest
    ``r`` with ``(E + r) % ep == 0`` (SGLang's --ep-num-redundant-experts must make the slots a
    multiple of EP; DeepSeek's 256 experts over EP 48 take 32 more: 288 slots, 6 per rank), said
    in a warning, where that is fewer replicas than experts. Any other deployment is returned as
    it is."""
    e = model.num_experts
    if (not model.is_moe or e <= 1 or dep.redundant_experts or dep.mesh is not None
            or e % dep.ep == 0 or dep.expert_cache is not None):
        return dep
    r = -e % dep.ep
    if r >= e:  # more replicas than experts: not a load balancer's layout (refused as it is)
        return dep
    warnings.warn(f"EP {dep.ep} does not divide the {e} experts of {model.name}: {r} redundant "
                  f"expert slots added ({e + r} = {(e + r) // dep.ep} per rank), as an engine's "
                  "expert-parallel load balancer places them; give the redundant experts "
                  "(--redundant-experts) to choose", stacklevel=2)
    return replace(dep, redundant_experts=r)


def valid_mask(model, gpus, ep, tp, redundant: int = 0, a2a=None, gpus_per_node: int = 8):
    """Which (GPUs, EP, TP) combinations (NumPy arrays, broadcast) shard ``model``: every rule of
    :data:`TOPOLOGY` (what a :class:`Deployment` checks on its own) and of :data:`VALIDITY`."""
    import numpy as np

    a2a = A2AMode.AUTO if a2a is None else a2a
    g, e, t = (np.asarray(x) for x in (gpus, ep, tp))
    ok = np.ones(np.broadcast(g, e, t).shape, dtype=bool)
    for _, rule, _ in TOPOLOGY:
        ok = ok & rule(g, e, t, gpus_per_node)
    e_safe = np.where(ok, e, 1)
    for _, rule, _ in VALIDITY:
        ok = ok & rule(model, g, e_safe, t, redundant, a2a)
    return ok


def prefill_chunk(tokens, context, minimum=min):
    """The prefill chunk a step runs unless ``--chunk`` sets one: the step's tokens, at most
    one prompt of ``context`` tokens (numbers, or NumPy arrays with ``np.minimum``). A serve
    step's default is the engine's (:func:`moesym.numbers.metrics.serve_chunk`)."""
    return minimum(tokens, context)


def serve_kv_tokens(isl, osl):
    """Mean KV length of a serve workload's decoding requests: the prompt and, on average, half
    the output, ``ISL + floor(OSL / 2)`` (numbers or NumPy arrays; the serve steady state of
    :mod:`moesym.numbers.metrics` evaluates its decode steps there)."""
    return isl + osl // 2


@dataclass(frozen=True)
class Workload:
    """What one step processes on one attention data-parallel rank."""

    phase: Phase
    batch: int = 1  # decode: concurrent requests
    tokens: int = 0  # prefill: tokens per step (0 -> context, one prompt)
    context: int = 1024  # prefill: prompt length; decode and serve: mean KV length
    chunk: int = 0  # prefill chunk (0 -> min(tokens, context); serve: the engine's default)
    isl: int = 0  # serve: input (prompt) tokens per request
    osl: int = 0  # serve: output tokens per request
    prefix_hit: float = 0.0  # prefill, serve: share of each prompt found in the prefix cache
    # a length distribution's representative values (moesym.specs.lengths), equal weights: decode
    # KV lengths, prefill prompt lengths, serve ISLs; () for the one length above
    lengths: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.phase, Phase):
            try:
                object.__setattr__(self, "phase", Phase(self.phase))
            except ValueError:
                raise SpecError(f"`phase` {self.phase!r}: use prefill, decode or serve") from None
        if not (isinstance(self.prefix_hit, (int, float)) and 0 <= self.prefix_hit <= 1):
            raise SpecError(f"`prefix_hit` must be a share in [0, 1], got {self.prefix_hit!r}")
        if self.prefix_hit and self.phase is Phase.DECODE:
            raise SpecError("`prefix_hit` skips prompt tokens: it applies to `phase` prefill "
                            "and serve, not decode")
        if self.lengths:  # the distribution's mean stands for its one length
            mean = max(1, round(sum(self.lengths) / len(self.lengths)))
            object.__setattr__(self, "isl" if self.phase is Phase.SERVE else "context", mean)
            if self.phase is Phase.PREFILL and self.chunk and self.chunk > mean:
                object.__setattr__(self, "chunk", mean)
        if self.phase is Phase.SERVE:
            _pos_int("batch", self.batch)
            _pos_int("isl", self.isl)
            _pos_int("osl", self.osl)
            # the running requests hold their prompt and, on average, half their output
            object.__setattr__(self, "context", serve_kv_tokens(self.isl, self.osl))
            if self.chunk:
                _pos_int("chunk", self.chunk)
            return
        _pos_int("context", self.context)
        if self.phase is Phase.DECODE:
            _pos_int("batch", self.batch)
        else:
            if self.tokens == 0:
                object.__setattr__(self, "tokens", self.context)
            _pos_int("tokens", self.tokens)
            if self.chunk == 0:
                object.__setattr__(self, "chunk", prefill_chunk(self.tokens, self.context))
            _pos_int("chunk", self.chunk)
            if self.chunk > self.context:
                raise SpecError(f"`chunk` {self.chunk} exceeds `context` {self.context}")

    @property
    def tokens_per_rank(self) -> int:
        return self.batch if self.phase is Phase.DECODE else self.tokens
