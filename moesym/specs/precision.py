"""Weight precision: the formats, their bytes, the tensor-core format their GEMMs run in, and
per-component recipes (``--weights moe=fp4,attn=fp8,dense=bf16``). The one home of these
numbers: the step model (bytes read, peak FLOP/s) and the memory model (bytes held) both read it.

Formats (``FORMATS``, data): bits per element, scale bytes per group of elements, and the
tensor-core input format of their GEMMs.

* ``bf16``: 16 bits.
* ``fp8``: 8 bits, DeepSeek-style 128 x 128 blocks with one fp32 scale (4 / 16384 bytes).
* ``fp4``: 4 bits, one 1-byte scale per 32 (MXFP4; ``--group-size 16``: NVFP4). On a GPU without
  FP4 tensor cores it is expanded to FP8 at load time (seed 002 section 6: expert memory doubles
  on Hopper).
* ``mxfp4`` / ``nvfp4``: the same 4-bit floats with their own groups (32 and 16), held in 4 bits
  on any GPU: where no FP4 tensor cores exist the kernel dequantizes them to BF16 on the fly
  (gpt-oss's MXFP4 experts on Hopper, seed 003), so the GEMMs run at the BF16 peak.
* ``w4a16``: 4-bit integer weights with an fp16 scale and an fp16 zero point per group (default
  128, asymmetric GPTQ / AWQ: 4.25 bits per weight), dequantized in the kernel (Marlin-style,
  16-row M tiles): 4-bit reads, BF16 tensor cores.
* ``w4a8``: 4-bit integer weights, 8-bit activations (FP8 where the GPU has it, else INT8).
* ``int8``: 8-bit integer weights and activations (W8A8), one fp32 scale per output channel.

>>> bytes_per_element("fp8"), bytes_per_element("fp4"), bytes_per_element("w4a16")
(1.000244140625, 0.53125, 0.53125)
>>> bytes_per_element("w4a16", group_size=32)
0.625
>>> r = WeightRecipe.parse("moe=fp4,attn=fp8,dense=bf16", is_moe=True)
>>> r.moe, r.attn, r.dense
('fp4', 'fp8', 'bf16')
>>> WeightRecipe.parse("fp4", is_moe=True).attn  # a 4-bit float MoE checkpoint keeps FP8 elsewhere
'fp8'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError

__all__ = ["FORMATS", "COMPONENTS", "WeightFormat", "WeightRecipe", "bytes_per_element",
           "storage_format", "compute_format", "quantizes_activations"]


@dataclass(frozen=True)
class WeightFormat:
    bits: float  # data bits per element
    scale_bytes: float  # bytes of one scale factor
    group: int  # elements per scale (0: per output channel, negligible)
    compute: str  # tensor-core input format of its GEMMs, where the GPU has it
    fallback: str  # where it does not: "expand" (stored as FP8) or the compute format used
    grouped: bool  # --group-size applies


FORMATS = {
    "bf16": WeightFormat(16, 0, 0, "bf16", "bf16", False),
    "fp8": WeightFormat(8, 4, 128 * 128, "fp8", "bf16", False),
    "fp4": WeightFormat(4, 1, 32, "fp4", "expand", True),
    "mxfp4": WeightFormat(4, 1, 32, "fp4", "bf16", False),
    "nvfp4": WeightFormat(4, 1, 16, "fp4", "bf16", False),
    "w4a16": WeightFormat(4, 4, 128, "bf16", "bf16", True),
    "w4a8": WeightFormat(4, 2, 128, "fp8", "int8", True),
    "int8": WeightFormat(8, 4, 0, "int8", "bf16", True),
}

#: the GEMM weight classes a recipe sets: attention projections; routed experts; shared experts,
#: dense FFN layers and a dense model's FFN. Embeddings, LM head, router and norms stay BF16.
COMPONENTS = ("attn", "moe", "dense")

_FLOAT4 = ("fp4", "mxfp4", "nvfp4")


def _format(name: str, flag: str = "--weights") -> WeightFormat:
    if name not in FORMATS:
        raise SpecError(f"{flag} {name!r}: use one of {', '.join(FORMATS)} (or per component: "
                        "moe=fp4,attn=fp8,dense=bf16)")
    return FORMATS[name]


def bytes_per_element(fmt: str, group_size: int = 0) -> float:
    """Bytes per weight element stored as ``fmt``, scale factors included (``group_size``
    overrides the format's group where it has one)."""
    f = _format(fmt)
    group = group_size if (group_size and f.grouped) else f.group
    return f.bits / 8 + (f.scale_bytes / group if group else 0.0)


def storage_format(fmt: str, peaks) -> str:
    """Format the weights occupy in HBM on a GPU with tensor-core ``peaks``: ``fp4`` without FP4
    tensor cores is expanded to FP8 (seed 002's capability matrix); every other stays."""
    f = _format(fmt)
    if f.compute not in peaks and f.fallback == "expand":
        return "fp8"
    return fmt


def compute_format(fmt: str, peaks) -> str:
    """Tensor-core format the GEMMs of ``fmt`` weights run in on a GPU with ``peaks``."""
    f = _format(fmt)
    if f.compute in peaks:
        return f.compute
    if f.fallback == "expand":
        return "fp8" if "fp8" in peaks else "bf16"
    return f.fallback if f.fallback in peaks else "bf16"


def quantizes_activations(compute: str) -> bool:
    """GEMMs in an 8-bit or 4-bit tensor-core format need their inputs cast first."""
    return compute != "bf16"


@dataclass(frozen=True)
class WeightRecipe:
    """Weight format of each GEMM component (:data:`COMPONENTS`)."""

    attn: str
    moe: str
    dense: str

    @staticmethod
    def parse(text: str, is_moe: bool = True) -> "WeightRecipe":
        """``fp8`` (every component) or ``moe=fp4,attn=fp8,dense=bf16`` (unnamed components
        BF16). A single 4-bit float format on an MoE model is an FP4 MoE checkpoint (gpt-oss,
        DeepSeek-R1-FP4): the routed experts in it, the other GEMMs FP8."""
        text = str(text).strip().lower()
        if "=" not in text:
            _format(text)
            other = "fp8" if (text in _FLOAT4 and is_moe) else text
            return WeightRecipe(attn=other, moe=text, dense=other)
        parts = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if key not in COMPONENTS:
                raise SpecError(f"--weights {text!r}: unknown component {key!r}; use "
                                f"{', '.join(COMPONENTS)} (e.g. moe=fp4,attn=fp8,dense=bf16)")
            if key in parts:
                raise SpecError(f"--weights {text!r}: {key} is given twice")
            _format(value, f"--weights {key}=")
            parts[key] = value
        return WeightRecipe(**{c: parts.get(c, "bf16") for c in COMPONENTS})

    def formats(self) -> set[str]:
        return {self.attn, self.moe, self.dense}
