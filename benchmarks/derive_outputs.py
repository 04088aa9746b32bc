"""Capture every ``derive`` subcommand's printed output (text and ``--json``, stdout, stderr and
exit code) on DeepSeek-V3/H800 (the commands of ``DERIVES`` and ``MORE_DERIVES`` in
bench_speed.py: with them the expert cache, the mesh rows and the general solver),
Qwen3-30B-A3B/H20 and Mixtral-8x7B/H100, each solved (its stored answer dropped first, the
compiled models cached in a fresh ``MOESYM_CACHE_DIR``), to check that a speed change leaves
every output byte-identical.

    python benchmarks/derive_outputs.py OUT.json              # capture
    python benchmarks/derive_outputs.py OUT.json BEFORE.json  # capture, then compare

Each command runs in a fresh process with this tree first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import DERIVES, MORE_DERIVES, ROOT, _drop_answers  # noqa: E402

QWEN = "qwen3-30b-a3b --hardware h20"
MIX = "mixtral-8x7b --hardware h100"
OTHERS = [
    f"derive tpot {QWEN} --tpot-ms 50",
    f"derive crossover {QWEN}",
    f"derive attention {QWEN}",
    f"derive micro-batches {QWEN} --gpus 8 --ep 8",
    f"derive comm-hidden {QWEN} --gpus 8 --ep 8",
    f"derive memory-batch {QWEN}",
    f"derive optimal-ep {QWEN} --batch 64 --gpus 8",
    f"derive ep-min-tpot {QWEN} --gpus 8 --total-batch 512",
    f"derive gpus-for-throughput {QWEN} --tokens-per-s 50000 --tpot-ms 50",
    f"derive concurrency {QWEN} --isl 1024 --osl 256 --tpot-ms 50",
    f"derive sensitivity {QWEN} --batch 64 --of tpot",
    f"derive tpot {MIX} --gpus 8 --ep 8 --tpot-ms 30",
    f"derive crossover {MIX} --gpus 8 --ep 8",
    f"derive micro-batches {MIX} --gpus 8 --ep 8",
    f"derive comm-hidden {MIX} --gpus 8 --ep 8 --micro-batches 2",
]


def commands() -> list[str]:
    return [c.removesuffix(" --json") for c in {**DERIVES, **MORE_DERIVES}.values()] + OTHERS


def capture(out: Path) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="moesym-derive-outputs-"))
    env = {**os.environ, "MOESYM_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MOESYM_NO_CACHE", None)
    got = {}
    for cmd in commands():
        for extra in ("", " --json"):
            _drop_answers(cache)
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "moesym", *(cmd + extra).split()], env=env,
                               capture_output=True, text=True, cwd=ROOT)
            dt = time.perf_counter() - t0
            print(f"{dt:6.2f} s rc={p.returncode} {cmd}{extra}", file=sys.stderr, flush=True)
            got[cmd + extra] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
    out.write_text(json.dumps(got, indent=1))
    return got


def compare(got: dict, before: dict) -> int:
    bad = 0
    for k in sorted(set(got) | set(before)):
        if got.get(k) != before.get(k):
            bad += 1
            print(f"DIFFERS: {k}")
            for field in ("rc", "stdout", "stderr"):
                a, b = (before.get(k) or {}).get(field), (got.get(k) or {}).get(field)
                if a != b:
                    print(f"  {field}: before {str(a)[:300]!r}\n  {field}: after  {str(b)[:300]!r}")
    print(f"{len(got)} outputs, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    got = capture(Path(sys.argv[1]))
    if len(sys.argv) > 2:
        sys.exit(compare(got, json.loads(Path(sys.argv[2]).read_text())))
