"""``moesym derive concurrency`` (issue 34 item 3): the largest serving concurrency per
attention-DP rank whose steady-state TPOT (and TTFT) meets the targets.

- the exact answer is a brute-force scan of ``predict --phase serve`` (``moesym.predict`` at
  each concurrency): every concurrency up to the answer's neighbourhood meets the target exactly
  up to the answer, and none beyond it up to the rank's saturation does;
- the smooth closed form (a dense model whose prompts fill a chunk: the share of mixed steps is
  linear in the concurrency, TPOT quadratic) equals an independent Brent root of the relaxed
  equation to 1e-9, at the asked target and at another one; where the share of mixed steps is
  its Poisson branch 1 - exp(-D/s) the answer says why there is no closed form;
- the TTFT target binds when it is the tighter one;
- bad input (no target, --percentile, no --isl) is one line and exit code 2.
"""

import json

import pytest
from scipy.optimize import brentq

import moesym as ms
from moesym.derive.concurrency import max_concurrency
from moesym.cli import main
from moesym.symbolic.compile import evaluate
from moesym.specs.deployment import Phase, Workload
from moesym.symbolic.symbols import S
from moesym.symbolic.expr import symbols_of

ISL, OSL = 1024, 256
# ISL 1024 under SGLang's 8192-token chunk on an H20: a rank saturates (prefill-bound) at
# 8192 (256 + 1) / 1024 = 2056 requests; beyond it the steady state no longer changes
SATURATION = 8192 * (OSL + 1) // ISL


def _serve(model, hw, dep, c, isl=ISL, osl=OSL, chunk=0) -> dict:
    return ms.predict(model, hw, dep, Workload(Phase.SERVE, batch=int(c), isl=isl, osl=osl,
                                               chunk=chunk), memory=False)


def _last_meeting(model, hw, dep, answer, meets, **lengths) -> tuple[int, list]:
    """Brute force: the last concurrency in 1 .. answer + 16 that ``meets`` (a predicate on
    predict's serve report), and the reports of answer + 1 .. answer + 16."""
    reports = {c: _serve(model, hw, dep, c, **lengths) for c in range(1, int(answer) + 17)}
    return max(c for c, r in reports.items() if meets(r)), \
        [reports[c] for c in range(int(answer) + 1, int(answer) + 17)]


def _relaxed_root(cf, target):
    """Brent's root of the answer's relaxed equation with the target at ``target``."""
    f = cf.smooth
    vals = {k: v for k, v in cf.values.items() if k in symbols_of(f.equation)}
    sym = next(s for s in (S.tpot_target, S.ttft_target) if s in symbols_of(f.equation))
    vals[sym] = target
    g = lambda x: float(evaluate(f.equation, vals, {S.batch: x}))  # noqa: E731
    return brentq(g, f.relaxed_root * 0.8, f.relaxed_root * 1.25, xtol=1e-14, rtol=1e-15)


@pytest.fixture(scope="module")
def qwen():
    return ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"), ms.Deployment()


@pytest.fixture(scope="module")
def tpot_answer(qwen):
    """``derive concurrency qwen3-30b-a3b --hardware h20 --isl 1024 --osl 256 --tpot-ms 50``:
    the answer and its ``--json`` object."""
    cf = max_concurrency(*qwen, ISL, OSL, tpot_s=0.050)
    return cf, json.loads(json.dumps(cf.as_dict(), allow_nan=False))


def test_exact_answer_is_predicts_last_concurrency_meeting_the_tpot(qwen, tpot_answer):
    m, h, dep = qwen
    (cf, r), target = tpot_answer, 0.050
    a = int(r["value"])
    last, after = _last_meeting(m, h, dep, a, lambda x: x["tpot_s"] <= target)
    assert last == a and after[0]["tpot_s"] > target
    # nothing past the neighbourhood meets it either, up to where the rank saturates
    for c in (a + 64, a + 256, 1024, SATURATION, SATURATION + 1):
        assert _serve(m, h, dep, c)["tpot_s"] > target
    # the TPOT targets giving the same answer: predict's TPOT at the answer, up to the
    # smallest TPOT of a larger concurrency
    low, high = r["target_range"]
    assert low == pytest.approx(_serve(m, h, dep, a)["tpot_s"], rel=1e-12)
    assert high == pytest.approx(min(x["tpot_s"] for x in after), rel=1e-12)
    # the SymPy serve TPOT the layers solve is predict's at the answer
    vals = {k: v for k, v in cf.values.items() if k in symbols_of(cf.sides[0][1])}
    assert float(evaluate(cf.sides[0][1], vals, {S.batch: float(a)})) == pytest.approx(
        low, rel=1e-12)
    # the contract's names, and why this regime has no closed form
    assert r["pinned_by"] == r["pin"] and r["pin"][-1].startswith("TPOT targets from")
    assert r["closed_form"] is None and "exp(-D/256)" in r["smooth"]["note"]
    assert r["smooth"]["relaxed_root"] > 0 and len(r["sensitivity"]) > 3
    assert "tau_tpot" in {x["symbol"] for x in r["sensitivity"][:3]}
    assert "not percentiles" in r["note"] and "--percentile" in r["note"]
    mem = ms.predict(m, h, dep, Workload(Phase.SERVE, batch=a, isl=ISL, osl=OSL), memory=True)
    assert f"Memory per GPU at {a}: {mem['memory_bytes'] / 1e9:.1f} GB, fits." in r["note"]


def test_every_concurrency_meeting_the_target_answers_where_the_rank_saturates(qwen):
    """A target met at every concurrency: the next meeting one is never absent, so the
    answer is the concurrency from which the rank is prefill-bound (the decoding requests at
    their cap chunk OSL / ISL = 2048), past which predict's TPOT no longer changes."""
    m, h, dep = qwen
    cf = max_concurrency(m, h, dep, ISL, OSL, tpot_s=10.0)
    assert cf.value == SATURATION and cf.kind == "numeric" and "prefill-bound" in cf.assumptions
    at, before = _serve(m, h, dep, SATURATION), _serve(m, h, dep, SATURATION - 1)
    assert at["serve"]["decoding_requests"] == pytest.approx(8192 * OSL / ISL, rel=1e-12)
    assert before["serve"]["decoding_requests"] < 8192 * OSL / ISL
    assert _serve(m, h, dep, 4 * SATURATION)["tpot_s"] == pytest.approx(at["tpot_s"], rel=1e-12)


@pytest.mark.slow  # 7 s: a second scan of predict
def test_ttft_binds_when_it_is_the_tighter_target(qwen, tpot_answer):
    m, h, dep = qwen
    tpot, ttft = 0.050, 0.098  # TTFT 94.9 ms at one request, above 98 ms before TPOT binds
    cf = max_concurrency(m, h, dep, ISL, OSL, tpot_s=tpot, ttft_s=ttft)
    a = int(cf.value)
    last, after = _last_meeting(m, h, dep, a, lambda x: x["tpot_s"] <= tpot
                                and x["ttft_s"] <= ttft)
    assert last == a < tpot_answer[0].value
    assert after[0]["ttft_s"] > ttft and after[0]["tpot_s"] <= tpot  # TTFT alone fails next
    assert "TTFT binds" in cf.assumptions
    assert S.ttft_target in symbols_of(cf.equation) and S.tpot_target not in symbols_of(
        cf.equation)
    low, high = cf.target_range
    assert low == pytest.approx(_serve(m, h, dep, a)["ttft_s"], rel=1e-12)
    assert low <= ttft < high


@pytest.fixture(scope="module")
def dense():
    return ms.load_model("qwen3-8b"), ms.load_hardware("h20"), ms.Deployment()


@pytest.mark.parametrize("which,target", [("tpot", 0.050), ("ttft", 1.120)])
def test_smooth_form_equals_the_relaxed_root(dense, which, target):
    """ISL 8192 over a 4096-token chunk: every prompt fills chunks, so the share of mixed steps
    is D ISL / (s C) and the mixed step holds one chunk: TPOT is quadratic in the concurrency
    and TTFT (two chunks of the mixed step) linear, both with the target in their root."""
    m, h, dep = dense
    lengths = {"isl": 8192, "osl": OSL, "chunk": 4096}
    cf = max_concurrency(m, h, dep, 8192, OSL, chunk=4096, **{f"{which}_s": target})
    a = int(cf.value)
    last, after = _last_meeting(m, h, dep, a, lambda x: x[f"{which}_s"] <= target, **lengths)
    assert last == a and after[0][f"{which}_s"] > target
    sym = S.tpot_target if which == "tpot" else S.ttft_target
    f = cf.smooth
    assert f.expr is not None and sym in symbols_of(f.expr) and sym in f.skeleton.free_symbols
    assert f.value == pytest.approx(_relaxed_root(cf, target), rel=1e-9)
    # the same formula at the target the relaxed model meets at 1.05 x its root gives that
    vals = {k: v for k, v in cf.values.items() if k in symbols_of(f.equation) and k != sym}
    x = 1.05 * f.relaxed_root
    other = float(evaluate(f.equation + sym, {**vals, sym: target}, {S.batch: x}))
    at = {k: v for k, v in {**cf.values, sym: other}.items() if k in symbols_of(f.expr)}
    assert float(evaluate(f.expr, at, {})) == pytest.approx(x, rel=1e-9)


@pytest.mark.parametrize("extra,says", [
    ([], "no target: give --tpot-ms and/or --ttft-ms"),
    (["--tpot-ms", "50", "--percentile", "99"], "moesym optimize --phase serve --percentile"),
    (["--tpot-ms", "50", "--isl", "0"], "--isl"),
])
def test_bad_input_is_one_line_and_exit_2(extra, says, capsys):
    lengths = ["--isl", str(ISL), "--osl", str(OSL)]
    if "--isl" in extra:
        lengths = ["--osl", str(OSL)]
    rc = main(["derive", "concurrency", "qwen3-30b-a3b", "--hardware", "h20", *lengths, *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and says in err


def test_missing_isl_names_the_flag(capsys):
    rc = main(["derive", "concurrency", "qwen3-30b-a3b", "--hardware", "h20", "--osl", "256",
               "--tpot-ms", "50"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == ("moesym: error: --isl is missing: derive concurrency needs the "
                               "request lengths (--isl N --osl N)")
