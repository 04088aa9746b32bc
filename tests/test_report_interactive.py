"""Issue 37: ``moesym report --interactive``, the step model in the browser.

The page runs the compiled step and memory models as generated JavaScript. The goldens are
``moesym predict``'s own numbers at the same points (the CLI in process, or the library with a
hardware spec changed field by field), never values computed from the page's code: where Node is
installed, the page's script is evaluated by Node at points (fast); where Debian's Chromium is
installed (CI installs it), the page is loaded, its inputs set through the DOM at 20 random
points and the displayed numbers read back, with the console quiet and nothing fetched.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
import subprocess
from dataclasses import replace

import pytest

from moesym.cli import main

NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DECODE = ["qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode", "--batch", "64",
          "--context", "4096", "--gpus", "4", "--ep", "4"]
PREFILL = ["deepseek-v3", "--hardware", "h800", "--phase", "prefill", "--tokens", "16384",
           "--context", "4096", "--gpus", "32", "--ep", "32", "--weights", "fp8"]
SERVE = ["qwen3-30b-a3b", "--hardware", "h20", "--phase", "serve", "--batch", "64", "--isl",
         "1024", "--osl", "1024", "--gpus", "4", "--ep", "4"]
REL = 1e-9


def _page(tmp_path, argv):
    out = tmp_path / "what-if.html"
    assert main(["report", *argv, "--out", str(out), "--interactive"]) == 0
    return out


def _script(html: str) -> str:
    return html[html.index("<script>") + len("<script>"):html.rindex("</script>")]


def _predict(capsys, argv) -> dict:
    capsys.readouterr()
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _close(a, b) -> bool:
    return abs(a - b) <= REL * abs(b)


def _flags(base, work_flag, p) -> list:
    """``base`` (model and fixed flags) at point ``p``: the test's own command line."""
    lengths = [x for k in ("context", "isl", "osl") if k in p for x in (f"--{k}", str(p[k]))]
    return [*base, work_flag, str(p["work"]), *lengths, "--gpus", str(p["gpus"]), "--ep",
            str(p["ep"]), "--tp", str(p["tp"]), "--micro-batches", str(p["mb"])]


def test_the_page_is_one_offline_file_under_2_mb(tmp_path):
    html = _page(tmp_path, DECODE).read_text()
    # one script, inline; nothing loaded from a file or a host
    assert html.count("<script") == 1 and "<script>" in html and "<link" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html)
    assert not re.search(r"\b(fetch|XMLHttpRequest|import\s*\(|WebSocket|EventSource)\b", html)
    urls = set(re.findall(r"https?://[^\s\"'<>`]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert len(html.encode()) < 2_000_000
    # provenance: version, the command, calibration source
    assert "moesym 0." in html and "moesym report qwen3-30b-a3b --hardware h20" in html
    assert "calibration:" in html


def test_length_distributions_are_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "s.html"
    rc = main(["report", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode", "--batch",
               "8", "--context-dist", "uniform:1000:3000", "--out", str(out), "--interactive"])
    err = capsys.readouterr().err
    assert rc == 2 and "--interactive" in err and "Traceback" not in err and not out.exists()


_NODE_RUN = """
const points = JSON.parse(process.argv[2]);
const out = points.map(p => {
  const hw = {}; for (const h of D.hardware) hw[h.id] = h.value;
  const combo = D.combos.findIndex(c => c.join() === [p.gpus, p.ep, p.tp].join());
  const state = Object.assign({overlap: D.start.overlap, a2a: D.start.a2a}, p,
                              {combo: combo, hw: hw});
  const r = evaluate(state);
  return {step_time_s: r.step_time_s, tokens_per_gpu_s: r.tokens_per_gpu_s,
          memory_bytes: r.memory_bytes, bound: r.bound, timeline: timeline(r),
          sensitivity: sensitivities(state)};
});
console.log(JSON.stringify(out));
"""


def _node(tmp_path, html: str, points) -> list:
    """The page's script run by Node at ``points`` (a file: the script is longer than one
    command-line argument may be)."""
    js = tmp_path / "page.js"
    js.write_text(_script(html) + _NODE_RUN)
    run = subprocess.run([NODE, str(js), json.dumps(points)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-800:]
    return json.loads(run.stdout)


def _structure(p) -> list:
    return [x for k in ("overlap", "a2a") if k in p for x in (f"--{k}", p[k])]


def _library_point(argv, p):
    """(model, hardware, deployment, workload) of the test's own command line at ``p``, with
    the micro-batches predict runs (no more than the work)."""
    from moesym.cli.common import inputs_from
    from moesym.cli import build_parser
    from moesym.numbers.metrics import clamp_micro_batches

    flag = "--tokens" if "--tokens" in argv else "--batch"
    point = ("--batch", "--tokens", "--context", "--isl", "--osl", "--gpus", "--ep", "--tp")
    base = [a for i, a in enumerate(argv) if a not in point and argv[i - 1] not in point]
    args = build_parser().parse_args(["predict", *_flags(base, flag, p), *_structure(p)])
    model, hw, dep, wl = inputs_from(args)
    return model, hw, clamp_micro_batches(dep, wl), wl


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install nodejs)")
@pytest.mark.parametrize("argv,flag,points", [
    (DECODE, "--batch", [dict(work=64, context=4096, gpus=4, ep=4, tp=1, mb=1),
                         dict(work=1, context=128, gpus=8, ep=8, tp=1, mb=2),
                         dict(work=700, context=30000, gpus=2, ep=2, tp=1, mb=2),
                         dict(work=96, context=2000, gpus=4, ep=4, tp=1, mb=1, overlap="none",
                              a2a="deepep-normal"),
                         dict(work=300, context=9000, gpus=8, ep=8, tp=1, mb=2,
                              overlap="tbo-sglang", a2a="allgather"),
                         dict(work=40, context=1000, gpus=4, ep=4, tp=1, mb=2, overlap="ideal")]),
    # the TP and serve pages take 25 s to build and run here: the slow tier
    pytest.param(DECODE[:-4] + ["--gpus", "4", "--ep", "4", "--tp", "2", "--a2a", "allgather"],
                 "--batch", [dict(work=100, context=4096, gpus=8, ep=8, tp=4, mb=2),
                             dict(work=33, context=20000, gpus=16, ep=16, tp=16, mb=1)],
                 marks=pytest.mark.slow),
    pytest.param(SERVE, "--batch", [dict(work=64, isl=1024, osl=1024, gpus=4, ep=4, tp=1, mb=1),
                                    dict(work=200, isl=8000, osl=300, gpus=8, ep=8, tp=1, mb=2),
                                    dict(work=5, isl=100, osl=3000, gpus=2, ep=2, tp=1, mb=1),
                                    dict(work=50, isl=2000, osl=500, gpus=4, ep=4, tp=1, mb=1,
                                         overlap="none", a2a="deepep-ll")],
                 marks=pytest.mark.slow),
    pytest.param(PREFILL, "--tokens", [dict(work=16384, context=4096, gpus=32, ep=32, tp=1, mb=1),
                                       dict(work=3000, context=9000, gpus=64, ep=64, tp=1, mb=2),
                                       dict(work=8192, context=8192, gpus=32, ep=32, tp=1, mb=2,
                                            overlap="tbo-sglang"),
                                       dict(work=4096, context=4096, gpus=16, ep=16, tp=1, mb=1,
                                            overlap="none", a2a="deepep-ll")],
                 marks=pytest.mark.slow),  # 10-30 s: four prefill pages' models built
])
def test_the_generated_javascript_gives_predicts_numbers(tmp_path, capsys, argv, flag, points):
    got_all = _node(tmp_path, _page(tmp_path, argv).read_text(), points)
    point = ("--batch", "--tokens", "--context", "--isl", "--osl", "--gpus", "--ep", "--tp")
    base = [a for i, a in enumerate(argv) if a not in point and argv[i - 1] not in point]
    for p, got in zip(points, got_all):
        want = _predict(capsys, [*_flags(base, flag, p), *_structure(p)])
        for k in ("step_time_s", "tokens_per_gpu_s", "memory_bytes"):
            assert _close(got[k], want[k]), (p, k, got[k], want[k])
        assert got["bound"] == want["bound"], p


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install nodejs)")
@pytest.mark.parametrize("argv", [DECODE, pytest.param(PREFILL, marks=pytest.mark.slow)],
                         ids=["decode", "prefill"])
def test_the_timeline_and_sensitivities_are_the_step_models(tmp_path, argv):
    """At random points (work, length, GPUs/EP/TP, micro-batches, schedule and A2A mode drawn
    from what the page offers): each operation's start and end equal
    :meth:`StepModel.timeline` of the step model built at that point (1e-9 of the layer
    period), and the page's elasticities of the step time to each hardware number (central
    differences) equal ``derive sensitivity``'s exact ones summed over the symbols the number
    sets (1e-6, relative to the largest elasticity of the point)."""
    from moesym.derive.sensitivity import sensitivity
    from moesym.model.step import build_step
    from moesym.schedules import resolve_name

    html = _page(tmp_path, argv).read_text()
    data = json.loads(re.search(r"const D = (\{.*\});\n", html).group(1))
    prefill = "--tokens" in argv
    rng = random.Random(3737)
    points = []
    while len(points) < 8:
        key = rng.choice(sorted(data["variants"]))
        mb, overlap, a2a = key.split("/")
        g, ep, tp = rng.choice(data["combos"])
        work = rng.randint(512, 32768) if prefill else rng.randint(1, 1024)
        if int(mb) > work:
            continue
        points.append(dict(work=work, context=rng.randint(256, 32768), gpus=g, ep=ep, tp=tp,
                           mb=int(mb), overlap=overlap, a2a=a2a))
    results = _node(tmp_path, html, points)
    assert sum(1 for got in results if got["timeline"]) >= 3  # enough points run a schedule
    for p, got in zip(points, results):
        model, hw, dep, wl = _library_point(argv, p)
        step = build_step(model, hw, dep, wl)
        if got["timeline"] is None:
            assert resolve_name(dep.overlap, dep.micro_batches, wl.phase.engine) == "ideal", p
        else:
            want = step.timeline()
            period = max(e["end_s"] for e in want)
            assert len(got["timeline"]) == len(want), p
            for a, b in zip(got["timeline"], want):
                assert {k: a[k] for k in ("name", "stream", "micro_batch", "layer")} == \
                    {k: b[k] for k in ("name", "stream", "micro_batch", "layer")}, p
                for k in ("start_s", "end_s"):
                    assert abs(a[k] - b[k]) <= 1e-9 * period, (p, a, b)
        rows = {str(s): e for s, e in sensitivity(model, hw, dep, wl, "step_time")["rows"]}
        top = max(abs(e) for e in rows.values())
        for h in data["hardware"]:
            want = sum(rows.get(s, 0.0) for s in h["symbols"])
            assert abs(got["sensitivity"][h["id"]] - want) <= 1e-6 * top, (p, h["id"], want)


# ------------------------------------------------------------------ headless Chromium

_DRIVER = """
<script>
(function () {
  const points = %s, out = [];
  const set = (id, v) => { const e = document.getElementById(id); e.value = String(v);
    e.dispatchEvent(new Event(e.tagName === "SELECT" ? "change" : "input")); };
  for (const p of points) {
    set("work", p.work); set("mb", p.mb); set("overlap", p.overlap); set("a2a", p.a2a);
    for (const k of ["context", "isl", "osl"]) if (p[k] !== undefined) set(k, p[k]);
    const combo = Array.from(document.getElementById("combo").options)
      .findIndex(o => o.textContent === `${p.gpus} GPUs, EP ${p.ep}, TP ${p.tp}`);
    set("combo", combo);
    for (const h of D.hardware) set(h.id, p.hw[h.id] === undefined ? h.value : p.hw[h.id]);
    document.getElementById("copy").click();
    const read = id => Number(document.getElementById(id).dataset.value);
    out.push({step_time_s: read("step_time_s"), tokens_per_gpu_s: read("tokens_per_gpu_s"),
              memory_bytes: read("memory_bytes"), redraw_ms: read("redraw_ms"),
              cmd: document.getElementById("cmd").textContent,
              bars: document.querySelectorAll("#breakdown rect").length,
              lines: document.querySelectorAll("#sweep polyline").length,
              timeline: document.querySelectorAll("#timeline rect").length,
              sensitivity: document.querySelectorAll("#sensitivity rect").length,
              error: document.getElementById("error").textContent});
  }
  const pre = document.createElement("pre"); pre.id = "results";
  pre.textContent = JSON.stringify({points: out,
    fetched: performance.getEntriesByType("resource").length});
  document.body.appendChild(pre);
})();
</script></body>"""

_HW_FIELDS = {  # page input -> how the test sets that number on a HardwareSpec (SI units)
    "hbm": lambda hw, v: replace(hw, hbm_bw_Bps=v * 1e12),
    "up": lambda hw, v: replace(hw, scale_up_Bps=v * 1e9),
    "out": lambda hw, v: replace(hw, scale_out_Bps=v * 1e9),
    "lat_up": lambda hw, v: replace(hw, latency=replace(hw.latency, scale_up_s=v * 1e-6)),
    "lat_out": lambda hw, v: replace(hw, latency=replace(hw.latency, scale_out_s=v * 1e-6)),
    "peak_bf16": lambda hw, v: replace(hw, peaks_flops={**hw.peaks_flops, "bf16": v * 1e12}),
}


def _run_copied(command: str, folder, capsys) -> dict:
    """Run the page's command (a heredoc writing a hardware file, then moesym predict) in
    process, in ``folder``."""
    import os

    if command.startswith("cat > "):
        head, rest = command.split("\n", 1)
        name = head.split()[2]
        body, last = rest.rsplit("\nEOF\n", 1)
        (folder / name).write_text(body + "\n")
        command = last
    argv = shlex.split(command)
    assert argv[:2] == ["moesym", "predict"]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return _predict(capsys, argv[2:])
    finally:
        os.chdir(cwd)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get "
                                              "install chromium; CI installs it)")
@pytest.mark.parametrize("argv", [DECODE, SERVE], ids=["decode", "serve"])
def test_twenty_random_points_in_headless_chromium(tmp_path, capsys, argv):
    from moesym import Deployment, Workload, load_hardware, load_model
    from moesym.model.predictor import predict
    from moesym.schedules import resolve_name
    from moesym.specs.deployment import A2AMode

    page = _page(tmp_path, argv)
    phase = argv[argv.index("--phase") + 1]
    html = page.read_text()
    data = json.loads(re.search(r"const D = (\{.*\});\n", html).group(1))
    hw_start = {h["id"]: h["value"] for h in data["hardware"]}
    assert set(hw_start) <= set(_HW_FIELDS), hw_start
    rng = random.Random(37)
    points = []
    for i in range(20):
        g, ep, tp = rng.choice(data["combos"])
        hw = {} if i < 10 else {k: float(f"{v * rng.uniform(0.5, 2.0):.4g}")
                                for k, v in hw_start.items() if rng.random() < 0.7}
        lengths = (dict(isl=rng.randint(16, 16384), osl=rng.randint(1, 8192)) if phase == "serve"
                   else dict(context=rng.randint(128, 32768)))
        work = rng.randint(1, 2048)
        structure = dict(mb=rng.choice([1, 2]), overlap=data["start"]["overlap"],
                         a2a=data["start"]["a2a"])
        if i % 2:  # a schedule and A2A mode the page offers, at a micro-batch count it runs
            key = rng.choice([k for k in sorted(data["variants"]) if int(k[0]) <= work])
            structure = dict(zip(("mb", "overlap", "a2a"), key.split("/")), mb=int(key[0]))
        points.append(dict(work=work, gpus=g, ep=ep, tp=tp, hw=hw, **structure, **lengths))
    driven = tmp_path / "driven.html"
    driven.write_text(html.replace("</body>", _DRIVER % json.dumps(points), 1))
    run = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", driven.as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-800:]
    console = [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    found = re.search(r'<pre id="results">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stdout[-800:]
    import html as html_lib

    res = json.loads(html_lib.unescape(found.group(1)))
    assert res["fetched"] == 0  # nothing loaded after the page itself
    model, h20 = load_model("qwen3-30b-a3b"), load_hardware("h20")
    for p, got in zip(points, res["points"]):
        if not p["hw"]:  # the CLI, in process, with the test's own flags
            want = _predict(capsys, [*_flags(["qwen3-30b-a3b", "--hardware", "h20", "--phase",
                                              phase], "--batch", p), *_structure(p)])
        else:  # the library on a hardware spec changed field by field
            hw = h20
            for k, v in p["hw"].items():
                hw = _HW_FIELDS[k](hw, v)
            want = predict(model, hw, Deployment(gpus=p["gpus"], ep=p["ep"], tp=p["tp"],
                                                 micro_batches=p["mb"], overlap=p["overlap"],
                                                 a2a=A2AMode(p["a2a"])),
                           Workload(phase, batch=p["work"], context=p["context"])
                           if phase == "decode" else  # serve: the mean KV, ISL + OSL // 2
                           Workload(phase, batch=p["work"], isl=p["isl"], osl=p["osl"],
                                    context=p["isl"] + p["osl"] // 2))
        for k in ("step_time_s", "tokens_per_gpu_s", "memory_bytes"):
            assert _close(got[k], want[k]), (p, k, got[k], want[k])
        assert got["bars"] >= 5 and got["lines"] == 2 and not got["error"]  # the charts redrew
        assert got["sensitivity"] == len(data["hardware"])
        ideal = resolve_name(p["overlap"], min(p["mb"], p["work"]), "decode") == "ideal"
        assert (got["timeline"] > 0) == (phase == "decode" and not ideal), p
        copied = _run_copied(got["cmd"], tmp_path, capsys)  # the command reproduces the point
        for k in ("step_time_s", "tokens_per_gpu_s", "memory_bytes"):
            assert _close(copied[k], want[k]), (p, k, copied[k], want[k])


@pytest.mark.slow
def test_optimize_writes_the_page_of_the_best_deployment(tmp_path):
    out = tmp_path / "o.html"
    assert main(["optimize", "qwen3-30b-a3b", "--hardware", "h20", "--gpus", "4", "--phase",
                 "decode", "--context", "4096", "--tpot-ms", "50", "--report", str(out),
                 "--interactive"]) == 0
    html = out.read_text()
    data = json.loads(re.search(r"const D = (\{.*\});\n", html).group(1))
    assert data["base"][:2] == ["predict", "qwen3-30b-a3b"]
    assert not {"--tpot-ms", "--report", "--interactive"} & set(data["base"])


# ------------------------------------------------------------------ inputs the CLI refuses (issue 51)

_NODE_DOM = """
const ELS = {};
globalThis.document = {getElementById: id => ELS[id] || (ELS[id] = {id: id, value: "",
  textContent: "", innerHTML: "", dataset: {}, addEventListener() {}})};
"""

_NODE_INPUTS = """
const cases = JSON.parse(process.argv[2]);
const out = cases.map(p => {
  if (p.direct) {  // GPUs/EP/TP outside the list the page offers: the check itself
    const hw = {}; for (const h of D.hardware) hw[h.id] = h.value;
    return {error: check(Object.assign({combo: 0, overlap: D.start.overlap, a2a: D.start.a2a,
                                        hw: hw}, p.state)), shown: ""};
  }
  const lengths = SERVE ? {isl: D.serve.isl, osl: D.serve.osl} : {context: D.start.context};
  const set = Object.assign({work: D.start.work, overlap: D.start.overlap, a2a: D.start.a2a,
                             mb: D.start.mb}, lengths, p.set);
  set.combo = D.combos.findIndex(c => c.join() === (p.combo || [D.start.gpus, D.start.ep,
                                                                 D.start.tp]).join());
  for (const h of D.hardware) document.getElementById(h.id).value = String(h.value);
  for (const [k, v] of Object.entries(set)) document.getElementById(k).value = String(v);
  redraw();
  const shown = Object.values(ELS).map(e => e.textContent + " " + e.innerHTML + " " +
                                       Object.values(e.dataset).join(" ")).join("\\n");
  return {error: document.getElementById("error").textContent, shown: shown,
          tokens: document.getElementById("tokens_per_gpu_s").textContent};
});
console.log(JSON.stringify(out));
"""


def _node_inputs(tmp_path, html: str, cases) -> list:
    """The page's script run by Node with a stand-in DOM: each case's inputs set as the boxes
    hold them and the page redrawn (a case with ``direct``: :js:`check` of a state)."""
    js = tmp_path / "inputs.js"
    js.write_text(_NODE_DOM + _script(html) + _NODE_INPUTS)
    run = subprocess.run([NODE, str(js), json.dumps(cases)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-800:]
    return json.loads(run.stdout)


def _cli_error(capsys, argv) -> str:
    """What ``moesym predict argv`` prints after ``moesym: error:`` (exit 2)."""
    capsys.readouterr()
    assert main(["predict", *argv]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("moesym: error: ")]
    assert len(lines) == 1, lines
    return lines[0][len("moesym: error: "):]


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install nodejs)")
def test_the_page_refuses_what_the_cli_refuses_with_its_message(tmp_path, capsys):
    """Batch 0, context 0, a context beyond the model's positions, a schedule at a micro-batch
    count it does not run, TP not dividing the GPUs: the page shows the message ``moesym
    predict`` prints for the same flags, and no number (no NaN, no Infinity) in its place; a
    good point afterwards shows numbers again."""
    html = _page(tmp_path, DECODE).read_text()
    base = ["qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode"]
    point = dict(work=64, context=4096, gpus=4, ep=4, tp=1, mb=1)
    cases = [({"work": 0}, {}), ({"context": 0}, {}), ({"context": 100000}, {}),
             ({"work": 1, "mb": 2, "overlap": "tbo-sglang"}, {"overlap": "tbo-sglang"}),
             ({"work": "1.5"}, {})]
    runs = [{"set": set_} for set_, _ in cases]
    runs.append({"direct": True, "state": dict(work=64, context=4096, mb=1, gpus=4, ep=4, tp=3)})
    runs.append({"set": {"work": 64, "context": 4096}})  # good again
    got = _node_inputs(tmp_path, html, runs)
    for (set_, extra), g in zip(cases, got):
        p = {**point, **{k: v for k, v in set_.items() if k in point}}
        argv = [*_flags(base, "--batch", p), *_structure(extra)]
        want = _cli_error(capsys, argv)
        assert g["error"] == want, (set_, g["error"], want)
        assert "NaN" not in g["shown"] and "Infinity" not in g["shown"], set_
        assert g["tokens"] == "-", set_
    want = _cli_error(capsys, _flags(base, "--batch", {**point, "tp": 3}))
    assert got[-2]["error"] == want == "--tp 3 does not divide --gpus 4"
    assert got[-1]["error"] == "" and float(got[-1]["tokens"]) > 0
    assert "NaN" not in got[-1]["shown"] and "Infinity" not in got[-1]["shown"]


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install nodejs)")
def test_the_serve_page_refuses_isl_0_and_lengths_beyond_the_model(tmp_path, capsys):
    """Serve: ISL 0 (the page once showed -183.7 tokens/GPU/s), OSL 0, ISL + OSL beyond the
    model's positions, batch 0: the CLI's message for the same flags, no number."""
    html = _page(tmp_path, SERVE).read_text()
    base = ["qwen3-30b-a3b", "--hardware", "h20", "--phase", "serve"]
    point = dict(work=64, isl=1024, osl=1024, gpus=4, ep=4, tp=1, mb=1)
    cases = [{"isl": 0}, {"osl": 0}, {"isl": 40000, "osl": 2000}, {"work": 0}]
    got = _node_inputs(tmp_path, html, [{"set": c} for c in cases])
    for c, g in zip(cases, got):
        want = _cli_error(capsys, _flags(base, "--batch", {**point, **c}))
        assert g["error"] == want, (c, g["error"], want)
        assert "NaN" not in g["shown"] and "Infinity" not in g["shown"], c
        assert g["tokens"] == "-", c


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install nodejs)")
def test_the_page_refuses_weights_that_do_not_fit_with_the_memory_numbers(tmp_path):
    """qwen3-30b-a3b in BF16 over 2 RTX 4090s (30 GB of weights per 24 GB GPU): the message of
    derive's feasibility check (``does_not_fit``, one request), with its memory numbers."""
    from moesym import Deployment, Workload, load_hardware, load_model
    from moesym.derive.decode_point import does_not_fit

    argv = ["qwen3-30b-a3b", "--hardware", "rtx-4090", "--phase", "decode", "--batch", "8",
            "--context", "4096", "--gpus", "4", "--ep", "4"]
    html = _page(tmp_path, argv).read_text()
    got = _node_inputs(tmp_path, html, [{"set": {"work": 8, "context": 4096}, "combo": [2, 2, 1]},
                                        {"set": {"work": 8, "context": 4096}}])
    want = does_not_fit(load_model("qwen3-30b-a3b"), load_hardware("rtx-4090"),
                        Deployment(gpus=2, ep=2), Workload("decode", batch=8, context=4096))
    assert want and got[0]["error"] == want, (got[0]["error"], want)
    assert "NaN" not in got[0]["shown"] and "Infinity" not in got[0]["shown"]
    assert got[1]["error"] == ""  # 4 GPUs hold it


def test_the_rules_the_page_embeds_are_the_clis():
    """Every rule of the deployment's TOPOLOGY and VALIDITY has its predicate in the page's
    runtime, and the page's templates filled with an input give the CLI's own message for it
    (without Node)."""
    from pathlib import Path

    from moesym import Deployment, Workload, load_hardware, load_model
    from moesym.errors import SpecError
    from moesym.report import interactive
    from moesym.plan.rules import check_inputs
    from moesym.specs.deployment import TOPOLOGY, VALIDITY

    js = Path(interactive.__file__).with_name("interactive.js").read_text()
    for name, _, _ in (*TOPOLOGY, *VALIDITY):
        assert f"  {name}: " in js, name
    model, hw = load_model("qwen3-30b-a3b"), load_hardware("h20")
    from moesym.cli.common import positive_int
    from moesym.cli.flags import flags

    cli = interactive.CliText(flags("predict"), positive_int)
    rules = interactive._rules(model, hw, Deployment(gpus=4, ep=4),
                               Workload("decode", batch=64, context=4096), cli)
    def fill(t, **v):  # the page's fill(), in Python
        return re.sub(r"\{(\w+)(?::\.(\d+)f)?\}",
                      lambda m: (f"{v[m[1]]:.{m[2]}f}" if m[2] else str(v[m[1]])), t)
    with pytest.raises(SpecError) as e:
        Deployment(gpus=4, ep=4, tp=3)
    assert fill(dict(rules["topology"])["tp_divides_gpus"], tp=3, gpus=4) == \
        cli.message(e.value)
    with pytest.raises(SpecError) as e:
        check_inputs(model, hw, Deployment(gpus=6, ep=6), None)
    assert fill(dict(rules["validity"])["ep_divides_experts"], ep=6, experts=128) == \
        cli.message(e.value)
    with pytest.raises(SpecError) as e:
        check_inputs(model, hw, Deployment(gpus=4, ep=4), Workload("decode", context=50000))
    assert fill(rules["positionsMessage"], context=50000) == cli.message(e.value)
