"""Locate the data folders that ship with moesym (hardware/, bench_data/, built-in models).

In a wheel they live inside the package (``moesym/_data/...``); in a source checkout they are the
top-level folders beside the package. Never resolved from the working directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["data_dir"]


def data_dir(name: str) -> Path:
    """Folder ``name`` ('hardware', 'bench_data') shipped with the package."""
    packaged = Path(str(resources.files("moesym"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / name
    if source.is_dir():
        return source
    raise FileNotFoundError(f"moesym data folder {name!r} is missing from the installation")
