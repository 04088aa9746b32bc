"""Weight storage formats: bytes per element with scale factors, and the FP4 capability matrix.

Scale-factor overheads (bytes per weight element):

* bf16: none.
* fp8: DeepSeek-style 128 x 128 weight blocks with one fp32 scale each: 4 / 16384.
* fp4: MXFP4, one E8M0 (1-byte) scale per 32 elements: 1 / 32; NVFP4, one E4M3 (1-byte) scale per
  16 elements: 1 / 16 (its single fp32 per-tensor scale is negligible and ignored).

Blocks are treated as dense (a matrix whose sides are not multiples of 128 pays the overhead of
its elements, not of whole padded blocks).

Capability matrix (seed 002 section 6): an FP4 checkpoint on a GPU without FP4 tensor cores
(Hopper: H100, H800, H200, H20) is expanded to FP8 at load time, so its bytes double; Blackwell
(B200, GB200) keeps FP4 in HBM.

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
from ..specs.deployment import DTYPE_BYTES
from ..specs.hardware import HardwareSpec

__all__ = [
    "CAPABILITY_MATRIX",
    "WeightFormats",
    "storage_format",
    "weight_bytes_per_param",
    "weight_formats",
]

_FP8_BLOCK_ELEMENTS = 128 * 128
_FP32_SCALE_BYTES = 4.0
_FP4_SCALE_BYTES = 1.0  # E8M0 (MXFP4) or E4M3 (NVFP4)

# (checkpoint format, GPU generation) -> (runtime storage format, HBM multiplier on data bytes)
CAPABILITY_MATRIX = {
    ("fp4", "blackwell"): ("fp4", 1.0),
    ("fp4", "hopper"): ("fp8", 2.0),  # pre-expanded to FP8: expert memory doubles
    ("fp8", "blackwell"): ("fp8", 1.0),
    ("fp8", "hopper"): ("fp8", 1.0),
    ("bf16", "blackwell"): ("bf16", 1.0),
    ("bf16", "hopper"): ("bf16", 1.0),
}


def weight_bytes_per_param(fmt: str, fp4_scale_group: int = 32) -> float:
    """Bytes per weight element stored as ``fmt``, scale factors included.

    bf16: 2; fp8: 1 + 4 / (128 * 128); fp4: 0.5 + 1 / g with g = 32 (MXFP4) or 16 (NVFP4).

    >>> weight_bytes_per_param("bf16")
    2.0
    """
    if fmt not in DTYPE_BYTES:
        raise SpecError(f"weight format {fmt!r}: use bf16, fp8 or fp4")
    if fmt == "fp8":
        return DTYPE_BYTES[fmt] + _FP32_SCALE_BYTES / _FP8_BLOCK_ELEMENTS
    if fmt == "fp4":
        if fp4_scale_group not in (16, 32):
            raise SpecError(f"fp4 scale group {fp4_scale_group!r}: use 32 (MXFP4) or 16 (NVFP4)")
        return DTYPE_BYTES[fmt] + _FP4_SCALE_BYTES / fp4_scale_group
    return DTYPE_BYTES[fmt]


def _generation(hw: HardwareSpec) -> str:
    return "blackwell" if "fp4" in hw.peaks_flops else "hopper"


def storage_format(checkpoint: str, hw: HardwareSpec) -> str:
    """Format a ``checkpoint``-format weight occupies in HBM on ``hw`` (capability matrix)."""
    return CAPABILITY_MATRIX[(checkpoint, _generation(hw))][0]


@dataclass(frozen=True)
class WeightFormats:
    """Storage format of each weight class as held in HBM."""

    routed: str  # routed experts
    gemm: str  # attention projections, shared experts, dense FFN
    high_precision: str = "bf16"  # embeddings, LM head, router, norms


def weight_formats(weights: str, hw: HardwareSpec, is_moe: bool = True) -> WeightFormats:
    """Formats for ``--weights``: bf16 and fp8 apply to every GEMM weight; fp4 (as in MXFP4 and
    NVFP4 MoE checkpoints: gpt-oss, DeepSeek-R1-FP4, DeepSeek-V4) applies to the routed experts
    (the FFN of a dense model) while attention and shared experts stay FP8. Embeddings, LM head,
    router and norms stay BF16. The capability matrix then maps FP4 to FP8 on Hopper.

    >>> from moesym.specs.hardware import load_hardware
    >>> weight_formats("fp4", load_hardware("h100"))
    WeightFormats(routed='fp8', gemm='fp8', high_precision='bf16')
    """
    if weights not in DTYPE_BYTES:
        raise SpecError(f"--weights {weights!r}: use bf16, fp8 or fp4")
    routed = storage_format(weights, hw)
    gemm = "fp8" if (weights == "fp4" and is_moe) else routed
    return WeightFormats(routed=routed, gemm=gemm)
