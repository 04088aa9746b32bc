"""The serving-engine memory settings a deployment may override (``--memory-option KEY=VALUE``,
``Deployment.memory_options``): one record, every default with its source."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SpecError
from .model import ModelSpec

__all__ = ["MemoryOptions"]

_NCCL_BUFFSIZE_BYTES = 4_194_304  # NCCL_BUFFSIZE default (4 MiB, stated in bytes)


@dataclass(frozen=True)
class MemoryOptions:
    """Serving-engine defaults the memory model assumes (every one documented, all overridable).

    block_size: paged KV block in tokens (vLLM's default 16). kv_fragmentation: charge half a
    block per request per layer. hc_mult: residual streams (0, the default: the model's own,
    DeepSeek-V4's 4 hyper-connection streams or 1 for a plain residual).
    prefill_tokens: a co-located engine's largest prefill chunk held beside decode (0: a
    disaggregated decode instance). max_dispatch_tokens: DeepEP low-latency
    num_max_dispatch_tokens_per_rank (SGLang's default 128; grown to the decode batch when that
    is larger). max_rank_tokens: most tokens per rank per dispatch (the chunked-prefill cap,
    SGLang's 8192). load_factor: busiest-rank load over the mean in workspace sizing.
    nccl_bytes_per_communicator: 2 directions x 16 channels x NCCL_BUFFSIZE (4,194,304 bytes).
    deepep_normal_bytes: DeepEP normal-mode buffer (about 1e9 bytes as SGLang sizes it).
    reserve_fraction / reserve_fixed_bytes: CUDA graphs and allocator slack as a share of HBM,
    and the CUDA context with library workspaces. mtp_layers: MTP draft modules served (0: off);
    mtp_shares_block: seed 002's reading that the MTP block reuses the last main layer (False:
    the checkpoint's own block, 14B parameters for DeepSeek-V3). fp4_scale_group: 32 (MXFP4) or
    16 (NVFP4). residual_bytes: residual-stream element size (fp32, seed 002).
    """

    block_size: int = 16
    kv_fragmentation: bool = True
    hc_mult: float = 0.0
    prefill_tokens: int = 0
    max_dispatch_tokens: int = 128
    max_rank_tokens: int = 8192
    load_factor: float = 1.0
    nccl_bytes_per_communicator: float = 2 * 16 * _NCCL_BUFFSIZE_BYTES
    deepep_normal_bytes: float = 1e9
    reserve_fraction: float = 0.04
    reserve_fixed_bytes: float = 1e9
    mtp_layers: int = 0
    mtp_shares_block: bool = False
    fp4_scale_group: int = 32
    residual_bytes: float = 4.0

    def residual_streams(self, model: ModelSpec) -> float:
        """The residual streams as applied: the option, or the model's own (hc_mult 0)."""
        return float(self.hc_mult or model.hc_mult or 1)

    def __post_init__(self) -> None:
        for name in ("block_size", "max_dispatch_tokens", "max_rank_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise SpecError(f"memory option {name} must be a positive integer, got {v!r}")
        for name in ("prefill_tokens", "mtp_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(f"memory option {name} must be a non-negative integer, got {v!r}")
        for name in ("load_factor", "residual_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise SpecError(f"memory option {name} must be a positive number, got {v!r}")
        if not (isinstance(self.hc_mult, (int, float)) and self.hc_mult >= 0
                and math.isfinite(self.hc_mult)):
            raise SpecError(f"memory option hc_mult must be a non-negative number (0: the "
                            f"model's), got {self.hc_mult!r}")
        for name in ("nccl_bytes_per_communicator", "deepep_normal_bytes", "reserve_fixed_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise SpecError(f"memory option {name} must be a non-negative number, got {v!r}")
        if not 0 <= self.reserve_fraction < 1:
            raise SpecError(f"memory option reserve_fraction must be in [0, 1), "
                            f"got {self.reserve_fraction!r}")
        if self.fp4_scale_group not in (16, 32):
            raise SpecError(f"memory option fp4_scale_group must be 16 or 32, "
                            f"got {self.fp4_scale_group!r}")
