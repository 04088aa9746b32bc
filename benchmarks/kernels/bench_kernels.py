"""Measure GEMM, grouped GEMM, attention and elementwise kernels with PyTorch; write InferSim CSVs.

    python benchmarks/kernels/bench_kernels.py --out bench_data --gpu h100 [--dtype fp8]
    python benchmarks/kernels/bench_kernels.py --device cpu --tiny --out /tmp/bd --gpu cpu

Writes, in the layout ``moesym.kernels.tables`` reads (see bench_data/README.md):
  gemm/<gpu>/data.csv                          m,k,n,latency_us,mfu
  grouped_gemm/{decode,prefill}/<gpu>/data.csv InferSim grouped columns (decode = masked layout:
                                               a batched matmul over fixed rows per expert;
                                               prefill = contiguous: torch._grouped_mm when
                                               available, else a loop of GEMMs)
  mha/{decode,prefill}/<gpu>/<h>-<kv>-<d>.csv  attention via torch SDPA
  elementwise/<gpu>/data.csv                   bytes,latency_us,bandwidth_GBps (a copy kernel)
These are PyTorch's kernels (cuBLAS / cuBLASLt, FlashAttention via SDPA), not DeepGEMM's.
Requires ``pip install moesym[bench]`` (torch).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def _timer(device: str, fn, repeats: int, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _fp8_ok(device: str) -> bool:
    if device != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    major, minor = torch.cuda.get_device_capability()
    return (major, minor) >= (8, 9)


def _matmul_fn(m, n, k, dtype: str, device: str):
    if dtype == "fp8" and _fp8_ok(device):
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(m, k, device=device, dtype=dt)
    b = torch.randn(k, n, device=device, dtype=dt)
    return lambda: a @ b


def _write(path: Path, header, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def bench_gemm(args, peak):
    ms = [16, 64, 256] if args.tiny else [16, 32, 64, 128, 256, 512, 1024, 4096, 8192, 16384]
    shapes = [(256, 512), (512, 128)] if args.tiny else [(7168, 2048), (2048, 7168), (4096, 4096),
                                                         (7168, 1536), (1536, 24576), (7168, 576)]
    rows = []
    # the dtype the GEMM actually ran in (moesym --timing tables:DIR matches it per weight class)
    ran = ("fp8" if args.dtype == "fp8" and _fp8_ok(args.device) else "bf16") \
        if args.device == "cuda" else "fp32"
    for k, n in shapes:
        for m in ms:
            t = _timer(args.device, _matmul_fn(m, n, k, args.dtype, args.device), args.repeats)
            rows.append([m, k, n, round(t * 1e6, 3), round(2 * m * n * k / t / peak, 6), ran])
    _write(args.out / "gemm" / args.gpu / "data.csv", ["m", "k", "n", "latency_us", "mfu", "dtype"],
           rows)


def _grouped_fn(g, m, n, k, device, contiguous: bool):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    w = torch.randn(g, k, n, device=device, dtype=dt)
    if not contiguous:  # masked layout: every expert's block at the same (max) rows
        x = torch.randn(g, m, k, device=device, dtype=dt)
        return lambda: torch.bmm(x, w)
    x = torch.randn(g * m, k, device=device, dtype=dt)
    offs = torch.arange(m, g * m + 1, m, device=device, dtype=torch.int32)
    if device == "cuda" and hasattr(torch, "_grouped_mm"):
        wt = w.transpose(1, 2).contiguous().transpose(1, 2)
        try:
            torch._grouped_mm(x, wt, offs=offs)
            return lambda: torch._grouped_mm(x, wt, offs=offs)
        except (RuntimeError, TypeError):
            pass
    return lambda: [x[i * m:(i + 1) * m] @ w[i] for i in range(g)]


def bench_grouped(args, peak):
    cfgs = [(8, 1, 2, 128, 64)] if args.tiny else [(256, 8, 8, 7168, 2048), (128, 8, 8, 2048, 768)]
    for phase, sizes in (("decode", [4, 16] if args.tiny else [16, 32, 64, 128, 256, 512]),
                         ("prefill", [64] if args.tiny else [1024, 4096, 8192, 16384])):
        rows = []
        for experts, gpus, topk, hidden, inter in cfgs:
            local = experts // gpus
            for tok in sizes:
                m = max(1, tok * topk // experts)
                contiguous = phase == "prefill"
                up = _timer(args.device, _grouped_fn(local, m, 2 * inter, hidden, args.device,
                                                     contiguous), args.repeats)
                dn = _timer(args.device, _grouped_fn(local, m, hidden, inter, args.device,
                                                     contiguous), args.repeats)
                fl_up, fl_dn = 2 * local * m * 2 * inter * hidden, 2 * local * m * hidden * inter
                rows.append([experts, gpus, local, topk, hidden, inter, tok, m,
                             round(up * 1e6, 3), round(fl_up / up / peak, 6),
                             round(dn * 1e6, 3), round(fl_dn / dn / peak, 6),
                             "bf16" if args.device == "cuda" else "fp32"])
        tok_col = "batch_size_per_gpu" if phase == "decode" else "seq_len_per_gpu"
        _write(args.out / "grouped_gemm" / phase / args.gpu / "data.csv",
               ["num_experts", "num_gpus", "num_local_experts", "topk", "hidden_size",
                "intermediate_size", tok_col, "tokens_per_expert", "up_proj_us", "up_mfu",
                "down_proj_us", "down_mfu", "dtype"], rows)


def bench_attention(args, peak_bf16):
    dt = torch.bfloat16 if args.device == "cuda" else torch.float32
    shapes = [(4, 2, 32)] if args.tiny else [(32, 8, 128), (32, 4, 128), (64, 8, 128)]
    for h, kv, d in shapes:
        rows = []
        for b in ([1, 4] if args.tiny else [1, 16, 64, 128]):
            for L in ([64, 256] if args.tiny else [1024, 4096, 8192, 16384]):
                q = torch.randn(b, h, 1, d, device=args.device, dtype=dt)
                k = torch.randn(b, kv, L, d, device=args.device, dtype=dt)
                v = torch.randn(b, kv, L, d, device=args.device, dtype=dt)
                fn = (lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
                t = _timer(args.device, fn, args.repeats)
                rows.append(["bf16", "bf16", b, L, round(t * 1e6, 3),
                             round(4 * b * h * L * d / t / peak_bf16, 6)])
        _write(args.out / "mha" / "decode" / args.gpu / f"{h}-{kv}-{d}.csv",
               ["dtype", "kv_dtype", "batch_size", "kv_len", "latency_us", "mfu"], rows)
        rows = []
        for L in ([64, 128] if args.tiny else [1024, 4096, 8192, 16384]):
            q = torch.randn(1, h, L, d, device=args.device, dtype=dt)
            k = torch.randn(1, kv, L, d, device=args.device, dtype=dt)
            v = torch.randn(1, kv, L, d, device=args.device, dtype=dt)
            fn = (lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                       enable_gqa=True))
            t = _timer(args.device, fn, args.repeats)
            rows.append(["bf16", L, round(t * 1e6, 3), round(2 * h * L * L * d / t / peak_bf16, 6)])
        _write(args.out / "mha" / "prefill" / args.gpu / f"{h}-{kv}-{d}.csv",
               ["dtype", "seq_len", "latency_us", "mfu"], rows)


def bench_elementwise(args):
    rows = []
    for n in ([1 << 16, 1 << 20] if args.tiny else [1 << 20, 1 << 24, 1 << 27]):
        x = torch.randn(n, device=args.device)
        y = torch.empty_like(x)
        t = _timer(args.device, lambda x=x, y=y: y.copy_(x), args.repeats)
        nbytes = 2 * x.numel() * x.element_size()
        rows.append([nbytes, round(t * 1e6, 3), round(nbytes / t / 1e9, 3)])
    _write(args.out / "elementwise" / args.gpu / "data.csv",
           ["bytes", "latency_us", "bandwidth_GBps"], rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="bench-data folder to write")
    ap.add_argument("--gpu", required=True, help="name of the folder level <gpu> (e.g. h100)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (seconds, for tests)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="peak of --dtype for the mfu column (default: 1 TFLOP/s on CPU, 989 GPU)")
    args = ap.parse_args(argv)
    args.gpu = args.gpu.lower()
    args.repeats = args.repeats or (3 if args.tiny else 20)
    peak = (args.peak_tflops or (1.0 if args.device == "cpu" else 989.0)) * 1e12
    bench_gemm(args, peak)
    bench_grouped(args, peak)
    bench_attention(args, peak)
    bench_elementwise(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
