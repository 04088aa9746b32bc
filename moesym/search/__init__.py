"""Searching deployments: grid sweeps and the optimizer."""
