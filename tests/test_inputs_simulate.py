"""Bounds before work (issue 51): a simulation estimates its requests x steps, memory and wall
time before it starts and refuses, in one line naming the estimate and the flag to change, what
would not finish in about ten minutes or two gigabytes; rates, durations and counts are checked
for range. Each reproducer must answer within seconds (it allocates nothing of the run)."""

from __future__ import annotations

import io
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest

from moesym.cli import main
from moesym.cli.simulate import work_estimate
from moesym.serving.clients import Client

SIM = ["simulate", "qwen3-30b-a3b", "--hardware", "h100", "--isl", "1024", "--osl", "256"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0


@pytest.mark.parametrize("extra, flag", [
    (["--concurrency", "1000000"], "--concurrency"),       # 10 million requests by default
    (["--concurrency", "64", "--num-prompts", "1e8"], "--num-prompts"),
    (["--concurrency", "64", "--num-prompts", "100000000"], "--num-prompts"),
    (["--request-rate", "10", "--duration", "1e9"], "--duration"),
    (["--request-rate", "1e-300", "--num-prompts", "10"], "--request-rate"),
    (["--request-rate", "1e300", "--duration", "1e300"], "--duration"),
    (["--request-rate", "inf", "--duration", "10"], "--request-rate"),
    (["--request-rate", "nan", "--duration", "10"], "--request-rate"),
    (["--request-rate", "10", "--duration", "-1"], "--duration"),
    (["--concurrency", "4", "--seed", "-1"], "--seed"),
    (["--concurrency", "4", "--warmup-requests", "-1"], "--warmup-requests"),
    (["--concurrency", "4", "--num-prompts", "1.5"], "--num-prompts"),
])
def test_runaways_and_ranges_refused_in_one_line(extra, flag):
    rc, out, err, wall = _run(SIM + extra)
    assert rc == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moesym: error:") and flag in lines[0], err
    assert "Traceback" not in err
    assert wall < 20  # refused before the run (a machine shared with other tests: generous)


def test_refusal_names_the_estimate():
    rc, _, err, _ = _run(SIM + ["--concurrency", "1000000"])
    # 10 x 1,000,000 requests (the default --num-prompts) x 256 output tokens
    assert rc == 2 and "1e+07 requests" in err and "2.56e+09 request-steps" in err
    assert "GB of memory" in err


def test_estimate_by_hand():
    # closed loop: 1,000 requests x 100 output tokens = 1e5 request-steps; 10 in flight on one
    # rank: 1e4 decode steps, plus 1,000 x 512 / 8192 = 62.5 prefill chunks
    w = work_estimate(Client(concurrency=10, num_prompts=1000), 1, 512.0, 100.0)
    assert w["tokens"] == pytest.approx(1e5)
    assert w["steps"] == pytest.approx(1e4 + 62.5)
    # open loop: 2 per second for 50 s is 100 requests arriving over 50 simulated seconds
    w = work_estimate(Client(request_rate=2.0, duration_s=50.0), 1, 100.0, 10.0)
    assert w["requests"] == pytest.approx(100) and w["span_s"] == 50.0


def test_a_small_run_is_not_refused():
    rc, out, err, _ = _run(SIM + ["--concurrency", "4", "--num-prompts", "8", "--osl", "4"])
    assert rc == 0, err
    assert "8 requests" in out


def test_a_minute_long_run_is_said_up_front(monkeypatch):
    # the estimate of a run over a minute is said before it starts; the run itself is not made
    import moesym.cli.simulate as sim

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim, "simulate", stop)
    out, err = io.StringIO(), io.StringIO()
    # 1 in flight, 5,000 requests x 1,000 tokens: 5e6 steps, over a minute
    sim_args = SIM[:4] + ["--isl", "100", "--osl", "1000", "--concurrency", "1",
                          "--num-prompts", "5000"]
    with redirect_stdout(out), redirect_stderr(err), \
            pytest.warns(UserWarning, match=r"min; fewer requests \(--num-prompts\)"):
        assert main(sim_args) == 130  # stopped where the run would begin
    assert sim._SAY_WALL_S == 60.0
