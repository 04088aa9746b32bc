"""Weight storage formats as the memory model reads them: bytes per element with scale factors
and what each weight class occupies in HBM. The formats, their bytes and the capability rules
(an FP4 checkpoint on a GPU without FP4 tensor cores is expanded to FP8, seed 002 section 6; the
4-bit formats that kernels dequantize stay 4-bit) live in :mod:`moesym.specs.precision`, which the
step model reads too.

>>> from moesym.memory.formats import weight_bytes_per_param, storage_format
>>> weight_bytes_per_param("fp8")
1.000244140625
>>> weight_bytes_per_param("fp4"), weight_bytes_per_param("fp4", fp4_scale_group=16)
(0.53125, 0.5625)
>>> from moesym.specs.hardware import load_hardware
>>> storage_format("fp4", load_hardware("h100")), storage_format("fp4", load_hardware("b200"))
('fp8', 'fp4')
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from ..specs import precision
from ..specs.hardware import HardwareSpec

__all__ = ["WeightFormats", "storage_format", "weight_bytes_per_param", "weight_formats"]


def weight_bytes_per_param(fmt: str, fp4_scale_group: int = 32, group_size: int = 0) -> float:
    """Bytes per weight element stored as ``fmt``, scale factors included
    (:func:`moesym.specs.precision.bytes_per_element`; ``fp4_scale_group``: 32 for MXFP4, 16 for
    NVFP4, the memory option; ``group_size``: the deployment's ``--group-size``, which wins).

    >>> weight_bytes_per_param("bf16")
    2.0
    """
    if fmt == "fp4" and not group_size:
        if fp4_scale_group not in (16, 32):
            raise SpecError(f"fp4 scale group {fp4_scale_group!r}: use 32 (MXFP4) or 16 (NVFP4)")
        group_size = fp4_scale_group
    return precision.bytes_per_element(fmt, group_size)


def storage_format(checkpoint: str, hw: HardwareSpec) -> str:
    """Format a ``checkpoint``-format weight occupies in HBM on ``hw``."""
    return precision.storage_format(checkpoint, hw.peaks_flops)


@dataclass(frozen=True)
class WeightFormats:
    """Storage format of each weight class as held in HBM."""

    routed: str  # routed experts
    gemm: str  # attention projections
    dense: str = ""  # shared experts and dense FFN layers ("": as gemm)
    high_precision: str = "bf16"  # embeddings, LM head, router, norms


def weight_formats(weights: str, hw: HardwareSpec, is_moe: bool = True) -> WeightFormats:
    """Formats for ``--weights`` (one format, or per component; :class:`WeightRecipe`): a
    single 4-bit float format on an MoE model (MXFP4 and NVFP4 MoE checkpoints: gpt-oss,
    DeepSeek-R1-FP4, DeepSeek-V4) applies to the routed experts while attention, shared experts
    and dense layers stay FP8. Embeddings, LM head, router and norms stay BF16.

    >>> from moesym.specs.hardware import load_hardware
    >>> weight_formats("fp4", load_hardware("h100"))
    WeightFormats(routed='fp8', gemm='fp8', dense='fp8', high_precision='bf16')
    """
    r = precision.WeightRecipe.parse(weights, is_moe)
    if r.mix:  # a llama.cpp file type: its tensors' types vary (moesym.readers.gguf)
        return WeightFormats(routed=r.mix, gemm=r.mix, dense=r.mix, high_precision=r.mix)
    return WeightFormats(routed=storage_format(r.moe, hw), gemm=storage_format(r.attn, hw),
                         dense=storage_format(r.dense, hw))
