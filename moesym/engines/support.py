"""Which engine loads which weight format: the one table that predict, simulate, optimize,
sweep, report and ``--emit`` all read (the device half, which engine runs on which maker's
devices, is each profile's ``runs_on``: :func:`moesym.engines.check_runs_on`).

* llama.cpp loads GGUF files: GGUF block types and llama.cpp file types (``q4_k_m``), F16/BF16
  and MXFP4 (gpt-oss's GGUF);
* MLX loads its own quantization (``mlx-4bit``, ``mlx-8bit``), BF16/F16 and MXFP4;
* every other engine (SGLang, vLLM, TensorRT-LLM and the engines built on them, tt-metal) loads
  HuggingFace checkpoints: neither a GGUF file nor an MLX one.

A GGUF format given without ``--engine`` is timed as llama.cpp runs it, an MLX format as MLX
(:func:`engine_for_weights`).

>>> format_problem("trtllm", "q4_k_m", "--engine")[:52]
'--engine trtllm: --weights q4_k_m is a GGUF (llama.c'
>>> format_problem("llama.cpp", "q4_k_m") is None, format_problem("sglang", "fp8") is None
(True, True)
>>> engine_for_weights("Q8_0"), engine_for_weights("mlx-4bit"), engine_for_weights("fp8")
('llama.cpp', 'mlx', None)
"""

from __future__ import annotations

import warnings

from ..errors import SpecError
from ..specs.precision import GGUF_TYPES, WeightRecipe, canonical
from . import default_engine, load_engine, runs_on

__all__ = ["LOADS", "check_format", "engine_for_format", "engine_for_weights", "format_problem",
           "is_gguf", "is_mlx"]

#: the formats the single-device engines load (every component's format among them; a GGUF
#: file type or block type is allowed for llama.cpp as well)
LOADS = {"llama.cpp": frozenset({"bf16", "f16", "mxfp4"}),
         "mlx": frozenset({"bf16", "f16", "mlx-4bit", "mlx-8bit", "mxfp4"})}
_MLX = frozenset({"mlx-4bit", "mlx-8bit"})
_SERVING = ("sglang", "vllm", "trtllm")  # the engines tried for a format a device's default does not load
_NAMES = {"llama.cpp": "llama.cpp", "mlx": "MLX", "sglang": "SGLang", "vllm": "vLLM",
          "trtllm": "TensorRT-LLM"}


def is_gguf(recipe: WeightRecipe) -> bool:
    """A llama.cpp file type or GGUF block types (F16 aside: any engine loads 16-bit weights)."""
    return recipe.mix not in ("", "f16") or recipe.formats() <= set(GGUF_TYPES)


def is_mlx(recipe: WeightRecipe) -> bool:
    """MLX's own quantization in some component."""
    return bool(recipe.formats() & _MLX)


def engine_for_weights(weights: str) -> str | None:
    """The engine that runs a ``weights`` format at all: llama.cpp for GGUF, MLX for MLX's
    formats; None for a format the serving engines load."""
    recipe = WeightRecipe.parse(weights)
    if is_gguf(recipe):
        return "llama.cpp"
    return "mlx" if is_mlx(recipe) else None


def engine_for_format(hw, weights) -> str:
    """The engine timed where none is named: the one that runs ``weights`` at all (llama.cpp
    for GGUF, MLX for MLX's formats), else the device's default engine
    (:func:`moesym.engines.default_engine`), else, where that one does not load the format, the
    first serving engine that runs on the device and does; each choice away from the device's
    default is said in one warning line."""

    default = default_engine(hw)
    if not isinstance(weights, str):
        return default
    runs = engine_for_weights(weights)
    if runs is not None and runs != default:
        warnings.warn(f"--weights {weights} is {'a GGUF' if runs == 'llama.cpp' else 'an MLX'} "
                      f"format: timed as {runs} runs it (--engine {runs}; name another engine "
                      "with --engine)", stacklevel=3)
        return runs
    if runs is None and format_problem(default, weights):
        alt = next((e for e in _SERVING if runs_on(load_engine(e), hw)
                    and not format_problem(e, weights)), None)
        if alt is not None:
            warnings.warn(f"--weights {weights}: {default} ({hw.name}'s default engine) does not "
                          f"load it; timed as {alt} runs it (name another engine with --engine)",
                          stacklevel=3)
            return alt
    return default


def format_problem(engine: str, weights: str, flag: str = "--engine") -> str | None:
    """Why ``engine`` (a built-in name) cannot load ``weights``, as one line naming ``flag``
    and the fix; None where it can."""
    recipe = WeightRecipe.parse(weights)
    gguf, mlx = is_gguf(recipe), is_mlx(recipe)
    name = _NAMES.get(engine, engine)
    # one format named for the whole model (an MXFP4 MoE checkpoint keeps its other GEMMs in
    # FP8 or BF16 inside the same file)
    loads = recipe.formats() <= LOADS.get(engine, frozenset()) or \
        canonical(weights) in LOADS.get(engine, frozenset())
    if engine == "llama.cpp":
        if gguf or loads:
            return None
        return (f"{flag} llama.cpp: llama.cpp loads GGUF files; give --weights a GGUF type "
                f"(q4_k_m, q8_0, q4_0, ..., f16, mxfp4), not {weights}")
    if engine == "mlx":
        if not gguf and loads:
            return None
        return (f"{flag} mlx: MLX loads its own quantization; give --weights mlx-4bit, mlx-8bit, "
                f"mxfp4 or bf16, not {weights}")
    if gguf:
        return (f"{flag} {engine}: --weights {weights} is a GGUF (llama.cpp) format, which "
                f"{name} does not load; use {flag} llama.cpp, or a format {name} loads (awq, "
                "gptq, fp8, nvfp4, ...)")
    if mlx:
        return (f"{flag} {engine}: --weights {weights} is an MLX format, which {name} does not "
                f"load; use {flag} mlx on Apple silicon, or awq / gptq on a GPU")
    return None


def check_format(engine: str, weights: str, flag: str = "--engine") -> None:
    """Raise :class:`SpecError` (:func:`format_problem`) where ``engine`` cannot load
    ``weights``."""
    problem = format_problem(engine, weights, flag)
    if problem:
        raise SpecError(problem)
