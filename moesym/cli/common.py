"""Flags shared by the subcommands (CONTRACT.md 'Shared meanings') and their parsing."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import warnings

from ..engines import load_engine
from ..engines.support import check_format, engine_for_format
from ..errors import MoesymError
from ..numbers.economics import Pricing
from ..plan.rules import check_inputs
from ..readers.model import load_model
from ..specs.deployment import LAYOUTS, A2AMode, Deployment, Phase, Routing, Workload, eplb_slots
from ..specs.hardware import HardwareSpec, load_hardware
from ..specs.lengths import representative
from ..specs.memory_options import MemoryOptions
from ..specs.mesh import parse_shape
from ..specs.model import ModelSpec
from ..specs.time_models import help_text, metavar, name_problem

__all__ = ["add_model_hw", "add_deployment", "add_workload", "add_json", "deployment_from",
           "workload_from", "model_hw_from", "inputs_from", "emit_json", "positive_int", "positive_float",
           "fmt_s", "add_serve_lengths", "add_timing", "timing_name", "add_cost", "pricing_from"]


def _integer(text: str) -> int | None:
    """``text`` as an integer: digits, or a finite number with no fraction written with an
    exponent (``1e8``); None otherwise."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        return None
    # within float's exact integers: a larger one is a typo, not a count
    return int(v) if math.isfinite(v) and v.is_integer() and abs(v) <= 2**53 else None


def positive_int(text: str) -> int:
    v = _integer(text)
    if v is None or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def nonneg_int(text: str) -> int:
    v = _integer(text)
    if v is None or v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return v


def _finite(text: str, ok, what: str) -> float:
    """A finite number for which ``ok`` holds, else argparse's error 'expected ``what``'."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and ok(v)):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return v


def positive_float(text: str) -> float:
    return _finite(text, lambda v: v > 0, "a positive number")


def ms_as_s(text: str) -> float:
    """A non-negative number of milliseconds, given back in seconds."""
    return _finite(text, lambda v: v >= 0, "milliseconds >= 0") * 1e-3


def add_model_hw(p: argparse.ArgumentParser, model: bool = True) -> None:
    if model:
        p.add_argument("model", help="built-in model name or path to a HuggingFace config.json")
    p.add_argument("--hardware", required=True, help="built-in GPU name or path to a hardware .toml")
    add_no_cache(p)


def add_no_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true", default=argparse.SUPPRESS,
                   help="neither read nor write the compiled-model cache")


def timing_name(text: str) -> str:
    """``--timing``: a time model of :data:`moesym.specs.time_models.TIME_MODELS` (tables:DIR: the
    folder must exist)."""
    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_timing(p) -> None:
    p.add_argument("--timing", type=timing_name, default="kernel", metavar=metavar(),
                   help=help_text())


def positive_int_list(text: str) -> list[int]:
    """``4`` or ``1,2,4``: the values a searched choice may take."""
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or a comma list of them, "
                                         f"got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def cache_sizes(text: str):
    """optimize's --expert-cache: 'auto' or a comma list of non-negative integers."""
    if text == "auto":
        return "auto"
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a comma list of expert counts, got "
                                         f"{text!r}") from None
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expert counts must be >= 0, got {text!r}")
    return vals


def a2a_list(text: str) -> list[A2AMode]:
    modes = [m.value for m in A2AMode]
    out = []
    for x in text.split(","):
        if x not in modes:
            raise argparse.ArgumentTypeError(f"invalid choice {x!r} (choose from "
                                             f"{', '.join(modes)}; a comma list searches several)")
        out.append(A2AMode(x))
    return out


def add_deployment(p: argparse.ArgumentParser, search: bool = False) -> None:
    """Deployment flags; with ``search`` (optimize) --tp, --ep, --micro-batches and --a2a take
    one value or a comma list of the values the search may choose from (default: any)."""
    g = p.add_argument_group("deployment")
    g.add_argument("--gpus", type=positive_int, default=1)
    g.add_argument("--engine", default=None, metavar="NAME|FILE.toml",
                   help="serving engine whose defaults apply (prompt tokens per step in serve), "
                        "whose scheduler simulate and optimize --percentile run, and whose "
                        "kernels the hardware file times ([kernel.engines.NAME]): sglang, "
                        "sglang-0.5.9, vllm, trtllm (trt), dynamo-trt, dynamo-sglang, "
                        "mori-sglang, atom, llama.cpp, mlx, tt-metal or a profile file (moesym "
                        "list engines); one that does not "
                        "run on the hardware is refused (default: the hardware file's "
                        "default_engine, llama.cpp on Apple silicon and Ryzen AI Max, tt-metal "
                        "on Tenstorrent; else sglang)")
    g.add_argument("--eager", action="store_true",
                   help="no CUDA graphs: the host launches every kernel of a decode step "
                        "(SGLang --disable-decode-cuda-graph, vLLM --enforce-eager, llama.cpp "
                        "GGML_CUDA_DISABLE_GRAPHS=1); default: decode steps replay as CUDA "
                        "graphs where the engine captures them")
    g.add_argument("--prefill-graphs", choices=("on", "off"), default=None,
                   help="prefill and mixed steps replayed as (piecewise) CUDA graphs (on: SGLang "
                        "--enable-piecewise-cuda-graph, TensorRT-LLM piecewise "
                        "torch_compile_config) or launched kernel by kernel (off); default: the "
                        "engine's")
    g.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="GPUs per node (default: the hardware file's gpus_per_node)")
    if search:
        g.add_argument("--tp", type=positive_int_list, default=None, metavar="N[,N...]")
        g.add_argument("--ep", type=positive_int_list, default=None, metavar="N[,N...]")
        g.add_argument("--micro-batches", type=positive_int_list, default=None,
                       metavar="N[,N...]", help="default: 1,2")
        g.add_argument("--pp", type=positive_int_list, default=None, metavar="N[,N...]",
                       help="pipeline-parallel depths to search (default: 1)")
        g.add_argument("--cp", type=positive_int_list, default=None, metavar="N[,N...]",
                       help="prefill: context-parallel degrees to search (GPUs sharing each "
                            "prompt; default: 1)")
        g.add_argument("--a2a", type=a2a_list, default=None, metavar="MODE[,MODE...]",
                       help=f"any of {', '.join(m.value for m in A2AMode)} (default: every "
                            "mode that applies)")
    else:
        g.add_argument("--tp", type=positive_int, default=1)
        g.add_argument("--ep", type=positive_int, default=None, help="default: --gpus")
        g.add_argument("--micro-batches", type=positive_int, default=1)
        g.add_argument("--cp", type=positive_int, default=1,
                       help="context parallelism (prefill): GPUs sharing each prompt, ring "
                            "attention between them")
        g.add_argument("--pp", type=positive_int, default=1,
                       help="pipeline-parallel stages: each holds gpus / pp GPUs and 1 / pp of "
                            "the layers; pp micro-batches in flight")
    g.add_argument("--mesh", default=None, metavar="RxC",
                   help="a 2D device mesh of a hardware file with a [mesh] section (rows x "
                        "columns, e.g. 4x8): --gpus = R x C, TP along the non-dispatch axis, EP "
                        "over every device, --a2a ring-mcast")
    g.add_argument("--dispatch-axis", choices=("rows", "cols"), default=None,
                   help="mesh axis the experts are dispatched along (DP / EP; default rows, as "
                        "Tenstorrent's DeepSeek-V3 mesh study); TP runs along the other")
    g.add_argument("--weights", default="bf16", metavar="FORMAT",
                   help="bf16, fp8, fp4, mxfp4, nvfp4, w4a16, w4a8 or int8 for every GEMM "
                        "(fp4 family on an MoE model: the routed experts, FP8 elsewhere); by "
                        "users' names, any case: GGUF types (Q4_0, Q8_0, Q4_K, Q6_K, IQ4_XS, F16 "
                        "...) and llama.cpp file types (Q4_K_M, Q5_K_S ...), mlx-4bit, mlx-8bit, "
                        "awq, gptq, modelopt-fp8, modelopt-nvfp4; or per component: "
                        "moe=fp4,attn=fp8,dense=bf16 (docs/explanation/precision.md)")
    g.add_argument("--group-size", type=positive_int, default=None, metavar="N",
                   help="scale group of fp4, w4a16, w4a8, int8, awq, gptq or mlx weights "
                        "(default: the format's: 32 fp4, 128 w4a16/w4a8/awq/gptq, 64 mlx, per "
                        "channel int8)")
    g.add_argument("--dequant", choices=("fused", "separate"), default="fused",
                   help="weight-only formats (w4a16, w4a8 weights, fp4 without FP4 cores): "
                        "dequantize inside the GEMM (Marlin-style, default) or in a kernel of "
                        "its own before a BF16 GEMM")
    g.add_argument("--kv", choices=("bf16", "fp8"), default="bf16")
    if not search:
        g.add_argument("--a2a", choices=[m.value for m in A2AMode], default="auto")
    g.add_argument("--routing", default="uniform", help="uniform, balanced, zipf:S or freq:FILE.csv (measured per-expert assignment counts)")
    g.add_argument("--redundant-experts", type=nonneg_int, default=0)
    g.add_argument("--overlap", default="auto", metavar="SCHEDULE",
                   help="overlap schedule: auto (sbo for one micro-batch, tbo-sglang for two), "
                        "none, sbo, tbo-sglang, deepseek, ideal, or a schedule .toml "
                        "(docs/explanation/overlap.md)")
    add_timing(g)
    g.add_argument("--layout", choices=LAYOUTS, default="auto",
                   help="expert activation layout (auto: masked after DeepEP low-latency "
                        "dispatch, contiguous otherwise); the dispatch granularities of the "
                        "Metal Marlin single-device study: fused (= contiguous, all experts in "
                        "one kernel), grouped (one GEMM per active expert), per-token (one GEMV "
                        "per token and expert)")
    if search:
        g.add_argument("--expert-cache", type=cache_sizes, default=None, metavar="C[,C...]|auto",
                       help="expert-cache sizes to search (experts per MoE layer on the device, "
                            "the rest in host memory; --gpus 1): a list, or auto (0, powers of "
                            "two, quarters of E, E); default: all resident")
    else:
        g.add_argument("--expert-cache", type=nonneg_int, default=None, metavar="C",
                       help="experts per MoE layer resident in device memory, the rest in host "
                            "memory (one device, --ep 1; default: all resident)")
    g.add_argument("--cache-policy", choices=("static-top", "lfu", "lru"), default="static-top",
                   help="which experts the cache holds (default static-top: the most popular)")
    g.add_argument("--prefetch", action="store_true",
                   help="expert copies overlap the layer's compute (the next router is known)")
    g.add_argument("--expert-placement", choices=("stream", "host-compute"), default="stream",
                   help="cold experts copied to the device per use (stream) or computed by the "
                        "host CPU (host-compute, needs a [host] section in the hardware file)")
    g.add_argument("--mtp", type=nonneg_int, default=0, metavar="N",
                   help="speculative decoding: N draft tokens per decode step (DeepSeek MTP; "
                        "an EAGLE-style one-layer draft for other models)")
    g.add_argument("--accept", type=probability, default=None, metavar="P",
                   help="acceptance of each draft token (default 0.85: DeepSeek-V3 report "
                        "sec. 5.4.3)")
    g.add_argument("--accept-length", type=positive_float, default=None, metavar="L",
                   help="instead of --accept: tokens one verify step emits per request, the "
                        "accepted drafts plus the bonus token (the 'accept len' engines log), "
                        "between 1 and --mtp + 1")
    g.add_argument("--memory-option", action="append", default=[], metavar="KEY=VALUE",
                   help="override a serving-engine memory default (repeatable; moesym memory "
                        "--help lists the keys): KV block size, reserve, MTP layers, buffers")


class _Given(argparse.Action):
    """Stores the value and notes that the flag was given (``args.given``), so a flag that has
    no effect is said even when its value equals the default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", set()) | {self.dest}


def add_workload(p: argparse.ArgumentParser, phase: bool = True, required_phase: bool = True) -> None:
    g = p.add_argument_group("workload")
    if phase:
        g.add_argument("--phase", choices=("prefill", "decode", "serve"), required=required_phase,
                       default=None if required_phase else "decode",
                       help="serve: aggregated serving, decode steps with prefill chunks "
                            "(needs --isl, --osl, --batch)")
    g.add_argument("--batch", type=positive_int, default=None,
                   help="decode requests per attention data-parallel rank (default 1)")
    g.add_argument("--tokens", type=positive_int, default=None,
                   help="prefill tokens per attention data-parallel rank per step")
    g.add_argument("--context", type=positive_int, default=4096, action=_Given,
                   help="prompt length (prefill) or mean KV length (decode)")
    add_serve_lengths(g, "prefill chunk length (serve: ")
    g.add_argument("--context-dist", default=None, metavar="DIST",
                   help="decode: KV lengths as a distribution (fixed:N, uniform:A:B, "
                        "lognormal:MEAN:SIGMA or a file of lengths) instead of one --context")
    g.add_argument("--isl-dist", default=None, metavar="DIST",
                   help="prefill and serve: prompt lengths as a distribution (as --context-dist)")
    g.add_argument("--prefix-hit", type=probability, default=0.0, metavar="F",
                   help="prefill, serve: share of each prompt found in the prefix cache (not "
                        "recomputed; attention still reads its KV)")


def add_serve_lengths(g, chunk_help: str = "serve: ") -> None:
    """--isl, --osl and --chunk of an aggregated-serving workload."""
    g.add_argument("--chunk", type=positive_int, default=None,
                   help=chunk_help + "prefill tokens per step per attention DP rank; default "
                                     "SGLang's by GPU memory)")
    g.add_argument("--isl", type=positive_int, default=None,
                   help="serve: input (prompt) tokens per request")
    g.add_argument("--osl", type=positive_int, default=None,
                   help="serve: output tokens per request")


def nonneg_float(text: str) -> float:
    return _finite(text, lambda v: v >= 0, "a number >= 0")


def pue_value(text: str) -> float:
    return _finite(text, lambda v: v >= 1, "a PUE >= 1 (facility power over IT power)")


#: the cost and power flags of a serving answer: (flag, type, metavar, help)
_COST_FLAGS = (
    ("--price", positive_float, "USD_PER_GPU_HOUR",
     "price per GPU-hour (default: the hardware file's [price] list price, if any; else cost "
     "keys are null with 'no price: pass --price')"),
    ("--capex", positive_float, "USD_PER_GPU",
     "owned hardware: purchase price per GPU (with --years and --power-price): USD per "
     "GPU-hour = capex / (years x 8760) + all-in watts per GPU x power price / 1000"),
    ("--years", positive_float, "N", "owned hardware: years the purchase is spread over"),
    ("--power-price", nonneg_float, "USD_PER_KWH", "owned hardware: electricity price"),
    ("--pue", pue_value, "PUE",
     "facility power usage effectiveness (>= 1; default: the hardware file's [power] pue, 1.3 "
     "for data-center GPUs, 1.0 for desk-side machines)"),
)


def add_cost(p: argparse.ArgumentParser) -> None:
    """Cost and power of a serving answer (moesym.numbers.economics)."""
    g = p.add_argument_group("cost and power (serving answers)")
    for flag, kind, meta, help_ in _COST_FLAGS:
        g.add_argument(flag, type=kind, default=None, metavar=meta, help=help_)


def pricing_from(args, applies: bool = True):
    """The :class:`moesym.numbers.economics.Pricing` the cost flags give; where the answer is
    not a serving one (``applies`` False) a given flag is said to have no effect."""
    pricing = Pricing(getattr(args, "price", None), getattr(args, "capex", None),
                      getattr(args, "years", None), getattr(args, "power_price", None),
                      getattr(args, "pue", None))
    if pricing.given and not applies:
        warnings.warn("--price, --capex, --years, --power-price and --pue cost a serving "
                      "answer and have no effect here (use --phase serve)", stacklevel=2)
    return pricing


def stages(d) -> str:
    """`` pp=N`` and `` cp=N`` of a deployment (an object or a result's dict) where set above
    1, for result headers ("" otherwise)."""
    get = (lambda k: d.get(k, 1)) if isinstance(d, dict) else (lambda k: getattr(d, k, 1))
    return "".join(f" {k}={get(k)}" for k in ("pp", "cp") if (get(k) or 1) > 1)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def model_hw_from(args) -> tuple[ModelSpec, HardwareSpec]:
    return load_model(args.model), load_hardware(args.hardware)


def inputs_from(args, phase: str | None = None, sharding: bool = True) -> tuple:
    """(model, hardware, deployment, workload) the flags name, through the validation stage
    (:func:`moesym.plan.rules.check_inputs`) before any model is built; ``sharding`` False
    for a searched deployment (optimize, sweep), whose sharding is checked per candidate."""
    model, hw = model_hw_from(args)
    dep, wl = deployment_from(args), workload_from(args, phase)
    if sharding:
        dep = eplb_slots(model, dep)
    check_inputs(model, hw, dep, wl, sharding=sharding)
    return model, hw, dep, wl


def node_gpus(args, hardware: str) -> int:
    """--gpus-per-node, or the named hardware file's ``gpus_per_node`` when it is not given."""
    return args.gpus_per_node or load_hardware(hardware).gpus_per_node


def _cache_flags_need_a_cache(args) -> None:
    """--prefetch, --cache-policy and --expert-placement without --expert-cache change nothing
    (every expert is resident): one warning line each."""
    if getattr(args, "expert_cache", None) is not None:
        return
    for flag, dest, default in (("--prefetch", "prefetch", False),
                                ("--cache-policy", "cache_policy", "static-top"),
                                ("--expert-placement", "expert_placement", "stream")):
        if getattr(args, dest, default) != default:
            warnings.warn(f"{flag} has no effect without --expert-cache (every expert is "
                          "resident on the device)", stacklevel=3)


def engine_from(args, hardware: str | None = None) -> str:
    """--engine, or the named hardware file's default engine when it is not given (default:
    the first of --hardware)."""
    if getattr(args, "engine", None):
        return args.engine
    return engine_for_format(load_hardware(hardware or args.hardware.split(",")[0].strip()),
                             getattr(args, "weights", None))


def deployment_from(args) -> Deployment:
    """The deployment the flags name (searched flags given as lists keep their defaults; a
    sweep over several hardware files takes the first's node size and sets each's itself)."""
    one = lambda v, default: default if isinstance(v, list) or v is None else v  # noqa: E731
    mesh, gpus, tp = _mesh_from(args, one(args.tp, 1))
    _cache_flags_need_a_cache(args)
    derived = {"tp"} if mesh is not None and tp != one(args.tp, 1) else set()
    dep = Deployment(gpus=gpus, derived=frozenset(derived), gpus_per_node=node_gpus(args, args.hardware.split(",")[0].strip()),
                      tp=tp, mesh=mesh,
                      dispatch_axis=getattr(args, "dispatch_axis", None) or "rows",
                      ep=one(args.ep, None), micro_batches=one(args.micro_batches, 1),
                      pp=one(getattr(args, "pp", 1), 1), cp=one(getattr(args, "cp", 1), 1),
                      weights=args.weights, group_size=getattr(args, "group_size", None) or 0,
                      kv=args.kv, a2a=A2AMode(one(args.a2a, "auto")),
                      routing=Routing.parse(args.routing),
                      redundant_experts=args.redundant_experts, layout=args.layout,
                      overlap=args.overlap, timing=args.timing, mtp=getattr(args, "mtp", 0),
                      expert_cache=one(getattr(args, "expert_cache", None), None)
                      if getattr(args, "expert_cache", None) != "auto" else None,
                      cache_policy=getattr(args, "cache_policy", "static-top"),
                      prefetch=getattr(args, "prefetch", False),
                      expert_placement=getattr(args, "expert_placement", "stream"),
                      dequant=getattr(args, "dequant", "fused"),
                      accept=_accept(args),
                      memory_options=_memory_option_pairs(getattr(args, "memory_option", [])),
                      engine=engine_from(args),
                      cuda_graphs=not getattr(args, "eager", False),
                      prefill_graphs={"on": True, "off": False}.get(
                          getattr(args, "prefill_graphs", None)))

    check_format(load_engine(dep.engine).name, dep.weights)  # what the engine loads
    return dep


def _accept(args):
    """--accept, or the acceptance that gives --accept-length tokens per verify step."""
    length = getattr(args, "accept_length", None)
    if length is None:
        return getattr(args, "accept", None)
    if getattr(args, "accept", None) is not None:
        raise MoesymError("--accept and --accept-length both set the drafts' acceptance: give "
                          "one")
    from ..specs.speculative import accept_from_length

    return accept_from_length(getattr(args, "mtp", 0), length)


def _mesh_from(args, tp: int) -> tuple:
    """(mesh, gpus, tp) from --mesh: the mesh's devices are the GPUs and TP defaults to the
    length of the non-dispatch axis (a --gpus or --tp that disagrees is refused by the
    deployment in one line)."""
    text = getattr(args, "mesh", None)
    if text is None:
        if getattr(args, "dispatch_axis", None) is not None:
            warnings.warn(f"--dispatch-axis {args.dispatch_axis} has no effect without --mesh "
                          "(it names the axis of a 2D device mesh the experts are dispatched "
                          "along)", stacklevel=3)
        return None, args.gpus, tp
    r, c = parse_shape(text)
    gpus = r * c if args.gpus == 1 else args.gpus
    if tp == 1:
        tp = c if (getattr(args, "dispatch_axis", None) or "rows") == "rows" else r
    return (r, c), gpus, tp


def memory_options(items: list[str]) -> MemoryOptions:
    """MemoryOptions from ``KEY=VALUE`` strings, each converted to its field's type.

    >>> memory_options(["block_size=64", "kv_fragmentation=false"]).block_size
    64
    """
    fields = {f.name: f for f in dataclasses.fields(MemoryOptions)}
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise MoesymError(f"--memory-option {item!r}: use KEY=VALUE with KEY one of "
                              f"{', '.join(fields)}")
        kind = type(getattr(MemoryOptions(), key))
        try:
            if kind is bool:
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                values[key] = text.lower() in ("true", "1", "yes")
            elif kind is int:
                x = float(text)
                if not x.is_integer():  # 1.7 blocks is no block size: refuse, never truncate
                    raise ValueError
                values[key] = int(x)
            else:
                values[key] = kind(text)
        except (ValueError, OverflowError):
            what = {bool: "true or false", int: "an integer", float: "a number"}.get(kind, "text")
            raise MoesymError(f"--memory-option {item!r}: {key} takes {what}") from None
    try:
        return MemoryOptions(**values)
    except (TypeError, ValueError) as exc:
        raise MoesymError(f"--memory-option: {exc}") from None


def _memory_option_pairs(items: list[str]) -> tuple:
    """``KEY=VALUE`` flags as the deployment's (name, value) pairs, checked by building the
    options (a bad key or value is a one-line error)."""
    if not items:
        return ()
    opts = memory_options(items)
    given = {item.partition("=")[0].strip().replace("-", "_") for item in items}
    return tuple((f.name, getattr(opts, f.name)) for f in dataclasses.fields(opts)
                 if f.name in given)


def workload_from(args, phase: str | None = None) -> Workload:
    """The workload the flags name; a flag of the other phase is said in a one-line warning
    (it has no effect there), never ignored in silence."""
    ph = Phase(phase or args.phase)
    hit = getattr(args, "prefix_hit", 0.0) or 0.0
    lengths = _lengths_from(args, ph)
    if hit and ph is Phase.DECODE:
        warnings.warn("--prefix-hit skips prompt tokens and has no effect on a decode step "
                      "(use --phase prefill or serve)", stacklevel=2)
    if ph is not Phase.SERVE:
        for flag in ("isl", "osl"):
            if getattr(args, flag, None) is not None:
                warnings.warn(f"--{flag} sets an aggregated-serving workload and has no effect "
                              f"on a {ph.value} step (use --phase serve)", stacklevel=2)
    if ph is Phase.SERVE:
        missing = [f"--{f}" for f in ("isl", "osl") if getattr(args, f, None) is None]
        if missing:
            raise MoesymError(f"--phase serve needs {' and '.join(missing)} (prompt and output "
                              f"tokens per request), e.g. --isl 1024 --osl 2048")
        if getattr(args, "tokens", None) is not None:
            warnings.warn("--tokens has no effect on --phase serve: the prefill tokens per step "
                          "follow from --batch, --isl and --osl (--chunk caps them)", stacklevel=2)
        if "context" in getattr(args, "given", ()):
            warnings.warn("--context has no effect on --phase serve: the mean KV length is "
                          "--isl + --osl / 2", stacklevel=2)
        return Workload(ph, batch=args.batch or 1, isl=args.isl, osl=args.osl,
                        chunk=getattr(args, "chunk", None) or 0, prefix_hit=hit, lengths=lengths)
    if ph is Phase.PREFILL:
        if getattr(args, "batch", None) is not None:
            warnings.warn("--batch counts decode requests and has no effect on a prefill step, "
                          "which takes --tokens (tokens per step) and --context (prompt length)",
                          stacklevel=2)
        return Workload(ph, tokens=args.tokens or args.context, context=args.context,
                        chunk=getattr(args, "chunk", None) or 0, prefix_hit=hit, lengths=lengths)
    for flag in ("tokens", "chunk"):
        if getattr(args, flag, None) is not None:
            warnings.warn(f"--{flag} sets a prefill step and has no effect on a decode step, "
                          "which takes --batch (requests) and --context (mean KV length)",
                          stacklevel=2)
    return Workload(ph, batch=args.batch or 1, context=args.context, lengths=lengths)


def _lengths_from(args, ph: Phase) -> tuple:
    """The representative lengths of the phase's distribution flag (the other phase's flag
    is said to have no effect)."""

    own, other = ("context_dist", "isl_dist") if ph is Phase.DECODE else ("isl_dist", "context_dist")
    if getattr(args, other, None) is not None:
        warnings.warn(f"--{other.replace('_', '-')} has no effect on a {ph.value} step (it takes "
                      f"--{own.replace('_', '-')})", stacklevel=3)
    text = getattr(args, own, None)
    if text is None:
        return ()
    single = "isl" if ph is Phase.SERVE else "context"
    if (getattr(args, "isl", None) is not None if single == "isl"
            else "context" in getattr(args, "given", ())):
        warnings.warn(f"--{single} has no effect: --{own.replace('_', '-')} gives the lengths "
                      "(its mean stands for them)", stacklevel=3)
    if ph is Phase.SERVE and getattr(args, "isl", None) is None:
        args.isl = 1  # replaced by the distribution's mean
    return representative(text, "--" + own.replace("_", "-"))


def _json_default(o):
    if hasattr(o, "item"):  # a NumPy scalar
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def plain(obj):
    """``obj`` as JSON reads it back (NumPy scalars as Python numbers, tuples as lists): what
    a JSON file stores of it and ``emit_json`` prints the same."""
    return json.loads(json.dumps(obj, default=_json_default))


def emit_json(obj) -> None:
    try:
        text = json.dumps(obj, default=_json_default, allow_nan=False)
    except ValueError as exc:
        raise MoesymError(f"result is not finite: {exc}") from None
    sys.stdout.write(text + "\n")


def print_launch(launch: dict, indent: str = "") -> None:
    """An engine launch command (:func:`moesym.engines.emit.launch_command`) and its notes, as text."""
    print(f"{indent}{launch['engine']}: {launch['command']}")
    if "bench" in launch:  # llama-bench / mlx_lm.generate with the same settings
        print(f"{indent}{launch['engine']} bench: {launch['bench']}")
    for note in launch["notes"]:
        print(f"{indent}  note: {note}")


def fmt_s(x: float) -> str:
    """Seconds in a readable unit (edge conversion only)."""
    if x >= 1:
        return f"{x:.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3f} ms"
    return f"{x * 1e6:.1f} us"
