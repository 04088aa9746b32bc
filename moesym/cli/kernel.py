"""``moesym kernel {gemm,grouped-gemm,attention}``: time of one kernel (CONTRACT.md command 4).

``--timing kernel`` (default): the analytical kernel model; ``--timing roofline``: the roofline
with the same fitted fractions; ``--timing tables:DIR``: a measured table in DIR where one covers
the shape (interpolated in log M between measured rows), the kernel model otherwise. ``source``
says which answered.
"""

from __future__ import annotations

import argparse
import warnings

from ..errors import MoesymError
from ..kernels.analytical import (
    attention_decode_time,
    attention_prefill_time,
    gemm_bytes,
    gemm_time,
)
from ..kernels.table_timing import tables_folder
from ..kernels.tables import KernelTables
from ..kernels.tile_step import tile_step_time_s
from ..specs.hardware import load_hardware
from ..specs.kernel_calib import kernel_calib
from . import COMMANDS
from .common import add_json, add_timing, emit_json, fmt_s, positive_int

__all__ = ["register"]

_BYTES = {"bf16": 2, "fp8": 1}


def register(sub) -> None:
    p = sub.add_parser("kernel", help=COMMANDS["kernel"])
    ks = p.add_subparsers(dest="kernel", required=True)

    def common(q):
        q.add_argument("--hardware", required=True, help="built-in GPU name or hardware .toml")
        q.add_argument("--dtype", choices=tuple(_BYTES), default="bf16")
        add_timing(q)
        add_json(q)

    g = ks.add_parser("gemm", help="dense GEMM (M x K) @ (K x N)")
    for f in ("--m", "--n", "--k"):
        g.add_argument(f, type=positive_int, required=True)
    common(g)
    g.set_defaults(func=_run_gemm, layout="dense", groups=1)

    gg = ks.add_parser("grouped-gemm", help="grouped GEMM of --groups experts")
    gg.add_argument("--groups", type=positive_int, default=None,
                    help="experts (with --m-per-group; or give --tokens-per-expert)")
    gg.add_argument("--m-per-group", type=positive_int, default=None, dest="m")
    gg.add_argument("--tokens-per-expert", type=_token_counts, default=None, metavar="N[,N...]",
                    help="explicit tokens of each expert (e.g. 17,38), instead of --groups and "
                         "--m-per-group; on tile-stepped hardware (wormhole-tg) the steps "
                         "Tenstorrent measured (give the gate/up shape: --n 2 d_e --k d, e.g. "
                         "4096 and 7168)")
    gg.add_argument("--n", type=positive_int, required=True)
    gg.add_argument("--k", type=positive_int, required=True)
    gg.add_argument("--layout", choices=("contiguous", "masked"), default="contiguous")
    common(gg)
    gg.set_defaults(func=_run_gemm)

    a = ks.add_parser("attention", help="attention decode or prefill (MHA/GQA, or MLA)")
    a.add_argument("--phase", choices=("decode", "prefill"), required=True)
    a.add_argument("--batch", type=positive_int, default=1, help="sequences")
    a.add_argument("--context", type=positive_int, required=True,
                   help="KV length (decode) or sequence length (prefill)")
    a.add_argument("--heads", type=positive_int, required=True)
    a.add_argument("--kv-heads", type=positive_int, default=None, help="default: --heads")
    a.add_argument("--head-dim", type=positive_int, default=128)
    a.add_argument("--mla", default=None, metavar="KV_LORA,ROPE",
                   help="MLA decode on the latent (e.g. 512,64): one shared K=V latent head")
    a.add_argument("--kv", choices=tuple(_BYTES), default="bf16", help="KV-cache dtype")
    common(a)
    a.set_defaults(func=_run_attention)


def _hw(args):
    hw = load_hardware(args.hardware)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CLI reports the source instead
        calib = kernel_calib(hw, args.dtype)  # the GPU's table for that format, if it has one
    if args.dtype not in hw.peaks_flops:
        raise MoesymError(f"--dtype: {hw.name} has no {args.dtype} tensor cores "
                          f"(it has {', '.join(sorted(hw.peaks_flops))})")
    return hw, calib


def _tables(args, hw):
    folder = tables_folder(args.timing)
    return KernelTables.load(folder, hw.name) if folder is not None else None


def _roofline_s(args, calib, hw, flops: float, nbytes: float, tensor_frac: float,
                hbm_frac: float) -> float:
    """max(FLOP / (peak x tensor fraction), bytes / (W x HBM fraction)): the roofline time model
    with the same [kernel] fractions the kernel model reads."""
    return max(flops / (hw.peak_flops(args.dtype) * tensor_frac), nbytes / (hw.hbm_bw_Bps * hbm_frac))


def _token_counts(text: str) -> list:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of token counts, got {text!r}") from None
    if not vals or min(vals) < 0 or not any(vals):
        raise argparse.ArgumentTypeError(
            f"token counts must be >= 0, one at least positive: {text!r}")
    return vals


def _groups(args) -> None:
    """--groups / --m-per-group, or --tokens-per-expert (mean rows for the GEMM shape)."""
    counts = getattr(args, "tokens_per_expert", None)
    if counts is not None:
        if args.groups is not None or args.m is not None:
            raise MoesymError("--tokens-per-expert replaces --groups and --m-per-group; give one")
        active = [c for c in counts if c]
        args.groups, args.m = len(active), max(1, round(sum(active) / len(active)))
    elif args.groups is None or args.m is None:
        raise MoesymError("grouped-gemm needs --groups and --m-per-group, or --tokens-per-expert")


def _run_gemm(args) -> int:
    hw, calib = _hw(args)
    if args.kernel == "grouped-gemm":
        counts = getattr(args, "tokens_per_expert", None)
        _groups(args)
        if calib.tile_stepped and args.timing != "roofline":
            return _tile_step(args, calib, counts or [args.m] * args.groups)
    b = _BYTES[args.dtype]
    m, n, k, g = args.m, args.n, args.k, args.groups
    flops = 2.0 * m * n * k * g
    nbytes = float(gemm_bytes(m, n, k, g, op_bytes=b, out_bytes=2))
    time_s, source = None, "analytical"
    tables = _tables(args, hw)
    if tables is not None and args.dtype == "fp8":  # the InferSim tables are FP8 DeepGEMM
        time_s = tables.gemm_latency_s(m, n, k, g, args.layout)
        source = "table" if time_s is not None else source
    if args.timing == "roofline":
        time_s, source = _roofline_s(args, calib, hw, flops, nbytes, calib.tensor_frac(args.layout),
                                     calib.gemm_hbm_frac), "roofline"
    if time_s is None:
        t = gemm_time(m, n, k, sms=hw.sms, peak_flops=hw.peak_flops(args.dtype),
                      hbm_bw_Bps=hw.hbm_bw_Bps, calib=calib, op_bytes=b, out_bytes=2,
                      groups=g, layout=args.layout)
        time_s = float(t.total_s)
    return _emit(args, {"time_s": time_s, "flops": flops, "bytes": nbytes,
                        "tflops": flops / time_s / 1e12, "source": source})


def _tile_step(args, calib, counts: list) -> int:
    """Tile-stepped expert GEMMs (the hardware's [kernel] tile_step_*; Tenstorrent's DeepSeek-V3
    mesh study): base + step x row tiles beyond each expert's first."""
    # gate and up: N = 2 d_e, K = d; the measured shape's steps scale by d d_e (one tile's work)
    scale = args.n * args.k / 2 / (calib.tile_step_ref_hidden * calib.tile_step_ref_inter)
    time_s = scale * float(tile_step_time_s(counts, calib.tile_step_base_s, calib.tile_step_s,
                                            calib.tile_step_rows))
    rows = sum(counts)
    flops = 2.0 * rows * args.n * args.k
    nbytes = float(gemm_bytes(args.m, args.n, args.k, args.groups, op_bytes=_BYTES[args.dtype],
                              out_bytes=2))
    return _emit(args, {"time_s": time_s, "flops": flops, "bytes": nbytes,
                        "tflops": flops / time_s / 1e12, "source": "tile-step",
                        "tokens_per_expert": counts,
                        "extra_tiles": sum(-(-c // calib.tile_step_rows) - 1 for c in counts if c)})


def _run_attention(args) -> int:
    hw, calib = _hw(args)
    kvh = args.kv_heads or args.heads
    if args.heads % kvh:
        raise MoesymError(f"--kv-heads: {kvh} does not divide --heads {args.heads}")
    shared = False
    qk = v = args.head_dim
    if args.mla:
        try:
            lora, rope = (int(x) for x in args.mla.split(","))
            if lora <= 0 or rope <= 0:
                raise ValueError
        except ValueError:
            raise MoesymError(f"--mla: expected KV_LORA,ROPE positive integers, got {args.mla!r}") from None
        if args.phase != "decode":
            raise MoesymError("--mla: only the decode (latent) form is modelled; "
                              "give prefill as --heads/--head-dim")
        qk, v, kvh, shared = lora + rope, lora, 1, True
    kw = {"sms": hw.sms, "peak_flops": hw.peak_flops(args.dtype), "hbm_bw_Bps": hw.hbm_bw_Bps, "calib": calib}
    B, L, h = args.batch, args.context, args.heads
    if args.phase == "decode":
        t = attention_decode_time(B, L, h, kvh, qk, v, kv_bytes=_BYTES[args.kv], shared_kv=shared, **kw)
        flops = 2.0 * B * h * L * (qk + v)
        nbytes = float(B * L * kvh * (qk if shared else qk + v) * _BYTES[args.kv]
                       + B * h * (qk + v) * 2)
        family, key = ("mla", f"{h}-{v}-{qk - v}") if shared else ("mha", f"{h}-{kvh}-{qk}")
    else:
        t = attention_prefill_time(B, L, h, kvh, qk, v, **kw)
        flops = 2.0 * B * h * L * (L + 1) / 2 * (qk + v)
        nbytes = float(B * L * (h + kvh) * (qk + v) * 2)
        family, key = "mha", f"{h}-{kvh}-{qk}"
    time_s, source = None, "analytical"
    tables = _tables(args, hw)
    if tables is not None and (B == 1 or args.phase == "decode"):
        time_s = tables.attention_latency_s(family, args.phase, key, batch=B, length=L)
        source = "table" if time_s is not None else source
    if args.timing == "roofline":
        frac = calib.attention_tensor_frac if args.phase == "decode" else calib.attention_prefill_tensor_frac
        time_s, source = _roofline_s(args, calib, hw, flops, nbytes, frac, calib.attention_hbm_frac), "roofline"
    if time_s is None:
        time_s = float(t.total_s)
    return _emit(args, {"time_s": time_s, "flops": flops, "bytes": nbytes,
                        "tflops": flops / time_s / 1e12, "source": source})


def _emit(args, r: dict) -> int:
    if args.json:
        emit_json(r)
        return 0
    print(f"{args.kernel} on {args.hardware}: {fmt_s(r['time_s'])}  {r['tflops']:.1f} TFLOP/s  "
          f"{r['bytes'] / 1e6:.2f} MB  ({r['source']})")
    return 0
