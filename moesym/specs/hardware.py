"""GPU hardware specifications, read from unit-suffixed TOML files and converted to SI once.

Peaks are datasheet numbers; what real kernels achieve lives in separate, named efficiency
fields. Built-in files are in the project's ``hardware/`` folder.

>>> from moesym.specs.hardware import load_hardware
>>> h = load_hardware("h800")
>>> h.hbm_bw_Bps, h.peak_flops("fp8"), h.scale_up_Bps
(3350000000000.0, 1979000000000000.0, 200000000000.0)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError
from ..io.resources import data_dir
from ..io.toml import load_toml
from .kernel_calib import MOE_KERNEL_KEYS, moe_kernel_fields
from .mesh import parse_mesh
from .precision import FORMATS, compute_format

__all__ = ["HardwareSpec", "CustomAllReduce", "Efficiency", "Latency", "PowerSpec", "PriceSpec",
           "VENDORS", "load_hardware", "builtin_hardware"]

#: device makers a hardware file's ``vendor`` names (an engine profile's ``runs_on`` lists them)
VENDORS = {"nvidia": "NVIDIA", "amd": "AMD", "apple": "Apple silicon", "tenstorrent": "Tenstorrent"}

_TOP_KEYS = {"name", "description", "source", "vendor", "arch", "default_engine", "sms",
             "gpus_per_node",
             "hbm_capacity_GB", "hbm_bandwidth_TBps", "peak_TFLOPs", "interconnect", "efficiency",
             "latency_us", "kernel", "compute_formats", "host", "mesh", "sram_MB", "usable_memory_frac", "allreduce",
             "moe_kernels", "deepep", "power", "price"}
_INTERCONNECT_KEYS = {"scale_up_GBps", "scale_out_GBps", "scale_up_domain_gpus", "host_link_GBps",
                      "scale_up_links"}
_EFF_KEYS = {"scale_up", "scale_out"}
# compute and memory efficiencies live in the [kernel] table, read by both time models
_EFF_MOVED = {"gemm": "gemm_tensor_frac", "grouped_gemm": "grouped_contiguous_tensor_frac",
              "attention": "attention_tensor_frac", "memory": "gemm_hbm_frac (and attention_hbm_frac, "
              "elementwise_hbm_frac)"}
_EFF_OPTIONAL = {"serving"}
_LAT_KEYS = {"kernel", "layer", "step", "scale_up", "scale_out"}
# per-kernel floor of a kernel replayed in a CUDA graph (decode steps as engines run them)
_LAT_OPTIONAL = {"graph_kernel"}
# fp16: FP16 inputs with FP16 accumulation, where it is faster than bf16 (GeForce tensor cores
# run it at twice the FP32-accumulate rate); only 16-bit GEMMs that accumulate in FP16 use it
# (llama.cpp's cuBLAS path, moesym.numbers.bindings)
_DTYPES = {"bf16", "fp16", "fp8", "fp4", "int8"}


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of the network peaks and the end-to-end serving factor (0 < x <= 1).

    Compute and HBM efficiencies per kernel class are the ``[kernel]`` table's fractions
    (:class:`moesym.specs.kernel_calib.KernelCalib`): one set per GPU, read by both time models.
    """

    scale_up: float
    scale_out: float
    serving: float = 1.0  # end-to-end: modeled step speed a serving engine sustains (optional key)


@dataclass(frozen=True)
class DeepEPKernel:
    """One DeepEP kernel inside one node (``[deepep]``, per mode and direction): time = fixed +
    bytes / rate + per-expert time x experts + per-token time x the tokens each of the kernel's
    thread blocks works through in turn. The low-latency kernels launch ceil(experts / 3) blocks
    (DeepEP 1.0.0, csrc/kernels/internode_ll.cu:305 and :506, kNumWarpGroups = 3); each block
    casts and sends (or receives and reduces) its tokens one after another, and the kernel polls
    one counter per expert and source rank. Normal mode fits the first two terms only."""

    fixed_s: float
    rate_Bps: float
    expert_s: float = 0.0
    block_token_s: float = 0.0

    LL_WARP_GROUPS = 3  # experts per thread block of the low-latency kernels (DeepEP 1.0.0)


@dataclass(frozen=True)
class CustomAllReduce:
    """The serving engine's own all-reduce inside one NVLink node (``[allreduce]``, or an
    engine's own ``[allreduce.NAME]``): one-shot (every GPU reads all peers' buffers: fixed +
    (p - 1) M / one-shot bandwidth) up to ``oneshot_max_bytes``, two-shot (reduce-scatter +
    all-gather: 2 fixed + 2 (p - 1) / p M / two-shot bandwidth) up to ``max_bytes``, NCCL
    beyond. Both switch points are per TP group size: ``((p, bytes), ...)`` ascending in p, the
    first p' >= p applies, the last beyond. The switch points are the engine's (read in its
    source, or fitted on its table where the source is not at hand: the file says which); the
    times are fitted on measured tables (the file names them)."""

    fixed_s: float
    oneshot_Bps: float
    twoshot_Bps: float
    oneshot_max_bytes: tuple[tuple[int, float], ...]
    max_bytes: tuple[tuple[int, float], ...]
    # where the numbers come from; "transferred ..." when not measured on this GPU (said in a
    # warning where a model uses it)
    source: str = ""


@dataclass(frozen=True)
class PowerSpec:
    """``[power]`` in watts: the board at full load (datasheet TDP / TBP) and at idle, the
    node's own draw per GPU (CPUs, NICs, switches, fans; the rack's share on an NVL72 system),
    the facility PUE a serving answer assumes unless ``--pue`` is given; ``source``: where the
    figures come from; ``assumed``: what was assumed where no published figure exists (said in
    one warning line wherever power is reported). :mod:`moesym.numbers.economics` uses them."""

    board_W: float
    idle_W: float
    node_W: float
    pue: float
    source: str = ""
    assumed: str = ""


@dataclass(frozen=True)
class PriceSpec:
    """``[price]``: a public list price per GPU-hour, with its source and date."""

    usd_per_gpu_hour: float
    source: str
    date: str


@dataclass(frozen=True)
class Latency:
    """Fixed latencies in seconds."""

    kernel_s: float
    layer_s: float
    step_s: float
    scale_up_s: float
    scale_out_s: float
    # an elementwise kernel's floor when the decode step replays as a CUDA graph (no host
    # launch per kernel); None: the hardware has no such measurement and keeps its launch cost
    graph_kernel_s: float | None = None


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    description: str
    source: str
    sms: int
    gpus_per_node: int
    hbm_capacity_bytes: float
    hbm_bw_Bps: float
    peaks_flops: Mapping[str, float]
    scale_up_Bps: float
    scale_out_Bps: float
    scale_up_domain_gpus: int
    host_link_Bps: float
    efficiency: Efficiency
    latency: Latency
    compute_formats: Mapping[str, str] = field(default_factory=dict)
    kernel: Mapping[str, object] = field(default_factory=dict)
    # the host CPU ([host]: DRAM bandwidth and matrix throughput), for experts computed there
    host_dram_Bps: float = 0.0
    host_flops: float = 0.0
    path: str = ""
    # a 2D mesh of devices ([mesh], moesym.specs.mesh): None for a GPU cluster
    mesh: object = None
    sram_bytes: float = 0.0  # on-chip SRAM per device (sram_MB; informational)
    # unified memory ([host] unified = true, Apple silicon): host and device share one DRAM, so
    # a host-to-device copy reads and writes that DRAM (host_link_Bps = hbm_bw_Bps / 2) and
    # competes with the device's own reads for it
    host_unified: bool = False
    # the engine's custom all-reduce for small TP messages ([allreduce]); None: NCCL's ring only
    allreduce: CustomAllReduce | None = None
    # engines' own custom all-reduce fits ([allreduce.NAME]): an engine profile's
    # [ENGINE.kernels] allreduce names the one it runs (moesym.engines.EngineProfile.hardware)
    allreduce_kernels: Mapping[str, CustomAllReduce] = field(default_factory=dict)
    # the device's maker (VENDORS; "": not given): which engines run on it (an engine
    # profile's runs_on) and the launch lines moesym.engines.emit writes
    vendor: str = ""
    # the compute architecture as the engines test it (CUDA compute capability sm90, sm100,
    # sm103, ...; AMD gfx942, gfx950, ...; "": not given): an engine profile's kernel paths that
    # depend on it (moesym.engines.SharedExpertFusion)
    arch: str = ""
    # the engine timed when none is named ("": SGLang): llama.cpp on Apple silicon and AMD's
    # APUs, tt-metal on Tenstorrent (moesym.engines.default_engine)
    default_engine: str = ""
    # host memory the expert tier (--expert-cache) may fill: [host] capacity_GB; on unified
    # memory the whole DRAM (hbm_capacity_GB), which the device's share is part of; 0: not given
    host_capacity_bytes: float = 0.0
    # fused-MoE kernels fitted one by one ([moe_kernels]): backend name -> the KernelCalib
    # fields (grouped-GEMM fractions and mechanisms) that replace [kernel]'s when an engine
    # profile's moe_kernels picks that backend (else [kernel]'s)
    moe_kernels: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    moe_kernels_dtype: str = ""  # the compute format the [moe_kernels] fits hold for
    # DeepEP inside one node ([deepep]): a DeepEPKernel by "ll_dispatch", "ll_combine",
    # "normal_dispatch", "normal_combine"; empty: the [interconnect] rate and [latency_us]
    deepep: Mapping[str, DeepEPKernel] = field(default_factory=dict)
    # a scale-up domain without a switch ([interconnect] scale_up_links): each GPU has this many
    # direct links, scale_up_GBps / scale_up_links each, one to every other GPU of the domain,
    # so a collective among p of them moves over their p - 1 links only
    # (moesym.terms.comm.link_share); 0: a switch (NVSwitch), every group at scale_up_GBps
    scale_up_links: int = 0
    # the power model ([power]) and a public list price ([price]); None: the file has none
    power: PowerSpec | None = None
    price: PriceSpec | None = None

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises if the GPU has no such tensor-core format."""
        if dtype not in self.peaks_flops:
            raise SpecError(f"hardware {self.name}: no {dtype} tensor-core peak; "
                            f"it supports {', '.join(sorted(self.peaks_flops))}")
        return self.peaks_flops[dtype]

    def compute_format(self, weight_dtype: str) -> str:
        """Tensor-core format the GEMMs of ``weight_dtype`` weights run in on this GPU: the
        file's ``[compute_formats]`` override, else :func:`moesym.specs.precision.compute_format`
        (an FP4 checkpoint on Hopper runs as FP8; W4A16 on BF16 cores)."""
        if weight_dtype in self.compute_formats:
            return self.compute_formats[weight_dtype]
        return compute_format(weight_dtype, self.peaks_flops)


def _req(d: Mapping, key: str, where: str):
    if key not in d:
        raise SpecError(f"{where}: missing key '{key}'")
    return d[key]


def _check_keys(d: Mapping, allowed: set[str], where: str) -> None:
    unknown = set(d) - allowed
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                        f"allowed: {', '.join(sorted(allowed))}")


def _positive(x, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf:
        raise SpecError(f"{where}: must be a positive finite number, got {x!r}")
    return float(x)


def _nonneg(x, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < math.inf:
        raise SpecError(f"{where}: must be a non-negative finite number, got {x!r}")
    return float(x)


def _count(x, where: str) -> int:
    """A count (SMs, GPUs): a positive integer; 132.5 SMs is refused, never truncated."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf \
            or x != int(x):
        raise SpecError(f"{where}: must be a positive integer, got {x!r}")
    return int(x)


def _fraction(x, where: str) -> float:
    v = _positive(x, where)
    if v > 1:
        raise SpecError(f"{where}: efficiency must be in (0, 1], got {x!r}")
    return v


def _serving(eff: Mapping, where: str) -> float:
    """``[efficiency] serving``: optional; a file without it gets 1.0 with a warning."""
    if "serving" not in eff:
        warnings.warn(f"{where}: no [efficiency] serving (end-to-end serving efficiency, fitted by "
                      f"'moesym validate --fit-serving'); using 1.0, i.e. kernels as timed in "
                      f"isolation", stacklevel=4)
        return 1.0
    return _fraction(eff["serving"], f"{where} efficiency.serving")


def _parse(raw: dict, where: str) -> HardwareSpec:
    _check_keys(raw, _TOP_KEYS, where)
    for k in ("name", "description", "source", "vendor", "arch", "default_engine"):
        if k in raw and not isinstance(raw[k], str):
            raise SpecError(f"{where} {k}: must be a string, got {raw[k]!r}")
    if raw.get("vendor", "").lower() not in ("", *VENDORS):
        raise SpecError(f"{where} vendor {raw['vendor']!r}: use {', '.join(VENDORS)} or leave "
                        "it out (then no engine is refused on this device)")
    for k in ("peak_TFLOPs", "interconnect", "efficiency", "latency_us", "kernel",
              "compute_formats", "host", "mesh", "allreduce"):
        if k in raw and not isinstance(raw[k], dict):
            raise SpecError(f"{where} {k}: must be a table ([{k}]), got {raw[k]!r}")
    peaks_raw = _req(raw, "peak_TFLOPs", where)
    _check_keys(peaks_raw, _DTYPES, f"{where} [peak_TFLOPs]")
    peaks = {k: _positive(v, f"{where} peak_TFLOPs.{k}") * 1e12 for k, v in peaks_raw.items()}
    if "bf16" not in peaks:
        raise SpecError(f"{where}: missing key 'peak_TFLOPs.bf16'")
    ic = _req(raw, "interconnect", where)
    _check_keys(ic, _INTERCONNECT_KEYS, f"{where} [interconnect]")
    eff = _req(raw, "efficiency", where)
    for old, new in _EFF_MOVED.items():
        if old in eff:
            raise SpecError(f"{where} [efficiency] {old}: compute and memory efficiencies are the "
                            f"[kernel] table's fractions now; write it as [kernel] {new}")
    _check_keys(eff, _EFF_KEYS | _EFF_OPTIONAL, f"{where} [efficiency]")
    lat = _req(raw, "latency_us", where)
    _check_keys(lat, _LAT_KEYS | _LAT_OPTIONAL, f"{where} [latency_us]")
    for k in _EFF_KEYS:
        _req(eff, k, f"{where} [efficiency]")
    for k in _LAT_KEYS:
        _req(lat, k, f"{where} [latency_us]")

    formats = dict(raw.get("compute_formats", {}))
    host = raw.get("host")
    if host is not None:
        _check_keys(host, {"dram_GBps", "peak_TFLOPs", "source", "unified", "capacity_GB"},
                    f"{where} [host]")
        for k in ("dram_GBps", "peak_TFLOPs"):
            _req(host, k, f"{where} [host]")
    unified = _unified(host, ic, where)
    mem_frac = _positive(raw.get("usable_memory_frac", 1.0), f"{where} usable_memory_frac")
    if mem_frac > 1:
        raise SpecError(f"{where} usable_memory_frac: the share of hbm_capacity_GB the device may "
                        f"hold, in (0, 1], got {mem_frac!r}")
    for k, v in formats.items():
        if k not in FORMATS or v not in peaks:
            raise SpecError(f"{where} [compute_formats]: {k} = {v!r} must map a weight dtype to a "
                            f"supported peak ({', '.join(sorted(peaks))})")
    return HardwareSpec(
        name=str(_req(raw, "name", where)),
        description=str(raw.get("description", "")),
        source=str(_req(raw, "source", where)),
        sms=_count(_req(raw, "sms", where), f"{where} sms"),
        gpus_per_node=_count(_req(raw, "gpus_per_node", where), f"{where} gpus_per_node"),
        hbm_capacity_bytes=_positive(_req(raw, "hbm_capacity_GB", where), f"{where} hbm_capacity_GB")
        * 1e9 * mem_frac,
        hbm_bw_Bps=_positive(_req(raw, "hbm_bandwidth_TBps", where), f"{where} hbm_bandwidth_TBps") * 1e12,
        peaks_flops=MappingProxyType(peaks),
        scale_up_Bps=_positive(_req(ic, "scale_up_GBps", where), f"{where} scale_up_GBps") * 1e9,
        scale_out_Bps=_positive(_req(ic, "scale_out_GBps", where), f"{where} scale_out_GBps") * 1e9,
        scale_up_domain_gpus=_count(_req(ic, "scale_up_domain_gpus", where),
                                    f"{where} [interconnect] scale_up_domain_gpus"),
        host_link_Bps=(_positive(raw["hbm_bandwidth_TBps"], f"{where} hbm_bandwidth_TBps") * 1e12 / 2
                       if unified else
                       _positive(ic.get("host_link_GBps", 64), f"{where} host_link_GBps") * 1e9),
        efficiency=Efficiency(**{k: _fraction(eff[k], f"{where} efficiency.{k}") for k in _EFF_KEYS},
                              serving=_serving(eff, where)),
        latency=Latency(**{f"{k}_s": _nonneg(lat[k], f"{where} latency_us.{k}") * 1e-6
                           for k in _LAT_KEYS | (_LAT_OPTIONAL & set(lat))}),
        compute_formats=MappingProxyType(formats),
        host_dram_Bps=_positive(host["dram_GBps"], f"{where} [host] dram_GBps") * 1e9 if host else 0.0,
        host_flops=_positive(host["peak_TFLOPs"], f"{where} [host] peak_TFLOPs") * 1e12 if host else 0.0,
        kernel=MappingProxyType(dict(raw.get("kernel", {}))),
        path=where,
        mesh=_mesh(raw.get("mesh"), where),
        sram_bytes=_positive(raw["sram_MB"], f"{where} sram_MB") * 1e6 if "sram_MB" in raw else 0.0,
        host_unified=unified,
        allreduce=_allreduce(raw.get("allreduce"), where),
        allreduce_kernels=_allreduce_kernels(raw.get("allreduce"), where),
        vendor=str(raw.get("vendor", "")).lower(),
        arch=str(raw.get("arch", "")).lower(),
        default_engine=str(raw.get("default_engine", "")),
        host_capacity_bytes=(_positive(raw["hbm_capacity_GB"], f"{where} hbm_capacity_GB") * 1e9
                             if unified else
                             _positive(host["capacity_GB"], f"{where} [host] capacity_GB") * 1e9
                             if host and "capacity_GB" in host else 0.0),
        scale_up_links=_links(ic, where),
        moe_kernels=_moe_kernels(raw.get("moe_kernels", {}), where),
        moe_kernels_dtype=_moe_kernels_dtype(raw.get("moe_kernels", {}), where),
        deepep=_deepep(raw.get("deepep"), where),
        power=_power(raw.get("power"), where),
        price=_price(raw.get("price"), where),
    )


_POWER_KEYS = {"board_W", "idle_W", "node_W", "pue", "source", "assumed"}


def _text(t: Mapping, key: str, ctx: str, required: bool = True) -> str:
    if key not in t:
        if required:
            raise SpecError(f"{ctx}: missing key '{key}'")
        return ""
    if not isinstance(t[key], str) or not t[key].strip():
        raise SpecError(f"{ctx} {key}: must be a non-empty string, got {t[key]!r}")
    return t[key]


def _table(raw, name: str, where: str) -> Mapping | None:
    if raw is not None and not isinstance(raw, Mapping):
        raise SpecError(f"{where} {name}: must be a table ([{name}]), got {raw!r}")
    return raw


def _power(raw, where: str) -> PowerSpec | None:
    """``[power]``: ``board_W``, ``idle_W`` (<= board_W), ``node_W`` (>= 0), ``pue`` (>= 1)
    and ``source`` required; ``assumed`` optional."""
    if _table(raw, "power", where) is None:
        return None
    ctx = f"{where} [power]"
    _check_keys(raw, _POWER_KEYS, ctx)
    board = _positive(_req(raw, "board_W", ctx), f"{ctx} board_W")
    idle = _nonneg(_req(raw, "idle_W", ctx), f"{ctx} idle_W")
    if idle > board:
        raise SpecError(f"{ctx} idle_W = {idle:g}: above board_W = {board:g}; idle power is at "
                        "most the board's full-load power")
    pue = _positive(_req(raw, "pue", ctx), f"{ctx} pue")
    if pue < 1:
        raise SpecError(f"{ctx} pue = {pue:g}: facility power over IT power is at least 1")
    return PowerSpec(board, idle, _nonneg(_req(raw, "node_W", ctx), f"{ctx} node_W"), pue,
                     _text(raw, "source", ctx), _text(raw, "assumed", ctx, required=False))


def _price(raw, where: str) -> PriceSpec | None:
    """``[price]``: ``usd_per_gpu_hour``, ``source`` and ``date``, all required."""
    if _table(raw, "price", where) is None:
        return None
    ctx = f"{where} [price]"
    _check_keys(raw, {"usd_per_gpu_hour", "source", "date"}, ctx)
    return PriceSpec(_positive(_req(raw, "usd_per_gpu_hour", ctx), f"{ctx} usd_per_gpu_hour"),
                     _text(raw, "source", ctx), _text(raw, "date", ctx))


def _links(ic: Mapping, where: str) -> int:
    """``[interconnect] scale_up_links``: direct links per GPU of a switchless scale-up domain,
    one to each other GPU of it (so ``scale_up_domain_gpus - 1``); absent: a switched domain."""
    if "scale_up_links" not in ic:
        return 0
    links = _count(ic["scale_up_links"], f"{where} [interconnect] scale_up_links")
    domain = ic.get("scale_up_domain_gpus")
    if domain is not None and links != domain - 1:
        raise SpecError(f"{where} [interconnect] scale_up_links = {links}: a switchless domain "
                        f"links each GPU directly to the other {domain} - 1; write "
                        f"{domain - 1}, or leave it out for a switched domain")
    return links


_DEEPEP_OPS = ("ll_dispatch", "ll_combine", "normal_dispatch", "normal_combine")


# the low-latency kernels' optional serial terms: per expert (ns) and per token a block sends (us)
_DEEPEP_SERIAL = {"expert_ns": ("expert_s", 1e-9), "block_token_us": ("block_token_s", 1e-6)}


def _deepep(raw, where: str) -> Mapping[str, DeepEPKernel]:
    """``[deepep]``: ``<op>_us`` and ``<op>_GBps`` for each DeepEP operation (all four); the
    low-latency ones may add ``<op>_expert_ns`` and ``<op>_block_token_us``."""
    if raw is None:
        return MappingProxyType({})
    ctx = f"{where} [deepep]"
    keys = {f"{op}_{u}" for op in _DEEPEP_OPS for u in ("us", "GBps")}
    keys |= {f"{op}_{u}" for op in _DEEPEP_OPS if op.startswith("ll_") for u in _DEEPEP_SERIAL}
    extra = set(raw) - keys - {"source"}
    if extra:
        raise SpecError(f"{ctx}: unknown key '{sorted(extra)[0]}'; allowed: "
                        f"{', '.join(sorted(keys))}, source")

    def serial(op):
        return {field_: _nonneg(raw[f"{op}_{k}"], f"{ctx} {op}_{k}") * scale
                for k, (field_, scale) in _DEEPEP_SERIAL.items() if f"{op}_{k}" in raw}

    return MappingProxyType({
        op: DeepEPKernel(_positive(_req(raw, f"{op}_us", ctx), f"{ctx} {op}_us") * 1e-6,
                         _positive(_req(raw, f"{op}_GBps", ctx), f"{ctx} {op}_GBps") * 1e9,
                         **serial(op))
        for op in _DEEPEP_OPS})


def _moe_kernels_dtype(raw, where: str) -> str:
    """``[moe_kernels] dtype``: the compute format its fits were measured in (required with
    any kernel: a fraction fitted on FP8 kernels does not time BF16 ones)."""
    names = [k for k in raw if k != "dtype"]
    if not names:
        return ""
    d = raw.get("dtype")
    if d not in ("bf16", "fp8", "fp4"):
        raise SpecError(f"{where} [moe_kernels] dtype: expected \"bf16\", \"fp8\" or \"fp4\" "
                        f"(the format the kernels were measured in), got {d!r}")
    return d


def _moe_kernels(raw, where: str) -> Mapping[str, Mapping[str, float]]:
    """``[moe_kernels]``: ``NAME = { grouped_tensor_frac = F, grouped_hbm_frac = ..., ... }``
    per fused-MoE backend (``heldout_median`` and ``source`` are records; ``dtype`` applies to
    all), as the :class:`~moesym.specs.kernel_calib.KernelCalib` fields (SI) that replace
    ``[kernel]``'s when an engine runs that backend."""
    out = {}
    for name, t in dict(raw).items():
        if name == "dtype":
            continue
        ctx = f"{where} [moe_kernels] {name}"
        if not isinstance(t, Mapping):
            raise SpecError(f"{ctx}: expected {{ grouped_tensor_frac = F, source = ... }}")
        allowed = ("grouped_tensor_frac", *MOE_KERNEL_KEYS, "heldout_median", "source")
        extra = set(t) - set(allowed)
        if extra:
            raise SpecError(f"{ctx}: unknown key '{sorted(extra)[0]}'; allowed: "
                            f"{', '.join(allowed)}")
        f = _fraction(_req(t, "grouped_tensor_frac", ctx), f"{ctx} grouped_tensor_frac")
        out[str(name)] = MappingProxyType({"grouped_contiguous_tensor_frac": f,
                                           "grouped_masked_tensor_frac": f,
                                           **moe_kernel_fields(t, ctx)})
    return MappingProxyType(out)


def _unified(host, ic: Mapping, where: str) -> bool:
    """``[host] unified``: true when host and device share one DRAM (Apple silicon). A copy
    from "host" to device memory then reads and writes that DRAM, so the host link is half the
    memory bandwidth, derived, never given: a file that also sets ``host_link_GBps`` is refused."""
    if host is None or "unified" not in host:
        return False
    u = host["unified"]
    if not isinstance(u, bool):
        raise SpecError(f"{where} [host] unified: must be true or false, got {u!r}")
    if u and "host_link_GBps" in ic:
        raise SpecError(f"{where} [interconnect] host_link_GBps: a unified-memory device "
                        "([host] unified = true) copies within its own DRAM; leave it out")
    return u


_ALLREDUCE_KEYS = {"fixed_us": 1e-6, "oneshot_GBps": 1e9, "twoshot_GBps": 1e9,
                   "oneshot_max_KiB": 1024, "max_MiB": 1024 * 1024}
_ALLREDUCE_BY_GROUP = ("oneshot_max_KiB", "max_MiB")  # a number, or a table by TP group size


def _allreduce_names(raw) -> list[str]:
    """The ``[allreduce.NAME]`` sub-tables: keys whose value is a table and not a switch point."""
    return [k for k, v in raw.items() if isinstance(v, Mapping) and k not in _ALLREDUCE_BY_GROUP]


def _by_group(value, key: str, ctx: str) -> tuple[tuple[int, float], ...]:
    """A switch point: one number (every group size) or ``{ p = value, ... }`` by TP group
    size, as ``((p, bytes), ...)`` ascending in p."""
    scale = _ALLREDUCE_KEYS[key]
    if not isinstance(value, Mapping):
        return ((2, _positive(value, f"{ctx} {key}") * scale),)
    table = []
    for k, v in value.items():
        if not str(k).isdigit() or int(k) < 2:
            raise SpecError(f"{ctx} {key}: key '{k}' is not a TP group size "
                            "(a whole number >= 2); write e.g. { 2 = 16384, 8 = 128 }")
        table.append((int(k), _positive(v, f"{ctx} {key}.{k}") * scale))
    if not table:
        raise SpecError(f"{ctx} {key}: empty table; give a number or {{ group size = value, ... }}")
    return tuple(sorted(table))


def _allreduce(raw, where: str, table: str = "allreduce") -> CustomAllReduce | None:
    """``[allreduce]`` (every key required; ``source``, comments and ``[allreduce.NAME]``
    sub-tables free) or None. ``oneshot_max_KiB`` and ``max_MiB`` are one number (every group
    size) or a table by TP group size (``{ 2 = 16384, 4 = 384, 8 = 128 }``)."""
    if raw is None:
        return None
    ctx = f"{where} [{table}]"
    named = set(_allreduce_names(raw)) if table == "allreduce" else set()  # no nesting deeper
    extra = set(raw) - set(_ALLREDUCE_KEYS) - {"source"} - named
    if extra:
        raise SpecError(f"{ctx}: unknown key '{sorted(extra)[0]}'; allowed: "
                        f"{', '.join(sorted(_ALLREDUCE_KEYS))}, source")
    v = {k: (_by_group(_req(raw, k, ctx), k, ctx) if k in _ALLREDUCE_BY_GROUP else
             _positive(_req(raw, k, ctx), f"{ctx} {k}") * f) for k, f in _ALLREDUCE_KEYS.items()}
    return CustomAllReduce(v["fixed_us"], v["oneshot_GBps"], v["twoshot_GBps"],
                           v["oneshot_max_KiB"], v["max_MiB"], str(raw.get("source", "")))


def _allreduce_kernels(raw, where: str) -> Mapping[str, CustomAllReduce]:
    """``[allreduce.NAME]``: an engine's own custom all-reduce (the keys of ``[allreduce]``,
    none inherited), by the name an engine profile's ``[ENGINE.kernels] allreduce`` gives."""
    if raw is None:
        return MappingProxyType({})
    return MappingProxyType({name: _allreduce(raw[name], where, f"allreduce.{name}")
                             for name in _allreduce_names(raw)})


def _mesh(raw, where: str):
    return parse_mesh(raw, where)


def builtin_hardware() -> list[str]:
    """Names of the built-in GPUs."""
    return sorted(p.stem for p in data_dir("hardware").glob("*.toml"))


def load_hardware(name_or_path: str | Path) -> HardwareSpec:
    """Load a built-in GPU by name (``'h100'``) or a hardware TOML file by path."""
    text = str(name_or_path)
    p = Path(text)
    if text.endswith(".toml") or p.is_file():
        if not p.is_file():
            raise SpecError(f"hardware file {text}: " + ("a folder, not a file" if p.is_dir()
                                                         else "not found"))
        return _parse(load_toml(p), str(p))
    path = data_dir("hardware") / f"{text.lower()}.toml"
    if not path.is_file():
        raise SpecError(f"unknown hardware {text!r}; built-in: {', '.join(builtin_hardware())} "
                        f"(or give a path to a hardware .toml file)")
    return _parse(load_toml(path), path.name)
