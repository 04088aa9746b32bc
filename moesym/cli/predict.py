"""``moesym predict``: step time, throughput and per-term breakdown of one configuration."""

from __future__ import annotations

from dataclasses import replace

from ..engines.emit import ENGINES, check_engine, launch_command
from ..errors import MoesymError
from ..model.predictor import predict
from ..model.report import BREAKDOWN_KEYS
from ..numbers.economics import economics, serve_busy_share, text_line
from . import COMMANDS
from .common import (add_cost, add_deployment, add_json, add_model_hw, add_workload, emit_json,
                     fmt_s, inputs_from, pricing_from, print_launch, stages)

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("predict", help=COMMANDS["predict"])
    add_model_hw(p)
    add_workload(p)
    add_deployment(p)
    add_cost(p)
    add_json(p)
    p.add_argument("--show-expr", action="store_true", help="print each term's SymPy expression")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="write a breakdown bar chart")
    p.add_argument("--timeline", nargs="?", const=True, default=None, metavar="FILE.png",
                   help="print one steady-state layer of the overlap schedule, operation by "
                        "operation (JSON key timeline); with FILE.png also draw it")
    p.add_argument("--emit", choices=ENGINES, default=None,
                   help="also print the engine's launch command for this deployment (JSON key "
                        "launch)")
    p.set_defaults(func=run)


def run(args) -> int:
    model, hw, dep, wl = inputs_from(args)
    if args.emit and dep.mesh is not None:
        raise MoesymError(f"--emit {args.emit}: a GPU serving engine's launch line; a --mesh "
                          "deployment runs on Tenstorrent's stack, which moesym does not emit")
    if args.emit:  # an engine that cannot run here is refused before any work
        check_engine(args.emit, hw, dep, model)
    pricing = pricing_from(args, applies="serve" == wl.phase.value)
    r = predict(model, hw, dep, wl)
    if "serve" in r:  # cost and power of the steady state (moesym.numbers.economics)
        r.update(economics(hw, r["output_tokens_per_gpu_s"], r["input_tokens_per_gpu_s"],
                           serve_busy_share(r), pricing))
    if dep.layout in ("per-token", "grouped", "fused") and model.is_moe:  # seed 003's granularity
        from ..model.dispatch import dispatch_parallelism

        r["expert_dispatch"] = dispatch_parallelism(model, hw, dep, wl)
    if dep.mesh is not None:
        r["mesh"] = {"rows": dep.mesh[0], "cols": dep.mesh[1], "dispatch_axis": dep.dispatch_axis,
                     "a2a": dep.resolved_a2a(wl.phase).value}
    step = None
    if args.timeline or args.show_expr:  # the symbolic model itself, not its compiled form
        from ..model.step import build_step

        step = build_step(model, hw, dep, wl)
    if args.timeline:
        r["timeline"] = step.timeline()
        if isinstance(args.timeline, str):
            from ..report.plots import timeline_gantt
            from ..schedules import resolve_name

            timeline_gantt(r["timeline"], args.timeline,
                           f"{model.name} on {hw.name}, {wl.phase.value}, {dep.micro_batches} "
                           f"micro-batch(es), schedule "
                           f"{resolve_name(dep.overlap, dep.micro_batches, wl.phase.value)}")
    if args.emit:

        if "serve" in r:  # the chunk the prediction used (the engine's default when not given)
            wl = replace(wl, chunk=r["serve"]["chunk_tokens"])
        r["launch"] = launch_command(args.emit, model, dep, wl, hw)
    if args.plot:
        from ..report.plots import breakdown_bar

        breakdown_bar(r, args.plot)
    if args.json:
        emit_json(r)
        return 0
    print(f"{model.name} on {dep.gpus} x {hw.name}  {wl.phase.value}  tp={dep.tp} ep={dep.ep}"
          f"{stages(dep)} micro-batches={dep.micro_batches} weights={dep.weights}"
          + (f" mesh={dep.mesh[0]}x{dep.mesh[1]} (dispatch along {dep.dispatch_axis}, "
             f"{r['mesh']['a2a']})" if dep.mesh is not None else "")
          + ("  eager (no CUDA graphs)" if not dep.cuda_graphs else ""))
    if "serve" in r:
        sv = r["serve"]
        print(f"  isl={wl.isl} osl={wl.osl} requests/rank={wl.batch} (decoding "
              f"{sv['decoding_requests']:.4g}) chunk={sv['chunk_tokens']} mean KV="
              f"{sv['kv_mean_tokens']}")
        print(f"  output tok/GPU/s {r['output_tokens_per_gpu_s']:.1f}")
        print(f"  input tok/GPU/s  {r['input_tokens_per_gpu_s']:.1f}")
        print(f"  TPOT             {fmt_s(r['tpot_s'])}  (decode-only step "
              f"{fmt_s(r['decode_step']['step_time_s'])})")
        print(f"  TTFT             {fmt_s(r['ttft_s'])}  (queueing ignored)")
        print(f"  mixed steps      {sv['mixed_step_share']:.1%} of steps, "
              f"{sv['mixed_step_tokens']:.0f} prefill tokens each, "
              f"{fmt_s(r['mixed_step']['step_time_s'])}")
        print(f"  cost, power      {text_line(r)}")
    else:
        print(f"  step time        {fmt_s(r['step_time_s'])}")
        print(f"  tokens/GPU/s     {r['tokens_per_gpu_s']:.1f}")
        key = "tpot_s" if "tpot_s" in r else "ttft_s"
        print(f"  {key:<16} {fmt_s(r[key])}")
    if "accepted_tokens_per_step" in r:
        print(f"  speculative      {dep.mtp} draft token(s), acceptance {dep.acceptance:g}: "
              f"{r['accepted_tokens_per_step']:.3f} tokens per request per step")
    print(f"  bound            {r['bound']}")
    if "expert_dispatch" in r:
        x = r["expert_dispatch"]
        print(f"  expert dispatch  {x['granularity']}: {x['kernels_per_layer']:.4g} kernels per layer "
              f"of {x['rows_per_kernel']:.3g} rows ({x['tile_row_use']:.0%} of a "
              f"{x['tile_m_rows']:.0f}-row tile), expert weights read "
              f"{x['expert_weight_reads_per_layer']:.3g} times, SMs busy {x['sm_fill']:.0%}")
    print(f"  memory per GPU   {r['memory_bytes'] / 1e9:.2f} GB  fits: {r['fits']}"
          + (f" ({r['fits_reason']})" if "fits_reason" in r else ""))
    if r["serving_frac"] != 1.0:
        print(f"  serving eff.     {r['serving_frac']:.3f} (end-to-end fit in {hw.name}'s file; "
              f"step time = kernel model / {r['serving_frac']:.3f})")
    print("  per layer (busy time, whole per-GPU batch, before overlap"
          + (", the mixed step" if "serve" in r else "") + "):")
    for k in BREAKDOWN_KEYS:
        print(f"    {k:<16} {fmt_s(r['per_layer_s'][k]):>12}")
        if args.show_expr:
            print(f"      = {step.per_layer_s[k]}")
    print(f"    {'layer (overlap)':<16} {fmt_s(r['layer_s']):>12}")
    if "launch" in r:
        print_launch(r["launch"], "  ")
    if "timeline" in r:
        print("  one steady-state layer (start - end, us):")
        for e in r["timeline"]:
            print(f"    {e['stream']:<8} mb{e['micro_batch']}  {e['name']:<14} "
                  f"{e['start_s'] * 1e6:9.1f} - {e['end_s'] * 1e6:9.1f}")
    return 0

