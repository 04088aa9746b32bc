"""Routing skew in the fused-MoE grouped GEMM (moesym.kernels.skew, aic.power_law_counts).

Golden values come from an independent Monte Carlo (NumPy binomial draws, tiles counted by
hand) or from the derivation written beside each test, never from the module's own output."""

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from moesym.kernels.aic import power_law_counts
from moesym.specs.kernel_calib import DEFAULTS
from moesym.kernels.skew import (expected_m_tiles, padded_m_tiles, routing_tile_factor,
                                 tile_factor_table)
from moesym.routing.zipf import zipf_inclusion_probabilities


def test_padded_tiles_by_hand():
    # 0 rows: no tile; 1..64: one 64-row tile; 65..128: two; 129..192: three
    assert float(padded_m_tiles([0, 1, 64, 65, 128, 129, 192], 64)) == 0 + 1 + 1 + 2 + 2 + 3 + 3


def test_expected_tiles_against_monte_carlo():
    rng = np.random.default_rng(1)
    pi = zipf_inclusion_probabilities(64, 4, 1.0)
    T, tm = 300, 16
    n = rng.binomial(T, pi, size=(20000, pi.size))  # each expert's rows, draw by draw
    mc = np.ceil(n / tm).sum(axis=1)
    got = expected_m_tiles(pi, T, tm)
    assert abs(got - mc.mean()) < 4 * mc.std() / np.sqrt(mc.size)


def test_skew_pads_more_tiles_than_its_touched_experts_take():
    E, k = 256, 8
    zipf = tuple(zipf_inclusion_probabilities(E, k, 1.2))
    # 512 tokens x 8 under Zipf 1.2: the step's grouped GEMM launches the ~246 experts with
    # rows, 4096 / 246 = 16.7 rows each, one 24-row tile each (8-row floor: 8 x ceiling(16.7 /
    # 8)) in the equal-groups count. The hottest expert holds hundreds of rows (several M
    # tiles) while the cold ones still take a whole tile for a few: by Monte Carlo the expected
    # tiles over that count
    rng = np.random.default_rng(2)
    c = replace(DEFAULTS, grouped_tile_m_min_rows=8)
    f = routing_tile_factor(zipf, 512, c)
    n = rng.binomial(512, np.asarray(zipf), size=(4000, E))
    touched = (n > 0).sum(axis=1).mean()
    assert 4096 / touched == pytest.approx(16.7, abs=0.05)
    tm = 24
    equal = touched * np.ceil(4096 / touched / tm)
    assert f == pytest.approx(np.ceil(n / tm).sum(axis=1).mean() / equal, rel=0.01)
    assert f > 1.1


def test_few_tokens_take_one_tile_per_touched_expert():
    # 8 tokens under Zipf 1.2: no expert gets near a 64-row tile, so the expected tiles are
    # the expected touched experts and the factor 1 (the step's groups carry the skew)
    zipf = tuple(zipf_inclusion_probabilities(256, 8, 1.2))
    assert routing_tile_factor(zipf, 8, DEFAULTS) == pytest.approx(1.0, abs=1e-9)


def test_factor_table_is_log_spaced_and_cached():
    zipf = tuple(zipf_inclusion_probabilities(64, 4, 1.0))
    ts, ys = tile_factor_table(zipf, DEFAULTS)
    assert ts[0] == 1 and ts[-1] == 2 ** 17 and ys[0] == pytest.approx(1.0)
    assert tile_factor_table(zipf, DEFAULTS) is tile_factor_table(zipf, DEFAULTS)


@pytest.mark.parametrize("tokens,ep", [(32, 1), (512, 1), (4096, 8), (3, 4)])
def test_power_law_counts_invariants(tokens, ep):
    E, k = 256, 8
    rng = np.random.default_rng(3)
    for _ in range(5):
        c = power_law_counts(tokens, E, k, ep, 1.01, rng)
        assert c.size == E // ep
        assert c.max() <= tokens  # a token picks an expert once
        if ep == 1:
            assert c.sum() <= tokens * k and c.sum() >= tokens * k - E  # only the cap removes rows


def test_power_law_touched_experts_follow_the_log_uniform_law():
    # alpha -> 1: the weights are log-uniform on [1, 0.8 T] (T k > E). At T = 64, k = 8,
    # E = 256: mean weight (51.2 - 1) / ln 51.2 = 12.75, count = 512 w / (256 x 12.75) = 0.157 w,
    # rounded to 0 for w < 3.19: P = ln 3.19 / ln 51.2 = 0.295, so ~70% of the experts touched
    # (the table's power_law_1.01 rows at 64 tokens take 0.77 of the balanced time at TP 1,
    # where the balanced layer reads every expert's weights)
    rng = np.random.default_rng(4)
    touched = np.mean([(power_law_counts(64, 256, 8, 1, 1.0001, rng) > 0).mean()
                       for _ in range(400)])
    assert touched == pytest.approx(1 - np.log(3.19) / np.log(51.2), abs=0.02)


def _moe_routed_s(routing: str, batch: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "moesym", "predict", "deepseek-v3", "--hardware", "h200",
         "--phase", "decode", "--batch", str(batch), "--context", "2048", "--tp", "8",
         "--ep", "1", "--gpus", "8", "--weights", "fp8", "--routing", routing, "--no-cache",
         "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["per_layer_s"]["moe_routed"]


@pytest.mark.slow  # three predicts in fresh processes: 9 s
def test_zipf_at_ep1_pads_more_tiles_than_uniform():
    # EP 1: no rank imbalance, so before the tile padding zipf changed nothing; at 2048 tokens
    # (256 x 8 assignments x 8 = 64 rows per expert on average) the hot experts' extra tiles
    # make the grouped GEMMs slower, as the power-law rows of AIConfigurator's tables are
    uniform, zipf = _moe_routed_s("uniform", 2048), _moe_routed_s("zipf:1.2", 2048)
    assert zipf > 1.03 * uniform
    assert _moe_routed_s("zipf:0", 2048) == pytest.approx(uniform, rel=1e-12)
