"""moesym: symbolic performance models of Mixture-of-Experts inference.

Every cost term is a SymPy expression; terms compose into layer and step models that compile to
NumPy for grid evaluation and can be solved for crossovers and optimal deployments.

The public names below are imported on first use, so ``import moesym`` (and the command line)
stays light until a name that needs SymPy is touched.
"""

__version__ = "0.1.0"

__all__ = ["A2AMode", "BREAKDOWN_KEYS", "Deployment", "HardwareSpec", "ModelSpec", "Phase", "Routing",
           "S", "StepModel", "Workload", "__version__", "build_step", "builtin_hardware",
           "builtin_models", "from_hf_config", "load_hardware", "load_model", "predict"]


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'moesym' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
