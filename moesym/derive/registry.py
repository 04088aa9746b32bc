"""Every answer of ``moesym derive``, in the order ``moesym derive --help`` lists them.

An :class:`Answer` says what the command line needs to ask it (its subcommand, the inputs it
takes, its own flags, how its answer prints) and names its module: ``moesym.derive.<module>``,
which holds the answer's function, ``ask`` (the answer from the command's flags) and ``PAGES``
(its worked configurations for ``moesym derive pages``). This module imports no answer: the
command line reads the registry to build its parser, and a derive answer read back from the
disk cache must not import SymPy (``tests/test_cache.py``), so a module is imported when its
answer is asked (:meth:`Answer.load`), as ``moesym.cli`` imports a subcommand's module when it
runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

__all__ = ["Answer", "Flag", "Page", "ANSWERS"]


@dataclass(frozen=True)
class Flag:
    """A flag of one answer beyond the model, hardware, workload and deployment flags its
    inputs take. ``type``: ``text``, ``switch`` (on when given), ``positive_float`` or
    ``positive_int`` (the command line's checked types); ``exclusive``: one of the answer's
    mutually exclusive flags, of which exactly one is required."""

    name: str
    type: str = "text"
    help: str | None = None
    required: bool = False
    default: object = None
    metavar: str | tuple | None = None
    nargs: int | None = None
    dest: str | None = None
    exclusive: bool = False

    @property
    def key(self) -> str:
        """The attribute the flag's value is read from."""
        return self.dest or self.name.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Page:
    """A derivation page (``derivations/<name>.md``): the worked configuration in words,
    ``answer(timing)`` (the answer on that configuration with ``--timing`` kernel or
    roofline), and ``source``, the function whose docstring is the derivation."""

    name: str
    config: str
    answer: Callable
    source: Callable


@dataclass(frozen=True)
class Answer:
    """One ``moesym derive`` subcommand.

    ``inputs``: the flags it takes besides its own: ``decode`` (a decode point: model,
    hardware, workload and deployment as ``predict`` takes them), ``serve`` (the steady
    state's request lengths) or ``step`` (one prefill or decode step, ``--phase``).
    ``shows``: how its answer prints: ``closed_form`` (a
    :class:`~moesym.derive.closed_form.ClosedForm`), ``elasticities`` or ``mesh_rows`` (a
    table). ``sets``: deployment fields the answer fixes itself (micro-batches: two, so
    ``--overlap`` names the two-batch schedule). ``differentiable``: ``derive sensitivity --of`` can name it (it needs no target beyond the
    decode point and has a smooth form). ``plot``: it takes ``--plot`` (each term's roofline
    against batch, the answer marked). ``status``: what the command says it is doing (a
    format over the flags)."""

    command: str
    help: str
    inputs: str = "decode"
    flags: tuple[Flag, ...] = ()
    shows: str = "closed_form"
    sets: tuple[tuple[str, object], ...] = ()
    differentiable: bool = False
    plot: bool = False
    status: str = "building and solving the step model"

    @property
    def module(self) -> str:
        return self.command.replace("-", "_")

    def load(self):
        """The answer's module, imported on first use (see the module docstring)."""
        return importlib.import_module(f"{__package__}.{self.module}")

    def defaults(self) -> SimpleNamespace:
        """The answer's own flags at their defaults (a switch off)."""
        return SimpleNamespace(**{f.key: False if f.type == "switch" else f.default
                                  for f in self.flags})


_MAX_EP = Flag("--max-ep", "positive_int")

_ANSWERS = (
    Answer("crossover", "decode batch per GPU where routed experts turn compute-bound",
           flags=(Flag("--no-lazy", "switch", "every local expert is read each step"),),
           differentiable=True, plot=True),
    Answer("attention", "batch where attention's KV read overtakes the MoE layer",
           differentiable=True),
    Answer("tpot", "largest decode batch that meets a TPOT target",
           flags=(Flag("--tpot-ms", "positive_float", required=True),)),
    Answer("concurrency", "largest serving concurrency per rank whose steady-state TPOT (and "
                          "TTFT) meets the targets", inputs="serve",
           flags=(Flag("--tpot-ms", "positive_float", "mean TPOT target of the steady state"),
                  Flag("--ttft-ms", "positive_float",
                       "mean TTFT target of the steady state (no queueing)"),
                  Flag("--percentile", "positive_float",
                       "refused: the steady state gives means; moesym optimize --percentile P "
                       "simulates percentile SLAs", metavar="P")),
           status="building and solving the serve model"),
    Answer("memory-batch", "largest decode batch whose memory per GPU fits in HBM",
           differentiable=True),
    Answer("optimal-ep", "EP degree where more EP stops shortening the MoE layer",
           flags=(_MAX_EP, Flag("--no-memory-limit", "switch",
                                "ignore whether the deployment fits in GPU memory"))),
    Answer("comm-hidden", "batch where communication stops hiding behind compute",
           differentiable=True),
    Answer("micro-batches", "batch from which two micro-batches beat one",
           sets=(("micro_batches", 2),), differentiable=True),
    Answer("ep-min-tpot",
           "EP that minimizes TPOT for a fixed number of requests (square-root form)",
           flags=(Flag("--total-batch", "positive_int",
                       "decode requests in flight across the whole instance", required=True),
                  _MAX_EP)),
    Answer("gpus-for-throughput",
           "smallest instance (GPUs = EP) reaching a decode throughput at a TPOT",
           flags=(Flag("--tokens-per-s", "positive_float",
                       "decode throughput target of the instance (tokens/s)", required=True),
                  Flag("--tpot-ms", "positive_float", required=True),
                  Flag("--max-gpus", "positive_int", default=4096))),
    Answer("expert-cache", "smallest expert cache (experts per layer on the device) whose tier "
                           "traffic hides under the layer's compute"),
    Answer("mesh-rows", "devices along a mesh's dispatch axis where the longer ring costs more "
                        "than fewer experts per device save (--mesh RxC)", shows="mesh_rows"),
    Answer("solve", "any equation over the step model: TERM_A = TERM_B, or the minimum of a "
                    "TERM, as one variable varies", inputs="step",
           flags=(Flag("--equal", help="a term name (step, tpot, layer, layer_compute, "
                       "exposed_comm, a breakdown key, routed_compute, routed_memory, "
                       "tokens_per_gpu_s, memory_used, memory_free), a number, or a SymPy "
                       "expression over terms and symbols", metavar=("TERM_A", "TERM_B"),
                       nargs=2, exclusive=True),
                  Flag("--minimize", metavar="TERM", exclusive=True),
                  Flag("--for", dest="var", required=True, metavar="VAR",
                       help="batch, tokens, context, chunk, ep, tp, gpus, micro_batches, "
                            "rdma_bandwidth, nvlink_bandwidth, hbm_bandwidth, flops, or any "
                            "symbol (attribute or printed name, e.g. bw_out or W_out)"),
                  Flag("--range", metavar="LO:HI",
                       help="where to look (default: the variable's natural range, or 1/1000 "
                            "to 1000 times its value)")),
           status="building the step model and solving for {var}"),
)

#: every answer, ``derive sensitivity`` last: its ``--of`` names the differentiable ones
ANSWERS = _ANSWERS + (
    Answer("sensitivity", "elasticity d ln y / d ln x of a quantity (or a derive answer) to "
                          "every parameter, ranked", inputs="step", shows="elasticities",
           flags=(Flag("--of", default="step_time", metavar="QUANTITY",
                       help="step_time (default), tokens_per_gpu_s, tpot (decode), ttft "
                            "(prefill), a derive solve term, or a derive answer: " + ", ".join(
                                a.command for a in _ANSWERS if a.differentiable)),),
           status="building the step model and differentiating {of}"),
)

