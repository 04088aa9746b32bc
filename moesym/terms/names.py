"""Names of cost terms that data files refer to (no SymPy: an engine profile is read without
building a model)."""

from __future__ import annotations

#: the attention GEMMs that read the layer's (normalized) input: an engine may run them as one
#: GEMM over their weights side by side (``[ENGINE.kernels] fused_gemms``,
#: :func:`moesym.terms.attention.fuse_gemms`)
SAME_INPUT_GEMMS = ("q_a_proj", "q_proj", "kv_a_proj")

#: GEMMs whose weights stay BF16 whatever the checkpoint's format (the MoE router's gate, the
#: LM head): the kernel model times them with the GPU's BF16 calibration where it has its own
#: (``[kernel.dtypes.bf16]``, :meth:`moesym.kernels.timing.KernelTiming.calib_of`)
BF16_GEMMS = ("router", "lm_head")
