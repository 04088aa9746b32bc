"""The numbers in and out of a step model: the bindings (specs to the value of every symbol) and the metrics layer (a compiled model's outputs to what a user reads)."""
