"""2D device meshes (Tenstorrent Wormhole / Blackhole): the ``[mesh]`` table of a hardware file.

A mesh is R x C devices joined by links along two axes: axis ``rows`` joins device (r, c) to
(r + 1, c) (R devices per column), axis ``cols`` joins (r, c) to (r, c + 1) (C devices per row).
Each axis has its own per-direction link bandwidth and per-hop latency, and may wrap (a ring
along that axis; both wrapping: a torus). ``shapes`` lists the R x C meshes the system offers
(a Galaxy: 4 x 8; two or four of them: 8 x 8, 16 x 8, seed 004). ``[mesh.multicast]`` holds
the ring sparse-multicast kernel's fixed costs (per chain, per hop, per destination device,
per expert entry; :class:`moesym.specs.mesh.RingFabric`).

A GPU cluster is the other topology moesym knows: fully connected scale-up domains
(``[interconnect]``); a hardware file without ``[mesh]`` is one, and nothing here applies.

>>> m = parse_mesh({"shapes": ["4x8"], "rows": {"link_GBps": 50, "latency_us": 1, "wrap": True},
...                 "cols": {"link_GBps": 50, "latency_us": 1, "wrap": False}}, "x.toml")
>>> m.axis("rows").link_Bps, m.axis("rows").wrap, m.shapes
(50000000000.0, True, ((4, 8),))
>>> parse_shape("16x8")
(16, 8)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Mapping

from ..errors import SpecError

__all__ = ["MeshAxis", "MeshSpec", "MulticastFabric", "parse_mesh", "parse_shape", "AXES",
           "check_mesh", "mesh_values"]

AXES = ("rows", "cols")
_AXIS_KEYS = {"link_GBps", "latency_us", "wrap", "links", "source"}
_MC_KEYS = {"base_us", "hop_us", "device_us", "expert_us", "source"}


@dataclass(frozen=True)
class MeshAxis:
    """One axis of a mesh: per-direction bandwidth between neighbours (all parallel links
    together), fixed latency per hop, and whether the axis closes into a ring."""

    link_Bps: float
    latency_s: float
    wrap: bool


@dataclass(frozen=True)
class MulticastFabric:
    """Fixed costs of the ring sparse-multicast dispatch kernel (seconds): per chain, per hop to
    the farthest destination, per distinct destination device, per expert entry."""

    base_s: float
    hop_s: float
    device_s: float
    expert_s: float


@dataclass(frozen=True)
class MeshSpec:
    """A 2D mesh of devices (see the module docstring)."""

    rows: MeshAxis
    cols: MeshAxis
    shapes: tuple
    multicast: MulticastFabric | None = None

    def axis(self, name: str) -> MeshAxis:
        if name not in AXES:
            raise SpecError(f"`dispatch_axis` {name!r}: use rows or cols")
        return getattr(self, name)

    def check_shape(self, shape: tuple, hw_name: str) -> None:
        """Raise unless the system offers an R x C mesh of this shape."""
        if tuple(shape) not in self.shapes:
            offered = ", ".join(f"{r}x{c}" for r, c in self.shapes)
            raise SpecError(f"`mesh` {shape[0]}x{shape[1]}: {hw_name} offers {offered}")


def parse_shape(text: str, where: str = "`mesh`") -> tuple:
    """``'RxC'`` -> (R, C), both positive integers; anything else is a one-line error naming
    ``where`` (the flag, or a hardware file's key)."""
    parts = str(text).lower().split("x")
    try:
        r, c = (int(p) for p in parts)
    except ValueError:
        raise SpecError(f"{where} {text!r}: use ROWSxCOLS, e.g. 4x8") from None
    if r < 1 or c < 1:
        raise SpecError(f"{where} {text!r}: rows and columns must be positive")
    return r, c


def _num(x, where: str, positive: bool = True) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
            or (x <= 0 if positive else x < 0):
        kind = "positive" if positive else "non-negative"
        raise SpecError(f"{where}: must be a {kind} finite number, got {x!r}")
    return float(x)


def _axis(raw, where: str) -> MeshAxis:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: missing table (link_GBps, latency_us, wrap)")
    unknown = set(raw) - _AXIS_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: "
                        f"{', '.join(sorted(_AXIS_KEYS))}")
    for k in ("link_GBps", "latency_us", "wrap"):
        if k not in raw:
            raise SpecError(f"{where}: missing key '{k}'")
    if not isinstance(raw["wrap"], bool):
        raise SpecError(f"{where} wrap: must be true or false, got {raw['wrap']!r}")
    return MeshAxis(_num(raw["link_GBps"], f"{where} link_GBps") * 1e9,
                    _num(raw["latency_us"], f"{where} latency_us", positive=False) * 1e-6,
                    raw["wrap"])


def parse_mesh(raw, where: str) -> MeshSpec | None:
    """The ``[mesh]`` table (TOML units) as a :class:`MeshSpec`; None when absent."""
    if raw is None:
        return None
    w = f"{where} [mesh]"
    unknown = set(raw) - {"shapes", "rows", "cols", "multicast", "source"}
    if unknown:
        raise SpecError(f"{w}: unknown key(s) {', '.join(sorted(unknown))}; allowed: cols, "
                        "multicast, rows, shapes, source")
    if "shapes" not in raw or not isinstance(raw["shapes"], list) or not raw["shapes"]:
        raise SpecError(f"{w}: missing key 'shapes' (a list such as [\"4x8\"])")
    shapes = tuple(parse_shape(s, f"{w} shapes") for s in raw["shapes"])
    mc = raw.get("multicast")
    fabric = None
    if mc is not None:
        unknown = set(mc) - _MC_KEYS
        if unknown:
            raise SpecError(f"{w} multicast: unknown key(s) {', '.join(sorted(unknown))}; "
                            f"allowed: {', '.join(sorted(_MC_KEYS))}")
        vals = []
        for k in ("base_us", "hop_us", "device_us", "expert_us"):
            if k not in mc:
                raise SpecError(f"{w} multicast: missing key '{k}'")
            vals.append(_num(mc[k], f"{w} multicast.{k}", positive=False) * 1e-6)
        fabric = MulticastFabric(*vals)
    return MeshSpec(_axis(raw.get("rows"), f"{w} rows"), _axis(raw.get("cols"), f"{w} cols"),
                    shapes, fabric)


def check_mesh(hw, dep) -> None:
    """Raise unless ``hw`` describes a mesh offering ``dep.mesh`` (no-op without ``--mesh``)."""
    if dep.mesh is None:
        return
    if hw.mesh is None:
        raise SpecError(f"`mesh` {dep.mesh[0]}x{dep.mesh[1]}: hardware {hw.name} has no [mesh] "
                        "section (a mesh system: wormhole-tg, wormhole-n300, blackhole-p150)")
    hw.mesh.check_shape(dep.mesh, hw.name)


def mesh_values(hw, dep) -> dict:
    """Numbers of the mesh symbols (by attribute name) for a mesh deployment, {} otherwise:
    the dispatch axis's and the TP axis's link rates, the TP axis's hop latency, and the
    multicast fabric (the file's ``[mesh.multicast]``, else the fit to Tenstorrent's published
    table, with a warning)."""
    if dep.mesh is None:
        return {}
    check_mesh(hw, dep)
    disp = hw.mesh.axis(dep.dispatch_axis)
    tp = hw.mesh.axis("cols" if dep.dispatch_axis == "rows" else "rows")
    mc = hw.mesh.multicast
    if mc is None:
        f = RingFabric()
        warnings.warn(f"hardware {hw.name}: no [mesh.multicast]; using the ring multicast fit to "
                      "Tenstorrent's published dispatch table (moesym.specs.mesh.RingFabric)",
                      stacklevel=3)
        mc = MulticastFabric(f.base_s, f.hop_s, f.device_s, f.expert_s)
    return {"mesh_bw_disp": disp.link_Bps, "mesh_bw_tp": tp.link_Bps,
            "mesh_lat_tp": tp.latency_s, "mc_base": mc.base_s, "mc_hop": mc.hop_s,
            "mc_device": mc.device_s, "mc_expert": mc.expert_s}


@dataclass(frozen=True)
class RingFabric:
    """A bidirectional ring of ``ring`` devices along the dispatch axis (seed 004, TT mesh).

    A token is multicast hop by hop in both directions: the chain's latency is set by the
    farthest selected device, each distinct device costs one write, each expert one more entry.
    Defaults fitted (least squares of the relative error) to all 23 comparable entries of seed
    004's dispatch table (best, average and worst rows; the best-case E = 2 copy slip left out)
    on QUAD's 16-device ring with x = 2 experts per device (256 experts over 128 devices),
    microseconds: base 10.323, per hop 8.427, per device 4.995, per expert 3.074; every entry
    within 8% (the average row from the derivation in :func:`ring_dispatch_time`). A hardware
    file's ``[mesh.multicast]`` overrides them (:mod:`moesym.specs.mesh`).
    """

    ring: int = 16
    base_s: float = 10.323e-6
    hop_s: float = 8.427e-6
    device_s: float = 4.995e-6
    expert_s: float = 3.074e-6
    experts_per_device: int = 2
