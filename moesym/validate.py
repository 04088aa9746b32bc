"""Validation against published end-to-end measurements (``moesym validate``).

Each case is a published measurement with its exact setup, written here as data with its
source. Nothing in moesym is fitted on these cases: efficiencies and kernel parameters come
from kernel-level tables, overheads are documented defaults.

>>> [c.name for c in CASES][:2]
['deepseek-v3-prefill-h800-ep32', 'deepseek-v3-decode-h800-ep128']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model.step import build_step
from .specs.deployment import A2AMode, Deployment, Phase, Workload
from .specs.hardware import load_hardware
from .specs.model import load_model

__all__ = ["Case", "CASES", "run_case", "validate"]

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


def run_case(case: Case, timing=None) -> dict:
    step = build_step(load_model(case.model), load_hardware(case.hardware), case.deployment,
                      case.workload, timing=timing)
    r = step.predict()
    pred = r[case.metric]
    return {"name": case.name, "metric": case.metric, "measured": case.measured, "predicted": pred,
            "error": (pred - case.measured) / case.measured, "source": case.source,
            "setup": case.setup, "infersim_error": case.infersim_error, "bound": r["bound"],
            "step_time_s": r["step_time_s"]}


def validate(timing_factory=None) -> list[dict]:
    """Run every case; ``timing_factory(hardware)`` picks the time model (default: the step
    model's default)."""
    out = []
    for c in CASES:
        timing = timing_factory(load_hardware(c.hardware)) if timing_factory else None
        out.append(run_case(c, timing))
    return out
