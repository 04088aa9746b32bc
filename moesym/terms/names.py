"""Names of cost terms that data files refer to (no SymPy: an engine profile is read without
building a model)."""

from __future__ import annotations

#: the attention GEMMs that read the layer's (normalized) input: an engine may run them as one
#: GEMM over their weights side by side (``[ENGINE.kernels] fused_gemms``,
#: :func:`moesym.terms.attention.fuse_gemms`)
SAME_INPUT_GEMMS = ("q_a_proj", "q_proj", "kv_a_proj")
