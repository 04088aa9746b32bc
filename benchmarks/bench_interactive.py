"""Size and redraw time of the ``report --interactive`` page (issue 37: under 2 MB and a slider
move redrawn in under 50 ms in headless Chromium, for DeepSeek-V3 on H800).

Writes the page of each command below, loads it in headless Chromium (Debian's ``chromium``)
with a driver that moves the batch (prompt tokens) input, then the context (serve: ISL) input,
to ``--moves`` positions each, one input event a move (the crossover is found again when
anything but the batch moves), and reads two times per move: the page's own redraw (``redraw()`` from reading the
inputs to the last chart written, as the page shows it) and the whole move (the event dispatched,
then the layout forced by reading the page's height). Prints the page size and the median and
largest of each.

Run ``PYTHONPATH=. python benchmarks/bench_interactive.py`` (``--moves 40``).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V3 = ["deepseek-v3", "--hardware", "h800", "--weights", "fp8"]
PAGES = {
    "decode": [*V3, "--phase", "decode", "--batch", "128", "--context", "4989", "--gpus", "128",
               "--ep", "128", "--micro-batches", "2"],
    "prefill": [*V3, "--phase", "prefill", "--tokens", "16384", "--context", "4096", "--gpus",
                "32", "--ep", "32"],
    "serve": [*V3, "--phase", "serve", "--batch", "64", "--isl", "1024", "--osl", "1024",
              "--gpus", "16", "--ep", "16"],
}

_DRIVER = """
<script>
(function () {
  const res = {};
  for (const id of ["work", "%s"]) {
    const box = document.getElementById(id), start = Number(box.value), out = [];
    for (let i = 0; i < %d; i++) {
      const t0 = performance.now();
      box.value = String(Math.max(1, Math.round(start * Math.pow(4, (i %% 9) / 4 - 1))));
      box.dispatchEvent(new Event("input"));
      void document.body.offsetHeight;  // the layout of the new charts
      out.push([Number(document.getElementById("redraw_ms").dataset.value), performance.now() - t0]);
    }
    box.value = String(start); box.dispatchEvent(new Event("input"));
    res[id] = out;
  }
  const pre = document.createElement("pre"); pre.id = "bench";
  pre.textContent = JSON.stringify(res); document.body.appendChild(pre);
})();
</script></body>"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moves", type=int, default=40)
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs Debian's chromium (apt-get install chromium)")
    print(f"{'page':8} {'size':>9} {'build s':>8} {'slider':>8} {'redraw ms (median/max)':>23} "
          f"{'move ms (median/max)':>21}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in PAGES.items():
            page = Path(tmp) / f"{name}.html"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "moesym", "report", *argv, "--out", str(page),
                            "--interactive"], check=True, cwd=ROOT, capture_output=True)
            build = time.perf_counter() - t0
            text = page.read_text(encoding="utf-8")
            driven = Path(tmp) / f"{name}-driven.html"
            other = "isl" if name == "serve" else "context"
            driven.write_text(text.replace("</body>", _DRIVER % (other, args.moves), 1),
                              encoding="utf-8")
            run = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                  "--dump-dom", driven.as_uri()], capture_output=True, text=True,
                                 timeout=300)
            found = re.search(r'<pre id="bench">(.*?)</pre>', run.stdout, re.S)
            if not found:
                sys.exit(f"{name}: the driver wrote nothing\n{run.stderr[-800:]}")
            for slider, times in json.loads(html.unescape(found.group(1))).items():
                redraw, move = [t[0] for t in times], [t[1] for t in times]
                print(f"{name:8} {len(text.encode()) / 1e3:7.0f} KB {build:8.1f} {slider:>8} "
                      f"{statistics.median(redraw):13.1f} / {max(redraw):6.1f} "
                      f"{statistics.median(move):12.1f} / {max(move):6.1f}")

if __name__ == "__main__":
    main()
