"""Speed of the fleet simulator (``moesym fleet``): one million simulated requests on one
candidate, next to ``python -c "import numpy"`` measured in the same run (the floor of any
NumPy program on this machine). The target: under 60 times the reference.

The candidate: Qwen3-30B-A3B on 8-GPU H200 replicas (TP 2, EP 8, four attention DP ranks,
SGLang), Poisson arrivals at 100 requests per second for 10,000 s (about a million requests,
prompts 1024 and outputs 256 tokens) behind round robin on two replicas. Timed: the traffic's
draw, and the fleet simulation of every request (:func:`moesym.serving.fleet.simulate_fleet`);
the replica's step-time tables (built once per candidate from the compiled step model, cached
on disk) are timed apart. Each figure is the best of ``--repeat`` runs.

Run ``python benchmarks/bench_fleet.py [--router least-outstanding] [--repeat 3]``; it prints
one JSON object. Times depend on the machine and its load: read the ratio first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _numpy_import(repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import numpy"], check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--router", default="round-robin")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--duration", type=float, default=10_000.0)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()

    from moesym.serving import Simulation
    from moesym.serving.fleet import replica_model, simulate_fleet
    from moesym.serving.traffic import poisson_traffic
    from moesym.specs.deployment import Deployment
    from moesym.specs.hardware import load_hardware
    from moesym.readers.model import load_model

    ref = _numpy_import(a.repeat)
    model, hw = load_model("qwen3-30b-a3b"), load_hardware("h200")
    dep = Deployment(gpus=8, tp=2, ep=8, gpus_per_node=8, engine="sglang")
    t0 = time.perf_counter()
    sim = Simulation(model, hw, dep)
    tr = poisson_traffic(a.rate, a.duration, "1024", "256", seed=0)
    m, _, _ = replica_model(sim, tr.isl, tr.osl)
    tables = time.perf_counter() - t0
    best, run = float("inf"), None
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        tr = poisson_traffic(a.rate, a.duration, "1024", "256", seed=0)
        run = simulate_fleet(m, tr, [a.replicas], a.router)
        best = min(best, time.perf_counter() - t0)
    ttft = run.first_token_s - tr.arrival_s
    out = {"requests": len(tr), "router": a.router, "replicas": a.replicas,
           "numpy_import_s": ref, "fleet_s": best, "ratio": best / ref,
           "target_ratio": 60, "us_per_request": best / len(tr) * 1e6,
           "replica_tables_s": tables, "ttft_p90_ms": float(
               sorted(ttft)[int(0.9 * len(ttft))] * 1e3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
