"""The one table from the fields of a deployment and a workload to the flags that set them.

Errors about those fields name them as a Python user gives them (``micro_batches``,
:class:`moesym.errors.MoesymError`'s ``fields``); the command line prints each as its flag:

>>> from moesym.errors import SpecError
>>> from moesym.specs.deployment import Deployment
>>> try:
...     Deployment(micro_batches=0)
... except SpecError as exc:
...     print(exc, "|", exc.named(FLAGS))
`micro_batches` must be a positive integer, got 0 | --micro-batches must be a positive integer, got 0
"""

from __future__ import annotations

__all__ = ["FLAGS", "COMMAND_FLAGS", "flags"]

#: field of :class:`moesym.specs.deployment.Deployment` or ``Workload`` -> its flag
FLAGS = {
    # Deployment
    "gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "tp": "--tp", "ep": "--ep",
    "micro_batches": "--micro-batches", "weights": "--weights", "kv": "--kv", "a2a": "--a2a",
    "routing": "--routing", "redundant_experts": "--redundant-experts", "layout": "--layout",
    "overlap": "--overlap", "timing": "--timing", "memory_options": "--memory-option",
    "group_size": "--group-size", "expert_cache": "--expert-cache",
    "cache_policy": "--cache-policy", "prefetch": "--prefetch",
    "expert_placement": "--expert-placement", "dequant": "--dequant", "mtp": "--mtp",
    "pp": "--pp", "cp": "--cp", "accept": "--accept", "accept_length": "--accept-length",
    "mesh": "--mesh",
    "dispatch_axis": "--dispatch-axis", "engine": "--engine",
    "cuda_graphs": "--eager", "prefill_graphs": "--prefill-graphs",
    # Workload
    "phase": "--phase", "batch": "--batch", "tokens": "--tokens", "context": "--context",
    "chunk": "--chunk", "isl": "--isl", "osl": "--osl", "prefix_hit": "--prefix-hit",
}

#: fields a command sets with flags of its own: ``moesym routing`` gives a MoE layer's shape
#: (:func:`moesym.specs.model.check_experts`'s fields) as --experts, --topk, --groups and
#: --topk-groups (elsewhere those fields are a model file's, named as the file names them)
COMMAND_FLAGS = {
    "routing": {"num_experts": "--experts", "experts_per_token": "--topk",
                "expert_groups": "--groups", "groups_per_token": "--topk-groups"},
}


def flags(command: str) -> dict:
    """Field -> flag for ``command``: :data:`FLAGS` and the command's own."""
    return {**FLAGS, **COMMAND_FLAGS.get(command, {})}
