"""TOML reading for Python 3.10 (tomli) and 3.11+ (tomllib)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["load_toml"]


def load_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: malformed TOML ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:  # missing, a folder, unreadable, not UTF-8
        from .text import file_problem

        raise file_problem(path, exc) from None
