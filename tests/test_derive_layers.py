"""The three layers of a derive answer (issue 34) and ``derive sensitivity``.

- golden smooth closed forms written by hand from the terms' definitions (moesym.terms:
  ``gemm``, ``attention_core_decode``; moesym.kernels.time_model's roofline) for a memory-bound decode step
  and a compute-bound prefill step, against what :func:`regime_form` solves;
- elasticities of a pure roofline term are 0 or +-1 where the algebra says so, and equal
  central finite differences of the compiled step model on random points (hypothesis);
- per derive command: the smooth form at the point equals the relaxed model's numeric root
  (an independent Brent solve) to 1e-9; the exact answer meets the target on predict's model
  and the next value fails; the TPOT range that gives the same answer is checked by predict at
  both ends.
"""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

import moesym as ms
from moesym.derive.comm_hidden import comm_hidden
from moesym.derive.crossover import crossover
from moesym.derive.decode_point import decode_step
from moesym.derive.memory_batch import max_batch_for_memory
from moesym.derive.micro_batches import micro_batches_pay
from moesym.derive.sensitivity import sensitivity
from moesym.derive.tpot import max_batch_for_tpot
from moesym.symbolic.compile import evaluate
from moesym.model.predictor import predict
from moesym.solve.regime_form import regime_form, relax, tidy
from moesym.solve.sensitivity import elasticities, gradient
from moesym.specs.deployment import Phase, Workload
from moesym.symbolic.symbols import S
from moesym.terms.attention import attention_core_decode, gemm
from moesym.symbolic.expr import symbols_of
from moesym.terms.dims import symbolic_dims
from moesym.kernels.time_model import RooflineTiming

ROOF = RooflineTiming()
# a one-layer point: hidden 4096, 8 KV heads of 128, 32 query heads, bf16, one GPU
POINT = {S.hidden: 4096.0, S.kv_heads: 8.0, S.heads: 32.0, S.head_dim: 128.0, S.tp: 1.0,
         S.w_bytes: 2.0, S.act_bytes: 2.0, S.kv_bytes: 2.0, S.context: 8192.0,
         S.hbm_bw: 3.35e12, S.eff_mem: 0.8, S.eff_mem_attn: 0.7, S.flops_gemm: 989e12,
         S.flops_attn: 989e12, S.eff_gemm: 0.7, S.eff_attn: 0.6, S.t_kernel: 4e-6}


def _time(costs):
    return sp.Add(*(ROOF.time(c).total_s for c in costs))


def _at(expr, env):
    return float(substitute_all(expr, env))


def substitute_all(expr, env):
    return sp.sympify(expr).xreplace({k: sp.Float(v, 30) for k, v in env.items()}).evalf(30)


def test_golden_memory_bound_decode_step():
    """T(B) = [d^2 b_w + 2 B d b_a] / (W eta_m) + [2 B L h_kv d_h b_kv + 2 B h d_h b_a] /
    (W eta_ma) + 2 tau_k (gemm: n k b_w weights + m (k + n) b_a activations; attention core:
    B L 2 h_kv d_h b_kv of KV + 2 B h d_h b_a of q / o; both memory-bound; one launch each),
    so T(B*) = tau gives B* = (tau - 2 tau_k - d^2 b_w / (W eta_m)) /
    (2 d b_a / (W eta_m) + 2 d_h (L h_kv b_kv + h b_a) / (W eta_ma))."""
    D = symbolic_dims()
    tau = sp.Symbol("tau", positive=True)
    t = _time([gemm("o_proj", S.batch, S.hidden, S.hidden, S.w_bytes, S.act_bytes),
               attention_core_decode(D, S.batch, S.context, mla=False)])
    d, W, em, ema = S.hidden, S.hbm_bw, S.eff_mem, S.eff_mem_attn
    hand = (tau - 2 * S.t_kernel - d ** 2 * S.w_bytes / (W * em)) / (
        2 * d * S.act_bytes / (W * em)
        + 2 * S.head_dim * (S.context * S.kv_heads * S.kv_bytes + S.heads * S.act_bytes)
        / (W * ema))
    env = {**POINT, tau: 2e-3}
    f = regime_form(t, tau, S.batch, env, 10.0, (1.0, 1e6))
    assert f.expr is not None and tau in f.skeleton.free_symbols
    for scale in (1.0, 1.3, 0.8):  # the same formula at other bandwidths and targets
        e = {**env, S.hbm_bw: POINT[S.hbm_bw] * scale, tau: 2e-3 * scale}
        assert _at(f.expr, e) == pytest.approx(_at(hand, e), rel=1e-12)
    assert f.value == pytest.approx(_at(hand, env), rel=1e-12)
    assert f.value == pytest.approx(f.relaxed_root, rel=1e-9)


def test_golden_compute_bound_prefill_step():
    """Two compute-bound GEMMs over T prompt tokens: 2 T d d_e / (F_g eta_g) each (gemm: 2 m n
    k FLOPs) plus a launch, so T* = (tau - 2 tau_k) F_g eta_g / (2 d (d_e + d))."""
    tau = sp.Symbol("tau", positive=True)
    t = _time([gemm("up", S.tokens, S.moe_inter, S.hidden, S.w_bytes, S.act_bytes),
               gemm("o_proj", S.tokens, S.hidden, S.hidden, S.w_bytes, S.act_bytes)])
    hand = (tau - 2 * S.t_kernel) * S.flops_gemm * S.eff_gemm / (
        2 * S.hidden * (S.moe_inter + S.hidden))
    env = {**POINT, S.moe_inter: 14336.0, tau: 0.05}
    f = regime_form(t, tau, S.tokens, env, 1e4, (1.0, 1e8))
    for scale in (1.0, 2.0, 0.5):
        e = {**env, S.flops_gemm: POINT[S.flops_gemm] * scale, tau: 0.05 * scale}
        assert _at(f.expr, e) == pytest.approx(_at(hand, e), rel=1e-12)
    assert f.value == pytest.approx(f.relaxed_root, rel=1e-9)
    # the printed form has no float noise and names the target
    assert {str(x) for x in f.skeleton.free_symbols} == {"tau", "c0", "c1"}
    assert sp.degree(f.skeleton, tau) == 1 and not f.skeleton.atoms(sp.Float)


def test_tidy_prints_exact_rationals_and_short_decimals():
    x = sp.Symbol("x")
    assert tidy(sp.Float(64.0000000640000) * x) == 64 * x
    assert tidy(sp.Float(0.015624999984375) * x) == x / 64
    assert str(tidy(sp.Float(2.08507123456) * x)) == "2.08507*x"


@pytest.mark.parametrize("bound", ["memory", "compute"])
def test_elasticities_of_a_roofline_term_are_zero_or_one(bound):
    """max(2 B n k / (F eta), (n k b_w + B (k + n) b_a) / (W eta_m)): compute-bound, the time
    is proportional to B and to 1 / F: elasticities +1 and -1, 0 for W and b_w; memory-bound,
    -1 for W and eta_m, 0 for F and eta."""
    tt = ROOF.time(gemm("up", S.batch, S.moe_inter, S.hidden, S.w_bytes, S.act_bytes))
    term = sp.Max(tt.compute_s, tt.memory_s)
    env = {**POINT, S.moe_inter: 2048.0, S.batch: 8.0 if bound == "memory" else 4096.0}
    el = dict(elasticities(term, env))
    assert (tt.compute_s.subs(env) > tt.memory_s.subs(env)) == (bound == "compute")
    if bound == "compute":
        assert el[S.batch] == pytest.approx(1, abs=1e-12)
        assert el[S.flops_gemm] == pytest.approx(-1, abs=1e-12)
        assert el[S.eff_gemm] == pytest.approx(-1, abs=1e-12)
        assert el[S.hbm_bw] == el[S.w_bytes] == 0
    else:
        assert el[S.hbm_bw] == pytest.approx(-1, abs=1e-12)
        assert el[S.eff_mem] == pytest.approx(-1, abs=1e-12)
        assert el[S.flops_gemm] == el[S.eff_gemm] == 0
        assert 0 < el[S.batch] < 1  # activations only: the weights do not grow with B


_STEP = {}


def _step():
    """Qwen3-30B-A3B's decode step on one H20 and its step time compiled once over every free
    symbol (the compiled model predict evaluates)."""
    if not _STEP:
        from moesym.symbolic.compile import compile_expr

        m, h = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20")
        step = decode_step(m, h, ms.Deployment(), 4096)
        args = tuple(sorted(symbols_of(step.expr), key=str))
        fn = compile_expr(step.expr, args)
        _STEP.update(step=step, f=lambda env: float(np.ravel(fn(*(env[a] for a in args)))[0]))
    return _STEP["step"], _STEP["f"]


@settings(max_examples=12, deadline=None)
@given(st.floats(0.5, 2.0), st.floats(0.5, 2.0), st.floats(1.3, 400.0), st.floats(300.0, 30000.0))
def test_sensitivities_equal_finite_differences_of_the_compiled_model(w, f, batch, context):
    step, model = _step()
    vals = {**step.values, S.hbm_bw: step.values[S.hbm_bw] * w, S.batch: batch,
            S.context: context}
    vals = {k: float(v) for k, v in vals.items() if k in symbols_of(step.expr)}
    for s in (S.flops_moe, S.flops_gemm):
        if s in vals:
            vals[s] *= f
    g = gradient(step.expr, vals)
    y = float(model(vals))

    def fd(s, h):
        x = vals[s]
        up, dn = model({**vals, s: x * (1 + h)}), model({**vals, s: x * (1 - h)})
        return float(up - dn) / (2 * h * x)

    checked = 0
    for s in (S.hbm_bw, S.flops_moe, S.flops_gemm, S.batch, S.context, S.bw_up, S.t_kernel):
        if s not in vals:
            continue
        a, b = fd(s, 1e-6), fd(s, 2.5e-7)
        if not math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9 * abs(y) / vals[s]):
            continue  # a tile or wave step inside the difference: no derivative there
        assert g[s] * vals[s] / y == pytest.approx(a * vals[s] / y, rel=1e-4, abs=1e-7)
        checked += 1
    assert checked >= 3


# ------------------------------------------------------------------ per derive command


def _predict_tpot(m, h, dep, batch, context=4096):
    return predict(m, h, dep, Workload(Phase.DECODE, batch=int(batch), context=context),
                   memory=False)["tpot_s"]


def _independent_relaxed_root(cf):
    """Brent's root of the relaxed equation around the smooth form's value."""
    f = cf.smooth
    vals = {k: v for k, v in cf.values.items() if k in symbols_of(f.equation)}
    g = lambda x: float(evaluate(f.equation, vals, {cf.variable: x}))  # noqa: E731
    lo, hi = f.relaxed_root * 0.999, f.relaxed_root * 1.001
    return brentq(g, lo, hi, xtol=1e-14, rtol=1e-15)


TPOT_CASES = [pytest.param("qwen3-30b-a3b", "h20", 1, 50, marks=pytest.mark.slow),
              pytest.param("qwen3-30b-a3b", "h100", 8, 20, marks=pytest.mark.slow),
              pytest.param("deepseek-v3", "h800", 64, 50, marks=pytest.mark.slow),
              pytest.param("gpt-oss-120b", "h200", 4, 20, marks=pytest.mark.slow)]


@pytest.mark.parametrize("model,hw,gpus,tpot_ms", TPOT_CASES)
def test_tpot_layers(model, hw, gpus, tpot_ms):
    m, h = ms.load_model(model), ms.load_hardware(hw)
    dep = ms.Deployment(gpus=gpus, ep=gpus, weights="fp8")
    target = tpot_ms / 1e3
    cf = max_batch_for_tpot(m, h, dep, 4096, target)
    # exact: predict meets the target at the answer, not at the next batch
    assert _predict_tpot(m, h, dep, cf.value) <= target < _predict_tpot(m, h, dep, cf.value + 1)
    # the smooth form keeps the target and equals the relaxed model's root; where the regime
    # mixes forms with no closed-form root, the note says which
    if cf.smooth.expr is not None:
        assert S.tpot_target in symbols_of(cf.smooth.expr)
        assert cf.smooth.value == pytest.approx(_independent_relaxed_root(cf), rel=1e-9)
    else:
        assert "mixes" in cf.smooth.note and cf.smooth.relaxed_root > 0
    # the target range: predict's TPOT at the answer is its low end; some larger batch is
    # its high end and none in reach is below it
    low, high = cf.target_range
    assert _predict_tpot(m, h, dep, cf.value) == pytest.approx(low, rel=1e-9)
    above = [_predict_tpot(m, h, dep, b) for b in range(int(cf.value) + 1, int(cf.value) + 33)]
    assert min(above) >= high * (1 - 1e-9)
    # a target just under the high end gives the same answer; just over, a larger one
    assert max_batch_for_tpot(m, h, dep, 4096, high * (1 - 1e-7)).value == cf.value
    assert max_batch_for_tpot(m, h, dep, 4096, high * (1 + 1e-7)).value > cf.value
    assert cf.pin and len(cf.sensitivity) > 3
    assert {str(s) for s, _ in cf.sensitivity[:3]}


CROSS_CASES = [("qwen3-30b-a3b", "h20", 1), ("deepseek-v3", "h800", 32),
               ("qwen3-30b-a3b", "h100", 8), ("gpt-oss-120b", "h200", 4)]


@pytest.mark.slow
@pytest.mark.parametrize("model,hw,gpus", CROSS_CASES)
def test_crossover_layers(model, hw, gpus):
    m, h = ms.load_model(model), ms.load_hardware(hw)
    dep = ms.Deployment(gpus=gpus, ep=gpus)
    cf = crossover(m, h, dep)
    roof = lambda b: predict(m, h, dep, Workload(Phase.DECODE, batch=int(b), context=4096),  # noqa
                             memory=False)["bounds"]["routed_experts"]["roofline"]
    assert (roof(cf.value - 1), roof(cf.value)) == ("memory", "compute")
    if cf.smooth.expr is not None:
        assert cf.smooth.value == pytest.approx(_independent_relaxed_root(cf), rel=1e-9)
    else:
        assert cf.smooth.note


@pytest.mark.slow
@pytest.mark.parametrize("model,hw,gpus", [("qwen3-30b-a3b", "h20", 8),
                                           ("deepseek-v3", "h100", 64),
                                           ("gpt-oss-120b", "h200", 8)])
def test_micro_batches_layers(model, hw, gpus):
    m, h = ms.load_model(model), ms.load_hardware(hw)
    dep = ms.Deployment(gpus=gpus, ep=gpus, weights="fp8", micro_batches=2)
    cf = micro_batches_pay(m, h, dep, 4096)
    assert "0000000" not in str(tidy(cf.expr)) if cf.expr is not None else True
    if cf.smooth is not None and cf.smooth.expr is not None:
        assert cf.smooth.value == pytest.approx(_independent_relaxed_root(cf), rel=1e-9)


def test_sensitivity_command_ranks_every_parameter(cli_json):
    out = cli_json(["derive", "sensitivity", "qwen3-30b-a3b", "--hardware", "h20",
                    "--batch", "32", "--of", "tpot"])
    el = out["elasticities"]
    assert len(el) > 20
    mags = [abs(r["elasticity"]) for r in el]
    assert mags == sorted(mags, reverse=True)
    names = {r["symbol"] for r in el}
    assert {"W", "B", "L", "E", "N_SM"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("model,hw,gpus", [("qwen3-30b-a3b", "h20", 1),
                                           ("deepseek-v3", "h200", 16),
                                           ("gpt-oss-120b", "h100", 2)])
def test_memory_batch_is_predicts_last_fitting_batch(model, hw, gpus):
    m, h = ms.load_model(model), ms.load_hardware(hw)
    dep = ms.Deployment(gpus=gpus, ep=gpus, weights="fp8")
    cf = max_batch_for_memory(m, h, dep, 4096)

    def fits(b):
        return predict(m, h, dep, Workload(Phase.DECODE, batch=int(b), context=4096),
                       memory=True)["fits"]

    assert fits(cf.value) and not fits(cf.value + 1)
    # linear in B: the smooth form is the relaxed root, with the capacity in it
    assert S.hbm_capacity in symbols_of(cf.smooth.expr)
    assert cf.smooth.value == pytest.approx(_independent_relaxed_root(cf), rel=1e-9)
    assert cf.value <= cf.smooth.value < cf.value + 1


def test_contract_names_of_every_answer(cli_json):
    """CONTRACT item 18: `closed_form` is the smooth form with the target in it where the regime
    has one, and `pinned_by` what holds the exact answer on a step (or null)."""
    r = cli_json(["derive", "tpot", "qwen3-30b-a3b", "--hardware", "h20", "--tpot-ms", "50"])
    assert r["closed_form"] == r["smooth"]["sympy"] and "tau_tpot" in r["closed_form"]
    assert r["pinned_by"] == (r["pin"] or None)


def test_memory_batch_sensitivity_is_a_finite_difference_of_its_relaxed_root():
    """derive sensitivity --of memory-batch: each top elasticity equals the central difference
    d ln B* / d ln x of the relaxed memory equation's root, re-solved by Brent's method with x
    moved by +-1e-4 relative (a brute-force check of the implicit derivative)."""
    m, h = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20")
    dep = ms.Deployment(gpus=8, ep=8, weights="fp8")
    wl = ms.Workload(ms.Phase.DECODE, batch=64, context=4096)
    r = sensitivity(m, h, dep, wl, "memory-batch")
    cf = max_batch_for_memory(m, h, dep, 4096)
    assert r["value"] == cf.smooth.relaxed_root and r["exact_answer"] == cf.value
    eq = cf.smooth.equation
    vals = {k: v for k, v in cf.values.items() if k in symbols_of(eq)}
    root = _independent_relaxed_root(cf)

    def root_with(sym, factor):
        v = {**vals, sym: vals[sym] * factor}
        g = lambda x: float(evaluate(eq, v, {cf.variable: x}))  # noqa: E731
        return brentq(g, root * 0.99, root * 1.01, xtol=1e-14, rtol=1e-15)

    h_ = 1e-4
    rows = [(s, e) for s, e in r["rows"] if s in vals][:4]
    assert len(rows) == 4 and abs(rows[0][1]) > 0.5
    for s, e in rows:
        fd = (np.log(root_with(s, 1 + h_)) - np.log(root_with(s, 1 - h_))) / (
            np.log(1 + h_) - np.log(1 - h_))
        assert e == pytest.approx(fd, rel=1e-4), s


@pytest.mark.slow
def test_comm_hidden_smooth_form_is_where_relaxed_communication_shows():
    """derive comm-hidden, DeepSeek-V3 on 128 H800 (EP128, two micro-batches): the relaxed
    overlapped layer equals its compute-only time just below the smooth form's value and
    exceeds it just above. (Its regime was once taken where the two paths tie, the compute
    branch of the maximum, which leaves 0 = 0: no smooth form.)"""
    m, h = ms.load_model("deepseek-v3"), ms.load_hardware("h800")
    cf = comm_hidden(m, h, ms.Deployment(gpus=128, ep=128, weights="fp8", micro_batches=2),
                        4096)
    f = cf.smooth
    assert f.expr is not None, f.note
    compute = relax(cf.sides[1][1])
    vals = {k: v for k, v in cf.values.items()
            if k in symbols_of(f.equation) | symbols_of(compute)}
    at = lambda e, x: float(evaluate(e, {k: v for k, v in vals.items()  # noqa: E731
                                         if k in symbols_of(e)}, {cf.variable: x}))
    below, above = f.value * (1 - 1e-6), f.value * (1 + 1e-6)
    assert abs(at(f.equation, below)) <= 1e-9 * at(compute, below)
    assert at(f.equation, above) > 1e-9 * at(compute, above)
    assert 1 < f.value < cf.value  # the relaxed tiles are fuller: communication shows earlier
