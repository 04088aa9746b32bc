"""Per-GPU memory model and capacity planning (issue 6; seed 002 sections 1-8, seed 001).

Submodules, in data-flow order: :mod:`.formats` (storage formats, scale overheads, FP4
capability matrix), :mod:`.weights` (weights by component), :mod:`.runtime` (activations, MoE
workspaces, communication buffers, reserve, MTP), :mod:`.capacity` (budget, max batch / context,
report). The KV cache per token and request is a cost term, :mod:`moesym.terms.kv`; each
attention variant says which of it its layers hold (:mod:`moesym.attention`).

>>> import moesym.memory as mem
>>> mem.weight_bytes_per_param("fp8") > 1
True
"""

from .capacity import (
                       CONTRACT_KEYS,
                       MemoryModel,
                       MemoryOptions,
                       a2a_mode,
                       fits,
                       max_batch,
                       max_context,
                       memory_bindings,
                       memory_expressions,
                       memory_model,
                       memory_report,
                       solve_max,
)
from .formats import (
                       WeightFormats,
                       storage_format,
                       weight_bytes_per_param,
                       weight_formats,
)
from .runtime import (
                       decode_activation_bytes,
                       deepep_low_latency_bytes,
                       dispatch_buffer_bytes,
                       dispatch_tokens,
                       expert_rows,
                       ffn_intermediate,
                       grouped_gemm_workspace_bytes,
                       mtp_activation_bytes,
                       nccl_buffer_bytes,
                       prefill_activation_bytes,
                       runtime_reserve_bytes,
)
from .weights import (
                       WEIGHT_COMPONENTS,
                       attention_params,
                       dense_ffn_params,
                       embedding_params,
                       mtp_extra_params,
                       norm_params,
                       replication_factors,
                       routed_expert_params,
                       router_params,
                       shared_expert_params,
                       weights_breakdown,
)

__all__ = [
                       "CONTRACT_KEYS",
                       "WEIGHT_COMPONENTS",
                       "MemoryModel",
                       "MemoryOptions",
                       "WeightFormats",
                       "a2a_mode",
                       "attention_params",
                       "decode_activation_bytes",
                       "deepep_low_latency_bytes",
                       "dense_ffn_params",
                       "dispatch_buffer_bytes",
                       "dispatch_tokens",
                       "embedding_params",
                       "expert_rows",
                       "ffn_intermediate",
                       "fits",
                       "grouped_gemm_workspace_bytes",
                       "max_batch",
                       "max_context",
                       "memory_bindings",
                       "memory_expressions",
                       "memory_model",
                       "memory_report",
                       "mtp_activation_bytes",
                       "mtp_extra_params",
                       "nccl_buffer_bytes",
                       "norm_params",
                       "prefill_activation_bytes",
                       "replication_factors",
                       "routed_expert_params",
                       "router_params",
                       "runtime_reserve_bytes",
                       "shared_expert_params",
                       "solve_max",
                       "storage_format",
                       "weight_bytes_per_param",
                       "weight_formats",
                       "weights_breakdown",
]
