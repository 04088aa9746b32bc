"""Before -> after of every derive in bench_speed.py (``DERIVES`` and ``MORE_DERIVES``): two
trees of moesym, each question solved with only its compiled models cached (the stored answer
dropped first), the two trees interleaved so that the machine's load falls on both alike.

    git worktree add /tmp/before <commit>
    python benchmarks/ab_derive.py /tmp/before . [--repeat 3] [--only tpot,solve]

Both trees' bytecode is compiled first (as ``pip install`` leaves it); each tree has its own
``MOESYM_CACHE_DIR``. Printed per question: the best whole-process wall seconds and CPU seconds
(user + system) of each tree, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import DERIVES, MORE_DERIVES, _drop_answers  # noqa: E402


def _timed(tree: Path, cmd: str, cache: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``python -m moesym CMD`` run in ``tree``."""
    env = {**os.environ, "MOESYM_CACHE_DIR": str(cache), "PYTHONPATH": str(tree)}
    env.pop("MOESYM_NO_CACHE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "moesym", *cmd.split()], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated derive names (default: all)")
    args = ap.parse_args()
    trees = (args.before.resolve(), args.after.resolve())
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "moesym")],
                       check=True)
    questions = {**DERIVES, **MORE_DERIVES}
    if args.only:
        questions = {k: questions[k] for k in args.only.split(",")}
    with tempfile.TemporaryDirectory(prefix="moesym-ab-") as tmp:
        caches = {tree: Path(tmp) / f"cache{i}" for i, tree in enumerate(trees)}
        print(f"{'derive':<22} {'before wall/cpu':>16} {'after wall/cpu':>16} {'after/before':>13}")
        for name, cmd in questions.items():
            for tree in trees:  # compile the question's models into each tree's cache
                _timed(tree, cmd, caches[tree])
            runs = {tree: [] for tree in trees}
            for _ in range(args.repeat):
                for tree in trees:
                    _drop_answers(caches[tree])
                    runs[tree].append(_timed(tree, cmd, caches[tree]))
            (wb, cb), (wa, ca) = ((min(w for w, _ in runs[t]), min(c for _, c in runs[t]))
                                  for t in trees)
            print(f"{name:<22} {wb:7.2f} / {cb:6.2f} {wa:7.2f} / {ca:6.2f} {wa / wb:13.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
