"""Kernel-time models: analytical GEMM / grouped-GEMM / attention / elementwise times
(:mod:`.analytical`, :class:`.timing.KernelTiming`), measured kernel tables (InferSim CSV layout;
AIConfigurator's parquet layout in :mod:`.aic`, aiter's tuner tables in :mod:`.aiter`), fitting
of the per-GPU ``[kernel]`` calibration (:mod:`.fit`; the calibration record itself is
:mod:`moesym.specs.kernel_calib`), and the time models a deployment names (:mod:`.registry`)."""
