"""The one-screen Python API.

>>> import moesym as ms
>>> step = ms.build_step(ms.load_model("deepseek-v3"), ms.load_hardware("h800"),
...                      ms.Deployment(gpus=128, ep=128, weights="fp8", micro_batches=2),
...                      ms.Workload("decode", batch=128, context=4989))
>>> r = step.predict()
>>> sorted(r["per_layer_s"])[:3]
['attention_core', 'attention_proj', 'combine']
"""

from __future__ import annotations

from .model.predictor import predict as report
from .model.step import BREAKDOWN_KEYS, StepModel, build_step
from .plan.rules import check_inputs
from .readers.model import builtin_models, from_hf_config, load_model
from .specs.deployment import A2AMode, Deployment, Phase, Routing, Workload
from .specs.hardware import HardwareSpec, builtin_hardware, load_hardware
from .specs.model import ModelSpec
from .symbolic.symbols import S

__all__ = ["A2AMode", "BREAKDOWN_KEYS", "Deployment", "HardwareSpec", "ModelSpec", "Phase", "Routing",
           "S", "StepModel", "Workload", "build_step", "builtin_hardware", "builtin_models",
           "from_hf_config", "load_hardware", "load_model", "predict"]


def predict(model: str | ModelSpec, hardware: str | HardwareSpec, deployment: Deployment | None = None,
            workload: Workload | None = None, **workload_kw) -> dict:
    """Shortcut: load by name and return ``moesym predict``'s report (memory per GPU and
    whether it fits included; a serve workload's steady state)."""
    m = model if isinstance(model, ModelSpec) else load_model(model)
    h = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    wl = workload or Workload(**workload_kw)
    dep = deployment or Deployment()
    check_inputs(m, h, dep, wl)  # as the command line checks them, before any number
    return report(m, h, dep, wl)
