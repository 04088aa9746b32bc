"""Closed forms: each equals a numeric root (brentq on the compiled expressions) at random
points in its regime, and the committed derivations/ pages match what the code derives now."""

import random
from dataclasses import replace
from pathlib import Path

import pytest
import sympy as sp

import moesym as ms
from moesym import derive as dv
from moesym.solve import RELAX_CEILING, apply_rules, solve_regimes
from moesym.symbols import S


def _perturbed(cf, rng, keep=()):
    """The closed form's bindings with hardware and calibration numbers scaled by 0.5-2x."""
    vals = dict(cf.values)
    for s in (S.flops_gemm, S.hbm_bw, S.eff_grouped, S.eff_mem, S.flops_attn, S.eff_attn):
        if s in vals and s not in keep:
            vals[s] = vals[s] * rng.uniform(0.5, 2.0)
    return vals


@pytest.mark.parametrize("lazy", [False, True])
def test_crossover_equals_brentq_at_random_points(lazy):
    rng = random.Random(3)
    for model, hw, gpus in (("deepseek-v3", "h800", 128), ("qwen3-30b-a3b", "h20", 4),
                            ("qwen3-235b-a22b", "h100", 16), ("mixtral-8x7b", "h200", 8)):
        cf = dv.crossover(ms.load_model(model), ms.load_hardware(hw),
                          ms.Deployment(gpus=gpus, ep=gpus), lazy=lazy)
        for _ in range(3):
            vals = _perturbed(cf, rng)
            cfp = replace(cf, values=vals)
            closed = float(cf.expr.xreplace({s: sp.Float(v) for s, v in vals.items()}).evalf())
            if lazy and not closed > 1e-6:
                continue
            num = dv.numeric_check(cfp, 1e-6, 1e7)
            assert closed == pytest.approx(num, rel=1e-6)


def test_crossover_no_lazy_is_seed_000_r_over_2s():
    # seed 000 section 6.2: B_MoE = R / (2 S) tokens across the EP group, R = F/W (with the
    # achieved fractions and FP8 bytes per weight), S = k / E; per GPU divide by the EP size
    m, h = ms.load_model("deepseek-v3"), ms.load_hardware("h800")
    cf = dv.crossover(m, h, ms.Deployment(gpus=128, ep=128, weights="fp8"), lazy=False)
    R = 1979e12 * h.efficiency.grouped_gemm / (3.35e12 * h.efficiency.memory) * (1 + 4 / 128**2)
    assert cf.value == pytest.approx(R / (2 * 8 / 256) / 128, rel=1e-12)


def test_attention_overtakes_moe_equals_brentq():
    m, h = ms.load_model("deepseek-v3"), ms.load_hardware("h800")
    for ctx in (2048, 8192, 32768):
        cf = dv.attention_overtakes_moe(m, h, ms.Deployment(gpus=32, ep=32, weights="fp8"), ctx)
        assert cf.value == pytest.approx(dv.numeric_check(cf, 1e-3, 1e7), rel=1e-6)


def test_comm_hidden_equals_brentq():
    cf = dv.comm_hidden(ms.load_model("deepseek-v3"), ms.load_hardware("h100"),
                        ms.Deployment(gpus=32, ep=32, weights="fp8", micro_batches=2,
                                      a2a="deepep-ll"), 4096)
    assert 0 < cf.value < 1e6
    assert cf.value == pytest.approx(dv.numeric_check(cf, 2, 65536), rel=1e-6)


def test_kink_ep_closed_form_by_hand():
    expr, eq = dv.kink_ep()
    # compute 6 (B/t_p) k d d_e / (F eta) = load (E + R) 3 d d_e b_w / (e_p W eta_m)
    want = (S.experts + S.redundant) * S.w_bytes * S.flops_gemm * S.eff_grouped * S.tp / (
        2 * S.hbm_bw * S.eff_mem * S.topk * S.batch)
    assert sp.simplify(expr - want) == 0


def test_regime_solver_keeps_conditions_and_relaxes_ceilings():
    x, a = sp.symbols("x a", positive=True)
    roots = solve_regimes(sp.Max(3 * x, a) + sp.ceiling(x) - 10, x)
    values = [r.value for r in roots]
    # branch 3x: 4x = 10 -> 5/2 (valid where 15/2 >= a); branch a: a + x = 10 -> 10 - a
    assert sp.Rational(5, 2) in values
    assert any(sp.simplify(v - (10 - a)) == 0 for v in values)
    assert apply_rules(sp.ceiling(x) + sp.floor(2 * x), [RELAX_CEILING]) == 3 * x


def test_committed_pages_match_the_code(tmp_path):
    from moesym.pages import write_all

    root = Path(__file__).resolve().parent.parent / "derivations"
    written = write_all(tmp_path)
    assert written, "no pages generated"
    for p in written:
        committed = root / p.name
        assert committed.is_file(), f"derivations/{p.name} is missing: run moesym derive pages"
        assert committed.read_text() == p.read_text(), (
            f"derivations/{p.name} differs from the code: run `moesym derive pages`")
    assert {p.name for p in written} == {p.name for p in root.glob("*.md")}


def test_ep_min_tpot_is_the_square_root_of_the_regime_and_the_numeric_argmin():
    import numpy as np
    from scipy.optimize import minimize_scalar

    from moesym.compile import evaluate

    cf = dv.ep_min_tpot(ms.load_model("deepseek-v3"), ms.load_hardware("h800"), 4096, 4096,
                        ms.Deployment(weights="fp8", a2a="allgather"))
    f = lambda e: float(evaluate(cf.equation, cf.values, {S.ep: e}))  # noqa: E731
    r = minimize_scalar(f, bounds=(cf.value / 2, cf.value * 2), method="bounded",
                        options={"xatol": 1e-10})
    assert cf.value == pytest.approx(r.x, rel=1e-6)
    # independent of the solver: in the regime the step time is A/e + C e + K, so three
    # evaluations near the optimum give A, C, K and the optimum sqrt(A / C)
    es = np.array([0.9, 1.0, 1.1]) * cf.value
    M = np.stack([1 / es, es, np.ones(3)], axis=1)
    A, C, K = np.linalg.solve(M, [f(e) for e in es])
    assert A > 0 and C > 0
    assert cf.value == pytest.approx(np.sqrt(A / C), rel=1e-6)
    assert any(p.exp == sp.Rational(1, 2) for p in cf.expr.atoms(sp.Pow))  # a square root


def test_ep_min_tpot_without_growing_latency_has_no_interior_optimum():
    from moesym.errors import MoesymError

    with pytest.raises(MoesymError, match="monotone"):
        dv.ep_min_tpot(ms.load_model("deepseek-v3"), ms.load_hardware("h800"), 4096, 4096,
                       ms.Deployment(weights="fp8", a2a="deepep-ll"))


def test_gpus_for_throughput_meets_the_target_exactly_at_the_root():
    from moesym.compile import evaluate

    X, tau = 200_000.0, 0.05
    cf = dv.gpus_for_throughput(ms.load_model("deepseek-v3"), ms.load_hardware("h800"), X, tau,
                                4096, ms.Deployment(weights="fp8", a2a="deepep-ll"))
    assert cf.value == pytest.approx(dv.numeric_check(cf, 1.0, 4096.0), rel=1e-6)
    # at the root the instance's step time is the TPOT limit: N / t_p ranks of
    # B = X tau t_p / N requests each emit N B / (t_p tau) = X tokens per second
    t = float(evaluate(cf.equation + S.tpot_target, cf.values, {S.ep: cf.value}))
    assert t == pytest.approx(tau, rel=1e-9)
    # and one GPU fewer misses it (step time above the limit)
    assert float(evaluate(cf.equation, cf.values, {S.ep: cf.value - 1})) > 0


def test_max_batch_for_tpot_lambert_w_regime_equals_brentq():
    # Qwen3-30B-A3B on one H20: at the root the routed experts are weight-load bound with lazy
    # loading, a + b B + c q^(g B) = tau: the closed form goes through Lambert W
    from moesym.compile import evaluate

    cf = dv.max_batch_for_tpot(ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20"),
                               ms.Deployment(), 4096, 0.05)
    assert cf.expr.has(sp.LambertW)
    assert cf.value == pytest.approx(dv.numeric_check(cf, 1.0, 4096.0), rel=1e-6)
    assert float(evaluate(cf.equation, cf.values, {S.batch: cf.value})) == pytest.approx(
        0.0, abs=1e-9)
