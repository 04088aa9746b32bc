"""Small-batch kernel timings on one NVIDIA GPU, eager and replayed in a CUDA graph.

What a decode step at a handful of requests costs is set by per-kernel floors, and engines
(SGLang, vLLM, TensorRT-LLM, llama.cpp) replay decode steps as CUDA graphs. Published kernel
tables time kernels one at a time. This script measures, on the GPU it runs on, with PyTorch:

* ``launch``: a chain of tiny kernels (one-element in-place adds), per kernel, launched eagerly
  from Python and replayed from a CUDA graph: the host launch cost and the graph's per-kernel gap;
* ``gemm``: dense GEMMs of DeepSeek-V3's decode layer under TP8 (bf16 with cuBLAS; fp8 with
  ``torch._scaled_mm``, per-tensor scales) at M = 1..256 rows, each timed back to back in a graph
  with the weights rotated over copies four times the L2 so every launch reads them from HBM;
* ``experts``: a batched GEMM over E touched experts with one token each (``torch.bmm``): weight
  reads at few tokens per expert;
* ``elementwise``: single elementwise, reduction and top-k kernels at decode sizes, eager and in a
  graph (the floor of the norms, activations, casts and routing kernels around the GEMMs);
* ``chain``: GEMMs interleaved with elementwise kernels in one graph, against the sum of each
  kernel's own graph time (whether a kernel boundary in a graph costs more than the kernels);
* ``hbm``: a device-to-device copy and a read-only reduction over a few GB (the ceilings).

Output: one JSON document (``--out``); bench_data/h200_small_batch.json is its run on an H200 and
benchmarks/gpu_small_batch.md the reading of it. Run: ``python benchmarks/gpu_small_batch.py
--out FILE`` on a machine with a CUDA GPU and PyTorch.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import torch

# DeepSeek-V3 (hf config: hidden 7168, q_lora 1536, kv_lora 512 + rope 64, 128 heads x (128+64),
# v_head 128, moe_intermediate 2048, intermediate 18432, vocab 129280), per GPU under TP8
TP = 8
SHAPES = {  # name: (N, K)
    "qkv_a (replicated)": (1536 + 512 + 64, 7168),
    "q_b": (128 * 192 // TP, 1536),
    "o_proj": (7168, 128 * 128 // TP),
    "shared gate_up": (2 * 2048 // TP, 7168),
    "shared down": (7168, 2048 // TP),
    "router (replicated)": (256, 7168),
    "dense gate_up": (2 * 18432 // TP, 7168),
    "lm_head": (129280 // TP, 7168),
}
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REPS = 64   # kernels per timed graph
REPLAYS = 5


def _graph_time_s(fn, reps: int = REPS, replays: int = REPLAYS) -> float:
    """Mean time per call of ``fn(i)`` captured ``reps`` times in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3 / (reps * replays)


def _eager_time_s(fn, reps: int = REPS) -> float:
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(reps):
        fn(i)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3 / reps


def launch() -> dict:
    x = torch.zeros(1, device="cuda")
    n = 400

    def chain(_i):
        for _ in range(n):
            x.add_(1.0)
    return {"kernels": n, "eager_us_per_kernel": _eager_time_s(chain, reps=5) / n * 1e6,
            "graph_us_per_kernel": _graph_time_s(chain, reps=1, replays=20) / n * 1e6}


def _copies(nbytes: int, l2_bytes: int) -> int:
    return max(2, math.ceil(4 * l2_bytes / max(nbytes, 1)))


def gemm(l2_bytes: int) -> list[dict]:
    rows = []
    for name, (n, k) in SHAPES.items():
        for dtype in ("bf16", "fp8"):
            bytes_per = 2 if dtype == "bf16" else 1
            copies = _copies(n * k * bytes_per, l2_bytes)
            if dtype == "bf16":
                ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
                      for _ in range(copies)]
            else:
                ws = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
                      for _ in range(copies)]
            one = torch.ones((), device="cuda")
            for m in ROWS:
                mm = m if dtype == "bf16" else max(16, m)  # _scaled_mm takes rows in 16s
                if dtype == "bf16":
                    a = torch.randn(mm, k, device="cuda", dtype=torch.bfloat16)

                    def fn(i, a=a):
                        return a @ ws[i % copies]
                else:
                    a = torch.randn(mm, k, device="cuda").to(torch.float8_e4m3fn)

                    def fn(i, a=a):
                        return torch._scaled_mm(a, ws[i % copies], scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16)
                try:
                    g = _graph_time_s(fn)
                    e = _eager_time_s(fn)
                except Exception as exc:  # a kernel this PyTorch build lacks: say so, go on
                    rows.append({"name": name, "dtype": dtype, "m": m, "error": repr(exc)[:200]})
                    continue
                wbytes = n * k * bytes_per
                rows.append({"name": name, "dtype": dtype, "m": m, "m_run": mm, "n": n, "k": k,
                             "graph_us": g * 1e6, "eager_us": e * 1e6,
                             "weight_GBps_graph": wbytes / g / 1e9,
                             "TFLOPs_graph": 2 * mm * n * k / g / 1e12})
            del ws
            torch.cuda.empty_cache()
    return rows


def experts(l2_bytes: int) -> list[dict]:
    n, k = 2 * 2048 // TP, 7168  # one expert's gate_up slice under TP8
    rows = []
    for e in (1, 8, 32, 64, 128, 256):
        copies = _copies(e * n * k * 2, l2_bytes)
        ws = [torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        a = torch.randn(e, 1, k, device="cuda", dtype=torch.bfloat16)

        def fn(i):
            return torch.bmm(a, ws[i % copies])
        g = _graph_time_s(fn)
        rows.append({"experts": e, "tokens_per_expert": 1, "n": n, "k": k, "graph_us": g * 1e6,
                     "weight_GBps_graph": e * n * k * 2 / g / 1e9})
        del ws
        torch.cuda.empty_cache()
    return rows


def elementwise() -> list[dict]:
    rows = []
    for r in (1, 8, 64, 256):
        x = torch.randn(r, 7168, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(r, 4096, device="cuda", dtype=torch.bfloat16)
        logits = torch.randn(r, 256, device="cuda", dtype=torch.float32)
        ops = {"mul_ in place (r x 7168)": lambda _i: x.mul_(1.0),
               "silu (r x 4096)": lambda _i: torch.nn.functional.silu(g),
               "row sum (r x 7168)": lambda _i: x.sum(-1),
               "softmax (r x 256)": lambda _i: logits.softmax(-1),
               "topk 8 of 256": lambda _i: logits.topk(8, dim=-1)}
        for name, fn in ops.items():
            rows.append({"op": name, "rows": r, "graph_us": _graph_time_s(fn) * 1e6,
                         "eager_us": _eager_time_s(fn) * 1e6})
    return rows


def chain(l2_bytes: int) -> dict:
    n, k = 7168, 2048  # o_proj under TP8, bf16, 8 rows
    copies = _copies(n * k * 2, l2_bytes)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() for _ in range(copies)]
    a = torch.randn(8, k, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, 7168, device="cuda", dtype=torch.bfloat16)

    def both(i):
        a @ ws[i % copies]
        x.mul_(1.0)
    g_both = _graph_time_s(both)
    g_gemm = _graph_time_s(lambda i: a @ ws[i % copies])
    g_mul = _graph_time_s(lambda _i: x.mul_(1.0))
    return {"gemm_plus_mul_us": g_both * 1e6, "gemm_us": g_gemm * 1e6, "mul_us": g_mul * 1e6,
            "boundary_us": (g_both - g_gemm - g_mul) * 1e6}


def hbm() -> dict:
    nbytes = 4 << 30
    src = torch.empty(nbytes // 2, device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    copy = _eager_time_s(lambda _i: dst.copy_(src), reps=10)
    read = _eager_time_s(lambda _i: src.sum(dtype=torch.float32), reps=10)
    return {"bytes": nbytes, "copy_GBps_read_plus_write": 2 * nbytes / copy / 1e9,
            "sum_GBps_read": nbytes / read / 1e9}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    t0 = time.time()
    doc = {"gpu": props.name, "sms": props.multi_processor_count, "l2_bytes": l2,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "method": "CUDA events; graph rows: REPS kernels captured in one torch.cuda.CUDAGraph, "
                     "replayed REPLAYS times; weights rotated over copies >= 4x L2",
           "reps": REPS, "replays": REPLAYS}
    for key, fn in (("launch", launch), ("elementwise", elementwise),
                    ("chain", lambda: chain(l2)), ("hbm", hbm), ("gemm", lambda: gemm(l2)),
                    ("experts", lambda: experts(l2))):
        try:
            doc[key] = fn()
        except Exception as exc:
            doc[key] = {"error": repr(exc)[:300]}
        print(key, "done", round(time.time() - t0, 1), "s", flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: doc[k] for k in ("gpu", "launch", "hbm", "chain")}, indent=1))
    for r in doc.get("elementwise", []):
        print(r)
    for r in doc.get("gemm", []):
        if isinstance(r, dict) and "graph_us" in r:
            print(f"{r['name']:22s} {r['dtype']:4s} m={r['m']:3d} graph {r['graph_us']:7.2f} us "
                  f"eager {r['eager_us']:7.2f} us  {r['weight_GBps_graph']:7.0f} GB/s")
        else:
            print(r)
    for r in doc.get("experts", []):
        print(r)


if __name__ == "__main__":
    main()
