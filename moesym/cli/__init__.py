"""The ``moesym`` command line (see CONTRACT.md). Each subcommand lives in its own module that
exposes ``register(subparsers)``; this module wires them and turns bad input into one line."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import sys
import warnings
from pathlib import Path

from .. import __version__
from ..errors import MoesymError
from .flags import flags

__all__ = ["main", "run", "build_parser"]

# subcommands in help order, with their one-line help; each lives in the module of its name,
# imported only when that subcommand runs (the others appear in --help from this table alone)
COMMANDS = {
    "predict": "time one prefill or decode step",
    "memory": "per-GPU memory: weights, KV cache, buffers, max batch",
    "kernel": "time of one GEMM, grouped GEMM or attention kernel",
    "comm": "time one EP dispatch or combine (per rank)",
    "routing": "distinct experts, destinations and load imbalance",
    "derive": "closed forms: crossover batch, optimal EP, ...",
    "sweep": "grid of step times (CSV or Parquet)",
    "optimize": "best TP/EP/micro-batch/batch under TPOT/TTFT and memory",
    "simulate": "a serving benchmark simulated request by request: TTFT/TPOT percentiles",
    "fleet": "replicas per hour for a day of traffic behind a router: cost, megawatts",
    "validate": "error against published end-to-end measurements",
    "report": "one self-contained HTML page of a prediction (charts, timeline, formulas)",
    "list": "built-in models, GPUs and engines: their sources, calibration state and where each engine runs",
}


# a command whose module has another name (a module named ``list`` would shadow the builtin
# in this package's namespace once imported)
_MODULES = {"list": "listing"}


class _Parser(argparse.ArgumentParser):
    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # for error()
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # one line, exit 2, no usage dump
        m = re.match(r"argument (--[\w-]+).*: expected one argument", message)
        given = getattr(self, "_given", [])
        if m and m.group(1) in given:  # a value that begins with '-' is read as a flag
            i = given.index(m.group(1))
            value = given[i + 1] if i + 1 < len(given) else ""
            if re.match(r"-\.?\d", value):
                raise MoesymError(f"{m.group(1)} {value}: a negative value; give a positive one")
        raise MoesymError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` names the one subcommand to load in full (None: all of them; "":
    none, the others are listed by name and help only)."""
    p = _Parser(prog="moesym", description="Symbolic performance models of MoE inference.")
    p.add_argument("--version", action="version", version=f"moesym {__version__}")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the compiled-model cache (docs/explanation/speed.md)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no warnings (given anywhere on the command line)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="warnings in full detail (the kernel calibration's whole source)")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    for name, help_ in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f".{_MODULES.get(name, name)}", __name__).register(sub)
        else:
            sub.add_parser(name, help=help_, add_help=False)
    return p


def _command(argv: list[str]) -> str:
    """The subcommand named in ``argv`` ("" when none)."""
    return next((a for a in argv if not a.startswith("-")), "")


_OUTPUT_FLAGS = ("out", "plot", "timeline", "report")  # argument names that are files to write


def _check_outputs(args) -> None:
    """Refuse an output path that cannot be written before any work is done (a one-line
    error, exit 2), rather than failing after the computation."""

    for name in _OUTPUT_FLAGS:
        value = getattr(args, name, None)
        if not isinstance(value, str):
            continue
        flag = "--" + name.replace("_", "-")
        path = Path(value).expanduser()
        if getattr(args, "out_is_folder", False) and name == "out":  # derive pages: a folder
            above = next(p for p in (path, *path.parents) if p.exists())  # or what would hold it
            if not above.is_dir():
                raise MoesymError(f"{flag} {value}: " + ("a file" if above == path else
                                                          f"{above} is a file")
                                  + "; name a folder to write the pages in")
            continue
        if value.endswith(("/", "\\")) or path.is_dir():
            raise MoesymError(f"{flag} {value}: a folder; name a file in it")
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise MoesymError(f"{flag} {value}: folder {parent} does not exist; create it or "
                              "choose another path")
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise MoesymError(f"{flag} {value}: not writable; choose another path")
        if name in ("plot", "timeline") and path.suffix.lower() not in _IMAGES:
            raise MoesymError(f"{flag} {value}: an image file: name it .png, .svg or .pdf")


_IMAGES = (".png", ".svg", ".pdf")


#: commands that time nothing: the kernel calibration's provenance is not theirs to say
_UNTIMED = ("memory", "routing", "list")
#: the global switches, taken wherever they stand on the command line
_QUIET, _VERBOSE = ("-q", "--quiet"), ("-v", "--verbose")


def _provenance(text: str) -> bool:
    """A warning about where the kernel calibration came from (moesym.specs.kernel_calib)."""
    return text.startswith("hardware ") and "kernel calibration" in text


def _short(text: str) -> str:
    """A calibration provenance warning without its detail (``-v`` gives the whole line): where
    the fit came from, up to its closing parenthesis."""
    m = re.match(r"hardware \S+: kernel calibration transferred from [^;:(]*\([^)]*\)", text)
    return m.group(0) if m else text


def run() -> int:
    """The ``moesym`` program (console script and ``python -m moesym``): :func:`main` in a
    process that ends with it. SymPy's solves allocate millions of short-lived containers, so
    the cyclic garbage collector's first generation is collected every 100,000 allocations
    rather than every 700 (about a tenth of a symbolic solve's time went to it); at the end
    every object is frozen, so the interpreter's exit does not walk them again (a few tenths of
    a second after a derive). A library caller of :func:`main` keeps its own settings."""
    gc.set_threshold(100_000, 50, 100)
    try:
        return main()
    finally:
        gc.freeze()


# Python's own way of saying a warning (to stderr); catch_warnings(record=True) swaps the second
_SAYS = (warnings.showwarning, getattr(warnings, "_showwarnmsg_impl", None))


def main(argv: list[str] | None = None) -> int:
    if (warnings.showwarning, getattr(warnings, "_showwarnmsg_impl", None)) == _SAYS:
        warnings.simplefilter("default")  # the program itself: every warning said once
    # else a caller records warnings (a test, a notebook's catch_warnings): its filters stand
    said: set[str] = set()
    held: list[str] = []  # calibration provenance: said after the answer, never before an error
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet = any(a in _QUIET for a in argv)
    verbose = any(a in _VERBOSE for a in argv)
    argv = [a for a in argv if a not in _QUIET + _VERBOSE]

    def say_once(msg, category, *rest, **kw) -> str:
        """Each warning once per run: building a model inside ``catch_warnings`` resets the
        default filter's memory, so a second model would repeat the first one's warnings.
        ``--quiet`` drops them; the calibration's provenance waits for the answer."""
        text = str(msg)
        if quiet or text in said:
            return ""
        said.add(text)
        if _provenance(text):
            held.append(text if verbose else _short(text))
            return ""
        return f"moesym: warning: {text}\n"

    warnings.formatwarning = say_once
    cmd = ""
    try:
        cmd = _command(argv)
        parser = build_parser(cmd if cmd in COMMANDS else "")
        args = parser.parse_args(argv)
        from ..numeric.cache import disable

        disable(getattr(args, "no_cache", False))  # per invocation
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        _check_outputs(args)
        args.argv = argv  # the command as given (a report page shows how to reproduce it)
        rc = int(args.func(args) or 0)
        if cmd not in _UNTIMED:
            for text in held:
                sys.stderr.write(f"moesym: warning: {text}\n")
        return rc
    except MoesymError as exc:
        print(f"moesym: error: {exc.named(flags(cmd))}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # a file read without moesym.io.text (which names it)
        print(f"moesym: error: a file named on the command line is not UTF-8 text (byte "
              f"0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8",
              file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover
        return 0
    except OSError as exc:  # a file the user named could not be read or written
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"moesym: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except Exception as exc:  # noqa: BLE001 - never a traceback on the command line
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"moesym: error: {type(exc).__name__}: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
