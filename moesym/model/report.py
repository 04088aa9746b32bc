"""Numbers out of a step model: step time, throughput, per-layer breakdown and the bound.

Two halves: :func:`report_expressions` names every expression a report needs (SymPy objects of a
built step model), and :func:`report_from_numbers` turns their values into the report (plain
numbers, no SymPy), so a report from the disk cache is computed by the same code as a fresh one.
"""

from __future__ import annotations

from ..specs.deployment import Phase
from ..symtab import N

__all__ = ["BREAKDOWN_KEYS", "accepted_tokens", "bound_shares", "key_bounds", "report_expressions", "report_from_numbers",
           "routed_expert_roofline", "routed_expert_roofline_expr"]

# contract keys of per_layer_s (issue 2 / CONTRACT.md), in display order
BREAKDOWN_KEYS = ("attention_proj", "attention_core", "moe_routed", "moe_weight_load", "shared_expert",
                  "dispatch", "combine", "tp_comm", "other")
_PART_FIELDS = ("compute_s", "memory_s", "comm_s", "overhead_s")


def _parts(tt):
    return getattr(tt, "parts", (tt,))


def report_expressions(step) -> dict:
    """``{name: expression}`` of everything :func:`report_from_numbers` reads: the step, the
    overlapped and compute-only layer, each breakdown key, and the compute / memory /
    communication / overhead time of every kernel of the layer (``part/KEY/I/FIELD``), and each
    kernel's time over the layer's micro-batches by name (``kernel/KEY/I/NAME``)."""
    out = {"step_time_s": step.expr, "layer_s": step.layer_s,
           "layer_compute_s": step.layer_compute_s}
    for k, v in step.per_layer_s.items():
        out[f"per_layer_s/{k}"] = v
    from ..symbols import S

    n = S.micro_batches  # per_layer_s's factor: every micro-batch of the layer
    for key, tt in step.terms.items():
        for i, p in enumerate(_parts(tt)):
            for f in _PART_FIELDS:
                out[f"part/{key}/{i}/{f}"] = getattr(p, f)
            out[f"kernel/{key}/{i}/{p.name}"] = n * p.total_s
    for key, w in step.work.items():
        for f, e in w.items():
            out[f"work/{key}/{f}"] = e
    return out


def _kernels(nums) -> dict:
    """``{key: [{field: seconds}, ...]}`` from the ``part/...`` outputs."""
    out: dict = {}
    for name, v in nums.items():
        if name.startswith("part/"):
            _, key, i, f = name.split("/")
            parts = out.setdefault(key, [])
            while len(parts) <= int(i):
                parts.append({})
            parts[int(i)][f] = float(v)
    return out


def routed_expert_roofline(routed, load, maximum=max) -> tuple:
    """(compute, memory) seconds that decide whether the routed experts are compute- or
    memory-bound: compute = the tensor time of their GEMMs; memory = the larger of the GEMMs'
    own memory time and the expert-weight read (the weight-load floor). ``routed`` and ``load``
    are ``(compute_s, memory_s)`` pairs of the kernels under ``moe_routed`` and
    ``moe_weight_load``; ``maximum`` is ``max`` on numbers and ``smax`` on expressions, so the
    report and ``moesym derive crossover`` apply this one rule."""
    compute = sum(c for c, _ in routed)
    memory = maximum(sum(m for _, m in load), sum(m for _, m in routed))
    return compute, memory


def routed_expert_roofline_expr(terms) -> tuple:
    """:func:`routed_expert_roofline` of a step model's per-micro-batch terms (expressions)."""
    from ..terms.cost import smax

    pairs = lambda key: [(p.compute_s, p.memory_s) for p in _parts(terms[key])]  # noqa: E731
    return routed_expert_roofline(pairs("moe_routed"), pairs("moe_weight_load"), smax)


_RESOURCES = ("compute", "memory", "communication", "overhead")
_COMM_KEYS = ("dispatch", "combine")  # their time counts where it is exposed (bound_shares)


def _key_rooflines(nums) -> dict:
    """``{key: (compute_s, memory_s, shares)}`` per micro-batch and layer: the roofline sides
    and the seconds per resource of each breakdown key (``routed_experts`` for ``moe_routed``
    with ``moe_weight_load``), by the rule of :func:`key_bounds`."""
    kernels = _kernels(nums)
    out = {}
    for key, parts in kernels.items():
        if key == "moe_routed":
            continue
        shares = dict.fromkeys(_RESOURCES, 0.0)
        if key == "moe_weight_load":
            routed = kernels.get("moe_routed", [])
            c, m = routed_expert_roofline([(q["compute_s"], q["memory_s"]) for q in routed],
                                          [(q["compute_s"], q["memory_s"]) for q in parts])
            shares["compute" if c >= m else "memory"] += max(c, m)
            parts = routed + parts
        else:
            c = m = 0.0
            for p in parts:
                shares["compute" if p["compute_s"] >= p["memory_s"] else "memory"] += \
                    max(p["compute_s"], p["memory_s"])
                c, m = c + p["compute_s"], m + p["memory_s"]
        for p in parts:
            shares["communication"] += p["comm_s"]
            shares["overhead"] += p["overhead_s"]
        out["routed_experts" if key == "moe_weight_load" else key] = (c, m, shares)
    return out


def key_bounds(nums, model, deployment) -> dict:
    """Per breakdown key, over one step (all micro-batches and layers): its roofline sides
    (``compute_s``, ``memory_s``), ``overhead_s`` (launch latencies), ``communication_s``,
    ``roofline`` (compute or memory) and ``bound`` (the resource with the most seconds).

    Rule (the one ``derive`` solves for its crossovers): a kernel is compute-bound when its
    tensor time is at least its memory time, else memory-bound, and counts max(compute, memory)
    toward that resource; launch latencies count as overhead and transfers as communication.
    The routed experts (``moe_routed`` with ``moe_weight_load``) are one roofline,
    :func:`routed_expert_roofline`: their ``roofline`` flips from memory to compute exactly at
    ``moesym derive crossover``'s batch.
    """
    scale = deployment.micro_batches * (model.moe_layers if model.is_moe else model.dense_layers)
    out = {}
    for key, (c, m, shares) in _key_rooflines(nums).items():
        entry = {"compute_s": c * scale, "memory_s": m * scale,
                 "communication_s": shares["communication"] * scale,
                 "overhead_s": shares["overhead"] * scale,
                 "bound": max(_RESOURCES, key=shares.get) if any(shares.values()) else "none"}
        if c or m:
            entry["roofline"] = "compute" if c >= m else "memory"
        out[key] = entry
    return out


def bound_shares(nums, values, model, deployment) -> dict:
    """Seconds of one step attributed to compute, memory, communication and fixed overhead:
    each key's resources (:func:`key_bounds`' rule; dispatch and combine excepted), the
    communication not hidden behind compute (overlapped layer time minus compute-only time), the
    per-step and per-layer fixed latencies, and what the serving engine loses against the
    modeled kernels (eta_sv < 1) as overhead.
    """
    n = deployment.micro_batches
    layers = model.moe_layers if model.is_moe else model.dense_layers
    shares = dict.fromkeys(_RESOURCES, 0.0)
    for key, (_, _, s) in _key_rooflines(nums).items():
        if key not in _COMM_KEYS:
            for r in _RESOURCES:
                shares[r] += s[r] * n * layers
    exposed = float(nums["layer_s"]) - float(nums["layer_compute_s"])
    shares["communication"] += max(exposed, 0.0) * layers
    shares["overhead"] += values.get(N.t_step, 0.0) + values.get(N.t_layer, 0.0) * layers
    serving = values.get(N.eff_serve, 1.0)
    shares["overhead"] += sum(shares.values()) * (1 / serving - 1)
    return shares


def _bound_term(bound: str, nums, values, model, deployment) -> str:
    """The breakdown key (or ``exposed_communication`` / ``fixed_latency``) that contributes
    most to the step's bound resource."""
    n = deployment.micro_batches
    layers = model.moe_layers if model.is_moe else model.dense_layers
    parts = {k: s[bound] * n * layers for k, (_, _, s) in _key_rooflines(nums).items()
             if k not in _COMM_KEYS}
    parts["exposed_communication"] = max(float(nums["layer_s"]) - float(nums["layer_compute_s"]),
                                         0.0) * layers if bound == "communication" else 0.0
    parts["fixed_latency"] = (values.get(N.t_step, 0.0) + values.get(N.t_layer, 0.0) * layers
                              if bound == "overhead" else 0.0)
    return max(parts, key=parts.get)


def accepted_tokens(deployment) -> float:
    """Tokens one decode step emits per request: 1, or speculative decoding's expected accepted
    length (:func:`moesym.model.speculative.accepted_length`)."""
    if not deployment.mtp:
        return 1.0
    from .speculative import accepted_length

    return accepted_length(deployment.mtp, deployment.acceptance)


def report_from_numbers(nums, values, model, deployment, workload) -> dict:
    """The ``predict`` report from the values of :func:`report_expressions` (``nums``) and the
    numbers bound to the step model's symbols (``values``, by printed name)."""
    t = float(nums["step_time_s"])
    out: dict = {"step_time_s": t}
    if workload.phase is Phase.DECODE:
        a = accepted_tokens(deployment)  # tokens a step emits per request (speculative: > 1)
        out["tokens_per_gpu_s"] = workload.batch * a / deployment.tp / deployment.pp / t
        out["tpot_s"] = t / a
        if deployment.mtp:
            out["accepted_tokens_per_step"] = a
    elif workload.phase is Phase.PREFILL:
        out["tokens_per_gpu_s"] = workload.tokens / deployment.tp / deployment.pp / deployment.cp / t
        # a step advances each prompt by one chunk (--chunk, default min(tokens, context))
        out["ttft_s"] = t * max(1.0, workload.context / min(workload.chunk or workload.tokens,
                                                            workload.tokens))
    # a mixed serving step: its rates are the steady state's (moesym.model.serve), not its own
    shares = bound_shares(nums, values, model, deployment)
    out["bound"] = max(shares, key=shares.get)
    out["bound_shares_s"] = shares
    out["bound_term"] = _bound_term(out["bound"], nums, values, model, deployment)
    out["bounds"] = key_bounds(nums, model, deployment)
    out["per_layer_s"] = {k[len("per_layer_s/"):]: float(v) for k, v in nums.items()
                          if k.startswith("per_layer_s/")}
    work: dict = {}
    for name, v in nums.items():
        if name.startswith("work/"):
            _, key, f = name.split("/")
            work.setdefault(key, {})[f] = float(v)
    if work:  # per GPU, one layer, every micro-batch; the time model does not change these
        out["work_per_layer"] = work
    kernels: dict = {}
    for name, v in nums.items():
        if name.startswith("kernel/"):
            kernels[name.split("/", 3)[3]] = kernels.get(name.split("/", 3)[3], 0.0) + float(v)
    if kernels:  # each kernel's time in one layer (all micro-batches), by kernel name
        out["per_kernel_s"] = kernels
    out["layer_s"] = float(nums["layer_s"])
    out["layer_compute_s"] = float(nums["layer_compute_s"])
    out["serving_frac"] = float(values.get(N.eff_serve, 1.0))
    return out
