"""Running compiled models without SymPy: the generated NumPy functions, the special functions they call, and the on-disk cache of compiled models."""
