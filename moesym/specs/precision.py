"""Weight precision: the formats, their bytes, the tensor-core format their GEMMs run in, and
per-component recipes (``--weights moe=fp4,attn=fp8,dense=bf16``). The one home of these
numbers: the step model (bytes read, peak FLOP/s) and the memory model (bytes held) both read it.

Formats (``FORMATS``, data): bits per element, scale bytes per group of elements, and the
tensor-core input format of their GEMMs.

* ``bf16``: 16 bits.
* ``fp8``: 8 bits, DeepSeek-style 128 x 128 blocks with one fp32 scale (4 / 16384 bytes).
* ``fp4``: 4 bits, one 1-byte scale per 32 (MXFP4; ``--group-size 16``: NVFP4). On a GPU without
  FP4 tensor cores it is expanded to FP8 at load time (the simulator modelling guide "memory and
  throughput formulas", section 6: expert memory doubles on Hopper).
* ``mxfp4`` / ``nvfp4``: the same 4-bit floats with their own groups (32 and 16), held in 4 bits
  on any GPU: where no FP4 tensor cores exist the kernel dequantizes them to BF16 on the fly
  (gpt-oss's MXFP4 experts on Hopper; Metal Marlin's FP4 expert GEMM), so the GEMMs run at the
  BF16 peak.
* ``w4a16``: 4-bit integer weights with an fp16 scale and an fp16 zero point per group (default
  128, asymmetric GPTQ / AWQ: 4.25 bits per weight), dequantized in the kernel (Marlin-style,
  16-row M tiles): 4-bit reads, BF16 tensor cores.
* ``w4a8``: 4-bit integer weights, 8-bit activations (FP8 where the GPU has it, else INT8).
* ``int8``: 8-bit integer weights and activations (W8A8), one fp32 scale per output channel.

Formats by their users' names (case-insensitive: ``Q4_K_M`` and ``q4_k_m`` alike):

* GGUF block types (llama.cpp), ``q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl
  iq4_xs`` and ``f16``: each block's bytes are ggml's block structs (``ggml-common.h``), as
  gguf-py 0.19.0 lists them in ``GGML_QUANT_SIZES`` (weights per block, bytes per block; kept
  with their source in ``tests/data/ggml_quant_sizes.json``, which the tests compare with this
  table). Written here as data bits plus the rest of the block: ``q4_0`` = fp16 d + 16 bytes of
  nibbles per 32 weights (18 B: 4.5 bits per weight); ``q4_k`` = 144 B per 256 (4.5);
  ``q6_k`` = 210 B per 256 (6.5625); ``q8_0`` = 34 B per 32 (8.5). Kernel path: llama.cpp's CUDA
  and ROCm back ends quantize the activations to 8-bit blocks (q8_1) and run INT8 dot products
  (MMVQ at small batches, MMQ's int8 tensor-core tiles above): ``int8`` where the GPU has INT8
  tensor cores; Metal (Apple) dequantizes each block to half in the kernel and multiplies in
  16-bit floats: the ``bf16`` rate there. GGUF's MXFP4 (17 B per 32) is ``mxfp4`` below. The
  _S/_M file types (``q4_k_m`` ...) are per-tensor mixes of these: :mod:`moesym.readers.gguf`.
* MLX affine quantization (``mlx.core.quantize``; mlx-lm 0.32.2's ``convert`` defaults to 4 bits,
  group 64): ``mlx-4bit`` and ``mlx-8bit``, one scale and one bias in 16-bit floats per group
  (4 B per 64 weights: 4.5 and 8.5 bits), ``--group-size 32`` or ``128`` for the other groups.
  MLX's quantized matmul dequantizes in the kernel and multiplies in 16-bit floats.
* ``awq`` and ``gptq``: 4-bit integer weights with, per group of 128 along K, an fp16 scale and
  a 4-bit zero point packed eight to an int32 (the checkpoints' ``qweight``, ``qzeros``,
  ``scales`` tensors: 2.5 B per group, 4.156 bits per weight); dequantized in the kernel
  (Marlin, AWQ GEMM) onto BF16/FP16 tensor cores, as ``w4a16``.
* NVIDIA ModelOpt: ``modelopt-fp8`` (FP8 E4M3 weights with one fp32 scale per tensor) and
  ``modelopt-nvfp4`` (= ``nvfp4``: FP4 E2M1 with an FP8 scale per 16 and one fp32 per tensor).

>>> bytes_per_element("fp8"), bytes_per_element("fp4"), bytes_per_element("w4a16")
(1.000244140625, 0.53125, 0.53125)
>>> bytes_per_element("w4a16", group_size=32)
0.625
>>> r = WeightRecipe.parse("moe=fp4,attn=fp8,dense=bf16", is_moe=True)
>>> r.moe, r.attn, r.dense
('fp4', 'fp8', 'bf16')
>>> WeightRecipe.parse("fp4", is_moe=True).attn  # a 4-bit float MoE checkpoint keeps FP8 elsewhere
'fp8'
>>> [bytes_per_element(f) * 8 for f in ("Q4_0", "q8_0", "q4_k", "q6_k", "mlx-4bit", "awq")]
[4.5, 8.5, 4.5, 6.5625, 4.5, 4.15625]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError

__all__ = ["FORMATS", "GGUF_TYPES", "ALIASES", "COMPONENTS", "canonical", "WeightFormat", "WeightRecipe", "bytes_per_element",
           "storage_format", "compute_format", "quantizes_activations", "FILE_TYPES"]


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
    # 16-bit floats of a GGUF F16 file: the same tensor-core rate as BF16 on every GPU here
    "f16": WeightFormat(16, 0, 0, "bf16", "bf16", False),
    # NVIDIA ModelOpt FP8: E4M3 weights, one fp32 scale per tensor (negligible: group 0)
    "modelopt-fp8": WeightFormat(8, 4, 0, "fp8", "bf16", False),
    # AutoAWQ / GPTQ checkpoints: fp16 scale + 4-bit zero point (packed in int32) per 128
    "awq": WeightFormat(4, 2.5, 128, "bf16", "bf16", True),
    "gptq": WeightFormat(4, 2.5, 128, "bf16", "bf16", True),
    # MLX affine: a 16-bit scale and a 16-bit bias per group of 64 (mlx-lm's default)
    "mlx-4bit": WeightFormat(4, 4, 64, "bf16", "bf16", True),
    "mlx-8bit": WeightFormat(8, 4, 64, "bf16", "bf16", True),
}


def _gguf(bits: int, block_bytes: int, block: int) -> WeightFormat:
    """A GGUF block type: ``block`` weights in ``block_bytes`` bytes, of which ``bits`` per weight
    are the quantized values and the rest scales, minima, sub-block scales (ggml-common.h)."""
    return WeightFormat(bits, block_bytes - bits * block / 8, block, "int8", "bf16", False)


#: GGUF block types: (data bits, bytes per block, weights per block) from ggml's block structs
#: (gguf-py 0.19.0 GGML_QUANT_SIZES; tests/data/ggml_quant_sizes.json)
GGUF_TYPES = {
    "q4_0": (4, 18, 32), "q4_1": (4, 20, 32), "q5_0": (5, 22, 32), "q5_1": (5, 24, 32),
    "q8_0": (8, 34, 32), "q2_k": (2, 84, 256), "q3_k": (3, 110, 256), "q4_k": (4, 144, 256),
    "q5_k": (5, 176, 256), "q6_k": (6, 210, 256), "iq4_nl": (4, 18, 32),
    "iq4_xs": (4, 136, 256),
}
FORMATS.update({name: _gguf(*spec) for name, spec in GGUF_TYPES.items()})

#: other names of a format (case-insensitive like every name)
ALIASES = {"modelopt-nvfp4": "nvfp4", "mlx4": "mlx-4bit", "mlx8": "mlx-8bit"}

#: the GEMM weight classes a recipe sets: attention projections; routed experts; shared experts,
#: dense FFN layers and a dense model's FFN. Embeddings, LM head, router and norms stay BF16.
COMPONENTS = ("attn", "moe", "dense")

_FLOAT4 = ("fp4", "mxfp4", "nvfp4")


def canonical(name: str) -> str:
    """The table's name of a format given in any case or by an alias (``Q4_K`` -> ``q4_k``,
    ``ModelOpt-NVFP4`` -> ``nvfp4``)."""
    name = str(name).strip().lower()
    return ALIASES.get(name, name)


def _format(name: str, flag: str = "`weights`") -> WeightFormat:
    key = canonical(name)
    if key not in FORMATS:
        raise SpecError(f"{flag} {name!r}: use one of {', '.join(FORMATS)}, a llama.cpp file "
                        "type (q4_k_m, q4_k_s, q5_k_m, q5_k_s; any case) or per component: "
                        "moe=fp4,attn=fp8,dense=bf16")
    return FORMATS[key]


def bytes_per_element(fmt: str, group_size: int = 0) -> float:
    """Bytes per weight element stored as ``fmt``, scale factors included (``group_size``
    overrides the format's group where it has one)."""
    f = _format(fmt)
    group = group_size if (group_size and f.grouped) else f.group
    return f.bits / 8 + (f.scale_bytes / group if group else 0.0)


def storage_format(fmt: str, peaks) -> str:
    """Format the weights occupy in HBM on a GPU with tensor-core ``peaks``: ``fp4`` without FP4
    tensor cores is expanded to FP8 (the capability matrix of the simulator modelling guide
    "memory and throughput formulas"); every other stays."""
    f = _format(fmt)
    if f.compute not in peaks and f.fallback == "expand":
        return "fp8"
    return canonical(fmt)


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


#: llama.cpp file types moesym names, and their default block type (llama_ftype_get_default_type)
FILE_TYPES = {
    "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1", "q8_0": "q8_0",
    "q2_k": "q2_k", "q4_k_s": "q4_k", "q4_k_m": "q4_k", "q5_k_s": "q5_k", "q5_k_m": "q5_k",
    "q6_k": "q6_k", "iq4_nl": "iq4_nl", "iq4_xs": "iq4_xs", "f16": "f16",
}


@dataclass(frozen=True)
class WeightRecipe:
    """Weight format of each GEMM component (:data:`COMPONENTS`)."""

    attn: str
    moe: str
    dense: str
    #: a llama.cpp file type (``q4_k_m``; a GGUF type given alone, ``q8_0``): each class's
    #: tensors follow llama-quantize's per-tensor rules (:mod:`moesym.readers.gguf`); the three
    #: components above then name its default block type
    mix: str = ""

    @staticmethod
    def parse(text: str, is_moe: bool = True) -> "WeightRecipe":
        """``fp8`` (every component) or ``moe=fp4,attn=fp8,dense=bf16`` (unnamed components
        BF16). A single 4-bit float format on an MoE model is an FP4 MoE checkpoint (gpt-oss,
        DeepSeek-R1-FP4): the routed experts in it, the other GEMMs FP8."""
        text = str(text).strip().lower()
        if "=" not in text and text in FILE_TYPES:  # a GGUF file of llama-quantize's making
            base = FILE_TYPES[text]
            return WeightRecipe(attn=base, moe=base, dense=base, mix=text)
        if "=" not in text:
            _format(text)
            text = canonical(text)
            other = "fp8" if (text in _FLOAT4 and is_moe) else text
            return WeightRecipe(attn=other, moe=text, dense=other)
        parts = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if key not in COMPONENTS:
                raise SpecError(f"`weights` {text!r}: unknown component {key!r}; use "
                                f"{', '.join(COMPONENTS)} (e.g. moe=fp4,attn=fp8,dense=bf16)")
            if key in parts:
                raise SpecError(f"`weights` {text!r}: {key} is given twice")
            if value in FILE_TYPES and value not in FORMATS:
                raise SpecError(f"`weights` {text!r}: {value} is a llama.cpp file type (a "
                                f"recipe for every tensor): give it alone, or a block type "
                                f"({FILE_TYPES[value]}) per component")
            _format(value, f"`weights` {key}=")
            parts[key] = canonical(value)
        return WeightRecipe(**{c: parts.get(c, "bf16") for c in COMPONENTS})

    def formats(self) -> set[str]:
        return {self.attn, self.moe, self.dense}
