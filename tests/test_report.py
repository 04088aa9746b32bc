"""Issue 21 item 2: the report page. One self-contained HTML file (no network at view time),
checked as text and, where Debian's Chromium is installed (CI installs it), loaded in headless
Chromium: it renders, its DOM holds the sections, charts and formulas, the console stays
quiet, and a screenshot is taken."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from moesym.cli import main

ARGV = ["report", "deepseek-v3", "--hardware", "h800", "--phase", "decode", "--batch", "128",
        "--context", "4989", "--gpus", "128", "--ep", "128", "--weights", "fp8"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "r.html"
    assert main(ARGV + ["--out", str(out)]) == 0
    return out


def test_the_page_is_one_self_contained_file(page, capsys):
    html = page.read_text()
    # nothing to fetch: no src/href to another file or host, no script, no stylesheet link
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html)
    assert "<script" not in html and "<link" not in html
    urls = set(re.findall(r"https?://[^\s\"'<>]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1998/Math/MathML"}
    for section in ("Inputs", "Prediction", "Where the time goes", "One steady-state layer",
                    "Sweep over the batch", "Memory", "Closed forms", "Sensitivities"):
        assert f"<h2>{section}" in html
    assert html.count("<svg") >= 5 and "<math" in html
    # the step time the page shows is predict's
    assert main(["predict", *ARGV[1:], "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step_time_s"]
    assert f"{step * 1e3:.3f} ms" in html
    # the command that reproduces it
    assert "moesym report deepseek-v3 --hardware h800" in html


@pytest.mark.slow
def test_optimize_report_adds_the_pareto_front(tmp_path):
    out = tmp_path / "o.html"
    assert main(["optimize", "qwen3-30b-a3b", "--hardware", "h20", "--gpus", "4", "--phase",
                 "decode", "--context", "4096", "--tpot-ms", "50", "--report", str(out)]) == 0
    html = out.read_text()
    assert "Pareto front" in html and html.count("<circle") >= 2


@pytest.mark.parametrize("extra", [
    ["--phase", "prefill", "--tokens", "16384", "--context", "4096"],
    pytest.param(["--phase", "serve", "--isl", "1024", "--osl", "1024", "--batch", "64",
                  "--gpus", "4", "--ep", "4"], marks=pytest.mark.slow),
])
def test_other_phases_write_a_page(tmp_path, extra):
    out = tmp_path / "p.html"
    assert main(["report", "qwen3-30b-a3b", "--hardware", "h20", *extra, "--out", str(out)]) == 0
    assert "<h2>Prediction" in out.read_text()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get "
                                              "install chromium; CI installs it)")
def test_the_page_renders_in_headless_chromium(page, tmp_path):
    base = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(base + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-500:]
    html = dom.stdout
    assert "Where the time goes" in html and html.count("<svg") >= 5 and "<math" in html
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    shot = tmp_path / "report.png"
    r = subprocess.run(base + ["--window-size=1100,3000", f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_the_batch_chart_of_a_micro_batched_deployment_warns_nothing():
    """The page charts batches from 1 up; a batch of 1 cannot be split into 2 micro-batches, and
    an engine runs it as one (moesym.numbers.metrics.micro_batches_run). That is the chart's own
    point, not a batch the user gave: no "--micro-batches ... has no effect" warning (the README's
    report recipe printed one), and the point is timed as the single micro-batch it runs."""
    import warnings

    import moesym as ms
    from moesym.report.html import _sweep

    model, hw = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20")
    dep = ms.Deployment(gpus=4, ep=4, micro_batches=2)
    wl = ms.Workload("decode", batch=64, context=1024)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, (xs, thr, lat) = _sweep(model, hw, dep, wl)
    assert not [w for w in caught if "--micro-batches" in str(w.message)]
    one = ms.predict(model, hw, ms.Deployment(gpus=4, ep=4, micro_batches=1),
                     ms.Workload("decode", batch=1, context=1024))
    assert xs[0] == 1.0 and lat[0] == pytest.approx(one["tpot_s"] * 1e3, rel=1e-12)
