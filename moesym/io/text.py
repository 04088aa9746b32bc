"""Reading a text file the user named: every way it can fail (missing, a folder, unreadable,
not UTF-8) is one :class:`~moesym.errors.SpecError` line with the path and what is wrong."""

from __future__ import annotations

from pathlib import Path

from ..errors import SpecError

__all__ = ["read_text", "file_problem"]


def file_problem(path, exc: Exception) -> SpecError:
    """The one-line error of reading ``path`` failing with ``exc``."""
    if isinstance(exc, UnicodeDecodeError):
        return SpecError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}); save the file as UTF-8")
    if isinstance(exc, FileNotFoundError):
        return SpecError(f"{path}: file not found")
    if isinstance(exc, IsADirectoryError):
        return SpecError(f"{path}: a folder, not a file; name the file in it")
    if isinstance(exc, PermissionError):
        return SpecError(f"{path}: not readable (permission denied)")
    if isinstance(exc, OSError):
        return SpecError(f"{path}: cannot be read ({exc.strerror or exc})")
    raise exc


def read_text(path) -> str:
    """The text of ``path`` (UTF-8), or a one-line :class:`SpecError` naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise file_problem(path, exc) from None
