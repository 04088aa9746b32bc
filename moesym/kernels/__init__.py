"""Kernel-time models: analytical GEMM / grouped-GEMM / attention / elementwise times, measured
kernel tables (InferSim CSV layout; AIConfigurator's parquet layout in :mod:`.aic`), fitting of
the per-GPU ``[kernel]`` calibration, and
:class:`KernelTiming`, a drop-in replacement for :class:`moesym.timing.RooflineTiming`."""

from .analytical import (
                         KernelTime,
                         attention_decode_time,
                         attention_prefill_time,
                         elementwise_time,
                         gemm_time,
)
from .calib import DEFAULTS, KernelCalib, kernel_calib, parse_kernel_calib

__all__ = [
                         "DEFAULTS",
                         "KernelCalib",
                         "KernelTime",
                         "attention_decode_time",
                         "attention_prefill_time",
                         "elementwise_time",
                         "gemm_time",
                         "kernel_calib",
                         "parse_kernel_calib",
]
