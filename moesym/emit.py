"""Launch commands for the deployment moesym modelled (``predict --emit``, ``optimize --emit``):
the same TP / DP / EP / PP layout, all-to-all backend, overlap, chunk, speculative decoding and
KV format, spelled as each engine's server flags. Every flag is one the engine documents; what a
deployment sets that an engine cannot say as a flag is listed under ``notes`` instead of being
dropped.

Flag names: SGLang 0.5.23 (``srt/arg_groups``: each field ``x_y`` is the flag ``--x-y``; the
attention-DP, DeepEP, two-batch-overlap and speculative fields read there; attention DP is
``--attn-dp-size N``, which replaced the deprecated ``--dp-size N --enable-dp-attention``); vLLM
0.33's ``vllm serve`` engine arguments; TensorRT-LLM's ``trtllm-serve``. ``tests/test_emit.py``
checks every emitted flag against ``tests/data/engine_flags.json``, the flag names read from the
engines' sources by ``benchmarks/engine_flags.py``.

>>> from moesym.specs.deployment import Deployment, Workload
>>> from moesym.specs.model import load_model
>>> c = launch_command("sglang", load_model("deepseek-v3"), Deployment(gpus=8, weights="fp8",
...                    micro_batches=2), Workload("decode", batch=64, context=4096))
>>> c["command"]  # doctest: +NORMALIZE_WHITESPACE
'python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --attn-dp-size 8
 --ep-size 8 --moe-a2a-backend deepep --deepep-mode auto --enable-two-batch-overlap
 --max-running-requests 512'
"""

from __future__ import annotations

import shlex

from .errors import MoesymError
from .specs.deployment import A2AMode, Deployment, Phase, Workload
from .specs.model import ModelSpec

__all__ = ["ENGINES", "launch_command"]

ENGINES = ("sglang", "vllm", "trtllm")

_DEEPEP_MODE = {A2AMode.AUTO: "auto", A2AMode.DEEPEP_NORMAL: "normal",
                A2AMode.DEEPEP_LL: "low_latency"}
# vLLM 0.33 --all2all-backend for the DeepEP mode moesym resolves for the phase
_VLLM_A2A = {A2AMode.DEEPEP_NORMAL: "deepep_high_throughput",
             A2AMode.DEEPEP_LL: "deepep_low_latency"}


def _budget(wl) -> int:
    """Tokens an engine step may take per attention DP rank: a prefill step's --tokens (the
    modelled step, several prompts or chunks of one), serve's prefill chunk; 0 in decode."""
    if wl.phase is Phase.PREFILL:
        return wl.tokens
    return wl.chunk if wl.phase is Phase.SERVE else 0


def _model_path(model: ModelSpec) -> str:
    """The checkpoint to serve: the HuggingFace id a built-in model names as its source (the
    first word of ``source``), else the model's name."""
    first = model.source.split()[0] if model.source else ""
    return first if "/" in first and not first.endswith(".json") else model.name


def _requests(dep: Deployment, wl: Workload) -> int | None:
    """Requests in flight over the instance (decode and serve), or None for prefill."""
    return None if wl.phase is Phase.PREFILL else wl.batch * dep.dp


def _sglang(model, dep, wl, notes) -> list[str]:
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", _model_path(model),
           "--tp-size", str(dep.stage_gpus)]
    if dep.dp > 1:  # SGLang's TP size is the instance; attention runs TP tp_size / attn_dp_size
        cmd += ["--attn-dp-size", str(dep.dp)]  # SGLang's --dp-size counts model replicas
    if dep.pp > 1:
        cmd += ["--pp-size", str(dep.pp)]
    if model.is_moe and dep.ep > 1:
        cmd += ["--ep-size", str(dep.ep)]
        if dep.a2a in _DEEPEP_MODE and dep.ep == dep.stage_gpus:
            cmd += ["--moe-a2a-backend", "deepep", "--deepep-mode", _DEEPEP_MODE[dep.a2a]]
        if dep.redundant_experts:
            cmd += ["--ep-num-redundant-experts", str(dep.redundant_experts), "--enable-eplb"]
    if dep.micro_batches == 2:
        cmd += ["--enable-two-batch-overlap"]
    elif dep.micro_batches > 2:
        notes.append(f"{dep.micro_batches} micro-batches: SGLang overlaps two at most")
    if dep.kv == "fp8":
        cmd += ["--kv-cache-dtype", "fp8_e4m3"]
    if dep.mtp:
        cmd += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(dep.mtp),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                str(dep.mtp + 1)]
    if _budget(wl):  # SGLang's chunk is the instance's
        cmd += ["--chunked-prefill-size", str(_budget(wl) * dep.dp)]
    if _requests(dep, wl):
        cmd += ["--max-running-requests", str(_requests(dep, wl))]
    return cmd


def _vllm(model, dep, wl, notes) -> list[str]:
    cmd = ["vllm", "serve", _model_path(model), "--tensor-parallel-size", str(dep.tp)]
    if dep.dp > 1:
        cmd += ["--data-parallel-size", str(dep.dp)]
    if dep.pp > 1:
        cmd += ["--pipeline-parallel-size", str(dep.pp)]
    if model.is_moe and dep.ep > 1:
        cmd += ["--enable-expert-parallel"]
        if dep.ep != dep.stage_gpus:
            notes.append(f"vLLM's expert parallelism spans tp x dp = {dep.stage_gpus} GPUs; "
                         f"EP {dep.ep} with expert TP has no vLLM flag")
        backend = _VLLM_A2A.get(dep.resolved_a2a(wl.phase))
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
    return cmd


def _trtllm(model, dep, wl, notes) -> list[str]:
    cmd = ["trtllm-serve", _model_path(model), "--tp_size", str(dep.stage_gpus)]
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
    return cmd


_BUILDERS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}


def launch_command(engine: str, model: ModelSpec, dep: Deployment, wl: Workload) -> dict:
    """``{"engine", "command", "notes"}``: the engine's launch line for this deployment, and what
    it cannot say as a flag. Multi-node instances need the engine's node flags added."""
    if engine not in _BUILDERS:
        raise MoesymError(f"--emit {engine!r}: use {', '.join(ENGINES)}")
    notes: list[str] = []
    if dep.cp > 1:
        notes.append(f"context parallelism {dep.cp}: no launch flag emitted (engine-specific)")
    if dep.expert_cache is not None:
        notes.append("expert offload: engine-specific (llama.cpp --n-cpu-moe, KTransformers); "
                     "not emitted")
    cmd = _BUILDERS[engine](model, dep, wl, notes)
    if dep.nodes > 1:
        notes.append(f"{dep.nodes} nodes: add the engine's multi-node flags (node count, rank, "
                     "rendezvous address) on each node")
    return {"engine": engine, "command": shlex.join(cmd), "notes": notes}
