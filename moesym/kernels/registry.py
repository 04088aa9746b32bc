"""The time models a deployment names (``--timing``, ``Deployment.timing``): one class per
:class:`moesym.specs.time_models.TimeModelKind`, each built for a GPU by its ``named``.

>>> from moesym.specs.hardware import load_hardware
>>> type(time_model("kernel", load_hardware("h200"))).__name__
'KernelTiming'
>>> type(time_model("roofline", load_hardware("h200"))).__name__
'RooflineTiming'
"""

from __future__ import annotations

from ..specs.time_models import TimeModelKind, lookup
from .table_timing import TableTiming
from .time_model import RooflineTiming, TimeModel
from .timing import KernelTiming

__all__ = ["TIME_MODEL_CLASSES", "time_model"]

#: the class of each time model a deployment can name
TIME_MODEL_CLASSES: dict[TimeModelKind, type[TimeModel]] = {
    TimeModelKind.KERNEL: KernelTiming,
    TimeModelKind.ROOFLINE: RooflineTiming,
    TimeModelKind.TABLES: TableTiming,
}


def time_model(name: str, hw, moe_kernel: str | None = None) -> TimeModel:
    """The time model ``name`` names (:data:`moesym.specs.time_models.TIME_MODELS`) for GPU
    ``hw``: ``kernel``, the analytical kernel model with this GPU's calibration (what every
    command uses by default), ``roofline``, the plain roofline with named efficiency symbols (the
    teaching form), or ``tables:DIR``, measured kernel tables over the kernel model (bound to one
    configuration by ``build_step``). ``moe_kernel``: the fused-MoE backend the engine runs
    (:meth:`moesym.engines.EngineKernels.moe_kernel`), whose grouped-GEMM fields from the GPU's
    ``[moe_kernels]`` replace ``[kernel]``'s in the kernel model."""
    entry, argument = lookup(name)
    return TIME_MODEL_CLASSES[entry.kind].named(hw, moe_kernel, argument)
