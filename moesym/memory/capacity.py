"""Per-GPU memory budget, capacity (max batch, max context) and the ``moesym memory`` report.

Every quantity is a SymPy expression of the declared symbols (:func:`memory_expressions`);
:func:`memory_bindings` gives their numbers and :class:`MemoryModel` evaluates and solves them.

used(B, L) = weights + B kv_per_request(L) + activations + workspaces + comm buffers + reserve,
free = M_hbm - used. ``max_batch`` solves used(B) = M_hbm for B (the expression is linear in B
piecewise: every max/min is tried branch by branch with ``sympy.solve`` and the branch whose
root satisfies the full expression is kept); ``max_context`` solves used(L) = M_hbm for L.

Scopes (seed 002 section 8): B is requests per attention data-parallel rank (``--batch``); a
rank of t_p GPUs holds them, so per GPU it is B / t_p and for the instance B x N_gpu / t_p.
Weights summed over GPUs are the model's bytes times each component's replication factor
(:func:`moesym.memory.weights.replication_factors`); activations are never summed.

>>> from moesym.memory.capacity import memory_report
>>> from moesym.specs import deployment as d
>>> from moesym.readers.model import load_model
>>> from moesym.specs.hardware import load_hardware
>>> r = memory_report(load_model("qwen3-30b-a3b"), load_hardware("h100"), d.Deployment(),
...                   d.Workload("decode", batch=8, context=4096))
>>> r["kv_bytes_per_token"], r["fits"]
(98304.0, True)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import sympy as sp

from ..attention import compose
from ..errors import SpecError
from ..numbers.bindings import bindings, memory_workload_values
from ..readers.gguf import file_type_bytes
from ..specs.deployment import A2AMode, Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.memory_options import MemoryOptions
from ..specs.model import ModelSpec, expert_weights
from ..symbolic.compile import evaluate
from ..symbolic.expr import smax, substitute
from ..symbolic.symbols import S, by_name
from ..terms.dims import symbolic_dims
from .formats import weight_bytes_per_param, weight_formats
from .runtime import (
    decode_activation_bytes,
    deepep_low_latency_bytes,
    dispatch_buffer_bytes,
    dispatch_tokens,
    expert_rows,
    ffn_intermediate,
    grouped_gemm_workspace_bytes,
    mtp_activation_bytes,
    nccl_buffer_bytes,
    prefill_activation_bytes,
    runtime_reserve_bytes,
)
from .weights import weights_breakdown

__all__ = [
    "CONTRACT_KEYS",
    "MemoryModel",
    "MemoryOptions",
    "a2a_mode",
    "fits",
    "max_batch",
    "max_context",
    "memory_bindings",
    "memory_expressions",
    "memory_model",
    "memory_report",
    "solve_max",
]

CONTRACT_KEYS = ("weights_bytes", "kv_bytes_per_token", "activation_bytes", "workspace_bytes",
                 "comm_buffer_bytes", "free_bytes", "max_batch", "fits")

def a2a_mode(model: ModelSpec, dep: Deployment, phase: Phase) -> A2AMode | None:
    """The all-to-all whose buffers are allocated: none for a dense model or EP = 1; ``auto`` is
    DeepEP normal for prefill and DeepEP low latency for decode."""
    if not model.is_moe or dep.ep == 1:
        return None
    return dep.resolved_a2a(phase)


def memory_expressions(model: ModelSpec, dep: Deployment, phase: Phase,
                       options: MemoryOptions | None = None) -> dict[str, object]:
    """Symbolic per-GPU memory of ``model`` under ``dep`` in ``phase``.

    Keys: ``weights`` (dict by component), ``kv_per_token``, ``kv_per_request``, ``kv``,
    ``activation`` (dict), ``workspace`` (dict), ``comm`` (dict), ``reserve``. Only Python
    structure (MLA or GQA, q LoRA, tied embeddings, layer kinds, layout, all-to-all mode) is taken
    from the specs; every size is a symbol.
    """
    opts = options or MemoryOptions()
    phase = Phase(phase)
    D = symbolic_dims()
    mla = model.is_mla
    q_lora = model.q_lora_rank > 0
    n_layers = S.n_moe_layers + S.n_dense_layers
    weights = weights_breakdown(D, mla=mla, q_lora=q_lora, tie_embeddings=model.tie_embeddings,
                                mtp_shares_block=opts.mtp_shares_block, gate=model.attn_output_gate)
    if dep.expert_cache is not None and model.is_moe:  # only the cached experts stay on device
        cached = sp.Integer(min(dep.expert_cache, model.num_experts))
        weights["routed_experts"] = S.n_moe_layers * cached * expert_weights(
            D.hidden, D.moe_inter, S.w_bytes_expert, D.expert_tp)
    # the cache of each attention variant over its layers (moesym.attention)
    kv = compose.memory(model, D, n_layers, S.context, S.block_size, opts.kv_fragmentation,
                        S.n_mtp_layers)
    per_token, per_request = kv.per_token, kv.per_request
    own = compose.weights(model, D, n_layers)  # attention weights the variant counts itself
    if own is not None:
        weights.update(own)
    ffn_i = ffn_intermediate(D, is_moe=model.is_moe, has_dense=model.dense_layers > 0)
    act_kw = {"mla": mla, "ffn_inter": ffn_i, "hc_mult": S.hc_mult,
              "residual_bytes": sp.Float(opts.residual_bytes)}
    if phase is Phase.DECODE:
        step_tokens = S.batch
        activation = {"layers": smax(decode_activation_bytes(D, S.batch, **act_kw),
                                       prefill_activation_bytes(D, S.prefill_tokens, **act_kw))}
    else:
        step_tokens = S.tokens
        activation = {"layers": prefill_activation_bytes(D, S.tokens, **act_kw)}
    activation["mtp"] = mtp_activation_bytes(D, S.batch, S.n_mtp_layers)

    mode = a2a_mode(model, dep, phase)
    workspace: dict[str, sp.Expr] = {}
    comm: dict[str, sp.Expr] = {"nccl": nccl_buffer_bytes(D, S.nccl_bytes), "deepep": sp.Integer(0)}
    if model.is_moe:
        t = dispatch_tokens(step_tokens, S.micro_batches, S.max_rank_tokens)
        # the masked layout allocates the batched buffer (it only computes fewer rows)
        layout = ("contiguous" if dep.resolved_layout(phase) in ("contiguous", "grouped", "per-token")
                  else "batched")
        rows = expert_rows(D, t, layout=layout, imbalance=S.imbalance,
                           max_dispatch_tokens=S.max_dispatch_tokens)
        workspace["dispatch_buffer"] = dispatch_buffer_bytes(D, rows)
        workspace["grouped_gemm"] = grouped_gemm_workspace_bytes(D, rows)
        if mode is A2AMode.ALLGATHER:
            workspace["allgather"] = t * D.gpus / D.tp * D.hidden * D.act_bytes
        if mode is A2AMode.DEEPEP_NORMAL:
            comm["deepep"] = S.deepep_normal_bytes
        elif mode is A2AMode.DEEPEP_LL:
            comm["deepep"] = deepep_low_latency_bytes(D, smax(S.max_dispatch_tokens, t))
    return {"weights": weights, "kv_per_token": per_token, "kv_per_request": per_request,
            "kv": S.batch * per_request, "activation": activation, "workspace": workspace,
            "comm": comm, "reserve": runtime_reserve_bytes()}


def memory_bindings(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                    options: MemoryOptions | None = None) -> dict:
    """Numbers for every symbol of :func:`memory_expressions` (extends
    :func:`moesym.numbers.bindings.bindings`; ``b_w`` becomes the storage format of the non-expert
    GEMM weights, ``b_we`` that of the routed experts after the FP4 capability matrix)."""
    opts = options or MemoryOptions()
    v = bindings(model, hw, dep, wl)
    fmts = weight_formats(dep.weights, hw, model.is_moe)
    g = dep.group_size
    mix = file_type_bytes(dep.weight_recipe(model.is_moe), model)
    if mix:  # a llama.cpp file type: each class's tensors' average (moesym.readers.gguf)
        for symbol, c in ((S.w_bytes, "attn"), (S.w_bytes_expert, "moe"),
                          (S.w_bytes_dense, "dense"), (S.w_bytes_hp, "hp")):
            v[symbol] = mix[c]
    else:
        v[S.w_bytes] = weight_bytes_per_param(fmts.gemm, opts.fp4_scale_group, g)
        v[S.w_bytes_expert] = weight_bytes_per_param(fmts.routed, opts.fp4_scale_group, g)
        v[S.w_bytes_dense] = weight_bytes_per_param(fmts.dense, opts.fp4_scale_group, g)
        v[S.w_bytes_hp] = weight_bytes_per_param(fmts.high_precision)
    v.update({
        S.n_sliding_layers: model.sliding_layers / dep.pp, S.window: model.sliding_window or 1,
        S.n_mtp_layers: opts.mtp_layers, S.hc_mult: opts.residual_streams(model),
        S.block_size: opts.block_size,
        S.max_dispatch_tokens: opts.max_dispatch_tokens, S.max_rank_tokens: opts.max_rank_tokens,
        S.prefill_tokens: opts.prefill_tokens, S.imbalance: opts.load_factor,
        S.nccl_bytes: opts.nccl_bytes_per_communicator,
        S.deepep_normal_bytes: opts.deepep_normal_bytes,
        S.reserve_frac: opts.reserve_fraction, S.reserve_bytes: opts.reserve_fixed_bytes,
    })
    v.update({by_name(k): x for k, x in memory_workload_values(wl, dep).items()})
    return v


def _branches(expr: sp.Expr, x: sp.Symbol):
    """``expr`` with every Max/Min that depends on ``x`` replaced by each of its arguments."""
    atoms = [a for a in expr.atoms(sp.Max, sp.Min) if a.has(x)]
    if not atoms:
        yield expr
        return
    a = atoms[0]
    for arg in a.args:
        yield from _branches(substitute(expr, {a: arg}), x)


def solve_max(expr: sp.Expr, x: sp.Symbol, budget: float) -> float:
    """Largest x > 0 with ``expr``(x) <= ``budget`` for an ``expr`` nondecreasing in x and free
    only in x: 0 if even x -> 0 exceeds it, ``inf`` if it is never reached.

    >>> from moesym.symbolic.symbols import S
    >>> solve_max(3 * S.batch + smax(10, 2 * S.batch), S.batch, 100)
    20.0
    """
    f = sp.sympify(expr)
    extra = f.free_symbols - {x}
    if extra:
        raise ValueError("unbound symbol(s): " + ", ".join(sorted(map(str, extra))))

    def at(value: float) -> float:
        return float(substitute(f, {x: sp.Float(value)}))

    if x not in f.free_symbols:
        return math.inf if float(f) <= budget else 0.0
    roots = []
    for piece in _branches(f, x):
        for r in sp.solve(sp.Eq(piece, budget), x):
            if r.is_real and r > 0:
                rv = float(r)
                if abs(at(rv) - budget) <= 1e-9 * max(1.0, abs(budget)):
                    roots.append(rv)
    if roots:
        return max(roots)
    return 0.0 if at(1e-12) > budget else math.inf


@dataclass(frozen=True)
class MemoryModel:
    """Expressions and numbers of one configuration; evaluates and solves them."""

    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    workload: Workload
    options: MemoryOptions
    expressions: Mapping[str, object] = field(repr=False)
    values: Mapping[sp.Symbol, float] = field(repr=False)

    def number(self, expr, **override) -> float:
        vals = dict(self.values)
        vals.update({getattr(S, k): v for k, v in override.items()})
        return float(evaluate(sp.sympify(expr), vals, {}))

    def used_expr(self, include_kv: bool = True) -> sp.Expr:
        e = self.expressions
        total = (sum(e["weights"].values()) + sum(e["activation"].values())
                 + sum(e["workspace"].values(), sp.Integer(0)) + sum(e["comm"].values())
                 + e["reserve"])
        return total + e["kv"] if include_kv else total

    def _bound_except(self, expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
        fixed = {s: sp.Float(v) for s, v in self.values.items() if s != x}
        return substitute(sp.sympify(expr), fixed)

    def max_requests(self, context: int | None = None) -> float:
        """Largest B (requests per attention data-parallel rank, fractional) that fits at
        ``context`` (default: the workload's)."""
        expr = self.used_expr()
        if context is not None:
            expr = substitute(expr, {S.context: sp.Integer(context)})
        return solve_max(self._bound_except(expr, S.batch), S.batch, self.values[S.hbm_capacity])

    def max_context(self, batch: int | None = None) -> float:
        """Largest mean context L (tokens) that fits with ``batch`` requests per rank."""
        expr = self.used_expr()
        if batch is not None:
            expr = substitute(expr, {S.batch: sp.Integer(batch)})
        return solve_max(self._bound_except(expr, S.context), S.context,
                         self.values[S.hbm_capacity])

    def parts(self) -> dict:
        """Bytes per GPU of each part (``weights``, ``activation``, ``workspace``, ``comm``:
        ``{name: bytes}``; ``reserve``), the KV bytes per token and ``kv_pool`` (what the rest
        leaves for KV), without solving for the batch or context limits."""
        e, n = self.expressions, self.number
        out = {k: {name: n(v) for name, v in e[k].items()}
               for k in ("weights", "activation", "workspace", "comm")}
        out["reserve"] = n(e["reserve"])
        out["kv_per_token"] = n(e["kv_per_token"])
        out["kv_pool"] = self.values[S.hbm_capacity] - out["reserve"] - sum(
            sum(out[k].values()) for k in ("weights", "activation", "workspace", "comm"))
        return out

    def report(self) -> dict:
        e, dep, wl = self.expressions, self.deployment, self.workload
        n = self.number
        p = self.parts()
        weights, act, ws, comm = p["weights"], p["activation"], p["workspace"], p["comm"]
        hbm = self.values[S.hbm_capacity]
        reserve = p["reserve"]
        kv = n(e["kv"])
        pool = p["kv_pool"]
        free = pool - kv
        b_rank = self.max_requests()
        b_rank_int = math.floor(b_rank + 1e-9) if math.isfinite(b_rank) else None
        per_gpu = b_rank_int // dep.tp if b_rank_int is not None else None
        l_max = self.max_context()
        kv_tok = p["kv_per_token"]
        fmts = weight_formats(dep.weights, self.hardware, self.model.is_moe)
        mode = a2a_mode(self.model, dep, wl.phase)
        m = self.model
        host = host_tier(m, self.hardware, dep, hbm - free, self.values[S.w_bytes_expert])
        if free < 0:
            host.update(fits=False, fits_reason=device_short(hbm - free, self.hardware))
        return {"fits": bool(free >= 0), **host,
            "weights_bytes": sum(weights.values()),
            "kv_bytes_per_token": kv_tok,
            "activation_bytes": sum(act.values()),
            "workspace_bytes": sum(ws.values()),
            "comm_buffer_bytes": sum(comm.values()),
            "free_bytes": free,
            "max_batch": per_gpu,
            "hbm_bytes": hbm,
            "reserve_bytes": reserve,
            "requests": int(self.values[S.batch]),
            "context": wl.context,
            "kv_bytes": kv,
            "kv_bytes_per_request": n(e["kv_per_request"]),
            "kv_pool_bytes": pool,
            "max_batch_per_dp_rank": b_rank_int,
            "max_context": math.floor(l_max + 1e-9) if math.isfinite(l_max) else None,
            "weights_breakdown": weights,
            "activation_breakdown": act,
            "workspace_breakdown": ws,
            "comm_breakdown": comm,
            "formats": {"routed_experts": fmts.routed, "gemm": fmts.gemm, "dense": fmts.dense,
                        "high_precision": fmts.high_precision},
            "a2a": mode.value if mode else "none",
            "cluster": {
                "gpus": dep.gpus, "dp": dep.dp,
                "weights_bytes": sum(weights.values()) * dep.gpus,
                "kv_capacity_tokens": (max(pool, 0.0) / kv_tok * dep.dp) if kv_tok > 0 else None,
                "max_batch": b_rank_int * dep.dp if b_rank_int is not None else None,
            },
            # the options as applied (hc_mult 0 stands for the model's own streams)
            "assumptions": {**asdict(self.options), "hc_mult": self.options.residual_streams(m)},
        }


def device_short(device_bytes: float, hw: HardwareSpec) -> str:
    """Why a configuration does not fit its device, in words."""
    return (f"{device_bytes / 1e9:.1f} GB per GPU, {hw.hbm_capacity_bytes / 1e9:.1f} GB usable "
            f"on {hw.name}")


def host_expert_bytes(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                      expert_bytes_per_param: float | None = None) -> float:
    """Bytes of the routed experts ``--expert-cache`` leaves in host memory (0 without one)."""
    if dep.expert_cache is None or not model.is_moe:
        return 0.0
    if expert_bytes_per_param is None:
        mix = file_type_bytes(dep.weight_recipe(model.is_moe), model)
        if mix:  # a llama.cpp file type: its expert tensors' average (moesym.readers.gguf)
            expert_bytes_per_param = mix["moe"]
        else:
            opts = MemoryOptions(**dict(dep.memory_options))
            fmt = weight_formats(dep.weights, hw, model.is_moe).routed
            expert_bytes_per_param = weight_bytes_per_param(fmt, opts.fp4_scale_group,
                                                            dep.group_size)
    cold = max(model.num_experts - dep.expert_cache, 0)
    return model.moe_layers * cold * model.expert_params() * expert_bytes_per_param


def host_fits(hw: HardwareSpec, dep: Deployment, device_bytes, host_bytes: float):
    """Whether the host tier fits (numbers or arrays of ``device_bytes``): on unified memory
    ([host] unified) device and host are one DRAM holding both; elsewhere the host tier against
    [host] capacity_GB, which, not given, leaves it unchecked with a warning."""
    cap = hw.host_capacity_bytes
    if hw.host_unified:
        return device_bytes + host_bytes <= cap
    if not cap:
        if host_bytes:
            warnings.warn(f"--expert-cache {dep.expert_cache}: {host_bytes / 1e9:.1f} GB of "
                          f"experts in host memory, not checked ({hw.name}'s file gives no [host] "
                          "capacity_GB)", stacklevel=3)
        return device_bytes == device_bytes  # True, in the shape of device_bytes
    return (device_bytes == device_bytes) & (host_bytes <= cap)


def host_tier(model: ModelSpec, hw: HardwareSpec, dep: Deployment, device_bytes: float,
              expert_bytes_per_param: float | None = None) -> dict:
    """The host tier of ``--expert-cache`` (``host_expert_bytes``) and, where it does not fit
    (:func:`host_fits`), ``fits`` False with ``fits_reason``; {} without a host tier."""
    if dep.expert_cache is None or not model.is_moe:
        return {}
    host = host_expert_bytes(model, hw, dep, expert_bytes_per_param)
    out = {"host_expert_bytes": host}
    if not host_fits(hw, dep, device_bytes, host):
        cap = hw.host_capacity_bytes
        out.update(fits=False, fits_reason=(
            f"unified memory: {device_bytes / 1e9:.1f} GB on the device and {host / 1e9:.1f} GB "
            f"of experts in host memory share {hw.name}'s one {cap / 1e9:.0f} GB DRAM"
            if hw.host_unified else
            f"{host / 1e9:.1f} GB of experts in host memory, {cap / 1e9:.0f} GB of host memory "
            f"([host] capacity_GB of {hw.name})"))
    return out


def memory_model(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
                 workload: Workload | None = None, options: MemoryOptions | None = None) -> MemoryModel:
    """Build the :class:`MemoryModel` (checks that ``deployment`` can shard ``model``)."""
    given = dict(deployment.memory_options)
    if deployment.mtp and "mtp_layers" not in given:  # the draft module's weights and KV
        given["mtp_layers"] = model.mtp_layers or 1
    opts = options or MemoryOptions(**given)
    wl = workload or Workload(Phase.DECODE)
    deployment.check_model(model)
    exprs = memory_expressions(model, deployment, wl.phase, opts)
    vals = memory_bindings(model, hardware, deployment, wl, opts)
    return MemoryModel(model, hardware, deployment, wl, opts, exprs, vals)


def memory_report(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
                  workload: Workload | None = None, options: MemoryOptions | None = None) -> dict:
    """The ``moesym memory`` numbers (``CONTRACT_KEYS`` plus breakdowns); bytes per GPU unless
    under ``cluster``. ``max_batch`` is decode requests per GPU at the workload's context
    (requests per attention data-parallel rank / t_p), 0 if nothing fits."""
    return memory_model(model, hardware, deployment, workload, options).report()


def fits(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
         workload: Workload | None = None, options: MemoryOptions | None = None) -> bool:
    """True when the workload's requests, at its context, fit in GPU memory."""
    mm = memory_model(model, hardware, deployment, workload, options)
    return mm.number(mm.used_expr()) <= mm.values[S.hbm_capacity]


def max_batch(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
              workload: Workload | None = None, options: MemoryOptions | None = None,
              scope: str = "gpu") -> int:
    """Largest decode batch that fits at the workload's context: per ``'gpu'`` (B / t_p),
    per attention data-parallel ``'rank'`` (B, the unit of ``--batch``) or ``'cluster'``
    (B x N_gpu / t_p, seed 002 section 8). 0 if nothing fits."""
    mm = memory_model(model, hardware, deployment, workload, options)
    b = mm.max_requests()
    if not math.isfinite(b):
        raise SpecError("memory does not limit the batch (no KV grows with requests)")
    b_rank = math.floor(b + 1e-9)
    if scope == "rank":
        return b_rank
    if scope == "gpu":
        return b_rank // deployment.tp
    if scope == "cluster":
        return b_rank * deployment.dp
    raise ValueError(f"scope {scope!r}: use gpu, rank or cluster")


def max_context(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
                workload: Workload | None = None, options: MemoryOptions | None = None) -> int:
    """Largest mean context (tokens) at which the workload's requests per rank fit; 0 if none."""
    mm = memory_model(model, hardware, deployment, workload, options)
    L = mm.max_context()
    if not math.isfinite(L):
        raise SpecError("memory does not limit the context (no KV grows with context)")
    return math.floor(L + 1e-9)
