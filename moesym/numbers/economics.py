"""What a serving answer costs and draws: dollars per million tokens, watts per GPU, joules per
token and tokens per second per megawatt (SI inside: W, J, s, USD; hours, kWh and MW only at
the edges).

**Power.** A hardware file's ``[power]`` table gives the board's power at full load
(``board_W``: the datasheet TDP / TBP) and at idle (``idle_W``), the node's own draw per GPU
(``node_W``: CPUs, NICs, switches, fans; the rack's share on an NVL72 system) and a default PUE.
A GPU draws power linear in its utilization,

    P_gpu = P_idle + (P_board - P_idle) u,

the linear model of server power in utilization of Fan, Weber and Barroso ("Power provisioning
for a warehouse-sized computer", ISCA 2007, section 4.1: measured within a few percent). ``u``
is the step's busy share of compute or memory, whichever is higher: the seconds the step's
kernels keep the tensor cores busy (``compute_s``, at the kernels' achieved rate) or HBM busy
(``memory_s``) over the step's time (:func:`busy_share`); launch gaps, host time and
communication waits count as idle. A run or a steady state averages ``u`` over its steps by
their time, an idle GPU draws ``P_idle``. All-in power per GPU adds the node's share and
multiplies by the facility's PUE:

    P_all_in = (P_gpu + P_node) PUE,

so without the facility ``P_gpu + P_node <= P_board + P_node`` always. Energy per output token
is ``P_all_in / (output tokens per GPU per second)``.

**Cost.** A price per GPU-hour (``--price``, else the hardware file's ``[price]`` list price)
or owned hardware's (``--capex USD --years N --power-price USD_PER_KWH``):

    price = capex / (years x 8760 h) + P_all_in x power price / 1000,

and then, for a deployment of G GPUs serving X output tokens per second,

    USD per million output tokens = price x G / (3600 X) x 1e6,

the same with input and output tokens for USD per million tokens. Per GPU the G cancels.

>>> p = PowerSpec(board_W=700, idle_W=70, node_W=575, pue=1.3)
>>> round(gpu_watts(p, 0.5), 1), gpu_watts(p, 0.0)
(385.0, 70.0)
>>> round(usd_per_million(6.0, 1000.0), 4)   # $6/GPU-h at 1000 tokens/GPU/s
1.6667
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from ..errors import MoesymError
from ..specs.hardware import PowerSpec

__all__ = ["Pricing", "busy_share", "gpu_watts", "usd_per_million",
           "owned_usd_per_gpu_hour", "economics", "mix_busy_share", "serve_busy_share",
           "text_line", "NO_PRICE"]

HOURS_PER_YEAR = 8760.0
#: what a cost answer says when neither --price nor a listed price is at hand
NO_PRICE = "no price: pass --price USD_PER_GPU_HOUR (or --capex, --years and --power-price)"


@dataclass(frozen=True)
class Pricing:
    """What the user asked for: ``price`` (USD per GPU-hour, --price) or owned hardware
    (``capex`` USD per GPU over ``years``, electricity at ``power_price`` USD per kWh), and
    ``pue`` (None: the hardware file's)."""

    price: float | None = None
    capex: float | None = None
    years: float | None = None
    power_price: float | None = None
    pue: float | None = None

    def __post_init__(self):
        for name, flag in (("price", "--price"), ("capex", "--capex"), ("years", "--years")):
            v = getattr(self, name)
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise MoesymError(f"{flag} must be a positive number, got {v!r}")
        if self.power_price is not None and not (self.power_price >= 0
                                                 and math.isfinite(self.power_price)):
            raise MoesymError(f"--power-price must be a number >= 0 (USD per kWh), got "
                              f"{self.power_price!r}")
        if self.pue is not None and not (self.pue >= 1 and math.isfinite(self.pue)):
            raise MoesymError(f"--pue must be at least 1 (facility power over IT power; 1 = no "
                              f"cooling or conversion losses), got {self.pue!r}")
        owned = [f for f, v in (("--capex", self.capex), ("--years", self.years),
                                ("--power-price", self.power_price)) if v is not None]
        if owned and self.price is not None:
            raise MoesymError(f"--price and {owned[0]} both set the price per GPU-hour: give "
                              "--price (rented) or --capex, --years and --power-price (owned)")
        if owned and len(owned) < 3:
            missing = [f for f in ("--capex", "--years", "--power-price") if f not in owned]
            raise MoesymError(f"{owned[0]} prices owned hardware: add {' and '.join(missing)} "
                              "(USD per GPU, years of use, USD per kWh)")

    @property
    def owned(self) -> bool:
        return self.capex is not None

    @property
    def given(self) -> bool:
        """Any cost or power flag given (a command that has no serving answer says so)."""
        return any(v is not None for v in (self.price, self.capex, self.years,
                                           self.power_price, self.pue))


def busy_share(report: dict) -> float:
    """A step's utilization ``u`` in [0, 1]: the larger of the seconds its kernels keep compute
    busy and those they keep memory busy (the ``bounds`` of
    :func:`moesym.numbers.metrics.report_from_numbers`, summed over the breakdown keys), over
    the step's time."""
    t = float(report["step_time_s"])
    if not t > 0:
        return 0.0
    b = report.get("bounds", {}).values()
    compute = sum(float(v.get("compute_s", 0.0)) for v in b)
    memory = sum(float(v.get("memory_s", 0.0)) for v in b)
    return min(1.0, max(compute, memory) / t)


def mix_busy_share(parts) -> float:
    """The time-weighted utilization of a mix of steps: ``parts`` = ``[(seconds, u), ...]``,
    idle seconds as ``(seconds, 0.0)``."""
    total = sum(t for t, _ in parts)
    return min(1.0, sum(t * u for t, u in parts) / total) if total > 0 else 0.0


def serve_busy_share(r: dict) -> float:
    """The utilization of ``predict --phase serve``'s steady state: its mixed and decode-only
    steps' busy shares weighted by the time each takes (``serve.mixed_step_share`` of the
    steps are mixed)."""
    f = r["serve"]["mixed_step_share"]
    mix, dec = r["mixed_step"], r["decode_step"]
    return mix_busy_share([(f * mix["step_time_s"], mix["busy_share"]),
                           ((1 - f) * dec["step_time_s"], dec["busy_share"])])


def gpu_watts(power: PowerSpec, u: float) -> float:
    """The board's draw at utilization ``u`` (the linear rule of the module docstring)."""
    u = min(1.0, max(0.0, float(u)))
    return power.idle_W + (power.board_W - power.idle_W) * u


def usd_per_million(usd_per_gpu_hour: float, tokens_per_gpu_s: float) -> float | None:
    """USD per million tokens at a price per GPU-hour and a rate per GPU (None: no tokens)."""
    if not tokens_per_gpu_s > 0:
        return None
    return usd_per_gpu_hour / (3600.0 * tokens_per_gpu_s) * 1e6


def owned_usd_per_gpu_hour(capex: float, years: float, all_in_W: float,
                           usd_per_kWh: float) -> float:
    """Owned hardware's price per GPU-hour: its purchase spread over ``years`` of hours, plus
    its all-in power at the electricity price."""
    return capex / (years * HOURS_PER_YEAR) + all_in_W / 1000.0 * usd_per_kWh


def economics(hw, output_tokens_per_gpu_s: float, input_tokens_per_gpu_s: float,
              utilization: float | None, pricing: Pricing | None = None) -> dict:
    """The cost and power keys of a serving answer (CONTRACT.md item 22): per GPU, at the
    given rates and utilization (None: no power model applies). Keys without the numbers they
    need are None, and ``cost_note`` / ``power_note`` say why."""
    pricing = pricing or Pricing()
    power: PowerSpec | None = getattr(hw, "power", None)
    out: dict = {}
    out_tps, in_tps = float(output_tokens_per_gpu_s), float(input_tokens_per_gpu_s)
    all_in = None
    if power is None or utilization is None:
        out.update(dict.fromkeys(("gpu_watts", "all_in_watts_per_gpu", "joules_per_output_token",
                                  "output_tokens_per_s_per_mw"), None))
        out["power_note"] = (f"no power model: {hw.name}'s hardware file has no [power] table"
                             if power is None else "no power model for this answer")
    else:
        if power.assumed:
            warnings.warn(f"hardware {hw.name}: no published power figure; assumed "
                          f"{power.assumed}", stacklevel=2)
        pue = pricing.pue if pricing.pue is not None else power.pue
        g = gpu_watts(power, utilization)
        all_in = (g + power.node_W) * pue
        out.update({"gpu_watts": g, "all_in_watts_per_gpu": all_in,
                    "joules_per_output_token": all_in / out_tps if out_tps > 0 else None,
                    "output_tokens_per_s_per_mw": out_tps / all_in * 1e6,
                    "gpu_utilization": min(1.0, max(0.0, float(utilization))),
                    "node_watts_per_gpu": power.node_W, "pue": pue,
                    "board_watts": power.board_W, "idle_watts": power.idle_W})
    price, source = _price(hw, pricing, all_in)
    out["usd_per_gpu_hour"] = price
    if price is None:
        out.update({"usd_per_million_output_tokens": None, "usd_per_million_tokens": None,
                    "cost_note": source})
    else:
        out.update({"usd_per_million_output_tokens": usd_per_million(price, out_tps),
                    "usd_per_million_tokens": usd_per_million(price, out_tps + in_tps),
                    "price_source": source})
    return out


def _price(hw, pricing: Pricing, all_in_W: float | None) -> tuple:
    """(USD per GPU-hour or None, where it comes from or why there is none)."""
    if pricing.price is not None:
        return pricing.price, "--price"
    if pricing.owned:
        if all_in_W is None:
            raise MoesymError(f"--power-price needs the power of {hw.name}: its hardware file "
                              "has no [power] table; add one (docs: cost and power) or pass "
                              "--price")
        p = owned_usd_per_gpu_hour(pricing.capex, pricing.years, all_in_W, pricing.power_price)
        return p, (f"owned: --capex {pricing.capex:g} over --years {pricing.years:g} + all-in "
                   f"power at --power-price {pricing.power_price:g} USD/kWh")
    listed = getattr(hw, "price", None)
    if listed is None:
        return None, NO_PRICE
    return listed.usd_per_gpu_hour, f"{hw.name} list price: {listed.source} ({listed.date})"


def text_line(e: dict) -> str:
    """The one line of a command's text answer with the cost and power (W, J, MW at the edge)."""
    if e.get("usd_per_million_output_tokens") is not None:
        cost = (f"${e['usd_per_million_output_tokens']:.3g} per M output tokens "
                f"(${e['usd_per_million_tokens']:.3g} per M tokens) at "
                f"${e['usd_per_gpu_hour']:.4g}/GPU-h")
    else:
        cost = e.get("cost_note", NO_PRICE).split(" (or")[0]
    if e.get("gpu_watts") is not None:
        j = e["joules_per_output_token"]
        power = (f"GPU {e['gpu_watts']:.0f} W ({e['gpu_utilization']:.0%} busy), all-in "
                 f"{e['all_in_watts_per_gpu']:.0f} W/GPU (PUE {e['pue']:g}), "
                 + (f"{j:.3g} J/output token, " if j is not None else "")
                 + f"{e['output_tokens_per_s_per_mw']:,.0f} output tok/s per MW")
    else:
        power = e.get("power_note", "no power model")
    return f"{cost}; {power}"
