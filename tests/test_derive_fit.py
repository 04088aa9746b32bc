"""derive on a deployment that cannot hold the model (issue 51): the answer is none, with the
memory numbers, not a batch; derive sensitivity refuses it in one line; and derive pages
refuses an --out below a file.

The expected numbers come from the model card and the data sheet, not from moesym's memory
model: DeepSeek-V3 has 671 billion parameters (published), BF16 stores each in 2 bytes, so its
weights take 1342 GB on one GPU; an H800 holds 80 GB."""

from __future__ import annotations

import json
import re

import pytest

from moesym.cli import main

V3_ON_ONE_H800 = ["deepseek-v3", "--hardware", "h800", "--no-cache"]  # BF16, one GPU
PUBLISHED_PARAMS = 671e9  # DeepSeek-V3's card (without the MTP module)
BF16_BYTES = 2
H800_GB = 80


def _run(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _weights_gb(text: str) -> float:
    return float(re.search(r"its weights take ([\d.]+) GB per GPU", text).group(1))


@pytest.mark.parametrize("what", [["tpot", "--tpot-ms", "50"], ["crossover"], ["attention"],
                                  ["micro-batches"], ["comm-hidden"],
                                  ["solve", "--equal", "step", "0.05", "--for", "batch"]])
def test_an_answer_for_a_deployment_that_cannot_hold_the_weights_is_none(what, capsys):
    """The issue's reproducer (`derive tpot deepseek-v3 --hardware h800 --tpot-ms 50` said
    "exact answer : 2") and every answer on the deployment as given: none, with the weights per
    GPU against the capacity, exit 0; in JSON the value is null and the note says why."""
    argv = ["derive", what[0], *V3_ON_ONE_H800, *what[1:]]
    rc, out, err = _run(argv, capsys)
    assert rc == 0, err
    assert "exact answer : none" in out and "the model does not fit" in out
    assert _weights_gb(out) == pytest.approx(PUBLISHED_PARAMS * BF16_BYTES / 1e9, rel=1e-3)
    assert f"{H800_GB:.1f} GB usable on h800" in out
    rc, out, _ = _run(argv + ["--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["value"] is None and "the model does not fit" in d["note"]


def test_concurrency_for_a_deployment_that_cannot_hold_the_weights_is_none(capsys):
    rc, out, err = _run(["derive", "concurrency", *V3_ON_ONE_H800, "--isl", "1024", "--osl",
                         "256", "--tpot-ms", "50", "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["value"] is None, err
    assert _weights_gb(d["note"]) == pytest.approx(PUBLISHED_PARAMS * BF16_BYTES / 1e9, rel=1e-3)


def test_sensitivity_refuses_a_deployment_that_cannot_hold_the_weights(capsys):
    """The README's sensitivity recipe on BF16 DeepSeek-V3 and one H800: one line, exit 2."""
    rc, out, err = _run(["derive", "sensitivity", *V3_ON_ONE_H800], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and "the model does not fit" in lines[0]
    assert _weights_gb(lines[0]) == pytest.approx(PUBLISHED_PARAMS * BF16_BYTES / 1e9, rel=1e-3)
    assert f"{H800_GB:.1f} GB usable on h800" in lines[0] and "--gpus" in lines[0]


def test_a_deployment_that_holds_the_weights_is_answered(capsys):
    # FP8 weights over 16 GPUs: 671 GB / 16 = 42 GB of experts per GPU, well within 80 GB
    rc, out, err = _run(["derive", "crossover", "deepseek-v3", "--hardware", "h800", "--gpus",
                         "16", "--ep", "16", "--weights", "fp8", "--no-cache", "--json"], capsys)
    assert rc == 0 and json.loads(out)["value"] > 0, err


def test_pages_out_below_a_file_is_one_line(tmp_path, capsys):
    """`derive pages --out FILE/x` said a raw "Not a directory"."""
    f = tmp_path / "FILE"
    f.write_text("")
    rc, out, err = _run(["derive", "pages", "--out", str(f / "x")], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "--out" in lines[0] and f"{f} is a file" in lines[0]
    assert not (f / "x").exists()
