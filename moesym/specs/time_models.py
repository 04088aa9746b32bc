"""The time models a deployment can name (``--timing``, ``Deployment.timing``), as data.

Each entry, keyed by its :class:`TimeModelKind`, says what the model is (the command line's help)
and whether its name takes an argument (``tables:DIR``); the class that builds each kind for a GPU
is :data:`moesym.kernels.registry.TIME_MODEL_CLASSES`.
This module imports no SymPy: the command line and :class:`moesym.specs.deployment.Deployment`
check names against it on a cached run.

>>> metavar()
'{kernel,roofline,tables:DIR}'
>>> name_problem("kernel") is None, name_problem("kernels")
(True, "'kernels': use kernel, roofline or tables:DIR")
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable

__all__ = ["TIME_MODELS", "TimeModelEntry", "TimeModelKind", "help_text", "lookup", "metavar", "name_problem",
           "usage"]


class TimeModelKind(str, Enum):
    """The time models by name (a ``str``: ``TIME_MODELS["kernel"]`` finds its entry)."""

    KERNEL = "kernel"
    ROOFLINE = "roofline"
    TABLES = "tables"


@dataclass(frozen=True)
class TimeModelEntry:
    """One named time model of kind ``kind`` (its class for a GPU:
    :data:`moesym.kernels.registry.TIME_MODEL_CLASSES`); ``help`` says what it is; ``argument`` names the argument its name takes (None: none) and ``argument_problem``
    says what is wrong with one (None: nothing); ``tiles``: whether expert GEMMs may be timed in
    row tiles (:mod:`moesym.kernels.tile_step`; the roofline leaves tiles out); ``moe_kernels``:
    whether the engine's fused-MoE backend fit (a GPU's ``[moe_kernels]``) times the experts."""

    kind: TimeModelKind
    help: str
    argument: str | None = None
    argument_problem: Callable[[str], str | None] = lambda arg: None
    tiles: bool = True
    moe_kernels: bool = False

    def label(self) -> str:
        """``kernel``, ``tables:DIR``: the name, with its argument's placeholder."""
        name = self.kind.value
        return name if self.argument is None else f"{name}:{self.argument}"


def _missing_folder(folder: str) -> str | None:
    if Path(folder).expanduser().is_dir():
        return None
    return ("folder not found (tables:DIR names a folder of measured kernel tables, see "
            "bench_data/README.md)")


#: every time model by name, in the order the command line lists them
TIME_MODELS: dict[TimeModelKind, TimeModelEntry] = {
    TimeModelKind.KERNEL: TimeModelEntry(
        TimeModelKind.KERNEL, "the analytical kernel model calibrated per GPU, default",
        moe_kernels=True),
    TimeModelKind.ROOFLINE: TimeModelEntry(
        TimeModelKind.ROOFLINE, "peaks x the same fitted fractions; the teaching form",
        tiles=False),
    TimeModelKind.TABLES: TimeModelEntry(
        TimeModelKind.TABLES, "measured kernel tables in DIR where they cover a kernel, the "
        "kernel model elsewhere; bench_data/README.md", argument="DIR",
        argument_problem=_missing_folder),
}


def _split(name: str) -> tuple[TimeModelEntry | None, str | None]:
    """(the entry ``name`` names, its argument) or (None, None) when it names none."""
    key, sep, argument = name.partition(":")
    entry = TIME_MODELS.get(key)
    if entry is None or bool(sep) != (entry.argument is not None):
        return None, None
    return entry, (argument if sep else None)


def lookup(name: str) -> tuple[TimeModelEntry, str | None]:
    """(the entry ``name`` names, its argument); a name that names none is a ValueError."""
    entry, argument = _split(name)
    if entry is None:
        raise ValueError(f"unknown time model {name!r}")
    return entry, argument


def _listed(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0]


def usage() -> str:
    """The names a deployment may give: ``kernel, roofline or tables:DIR``."""
    return _listed([e.label() for e in TIME_MODELS.values()])


def metavar() -> str:
    """The command line's ``--timing`` metavar: ``{kernel,roofline,tables:DIR}``."""
    return "{" + ",".join(e.label() for e in TIME_MODELS.values()) + "}"


def help_text() -> str:
    """The command line's ``--timing`` help: every model with what it is."""
    return "time model: " + _listed([f"{e.label()} ({e.help})" for e in TIME_MODELS.values()])


def name_problem(name: str) -> str | None:
    """What is wrong with the time-model name ``name`` (a one-line reason naming it), or None."""
    entry, argument = _split(name)
    if entry is None or argument == "":
        return f"{name!r}: use {usage()}"
    why = None if argument is None else entry.argument_problem(argument)
    return None if why is None else f"{name}: {why}"
