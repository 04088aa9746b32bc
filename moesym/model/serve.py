"""Aggregated serving's steady state lives in :mod:`moesym.model.metrics` (its serving
section: the derivation, :func:`serve_point`, :func:`serve_rates`, the default chunk); these
names stay importable from here for callers written against this module.

>>> serve_point(batch=64, isl=8000, osl=50, chunk=8192)["decoding"]  # prefill-bound
51.2
"""

from __future__ import annotations

from .metrics import CHUNK_BY_MEMORY, default_chunk_tokens, serve_point, serve_rates

__all__ = ["serve_point", "serve_rates", "default_chunk_tokens", "CHUNK_BY_MEMORY"]
