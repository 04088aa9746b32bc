"""moesym: symbolic performance models of Mixture-of-Experts inference.

Every cost term is a SymPy expression; terms compose into layer and step models that compile to
NumPy for grid evaluation and can be solved for crossovers and optimal deployments.
"""

__version__ = "0.1.0"

from .api import (A2AMode, BREAKDOWN_KEYS, Deployment, HardwareSpec, ModelSpec, Phase, Routing, S,
                  StepModel, Workload, build_step, builtin_hardware, builtin_models, from_hf_config,
                  load_hardware, load_model, predict)

__all__ = ["A2AMode", "BREAKDOWN_KEYS", "Deployment", "HardwareSpec", "ModelSpec", "Phase", "Routing",
           "S", "StepModel", "Workload", "__version__", "build_step", "builtin_hardware",
           "builtin_models", "from_hf_config", "load_hardware", "load_model", "predict"]
