"""``moesym memory``: per-GPU memory budget, KV capacity and whether the configuration fits."""

from __future__ import annotations

from dataclasses import replace

from ..memory import CONTRACT_KEYS, memory_report
from ..numbers.metrics import serve_chunk
from ..specs.deployment import Phase, Workload
from . import COMMANDS
from .common import (
    add_deployment,
    add_json,
    add_model_hw,
    add_workload,
    emit_json,
    inputs_from,
    stages,
)

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("memory", help=COMMANDS["memory"])
    add_model_hw(p)
    add_workload(p, required_phase=False)
    add_deployment(p)
    add_json(p)
    p.set_defaults(func=run)


def _gb(x: float) -> str:
    return f"{x / 1e9:10.3f} GB"


def run(args) -> int:
    model, hw, dep, wl = inputs_from(args)
    if wl.phase is Phase.SERVE:  # the in-flight requests at their mean KV beside one chunk

        opts = dict(dep.memory_options)
        opts.setdefault("prefill_tokens", serve_chunk(wl.chunk, hw.hbm_capacity_bytes, dep.dp, dep.engine))
        dep = replace(dep, memory_options=tuple(sorted(opts.items())))
        wl = Workload(Phase.DECODE, batch=wl.batch, context=wl.context, lengths=())
    r = memory_report(model, hw, dep, wl)  # --memory-option rides on the deployment
    if args.json:
        out = {k: r[k] for k in CONTRACT_KEYS}
        out.update({k: v for k, v in r.items() if k not in out})
        emit_json(out)
        return 0
    print(f"{model.name} on {dep.gpus} x {hw.name}  {wl.phase.value}  tp={dep.tp} ep={dep.ep}"
          f"{stages(dep)} weights={dep.weights} (experts as {r['formats']['routed_experts']}) kv={dep.kv} "
          f"a2a={r['a2a']}")
    print(f"  per GPU, {r['requests']} request(s) per attention-DP rank at context {r['context']}:")
    print(f"    {'HBM':<22}{_gb(r['hbm_bytes'])}")
    print(f"    {'weights':<22}{_gb(r['weights_bytes'])}")
    for k, v in r["weights_breakdown"].items():
        if v:
            print(f"      {k:<20}{_gb(v)}")
    print(f"    {'KV cache':<22}{_gb(r['kv_bytes'])}")
    print(f"    {'activations':<22}{_gb(r['activation_bytes'])}")
    print(f"    {'workspaces':<22}{_gb(r['workspace_bytes'])}")
    print(f"    {'comm buffers':<22}{_gb(r['comm_buffer_bytes'])}")
    print(f"    {'runtime reserve':<22}{_gb(r['reserve_bytes'])}")
    print(f"    {'free':<22}{_gb(r['free_bytes'])}")
    print(f"  KV bytes per token      {r['kv_bytes_per_token']:.0f}")
    print(f"  KV bytes per request    {r['kv_bytes_per_request']:.0f}")
    print(f"  max batch per GPU       {r['max_batch']}  (per attention-DP rank "
          f"{r['max_batch_per_dp_rank']}, instance {r['cluster']['max_batch']})")
    print(f"  max context at batch    {r['max_context']}")
    if "host_expert_bytes" in r:
        print(f"  experts in host memory  {r['host_expert_bytes'] / 1e9:.3f} GB")
    print(f"  fits                    {'yes' if r['fits'] else 'no'}"
          + (f" ({r['fits_reason']})" if "fits_reason" in r else ""))
    return 0
