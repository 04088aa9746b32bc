"""``moesym report``: one self-contained HTML page of a prediction (:mod:`moesym.report.html`)."""

from __future__ import annotations

from pathlib import Path

from ..io.progress import status
from ..report.html import report_html
from ..report.interactive import CliText, interactive_html
from . import COMMANDS
from .common import add_deployment, add_model_hw, add_workload, inputs_from, positive_int
from .flags import flags

__all__ = ["add_interactive", "register", "write_report"]


def register(sub) -> None:
    p = sub.add_parser("report", help=COMMANDS["report"])
    add_model_hw(p)
    add_workload(p)
    add_deployment(p)
    p.add_argument("--out", required=True, metavar="FILE.html",
                   help="the page to write (one file: styles, SVG charts and MathML inline)")
    add_interactive(p)
    p.set_defaults(func=run)


def add_interactive(p) -> None:
    p.add_argument("--interactive", action="store_true",
                   help="write the what-if page instead: the step model as JavaScript, with "
                        "inputs for the workload, deployment and hardware numbers (offline, one "
                        "file; decode, prefill and serve)")


def _say(name: str) -> None:
    """Progress on stderr, a terminal only (the page takes a few seconds: models, derive)."""
    status(f"report: {name}")


def write_report(path: str, model, hw, dep, wl, argv, optimize_result=None,
                 interactive: bool = False) -> Path:
    out = Path(path).expanduser()
    if interactive:

        _say("interactive page")
        page = interactive_html(model, hw, dep, wl, argv,
                                cli=CliText(flags("predict"), positive_int))
    else:
        page = report_html(model, hw, dep, wl, argv, optimize_result, progress=_say)
    out.write_text(page, encoding="utf-8")
    return out


def run(args) -> int:
    model, hw, dep, wl = inputs_from(args)
    out = write_report(args.out, model, hw, dep, wl, args.argv, interactive=args.interactive)
    print(f"wrote {out}")
    return 0
