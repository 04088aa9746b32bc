"""Validation against published end-to-end measurements (``moesym validate``).

Each case is a published measurement with its exact setup, written here as data with its
source. Efficiencies and kernel parameters come from kernel-level tables and overheads are
documented defaults; none of them is fitted on these cases.

One number is fitted end to end: the serving efficiency ``eta_sv`` of a GPU (hardware file
``[efficiency] serving``), the fraction of the modeled step speed that a serving engine sustains.
Kernel tables time each kernel alone; a served step also pays inter-kernel gaps, host scheduling
and sustained (not boost) clocks, which no kernel table shows. For one GPU with cases ``j``::

    eta_sv = min(1, exp(mean_j log(measured_j / modeled_j)))     (modeled at eta_sv = 1)

the least-squares fit in log throughput, capped at 1 (an engine does not beat its own kernels).
Every case is reported with the factor fitted on the *other* cases of its GPU (leave-one-out),
never on itself; a GPU with a single case gets 1. Uncalibrated numbers are reported beside.

>>> round(fit_serving([100.0, 90.0], [110.0, 100.0]), 4)  # exp(mean(log(100/110), log(0.9)))
0.9045
>>> fit_serving([120.0], [100.0]), fit_serving([], [])  # capped at 1; no data: 1
(1.0, 1.0)

>>> [c.name for c in CASES][:2]
['deepseek-v3-prefill-h800-ep32', 'deepseek-v3-decode-h800-ep128']
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SpecError
from ..io.resources import data_dir
from ..model.predictor import predict
from ..readers.model import load_model
from ..serving import simulate
from ..serving.clients import Client, range_ratio
from ..specs.deployment import A2AMode, Deployment, Phase, Workload
from ..specs.hardware import load_hardware

__all__ = ["Case", "CASES", "LLAMA_BENCH_TABLE", "SERVING_CASES", "ServingCase", "fit_serving",
           "kernel_heldout", "load_cases", "run_case", "serving_fits", "single_device_cases",
           "validate", "validate_serving"]

_INFERSIM = ("InferSim README (alibaba/InferSim), table of actual throughput measured on "
             "SGLang deployments")


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    hardware: str
    deployment: Deployment
    workload: Workload
    measured: float
    metric: str = "tokens_per_gpu_s"
    source: str = _INFERSIM
    setup: str = ""
    notes: str = ""
    infersim_error: float | None = None  # InferSim's own signed error on this case, for comparison
    extra: dict = field(default_factory=dict)


CASES: tuple[Case, ...] = (
    Case("deepseek-v3-prefill-h800-ep32", "deepseek-v3", "h800",
         Deployment(gpus=32, ep=32, tp=1, weights="fp8", micro_batches=2,
                    a2a=A2AMode.DEEPEP_NORMAL),
         Workload(Phase.PREFILL, tokens=16384, context=4096), 7839.0,
         setup="H800, EP32 over 4 nodes, attention DP (TP1), FP8 GEMMs, DeepEP normal, two "
               "micro-batches, 16384 tokens per GPU per step, 4096-token prompts",
         infersim_error=0.15),
    Case("deepseek-v3-decode-h800-ep128", "deepseek-v3", "h800",
         Deployment(gpus=128, ep=128, tp=1, weights="fp8", micro_batches=2,
                    a2a=A2AMode.DEEPEP_LL),
         Workload(Phase.DECODE, batch=128, context=4989), 2324.0,
         setup="H800, EP128 over 16 nodes, FP8, DeepEP low-latency, two micro-batches, 128 "
               "requests per GPU, mean KV length 4989",
         infersim_error=0.15),
    Case("qwen3-30b-a3b-prefill-h20", "qwen3-30b-a3b", "h20", Deployment(gpus=1),
         Workload(Phase.PREFILL, tokens=16384, context=4096), 16594.0,
         setup="H20, 1 GPU, BF16, 16384 tokens per step, 4096-token prompts", infersim_error=0.04),
    Case("qwen3-30b-a3b-decode-h20-ep4", "qwen3-30b-a3b", "h20", Deployment(gpus=4, ep=4, tp=1),
         Workload(Phase.DECODE, batch=100, context=4096 + 2048 // 2), 2749.0,
         setup="H20, 4 GPUs (attention DP4, EP4), BF16, 100 requests per GPU, prompt 4096, "
               "output 2048 (mean KV length 4096 + 2048/2)", infersim_error=0.15),
    Case("qwen3-8b-prefill-h20-fp8", "qwen3-8b", "h20", Deployment(gpus=1, weights="fp8"),
         Workload(Phase.PREFILL, tokens=16384, context=4096), 15061.0,
         setup="H20, 1 GPU, FP8, 16384 tokens per step, 4096-token prompts", infersim_error=0.08),
    Case("qwen3-8b-decode-h20-fp8", "qwen3-8b", "h20", Deployment(gpus=1, weights="fp8"),
         Workload(Phase.DECODE, batch=64, context=4096 + 2048 // 2), 2682.0,
         setup="H20, 1 GPU, FP8, 64 requests, prompt 4096, output 2048 (mean KV length "
               "4096 + 2048/2)", infersim_error=-0.04),
)


# --- one device: llama.cpp's llama-bench on LLaMA 7B (pp512: a 512-token prompt in one step;
# tg128: 128 tokens generated at batch 1 from an empty cache, mean KV length 64)
_LLAMA_BENCH = "llama.cpp llama-bench (ggml-org/llama.cpp)"
_M2_ULTRA = f"{_LLAMA_BENCH} PR #2917, master column (2023-08-30): Apple M2 Ultra, Metal"
_RTX_4090 = f"{_LLAMA_BENCH} PR #4766 (2024-01-10, codellama-7b): NVIDIA RTX 4090, CUDA"
#: (hardware, GGUF type, --weights format, pp512 tokens/s, tg128 tokens/s or None, source)
LLAMA_BENCH_TABLE = (
    ("m2-ultra", "Q8_0", "q8_0", 629.07, 62.05, _M2_ULTRA),
    ("m2-ultra", "Q4_0", "q4_0", 629.60, 88.54, _M2_ULTRA),
    ("m2-ultra", "Q4_1", "q4_1", 631.94, 83.63, _M2_ULTRA),
    ("rtx-4090", "F16", "bf16", 11048.22, 61.03, _RTX_4090),
    ("rtx-4090", "Q8_0", "q8_0", 7664.00, 98.13, _RTX_4090),
    ("rtx-4090", "Q4_0", "q4_0", 7979.85, None, _RTX_4090),
)
TG_CONTEXT = 64  # mean KV length of tg128 from an empty cache
# both measured builds launched every kernel from the host: llama.cpp's CUDA graphs came later
# (the llama.cpp that llama-cpp-python 0.2.29 vendors, commit 4483396 of 2024-01-15, five days
# after PR #4766's table, has no cudaGraph in ggml-cuda.cu; today's replays decode graphs,
# moesym.engines' llama.cpp profile); Metal has no CUDA graphs at all
LLAMA_BENCH_CUDA_GRAPHS = False


def single_device_cases(engine: str = "llama.cpp") -> tuple[Case, ...]:
    """:data:`LLAMA_BENCH_TABLE` as cases: pp512 (prefill of 512 tokens) and tg128 (decode at
    batch 1) per device and format, on one device with ``engine``'s kernels."""
    out = []
    for hw, gguf, fmt, pp, tg, source in LLAMA_BENCH_TABLE:
        dep = Deployment(gpus=1, weights=fmt, engine=engine, cuda_graphs=LLAMA_BENCH_CUDA_GRAPHS)
        out.append(Case(f"llama-7b-pp512-{hw}-{gguf}", "llama-7b", hw, dep,
                        Workload(Phase.PREFILL, tokens=512, context=512), pp, source=source,
                        setup=f"{hw}, LLaMA 7B {gguf}, llama-bench pp512"))
        if tg is not None:
            out.append(Case(f"llama-7b-tg128-{hw}-{gguf}", "llama-7b", hw, dep,
                            Workload(Phase.DECODE, batch=1, context=TG_CONTEXT), tg,
                            source=source, setup=f"{hw}, LLaMA 7B {gguf}, llama-bench tg128"))
    return tuple(out)


_THROUGHPUT = {"tokens_per_gpu_s"}
_TIMES = {"step_time_s", "tpot_s", "ttft_s"}
_NOT_IN = {Phase.DECODE: ("ttft_s",), Phase.PREFILL: ("tpot_s",)}  # serve reports both


def _speed_ratio(metric: str, measured: float, modeled: float) -> float:
    """measured / modeled speed: throughput as is, times inverted."""
    return measured / modeled if metric in _THROUGHPUT else modeled / measured


def _at_serving(metric: str, value: float, frac: float) -> float:
    """``value`` of ``metric`` when the speed is multiplied by ``frac`` (times scale by 1/frac)."""
    return value * frac if metric in _THROUGHPUT else value / frac


def fit_serving(measured, modeled, metrics=None) -> float:
    """Serving efficiency fitted on cases (module docstring): 1 when there are none."""
    metrics = metrics or ["tokens_per_gpu_s"] * len(measured)
    logs = [math.log(_speed_ratio(m, a, b)) for m, a, b in zip(metrics, measured, modeled)]
    if not logs:
        return 1.0
    return min(1.0, math.exp(sum(logs) / len(logs)))


def run_case(case: Case, timing: str | None = None) -> dict:
    """One case modeled at eta_sv = 1 (``modeled``) plus the hardware file's own eta_sv, on the
    named time model (``kernel`` or ``roofline``; None: the case's deployment's)."""
    hw = load_hardware(case.hardware)
    dep = case.deployment if timing is None else replace(case.deployment, timing=timing)
    r = predict(load_model(case.model), hw, dep, case.workload, memory=False)  # moesym predict's
    shipped = r["serving_frac"]
    modeled = _at_serving(case.metric, r[case.metric], 1 / shipped)  # undo the file's eta_sv
    return {"name": case.name, "metric": case.metric, "measured": case.measured,
            "hardware": hw.name, "modeled": modeled, "shipped_serving_frac": shipped,
            "source": case.source, "setup": case.setup, "infersim_error": case.infersim_error,
            "bound": r["bound"],
            "step_time_s": _at_serving("step_time_s", r["step_time_s"], 1 / shipped)}


def _apply(r: dict, frac: float, fitted_on: list[str]) -> dict:
    m, meas, raw = r["metric"], r["measured"], r["modeled"]
    pred = _at_serving(m, raw, frac)
    out = {k: v for k, v in r.items() if k != "modeled"}
    out.update(predicted=pred, error=(pred - meas) / meas, predicted_uncalibrated=raw,
               error_uncalibrated=(raw - meas) / meas, serving_frac=frac,
               serving_fitted_on=fitted_on,
               step_time_s=_at_serving("step_time_s", r["step_time_s"], frac))
    return out


def validate(timing: str | None = None, cases=CASES) -> list[dict]:
    """Run every case on the named time model (``kernel``, the default, or ``roofline``). Each
    case's ``predicted`` uses eta_sv fitted on the other cases of its GPU (leave-one-out);
    ``predicted_uncalibrated`` is the model at eta_sv = 1."""
    raw = [run_case(c, timing) for c in cases]
    out = []
    for i, r in enumerate(raw):
        others = [o for j, o in enumerate(raw) if j != i and o["hardware"] == r["hardware"]]
        frac = fit_serving([o["measured"] for o in others], [o["modeled"] for o in others],
                           [o["metric"] for o in others])
        out.append(_apply(r, frac, [o["name"] for o in others]))
    return out


def serving_fits(results: list[dict]) -> dict[str, dict]:
    """eta_sv per GPU fitted on all of its cases (what a hardware file should ship), from
    :func:`validate` results."""
    by_hw: dict[str, list[dict]] = {}
    for r in results:
        by_hw.setdefault(r["hardware"], []).append(r)
    return {hw: {"serving_frac": fit_serving([r["measured"] for r in rs],
                                             [r["predicted_uncalibrated"] for r in rs],
                                             [r["metric"] for r in rs]),
                 "cases": [r["name"] for r in rs],
                 "shipped": rs[0]["shipped_serving_frac"]}
            for hw, rs in by_hw.items()}


_CASE_KEYS = {"name", "model", "hardware", "deployment", "workload", "measured", "metric", "source",
              "setup"}


def load_cases(path) -> tuple[Case, ...]:
    """Cases from a JSON file: a list of objects with ``name, model, hardware, deployment`` (the
    Deployment fields, e.g. ``{"gpus": 4, "ep": 4}``), ``workload`` (``{"phase": "decode",
    "batch": 100, "context": 5120}``), ``measured`` and optionally ``metric``
    (tokens_per_gpu_s, step_time_s, tpot_s or ttft_s), ``source`` and ``setup``."""
    p = Path(path)
    try:
        from ..io.text import read_text

        data = json.loads(read_text(p))
    except SpecError as exc:
        raise SpecError(f"--cases {exc}; pass a JSON list of cases") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"--cases {p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list) or not data:
        raise SpecError(f"--cases {p}: expected a non-empty JSON list of case objects")
    out = []
    for i, d in enumerate(data):
        where = f"--cases {p} case {i}"
        if not isinstance(d, dict):
            raise SpecError(f"{where}: expected an object with name, model, hardware, ...")
        unknown = set(d) - _CASE_KEYS
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                            f"allowed: {', '.join(sorted(_CASE_KEYS))}")
        for k in ("name", "model", "hardware", "deployment", "workload", "measured"):
            if k not in d:
                raise SpecError(f"{where}: missing key '{k}'")
        metric = d.get("metric", "tokens_per_gpu_s")
        if metric not in _THROUGHPUT | _TIMES:
            raise SpecError(f"{where}: metric {metric!r}; use one of "
                            f"{', '.join(sorted(_THROUGHPUT | _TIMES))}")
        m = d["measured"]
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m < math.inf:
            raise SpecError(f"{where}: measured must be a positive finite number, got {m!r}")
        try:
            dep = Deployment(**d["deployment"])
            wl = Workload(**d["workload"])
        except TypeError as exc:
            raise SpecError(f"{where}: {exc}") from None
        if metric in _NOT_IN.get(wl.phase, ()):
            raise SpecError(f"{where}: a {wl.phase.value} step has no {metric}; use "
                            f"tokens_per_gpu_s, step_time_s or "
                            f"{'tpot_s' if metric == 'ttft_s' else 'ttft_s'}")
        out.append(Case(str(d["name"]), str(d["model"]), str(d["hardware"]), dep, wl, float(m),
                        metric=metric, source=str(d.get("source", str(p))),
                        setup=str(d.get("setup", ""))))
    return tuple(out)


# -- serving under load: published benchmark runs, simulated (moesym simulate) -------------------
_INFERENCEX = ("SemiAnalysis InferenceX public runs (GitHub SemiAnalysisAI/InferenceX issue #870 "
               "and PR #1061)")


@dataclass(frozen=True)
class ServingCase:
    """A published serving benchmark at a fixed concurrency: ``measured`` maps a metric of
    ``moesym simulate``'s report (``output_tokens_per_gpu_s``, ``ttft_ms.mean``,
    ``tpot_ms.mean``, ``tpot_ms.p50``, ``tpot_ms.p99``) to its published value. The client:
    closed loop, ``num_prompts`` requests of ``isl`` / ``osl`` tokens."""

    name: str
    model: str
    hardware: str
    deployment: Deployment  # its engine's scheduler is simulated
    isl: int
    osl: int
    concurrency: int
    measured: dict
    source: str = _INFERENCEX
    setup: str = ""
    num_prompts: int = 0  # 0: 10 x concurrency (InferenceX's scripts: --num-prompts CONC x 10)
    # lengths drawn uniformly in [R N, N] (the benchmark's --random-range-ratio; 0: fixed N)
    range_ratio: float = 0.8


def _r1(c: int, measured: dict) -> ServingCase:
    return ServingCase(f"deepseek-r1-h200x8-sglang-c{c}", "deepseek-v3", "h200",
                       Deployment(gpus=8, tp=8, ep=1, weights="fp8", engine="sglang-0.5.9"),
                       1024, 1024, c, measured, setup="DeepSeek-R1-0528 FP8 (DeepSeek-V3 "
                       "architecture), 8 x H200, SGLang 0.5.7 (simulated as 0.5.9, the nearest "
                       "version read), TP8 EP1, 1024/1024, lengths in [0.8 N, N]")


def _oss(c: int, measured: dict) -> ServingCase:
    return ServingCase(f"gpt-oss-120b-mi300x-vllm-c{c}", "gpt-oss-120b", "mi300x",
                       Deployment(gpus=1, weights="moe=mxfp4,attn=bf16,dense=bf16", engine="vllm"),
                       1024, 1024, c, measured, setup="gpt-oss-120b (MXFP4 experts), 1 x "
                       "MI300X, vLLM 0.17.0 (ROCm), TP1, 1024/1024")


SERVING_CASES: tuple[ServingCase, ...] = (
    _r1(8, {"output_tokens_per_gpu_s": 74.6, "ttft_ms.mean": 330.6, "tpot_ms.mean": 12.8}),
    _r1(16, {"output_tokens_per_gpu_s": 111.9, "tpot_ms.mean": 17.2}),
    _r1(32, {"output_tokens_per_gpu_s": 151.1, "tpot_ms.mean": 25.6}),
    _r1(64, {"output_tokens_per_gpu_s": 223.6, "ttft_ms.mean": 423.1, "tpot_ms.mean": 34.6,
             "tpot_ms.p99": 37.0}),
    _oss(64, {"output_tokens_per_gpu_s": 2008.0, "tpot_ms.p50": 31.4}),
    _oss(128, {"output_tokens_per_gpu_s": 2990.0, "tpot_ms.p50": 41.3}),
    _oss(256, {"output_tokens_per_gpu_s": 4271.0, "tpot_ms.p50": 58.3}),
)


def validate_serving(cases=SERVING_CASES, seed: int = 0) -> list[dict]:
    """Each serving case simulated (:func:`moesym.serving.simulate`, the case's engine
    profile); one row per published metric with the signed relative error. Nothing is
    fitted on these cases."""

    rows = []
    for c in cases:
        client = Client(concurrency=c.concurrency, num_prompts=c.num_prompts or 10 * c.concurrency)
        isl, osl = ((range_ratio(c.isl, c.range_ratio), range_ratio(c.osl, c.range_ratio))
                    if c.range_ratio else (str(c.isl), str(c.osl)))
        r = simulate(load_model(c.model), load_hardware(c.hardware), c.deployment, client,
                     isl, osl, seed=seed, timeline_points=1)
        for metric, meas in c.measured.items():
            head, _, stat = metric.partition(".")
            pred = r[head][stat] if stat else r[head]
            rows.append({"name": c.name, "metric": metric, "measured": meas, "predicted": pred,
                         "error": (pred - meas) / meas, "source": c.source, "setup": c.setup,
                         "engine": c.deployment.engine, "concurrency": c.concurrency})
    return rows


def kernel_heldout() -> dict:
    """The kernel model's held-out error table (``bench_data/kernel_heldout.json``: per GPU and
    kernel class, median and 90th percentile of |model / measured - 1| on the measured shapes
    left out of each fit; written by ``benchmarks/kernel_fit_aic.py --heldout``)."""

    return json.loads((data_dir("bench_data") / "kernel_heldout.json").read_text())
