"""Kernel-time models: analytical GEMM / grouped-GEMM / attention / elementwise times, measured
kernel tables (InferSim CSV layout; AIConfigurator's parquet layout in :mod:`.aic`), fitting of
the per-GPU ``[kernel]`` calibration, and
:class:`KernelTiming`, a drop-in replacement for :class:`moesym.kernels.time_model.RooflineTiming`."""

import importlib

# the names below load on first use (PEP 562): reading an engine profile or a hardware file's
# [kernel] keys (moesym.kernels.calib) must not import SymPy, which a cached predict never needs
_LAZY = {"KernelTime": "analytical", "attention_decode_time": "analytical",
         "attention_prefill_time": "analytical", "elementwise_time": "analytical",
         "gemm_time": "analytical", "DEFAULTS": "calib", "KernelCalib": "calib",
         "kernel_calib": "calib", "parse_kernel_calib": "calib"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
