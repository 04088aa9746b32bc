"""Whole-process speed of the commands a planner iterates on, next to references measured in the
same run (issue 15). Each figure is the best of ``--repeat`` runs of a fresh process:

- reference ``python -c "import numpy"``: the floor of any NumPy program on this machine;
- ``predict`` cold (empty compiled-model cache) and cached, DeepSeek-V3 decode on 128 H800;
- ``optimize`` DeepSeek-V3 on 128 H800 (decode, TPOT 50 ms), cold and with the cache warm;
- ``sweep`` of a 1.3 M-point DeepSeek-V3 decode grid to Parquet (cache warm), in points/s;
- every ``derive`` command for DeepSeek-V3 (decode, H800, 128 GPUs), ``derive sensitivity``
  included (``--only derive``: the reference and these rows alone, each with its answer read
  back from the cache and, in the note, solved with the compiled models cached; with them the
  expert cache on one RTX 4090, the mesh rows on a Tenstorrent Galaxy and the general solver);
- ``simulate``: 2,000 requests of 1024/1024 at concurrency 64, DeepSeek-V3 on 8 H200 (cache
  warm; the whole process and the simulation alone in a warm process), and ``optimize
  --percentile 90`` (the serving SLA search) on 8 and 64 H200 (``--only serving``: the
  reference and these rows alone).

Run ``python benchmarks/bench_speed.py`` (``--write-readme`` replaces the table between the
``speed-table`` markers of docs/explanation/speed.md; with ``--only derive``, the table between
its ``derive-speed-table`` markers). Times depend on the machine and its load: read the
ratios to the reference first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V3 = "deepseek-v3 --hardware h800"
DEP = "--gpus 128 --ep 128 --weights fp8 --micro-batches 2"
PREDICT = f"predict {V3} --phase decode --batch 128 --context 4989 {DEP} --json"
OPTIMIZE = f"optimize {V3} --gpus 128 --phase decode --context 4096 --tpot-ms 50 --weights fp8 --json"
SWEEP_POINTS = 16384 * 8 * 5 * 2
SWEEP = (f"sweep {V3} --phase decode --batch 1:16384:1 --context 1024:131072 "
         "--ep 8,16,32,64,128 --micro-batches 1,2 --gpus 128 --weights fp8 --out {out}")
R1 = "deepseek-v3 --hardware h200 --weights fp8 --isl 1024 --osl 1024"
SIMULATE = f"simulate {R1} --gpus 8 --tp 8 --ep 1 --concurrency 64 --num-prompts 2000 --json"
SLA = (f"optimize {R1} --gpus {{gpus}} --phase serve --ttft-ms 2000 --tpot-ms 50 "
       "--percentile 90 --json")
DERIVES = {
    "crossover": f"derive crossover {V3} --gpus 128 --ep 128 --weights fp8 --json",
    "attention": f"derive attention {V3} --gpus 32 --ep 32 --weights fp8 --context 8192 --json",
    "tpot": f"derive tpot {V3} {DEP} --tpot-ms 50 --json",
    "optimal-ep": f"derive optimal-ep {V3} --batch 128 --gpus 128 --weights fp8 --json",
    "comm-hidden": f"derive comm-hidden {V3} {DEP} --json",
    "micro-batches": "derive micro-batches deepseek-v3 --hardware h100 --weights fp8 --gpus 72 "
                     "--ep 72 --redundant-experts 32 --a2a deepep-ll --context 2048 --json",
    "ep-min-tpot": f"derive ep-min-tpot {V3} --gpus 128 --weights fp8 --total-batch 4096 "
                   "--a2a allgather --json",
    "gpus-for-throughput": f"derive gpus-for-throughput {V3} {DEP} --tokens-per-s 200000 "
                           "--tpot-ms 50 --a2a deepep-ll --json",
    "memory-batch": f"derive memory-batch {V3} --gpus 128 --ep 128 --weights fp8 --json",
    "concurrency": f"derive concurrency {V3} --gpus 128 --ep 128 --weights fp8 --isl 1024 "
                   "--osl 256 --tpot-ms 50 --json",
    "sensitivity": f"derive sensitivity {V3} {DEP} --batch 128 --of tpot --json",
}
#: the other derive subcommands on DeepSeek-V3, timed by ``--only derive`` after DERIVES: the
#: expert cache on one RTX 4090 (seed 003), the mesh rows on a Tenstorrent Galaxy (seed 004) and
#: the general solver (the RDMA bandwidth where dispatch + combine equal the layer's compute)
MORE_DERIVES = {
    "expert-cache": "derive expert-cache deepseek-v3 --hardware rtx-4090 --weights q4_k_m "
                    "--batch 1 --context 4096 --json",
    "mesh-rows": "derive mesh-rows deepseek-v3 --hardware wormhole-tg --mesh 4x8 --batch 32 "
                 "--context 1024 --weights moe=mxfp4,attn=fp8,dense=fp8 --json",
    "solve": f"derive solve {V3} {DEP} --batch 128 --equal dispatch+combine layer_compute "
             "--for rdma_bandwidth --json",
}


def _drop_answers(cache_dir: Path) -> None:
    """Remove the stored derive answers (moesym.cli.derive.answered), keeping the compiled
    models: the next derive solves its question again."""
    for p in cache_dir.glob("*.json"):
        if "derive_answer" in json.loads(p.read_text()).get("payload", {}):
            p.unlink()


def _run(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _moesym(cmd: str) -> list[str]:
    return [sys.executable, "-m", "moesym", *cmd.split()]


def best(argv, env, repeat, before=None) -> float:
    out = float("inf")
    for _ in range(repeat):
        if before:
            before()
        out = min(out, _run(argv, env))
    return out


def _serving_rows(add, env, repeat: int) -> None:
    """simulate (whole process, and the simulation alone in-process) and the SLA searches."""
    _run(_moesym(SIMULATE), env)  # its three compiled models
    add("simulate 2,000 requests, concurrency 64, cache warm", best(_moesym(SIMULATE), env,
                                                                     repeat))
    code = ("import time, moesym as ms\n"
            "from moesym.serving import Simulation\n"
            "from moesym.serving.clients import Client\n"
            "sim = Simulation(ms.load_model('deepseek-v3'), ms.load_hardware('h200'),\n"
            "                 ms.Deployment(gpus=8, tp=8, ep=1, weights='fp8'))\n"
            "sim.run(Client(concurrency=64, num_prompts=64), '1024', '1024')\n"
            "t = time.perf_counter()\n"
            "sim.run(Client(concurrency=64, num_prompts=2000), '1024', '1024')\n"
            "print(time.perf_counter() - t)")
    inner = min(float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                     capture_output=True, text=True).stdout.split()[-1])
                for _ in range(repeat))
    add("  of which the simulation itself (in-process)", inner)
    for gpus in (8, 64):
        cmd = _moesym(SLA.format(gpus=gpus))
        _run(cmd, env)
        add(f"optimize --percentile 90, {gpus} H200, cache warm", best(cmd, env, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-readme", action="store_true")
    ap.add_argument("--only", choices=("derive", "serving"), default=None,
                    help="derive: the reference and the derive rows only (each derive best of "
                         "--repeat runs with the compiled-model cache warm)")
    args = ap.parse_args()
    # moesym's bytecode up to date, as `pip install` leaves it: where PYTHONDONTWRITEBYTECODE is
    # set, a module edited since its last compile is compiled again by every process (0.2 s of
    # a derive's imports after an edit of the solvers)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "moesym")], check=True)
    tmp = Path(tempfile.mkdtemp(prefix="moesym-bench-"))
    cache_dir = tmp / "cache"
    env = {**os.environ, "MOESYM_CACHE_DIR": str(cache_dir)}
    env.pop("MOESYM_NO_CACHE", None)
    clear = lambda: shutil.rmtree(cache_dir, ignore_errors=True)  # noqa: E731

    ref = best([sys.executable, "-c", "import numpy"], env, args.repeat)
    rows = [("reference: python -c 'import numpy'", ref, "")]

    def add(name, seconds, note=""):
        rows.append((name, seconds, note))
        print(f"{name:<44} {seconds:8.3f} s  {seconds / ref:7.1f}x ref  {note}", flush=True)

    print(f"{rows[0][0]:<44} {ref:8.3f} s", flush=True)
    if args.only == "derive":
        for name, cmd in {**DERIVES, **MORE_DERIVES}.items():
            _run(_moesym(cmd), env)  # warm the cache
            solved = best(_moesym(cmd), env, args.repeat, lambda: _drop_answers(cache_dir))
            _run(_moesym(cmd), env)  # store the answer again
            add(f"derive {name}", best(_moesym(cmd), env, args.repeat),
                f"solved: {solved:.3f} s ({solved / ref:.1f}x)")
        shutil.rmtree(tmp, ignore_errors=True)
        _table(rows, "derive-speed-table" if args.write_readme else None)
        return
    if args.only == "serving":
        _serving_rows(add, env, args.repeat)
        shutil.rmtree(tmp, ignore_errors=True)
        if args.write_readme:
            sys.exit("--write-readme writes the whole table: run without --only")
        return
    add("predict, cold (empty cache)", best(_moesym(PREDICT), env, args.repeat, clear))
    add("predict, cached", best(_moesym(PREDICT), env, args.repeat))
    add("optimize 128 GPUs, cold (empty cache)", best(_moesym(OPTIMIZE), env, 1, clear))
    add("optimize 128 GPUs, cache warm", best(_moesym(OPTIMIZE), env, args.repeat))
    out = tmp / "sweep.parquet"
    sweep = _moesym(SWEEP.format(out=out))
    _run(sweep, env)  # warm the cache for its five (GPUs, EP) models
    s = best(sweep, env, args.repeat)
    add("sweep 1.3 M points to Parquet, cache warm", s, f"{SWEEP_POINTS / s / 1e6:.2f} M points/s")
    for name, cmd in DERIVES.items():
        add(f"derive {name}", best(_moesym(cmd), env, 1))
    _serving_rows(add, env, args.repeat)
    shutil.rmtree(tmp, ignore_errors=True)

    _table(rows, "speed-table" if args.write_readme else None)


def _table(rows, marker: str | None) -> None:
    """Print the rows as a Markdown table (ratios to the first row, the reference); with a
    ``marker``, replace the table between its markers in docs/explanation/speed.md."""
    ref = rows[0][1]
    table = ["| command (whole process, best of runs) | seconds | / reference | note |",
             "|---|---|---|---|"]
    for name, sec, note in rows:
        table.append(f"| {name} | {sec:.3f} | {sec / ref:.1f} | {note} |")
    text = "\n".join(table)
    print()
    print(text)
    if marker:
        readme = ROOT / "docs" / "explanation" / "speed.md"
        body = readme.read_text()
        start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
        if start not in body or end not in body:
            sys.exit(f"{readme} has no {marker} markers")
        head, rest = body.split(start, 1)
        _, tail = rest.split(end, 1)
        readme.write_text(f"{head}{start}\n{text}\n{end}{tail}")
        print(f"{readme} {marker} updated")


if __name__ == "__main__":
    main()
