"""Cost and power of serving answers (issue 49 items 1-2, CONTRACT.md item 22).

Every identity is derived here by hand from the hardware file's figures (H200: board 700 W,
idle 70 W, node 575 W per GPU, PUE 1.3; list price $50.44 per 8-GPU hour) and the answer's own
rates, never copied from the code's output.
"""

from __future__ import annotations

import json

import pytest

from moesym.cli import main
from moesym.errors import MoesymError
from moesym.numbers.economics import Pricing, gpu_watts, mix_busy_share, usd_per_million
from moesym.specs.hardware import PowerSpec, builtin_hardware, load_hardware

QWEN = ["qwen3-30b-a3b", "--hardware", "h200"]
SERVE = ["--phase", "serve", "--isl", "1024", "--osl", "256", "--batch", "32"]
H200 = dict(board=700.0, idle=70.0, node=575.0, pue=1.3, price=50.44 / 8)
CONTRACT = ("usd_per_million_output_tokens", "usd_per_million_tokens", "gpu_watts",
            "all_in_watts_per_gpu", "joules_per_output_token", "output_tokens_per_s_per_mw")


def _json(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_predict_cost_identities_by_hand(capsys):
    price, gpus = 2.5, 2
    r = _json(capsys, ["predict", *QWEN, *SERVE, "--gpus", "2", "--tp", "2", "--price", "2.5"])
    out_dep = r["output_tokens_per_gpu_s"] * gpus  # output tokens/s of the whole deployment
    in_dep = r["input_tokens_per_gpu_s"] * gpus
    assert r["usd_per_million_output_tokens"] == pytest.approx(
        price * gpus / (3600 * out_dep) * 1e6, rel=1e-12)
    assert r["usd_per_million_tokens"] == pytest.approx(
        price * gpus / (3600 * (out_dep + in_dep)) * 1e6, rel=1e-12)
    assert r["usd_per_gpu_hour"] == price and r["price_source"] == "--price"


def test_power_identities_by_hand(capsys):
    r = _json(capsys, ["predict", *QWEN, *SERVE])
    u = r["gpu_utilization"]
    assert 0 < u <= 1
    gpu = H200["idle"] + (H200["board"] - H200["idle"]) * u
    all_in = (gpu + H200["node"]) * H200["pue"]
    assert r["gpu_watts"] == pytest.approx(gpu, rel=1e-12)
    assert r["all_in_watts_per_gpu"] == pytest.approx(all_in, rel=1e-12)
    # energy per token x tokens per second = watts
    assert r["joules_per_output_token"] * r["output_tokens_per_gpu_s"] == pytest.approx(all_in)
    assert r["output_tokens_per_s_per_mw"] == pytest.approx(
        r["output_tokens_per_gpu_s"] / all_in * 1e6)
    # the listed price, per GPU-hour: $50.44 for 8 GPUs
    assert r["usd_per_gpu_hour"] == pytest.approx(H200["price"])
    assert r["usd_per_million_output_tokens"] == pytest.approx(
        H200["price"] / (3600 * r["output_tokens_per_gpu_s"]) * 1e6)
    # --pue replaces the file's
    r1 = _json(capsys, ["predict", *QWEN, *SERVE, "--pue", "1"])
    assert r1["all_in_watts_per_gpu"] == pytest.approx(r1["gpu_watts"] + H200["node"])


def test_serve_utilization_is_the_step_mix(capsys):
    """The steady state's utilization weights its mixed and decode-only steps by their time."""
    r = _json(capsys, ["predict", *QWEN, *SERVE])
    f = r["serve"]["mixed_step_share"]
    tm, td = r["mixed_step"]["step_time_s"], r["decode_step"]["step_time_s"]
    um, ud = r["mixed_step"]["busy_share"], r["decode_step"]["busy_share"]
    assert r["gpu_utilization"] == pytest.approx((f * tm * um + (1 - f) * td * ud)
                                                 / (f * tm + (1 - f) * td))


def test_owned_price_by_hand(capsys):
    r = _json(capsys, ["predict", *QWEN, *SERVE, "--capex", "20000", "--years", "5",
                       "--power-price", "0.12"])
    hourly = 20000 / (5 * 8760) + r["all_in_watts_per_gpu"] / 1000 * 0.12
    assert r["usd_per_gpu_hour"] == pytest.approx(hourly, rel=1e-12)
    assert r["usd_per_million_output_tokens"] == pytest.approx(
        hourly / (3600 * r["output_tokens_per_gpu_s"]) * 1e6, rel=1e-12)


@pytest.mark.parametrize("argv", [
    ["predict", *QWEN, *SERVE],
    ["predict", *QWEN, "--phase", "serve", "--isl", "8192", "--osl", "16", "--batch", "64"],
    ["predict", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--tp", "8", "--ep", "1",
     "--weights", "fp8", "--phase", "serve", "--isl", "4096", "--osl", "64", "--batch", "256"],
])
def test_power_never_exceeds_board_and_node(capsys, argv):
    r = _json(capsys, argv)
    assert H200["idle"] <= r["gpu_watts"] <= H200["board"]
    assert r["all_in_watts_per_gpu"] / r["pue"] <= H200["board"] + H200["node"] + 1e-9


def test_idle_gpu_draws_idle_power(capsys):
    p = PowerSpec(board_W=700, idle_W=70, node_W=575, pue=1.3)
    assert gpu_watts(p, 0.0) == 70 and gpu_watts(p, 1.0) == 700 and gpu_watts(p, 3.0) == 700
    assert mix_busy_share([(9.0, 0.0), (1.0, 0.5)]) == pytest.approx(0.05)
    # a simulated server that waits for requests most of the time: near idle, never below
    r = _json(capsys, ["simulate", *QWEN, "--isl", "256", "--osl", "32", "--request-rate",
                       "0.05", "--num-prompts", "12"])
    assert 70 <= r["gpu_watts"] < 70 + 0.1 * (700 - 70)
    assert r["gpu_utilization"] < 0.1


def test_simulate_cost_and_power(capsys):
    r = _json(capsys, ["simulate", *QWEN, "--isl", "512", "--osl", "64", "--concurrency", "8",
                       "--num-prompts", "24", "--price", "3"])
    for k in CONTRACT:
        assert r[k] is not None and r[k] > 0, k
    assert r["usd_per_million_output_tokens"] == pytest.approx(
        3 / (3600 * r["output_tokens_per_gpu_s"]) * 1e6)
    assert r["usd_per_million_tokens"] == pytest.approx(
        3 / (3600 * (r["output_tokens_per_gpu_s"] + r["input_tokens_per_gpu_s"])) * 1e6)
    assert 70 <= r["gpu_watts"] <= 700
    assert r["joules_per_output_token"] * r["output_tokens_per_gpu_s"] == pytest.approx(
        r["all_in_watts_per_gpu"])


def test_optimize_best_and_pareto(capsys):
    r = _json(capsys, ["optimize", *QWEN, "--gpus", "1", "--phase", "serve", "--isl", "1024",
                       "--osl", "256", "--tpot-ms", "50", "--price", "4"])
    b = r["best"]
    for k in CONTRACT:
        assert b[k] is not None and r[k] == b[k], k
    assert b["usd_per_million_output_tokens"] == pytest.approx(
        4 / (3600 * b["output_tokens_per_gpu_s"]) * 1e6)
    for p in r["pareto"]:
        assert p["usd_per_million_output_tokens"] == pytest.approx(
            4 / (3600 * p["output_tokens_per_gpu_s"]) * 1e6)


def test_no_price_says_so(capsys):
    r = _json(capsys, ["predict", "qwen3-30b-a3b", "--hardware", "h800", *SERVE])
    assert r["usd_per_million_output_tokens"] is None and r["usd_per_million_tokens"] is None
    assert r["cost_note"].startswith("no price: pass --price")
    assert r["gpu_watts"] is not None  # power needs no price
    assert main(["predict", "qwen3-30b-a3b", "--hardware", "h800", *SERVE]) == 0
    assert "no price: pass --price" in capsys.readouterr().out


def test_assumed_power_is_one_warning(capsys):
    with pytest.warns(UserWarning, match="m3-max: no published power figure; assumed 140 W") \
            as seen:
        assert main(["predict", "qwen3-30b-a3b", "--hardware", "m3-max", "--weights", "Q4_K_M",
                     *SERVE]) == 0
    said = [str(w.message) for w in seen if "no published power" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0]


def test_every_builtin_file_has_a_power_model():
    for name in builtin_hardware():
        p = load_hardware(name).power
        assert p is not None and 0 <= p.idle_W <= p.board_W and p.pue >= 1 and p.source, name


@pytest.mark.parametrize("flags, field", [
    (["--price", "0"], "--price"),
    (["--price", "-2"], "--price"),
    (["--pue", "0.9"], "--pue"),
    (["--years", "0", "--capex", "1000", "--power-price", "0.1"], "--years"),
    (["--capex", "1000"], "--years"),
    (["--price", "2", "--capex", "1000", "--years", "3", "--power-price", "0.1"], "--price"),
])
def test_bad_cost_flags(capsys, flags, field):
    for cmd in (["predict", *QWEN, *SERVE], ["simulate", *QWEN, "--isl", "64", "--osl", "8",
                                               "--concurrency", "1"]):
        assert field in _error(capsys, [*cmd, *flags])


def test_pricing_refuses_bad_values_from_python():
    with pytest.raises(MoesymError, match="--pue"):
        Pricing(pue=0.5)
    with pytest.raises(MoesymError, match="--price"):
        Pricing(price=0.0)
    assert usd_per_million(3.6, 1.0) == pytest.approx(1000.0)  # $3.6/h = $0.001/s at 1 token/s


@pytest.mark.parametrize("table, field", [
    ("[power]\nboard_W = 700\nidle_W = 70\nnode_W = 500\npue = 1.2\nsource = \"x\"\nwatts = 3\n",
     "watts"),
    ("[power]\nboard_W = 700\nidle_W = 900\nnode_W = 500\npue = 1.2\nsource = \"x\"\n", "idle_W"),
    ("[power]\nboard_W = 700\nidle_W = 70\nnode_W = 500\npue = 0.8\nsource = \"x\"\n", "pue"),
    ("[price]\nusd_per_gpu_hour = -1\nsource = \"x\"\ndate = \"2025\"\n", "usd_per_gpu_hour"),
    ("[price]\nusd_per_gpu_hour = 2\nsource = \"x\"\n", "date"),
])
def test_bad_power_and_price_tables(tmp_path, capsys, table, field):
    from moesym.io.resources import data_dir

    base = (data_dir("hardware") / "h800.toml").read_text()
    # h800 has no [price]; its [power] is replaced by the case's table where it gives one
    if table.startswith("[power]"):
        base = base[:base.index("[power]")]
    f = tmp_path / "hw.toml"
    f.write_text(base + "\n" + table)
    err = _error(capsys, ["predict", "qwen3-30b-a3b", "--hardware", str(f), *SERVE])
    assert field in err
