"""Attention variants as components: MHA/GQA (:mod:`.gqa`), MLA (:mod:`.mla`), DeepSeek sparse
attention (:mod:`.dsa`), gated DeltaNet layers (:mod:`.gdn`), sliding-window layers
(:mod:`.sliding`) and DeepSeek-V4's compressed attention (:mod:`.compressed`), each one
:class:`~moesym.attention.base.AttentionVariant`; :mod:`.catalog` maps a model's fields to its
variants and :mod:`.compose` weights them by their shares of the layers for the step and memory
models.

A new variant touches one new file here and one catalog entry
(docs/how-to/add-attention-variant.md).
"""
from . import base

__all__ = ["AttentionVariant", "Kernel", "Memory", "MemorySite", "StepSite"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(base, name)
    raise AttributeError(f"module 'moesym.attention' has no attribute {name!r}")
