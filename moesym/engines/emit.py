"""Launch commands for the deployment moesym modelled (``predict --emit``, ``optimize --emit``):
the same TP / DP / EP / PP layout, all-to-all backend, overlap, chunk, speculative decoding and
KV format, spelled as each engine's server flags. Every flag is one the engine documents; what a
deployment sets that an engine cannot say as a flag is listed under ``notes`` instead of being
dropped.

Single-device engines: ``llama.cpp`` (a ``llama-server`` line and a ``llama-bench`` line of the
same settings: ``-ngl``, ``--n-cpu-moe`` for an expert cache, ``-c``/``-np``, ``-b``/``-ub``,
``-fa``) and ``mlx`` (``mlx_lm.server`` and ``mlx_lm.generate``). Each command names a checkpoint
in the ``--weights`` format (``moesym/engines/checkpoints.toml``: a model's own repository in its
shipped format, else a well-known repository of that format, else a placeholder in angle brackets
that a note asks the user to fill), and an engine that cannot run the hardware or the format is
refused in one line that names the one that can (Apple silicon: llama.cpp or MLX).

Flag names: SGLang 0.5.23 (``srt/arg_groups``: each field ``x_y`` is the flag ``--x-y``; the
attention-DP, DeepEP, two-batch-overlap and speculative fields read there; attention DP is
``--attn-dp-size N``, which replaced the deprecated ``--dp-size N --enable-dp-attention``); vLLM
0.33's ``vllm serve`` engine arguments; TensorRT-LLM's ``trtllm-serve``. ``tests/test_emit.py``
checks every emitted flag against ``tests/data/engine_flags.json``, the flag names read from the
engines' sources by ``benchmarks/engine_flags.py``; llama.cpp's from ``common/arg.cpp`` and
``tools/llama-bench/llama-bench.cpp`` as vendored in llama-cpp-python 0.3.36, MLX's from
mlx-lm 0.32.2's ``server.py`` and ``generate.py``.

>>> from moesym.specs.deployment import Deployment, Workload
>>> from moesym.readers.model import load_model
>>> c = launch_command("sglang", load_model("deepseek-v3"), Deployment(gpus=8, weights="fp8",
...                    micro_batches=2), Workload("decode", batch=64, context=4096))
>>> c["command"]  # doctest: +NORMALIZE_WHITESPACE
'python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --attn-dp-size 8
 --ep-size 8 --moe-a2a-backend deepep --deepep-mode auto --enable-two-batch-overlap
 --max-running-requests 512'
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path

from ..errors import MoesymError
from ..io.toml import load_toml
from ..specs.deployment import A2AMode, Deployment, Phase, Workload
from ..specs.model import ModelSpec
from ..specs.precision import WeightRecipe
from . import check_runs_on, load_engine
from .support import check_format, is_gguf

__all__ = ["ENGINES", "GPU_ENGINES", "TOOLS", "check_engine", "checkpoint", "launch_command"]

GPU_ENGINES = ("sglang", "vllm", "trtllm")  # CUDA / ROCm serving engines
ENGINES = (*GPU_ENGINES, "llama.cpp", "mlx")
#: the programs each engine's lines run: the server (``command``), then ``bench``'s
TOOLS = {"sglang": ("sglang.launch_server",), "vllm": ("vllm serve",),
         "trtllm": ("trtllm-serve",), "llama.cpp": ("llama-server", "llama-bench"),
         "mlx": ("mlx_lm.server", "mlx_lm.generate")}
_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM", "llama.cpp": "llama.cpp",
          "mlx": "MLX"}

_DEEPEP_MODE = {A2AMode.AUTO: "auto", A2AMode.DEEPEP_NORMAL: "normal",
                A2AMode.DEEPEP_LL: "low_latency"}
# vLLM 0.33 --all2all-backend for the DeepEP mode moesym resolves for the phase; on ROCm AMD's
# MoRI kernels of the same two kinds (the same choices list: mori_high_throughput,
# mori_low_latency)
_VLLM_A2A = {A2AMode.DEEPEP_NORMAL: "deepep_high_throughput",
             A2AMode.DEEPEP_LL: "deepep_low_latency"}
_VLLM_A2A_ROCM = {A2AMode.DEEPEP_NORMAL: "mori_high_throughput",
                  A2AMode.DEEPEP_LL: "mori_low_latency"}
# ROCm: the environment that turns on aiter's kernels (the tables moesym's AMD kernel fits come
# from): SGLang reads SGLANG_USE_AITER (InferenceX's MI300X/MI325X/MI355X SGLang scripts set it,
# with --attention-backend aiter), vLLM VLLM_ROCM_USE_AITER
_ROCM_ENV = {"sglang": "SGLANG_USE_AITER=1", "vllm": "VLLM_ROCM_USE_AITER=1"}


def _rocm(hw) -> bool:
    return getattr(hw, "vendor", "") == "amd"


def _budget(wl) -> int:
    """Tokens an engine step may take per attention DP rank: a prefill step's --tokens (the
    modelled step, several prompts or chunks of one), serve's prefill chunk; 0 in decode."""
    if wl.phase is Phase.PREFILL:
        return wl.tokens
    return wl.chunk if wl.phase is Phase.SERVE else 0


def _model_path(model: ModelSpec) -> str:
    """The model's own checkpoint: the HuggingFace id a built-in model names as its source (the
    first word of ``source``), else the model's name."""
    first = model.source.split()[0] if model.source else ""
    return first if "/" in first and not first.endswith(".json") else model.name


@cache
def _checkpoints() -> dict:
    return load_toml(Path(__file__).with_name("checkpoints.toml"))


def _format_key(recipe: WeightRecipe) -> str:
    """The checkpoints.toml key of a recipe: ``gguf`` for llama.cpp file and block types, a
    format's name where one format holds the routed experts and FP8 or it the rest (an FP4 MoE
    checkpoint), else the recipe spelled per component."""
    if recipe.mix == "f16":
        return "bf16"
    if is_gguf(recipe):
        return "gguf"
    if len(recipe.formats()) == 1 or {recipe.attn, recipe.dense} == {"fp8"}:
        return recipe.moe
    return f"attn={recipe.attn},moe={recipe.moe},dense={recipe.dense}"


def checkpoint(model: ModelSpec, recipe: WeightRecipe, notes: list, gguf: bool = False) -> str:
    """The repository to load for ``recipe`` (``gguf``: a GGUF file of it, for llama.cpp): the
    model's own where it ships that format, a well-known one (``engines/checkpoints.toml``),
    else a placeholder in angle brackets (and a note saying so)."""
    key = "gguf" if gguf else _format_key(recipe)
    own = WeightRecipe.parse(model.weight_dtype, model.is_moe)
    if key != "gguf" and _format_key(own) == key:
        return _model_path(model)
    known = _checkpoints().get(model.name, {}).get(key)
    if known:
        return known
    what = f"{(recipe.mix or recipe.moe).upper()} GGUF" if key == "gguf" else key
    notes.append(f"no known {what} checkpoint of {_model_path(model)}: replace the placeholder "
                 f"in angle brackets with one (or convert the model yourself)")
    return f"<{what} checkpoint of {_model_path(model)}>"


def check_engine(engine: str, hw, dep: Deployment, model: ModelSpec | None = None) -> None:
    """Refuse, in one line naming what runs, an engine that cannot run on ``hw`` (CUDA engines on
    Apple silicon), load the ``--weights`` format or offload experts to the host
    (``--expert-cache``), or a single-machine engine given a multi-node deployment."""
    if engine not in ENGINES:
        raise MoesymError(f"--emit {engine!r}: use {', '.join(ENGINES)}")
    name = _NAMES[engine]
    # SGLang runs on Apple silicon through an opt-in MLX back end (SGLANG_USE_MLX), whose
    # launch differs from the CUDA/ROCm line written here: not emitted
    apple = getattr(hw, "vendor", "") == "apple"
    if hw is not None:
        check_runs_on(load_engine(engine), hw, "--emit",
                      tuple(e for e in ENGINES if not (apple and e == "sglang")))
    if engine == "sglang" and apple:
        raise MoesymError(f"--emit sglang: the line written is SGLang's CUDA/ROCm launch; its "
                          f"opt-in Apple back end (SGLANG_USE_MLX) is not emitted for {hw.name} "
                          "(Apple silicon): use --emit llama.cpp or mlx")
    if engine in GPU_ENGINES and dep.expert_cache is not None and (
            model is None or dep.expert_cache < model.num_experts):
        raise MoesymError(f"--emit {engine}: --expert-cache {dep.expert_cache} keeps experts in "
                          f"host memory, which {name} does not; use --emit llama.cpp "
                          "(--n-cpu-moe)")
    check_format(engine, dep.weights, "--emit")
    if engine in ("llama.cpp", "mlx") and dep.nodes > 1:
        raise MoesymError(f"--emit {engine}: {name} runs on one machine; this deployment spans "
                          f"{dep.nodes} nodes (use --emit sglang or vllm)")
    if engine == "mlx" and dep.gpus > 1:
        raise MoesymError(f"--emit mlx: one Apple device per mlx_lm.server; --gpus {dep.gpus} "
                          "(MLX's distributed launch is not emitted)")


# what turns each engine's CUDA graphs off (--eager): SGLang's and vLLM's flags from the wheels
# (tests/data/engine_flags.json), llama.cpp's environment variable (vendored llama.cpp
# ggml/src/ggml-cuda/common.cuh:1289, read at the first graph), TensorRT-LLM's options file
# (SGLang 0.5.23 deprecates --disable-cuda-graph for its decode and prefill switches)
_EAGER_FLAGS = {"sglang": ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"],
                "vllm": ["--enforce-eager"]}
_EAGER_ENV = {"llama.cpp": "GGML_CUDA_DISABLE_GRAPHS=1"}
_EAGER_NOTE = {"trtllm": "no CUDA graphs: cuda_graph_config: null in --extra_llm_api_options"}
# the flag that raises each engine's largest captured decode batch (read from the wheels as
# tests/data/engine_flags.json lists them; TensorRT-LLM takes it in its options file)
_GRAPH_MAX_FLAG = {"sglang": "--cuda-graph-max-bs-decode", "vllm": "--max-cudagraph-capture-size"}


def _engine_profile(engine: str, dep: Deployment, wl: Workload, notes: list) -> list[str]:
    """What the engine profile moesym timed with asks of the launch line: a decode batch per
    rank beyond the engine's largest captured CUDA graph gets the flag that captures it
    (moesym times decode steps as graph replays); a profile of another engine is said."""
    if dep.engine != engine and not str(dep.engine).endswith(".toml"):
        notes.append(f"timed with {dep.engine}'s scheduler and defaults (--engine {dep.engine}); "
                     f"add --engine {engine} to time {engine}'s")
    if not dep.cuda_graphs:  # eager: no graphs to size
        if engine in _EAGER_NOTE:
            notes.append(_EAGER_NOTE[engine])
        return list(_EAGER_FLAGS.get(engine, []))
    if wl.phase is Phase.PREFILL or engine not in ("sglang", "vllm", "trtllm"):
        return []
    sizes = load_engine(engine).graph_batch_sizes(dep.tp)
    batch = int(wl.batch) * max(1, dep.mtp + 1)  # speculative steps verify mtp + 1 per request
    if not sizes or batch <= sizes[-1]:
        return []
    if engine == "trtllm":
        notes.append(f"decode batch {batch} per rank is beyond TensorRT-LLM's largest captured "
                     f"CUDA graph ({sizes[-1]}): set cuda_graph_config: max_batch_size: {batch} "
                     "in --extra_llm_api_options")
        return []
    return [_GRAPH_MAX_FLAG[engine], str(batch)]


def _requests(dep: Deployment, wl: Workload) -> int | None:
    """Requests in flight over the instance (decode and serve), or None for prefill."""
    return None if wl.phase is Phase.PREFILL else wl.batch * dep.dp


def _sglang(model, dep, wl, notes, hw=None) -> list[str]:
    rocm = _rocm(hw)
    cmd = [_ROCM_ENV["sglang"]] if rocm else []
    cmd += ["python", "-m", "sglang.launch_server", "--model-path",
           checkpoint(model, dep.weight_recipe(model.is_moe), notes),
           "--tp-size", str(dep.stage_gpus)]
    if dep.dp > 1:  # SGLang's TP size is the instance; attention runs TP tp_size / attn_dp_size
        cmd += ["--attn-dp-size", str(dep.dp)]  # SGLang's --dp-size counts model replicas
    if dep.pp > 1:
        cmd += ["--pp-size", str(dep.pp)]
    if model.is_moe and dep.ep > 1:
        cmd += ["--ep-size", str(dep.ep)]
        if dep.a2a in _DEEPEP_MODE and dep.ep == dep.stage_gpus and rocm:
            # SGLang 0.5.9 server_args.py: --moe-a2a-backend mori runs MoRI's normal dispatch
            cmd += ["--moe-a2a-backend", "mori"]
            if dep.resolved_a2a(wl.phase) is A2AMode.DEEPEP_LL:
                notes.append("MoRI under SGLang dispatches in its normal mode only (SGLang 0.5.9 "
                             "forces it); moesym timed the low-latency kernels of this phase")
        elif dep.a2a in _DEEPEP_MODE and dep.ep == dep.stage_gpus:
            cmd += ["--moe-a2a-backend", "deepep", "--deepep-mode", _DEEPEP_MODE[dep.a2a]]
        if dep.redundant_experts:
            cmd += ["--ep-num-redundant-experts", str(dep.redundant_experts), "--enable-eplb"]
    if dep.micro_batches == 2:
        cmd += ["--enable-two-batch-overlap"]
    elif dep.micro_batches > 2:
        notes.append(f"{dep.micro_batches} micro-batches: SGLang overlaps two at most")
    if dep.kv == "fp8":
        cmd += ["--kv-cache-dtype", "fp8_e4m3"]
    if rocm:
        cmd += ["--attention-backend", "aiter"]
    if dep.mtp:
        cmd += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(dep.mtp),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                str(dep.mtp + 1)]
    if _budget(wl):  # SGLang's chunk is the instance's
        cmd += ["--chunked-prefill-size", str(_budget(wl) * dep.dp)]
    if _requests(dep, wl):
        cmd += ["--max-running-requests", str(_requests(dep, wl))]
    return cmd + _engine_profile("sglang", dep, wl, notes)


def _vllm(model, dep, wl, notes, hw=None) -> list[str]:
    rocm = _rocm(hw)
    cmd = [_ROCM_ENV["vllm"]] if rocm else []
    cmd += ["vllm", "serve", checkpoint(model, dep.weight_recipe(model.is_moe), notes),
           "--tensor-parallel-size", str(dep.tp)]
    if dep.dp > 1:
        cmd += ["--data-parallel-size", str(dep.dp)]
    if dep.pp > 1:
        cmd += ["--pipeline-parallel-size", str(dep.pp)]
    if model.is_moe and dep.ep > 1:
        cmd += ["--enable-expert-parallel"]
        if dep.ep != dep.stage_gpus:
            notes.append(f"vLLM's expert parallelism spans tp x dp = {dep.stage_gpus} GPUs; "
                         f"EP {dep.ep} with expert TP has no vLLM flag")
        backend = (_VLLM_A2A_ROCM if rocm else _VLLM_A2A).get(dep.resolved_a2a(wl.phase))
        if backend and dep.ep == dep.stage_gpus:  # DeepEP kernels, as moesym timed them
            cmd += ["--all2all-backend", backend]
        if dep.redundant_experts:
            cmd += ["--enable-eplb", "--eplb-config",
                    f'{{"num_redundant_experts": {dep.redundant_experts}}}']
    if dep.micro_batches > 1:
        cmd += ["--enable-dbo"]  # vLLM's dual-batch overlap: two micro-batches
        if dep.micro_batches > 2:
            notes.append(f"vLLM overlaps two micro-batches; {dep.micro_batches} have no flag")
    if dep.kv == "fp8":
        cmd += ["--kv-cache-dtype", "fp8"]
    if dep.mtp:
        method = "mtp" if model.mtp_layers else "eagle"  # vLLM 0.33: deepseek_mtp etc. -> mtp
        cmd += ["--speculative-config",
                f'{{"method": "{method}", "num_speculative_tokens": {dep.mtp}}}']
        if not model.mtp_layers:
            notes.append('an EAGLE draft needs its checkpoint: add "model": PATH to '
                         "--speculative-config")
    if _budget(wl):
        cmd += ["--max-num-batched-tokens", str(_budget(wl))]
    if _requests(dep, wl):
        cmd += ["--max-num-seqs", str(wl.batch)]
    return cmd + _engine_profile("vllm", dep, wl, notes)


def _trtllm(model, dep, wl, notes, hw=None) -> list[str]:
    cmd = ["trtllm-serve", checkpoint(model, dep.weight_recipe(model.is_moe), notes),
           "--tp_size", str(dep.stage_gpus)]
    if dep.pp > 1:
        cmd += ["--pp_size", str(dep.pp)]
    if model.is_moe and dep.ep > 1:
        cmd += ["--ep_size", str(dep.ep)]
    if dep.dp > 1:
        notes.append("attention data parallelism: set enable_attention_dp: true in the file "
                     "given to --extra_llm_api_options")
        if dep.tp > 1:
            notes.append(f"attention DP {dep.dp} x TP {dep.tp}: TensorRT-LLM's attention DP "
                         f"spans all {dep.stage_gpus} ranks (TP 1 each), so this layout has no "
                         f"equivalent there; --max_batch_size is then per rank")
    if dep.mtp:
        notes.append(f"speculative decoding: speculative_config with decoding_type: MTP and "
                     f"num_nextn_predict_layers: {dep.mtp} in --extra_llm_api_options")
    if dep.kv == "fp8":
        notes.append("FP8 KV cache: kv_cache_config: dtype: fp8 in --extra_llm_api_options")
    if dep.redundant_experts:
        notes.append(f"{dep.redundant_experts} redundant experts: moe_load_balancer with "
                     f"num_slots = experts + {dep.redundant_experts} in --extra_llm_api_options")
    if dep.micro_batches > 1:
        notes.append(f"{dep.micro_batches} micro-batches overlapped: no TensorRT-LLM launch flag; "
                     "not emitted")
    if _budget(wl):
        cmd += ["--max_num_tokens", str(_budget(wl))]
    if _requests(dep, wl):
        cmd += ["--max_batch_size", str(wl.batch)]
    return cmd + _engine_profile("trtllm", dep, wl, notes)


def _cpu_moe_layers(model: ModelSpec, dep: Deployment) -> int:
    """llama.cpp's --n-cpu-moe for moesym's expert cache of C of E experts per MoE layer on the
    device: llama.cpp keeps whole layers' experts on the CPU, so the same share of expert weights
    on the device is C/E of the MoE layers, the rest (rounded) on the CPU."""
    share = min(dep.expert_cache, model.num_experts) / model.num_experts
    return round(model.moe_layers * (1 - share))


def _context_tokens(wl: Workload) -> int:
    """KV positions one request holds: the prompt and its output (serve), else the context."""
    return wl.isl + wl.osl if wl.phase is Phase.SERVE else wl.context


def _llamacpp(model, dep, wl, notes, hw=None) -> tuple[list[str], list[str]]:
    recipe = dep.weight_recipe(model.is_moe)
    repo = checkpoint(model, recipe, notes, gguf=True)
    quant = (recipe.mix or recipe.moe).upper()
    src = ["-hf", f"{repo}:{quant}"] if not repo.startswith("<") else ["-m", repo]
    if not repo.startswith("<"):
        notes.append(f"-hf {repo}:{quant} downloads the file of that quantization from the "
                     "repository (check that it lists one)")
    requests = 1 if wl.phase is Phase.PREFILL else wl.batch
    server = ["llama-server", *src, "-ngl", "999", "-fa", "on",
              "-c", str(_context_tokens(wl) * requests), "-np", str(requests)]
    bench = ["llama-bench", *src, "-ngl", "999", "-fa", "1"]
    if _budget(wl):  # the step's tokens: llama.cpp's logical batch and its ubatch
        server += ["-b", str(_budget(wl)), "-ub", str(_budget(wl))]
        bench += ["-b", str(_budget(wl)), "-ub", str(_budget(wl))]
    if wl.phase is Phase.PREFILL:
        bench += ["-p", str(wl.tokens or wl.context), "-n", "0"]
    elif wl.phase is Phase.SERVE:
        bench += ["-p", str(wl.isl), "-n", str(wl.osl)]
    else:
        bench += ["-p", "0", "-n", "128", "-d", str(wl.context)]
    if wl.batch > 1 and wl.phase is not Phase.PREFILL:
        notes.append(f"llama-bench times one sequence; the batch of {wl.batch} is llama-server's "
                     f"-np {wl.batch} slots")
    if dep.kv == "fp8":
        server += ["-ctk", "q8_0", "-ctv", "q8_0"]
        bench += ["-ctk", "q8_0", "-ctv", "q8_0"]
        notes.append("FP8 KV cache: llama.cpp has none; q8_0 (8.5 bits per value) is its nearest")
    if model.is_moe and dep.expert_cache is not None and dep.expert_cache < model.num_experts:
        n = _cpu_moe_layers(model, dep)
        server += ["--n-cpu-moe", str(n)]
        bench += ["--n-cpu-moe", str(n)]
        notes.append(f"expert cache of {dep.expert_cache} of {model.num_experts} experts per "
                     f"layer: llama.cpp keeps whole layers' experts on the CPU, --n-cpu-moe {n} "
                     f"of {model.moe_layers} holds the same share on the GPU (or -ot "
                     f"'blk\\.N\\.ffn_.*_exps\\.=CPU' per layer); it computes them on the CPU "
                     "(moesym's --expert-placement host-compute) and copies them to the GPU for "
                     "large batches")
    if dep.gpus > 1:
        server += ["-sm", "layer"]
        bench += ["-sm", "layer"]
        notes.append(f"{dep.gpus} GPUs: llama.cpp splits the layers between them (-sm layer), "
                     f"one after the other; the TP {dep.tp} / EP {dep.ep} layout modelled has no "
                     "llama.cpp equivalent")
    if dep.mtp:
        notes.append("speculative decoding: llama.cpp takes a draft model (-md FILE); MTP heads "
                     "are not emitted")
    if not dep.cuda_graphs:
        server, bench = [_EAGER_ENV["llama.cpp"], *server], [_EAGER_ENV["llama.cpp"], *bench]
    return server, bench


def _mlx(model, dep, wl, notes, hw=None) -> tuple[list[str], list[str]]:
    repo = checkpoint(model, dep.weight_recipe(model.is_moe), notes)
    server = ["mlx_lm.server", "--model", repo]
    gen = ["mlx_lm.generate", "--model", repo]
    if wl.phase is not Phase.PREFILL:
        server += ["--decode-concurrency", str(wl.batch)]
    if _budget(wl):
        server += ["--prefill-step-size", str(_budget(wl))]
        gen += ["--prefill-step-size", str(_budget(wl))]
    prompt = wl.isl if wl.phase is Phase.SERVE else (wl.tokens or wl.context)
    gen += ["--prompt", f"<a prompt of {prompt} tokens>",
            "--max-tokens", str(wl.osl if wl.phase is Phase.SERVE else
                                1 if wl.phase is Phase.PREFILL else 128)]
    notes.append("mlx_lm.generate runs one prompt: replace the placeholder prompt with text of "
                 "that length")
    if dep.kv == "fp8":
        server += ["--kv-bits", "8"]
        gen += ["--kv-bits", "8"]
        notes.append("FP8 KV cache: MLX quantizes the KV cache to 8-bit integers with group "
                     "scales (--kv-bits 8), its nearest")
    if dep.expert_cache is not None:
        notes.append("expert cache: MLX keeps every weight in unified memory; no offload flag")
    if dep.mtp:
        notes.append("speculative decoding: mlx_lm takes a draft model (--draft-model); MTP "
                     "heads are not emitted")
    return server, gen


_BUILDERS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm, "llama.cpp": _llamacpp,
             "mlx": _mlx}


def launch_command(engine: str, model: ModelSpec, dep: Deployment, wl: Workload,
                   hw=None) -> dict:
    """``{"engine", "command", "notes"}`` (llama.cpp and MLX add ``bench``: a llama-bench or
    mlx_lm.generate line of the same settings): the engine's launch line for this deployment,
    and what it cannot say as a flag. Multi-node instances need the engine's node flags added.
    An engine that cannot run on ``hw`` or load the weights is refused (:func:`check_engine`)."""
    check_engine(engine, hw, dep, model)
    notes: list[str] = []
    if dep.cp > 1:
        notes.append(f"context parallelism {dep.cp}: no launch flag emitted (engine-specific)")
    if engine == "mlx" and getattr(hw, "vendor", "apple") != "apple":
        notes.append(f"MLX on {hw.name}: its CUDA back end (pip install mlx[cuda12] or "
                     "mlx[cuda13], as mlx-lm 0.32.2 lists it)")
    cmd = _BUILDERS[engine](model, dep, wl, notes, hw)
    out = {"engine": engine}
    if isinstance(cmd, tuple):
        out["command"], out["bench"] = shlex.join(cmd[0]), shlex.join(cmd[1])
    else:
        out["command"] = shlex.join(cmd)
    if dep.nodes > 1:
        notes.append(f"{dep.nodes} nodes: add the engine's multi-node flags (node count, rank, "
                     "rendezvous address) on each node")
    out["notes"] = notes
    return out
