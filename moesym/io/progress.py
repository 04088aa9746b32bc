"""Progress on stderr for commands that may run for more than a couple of seconds.

A bar (tqdm) appears only when asked for and stderr is a terminal: ``--json`` output, pipes,
CI logs and tests stay clean.
"""

from __future__ import annotations

import sys
from typing import Iterable, TypeVar

__all__ = ["counter", "progress_bar", "status"]

T = TypeVar("T")
# every bar (on stderr as it is when the bar starts): gone when done, redrawn at most twice a
# second, shown after a second
_BAR = {"leave": False, "mininterval": 0.5, "delay": 1.0}


def progress_bar(items: Iterable[T], desc: str, enabled: bool = True,
                 total: int | None = None) -> Iterable[T]:
    """``items``, with a tqdm bar on stderr when ``enabled`` and stderr is a terminal; a
    generator stays lazy (give its ``total`` for a bar with an end)."""
    if not enabled or not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return items
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    return tqdm(items, **_BAR, file=sys.stderr, desc=desc, total=total)


class _Quiet:
    """A counter that shows nothing (no terminal, or not asked for)."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def counter(desc: str, total: int, enabled: bool = True, unit: str = "it"):
    """A bar counted by hand (``update(n)``, then ``close()``) on the same terms as
    :func:`progress_bar`: shown only when ``enabled``, stderr is a terminal and the work has
    run a second."""
    if not enabled or not sys.stderr.isatty():
        return _Quiet()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _Quiet()
    return tqdm(**_BAR, file=sys.stderr, desc=desc, total=total, unit=unit)


def status(message: str, enabled: bool = True) -> None:
    """One line on stderr saying what a long step is doing (a terminal only, as the bars)."""
    if enabled and sys.stderr.isatty():
        print(f"moesym: {message} ...", file=sys.stderr, flush=True)
