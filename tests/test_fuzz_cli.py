"""Generated bad inputs across every command (issue 51): each must exit 0 or 2, never with a
traceback or an exit 1; an answer holds finite numbers only, and with ``--json`` it is strict
JSON (no NaN, no Infinity). The inputs come from a fixed seed: the same ones every run.

Each case takes a small valid command and breaks it one or two ways: a number flag given a
bad value (0, negative, NaN, infinite, absurdly large or small, not a number), a model or
hardware that is unknown, malformed, not UTF-8 or a folder, an unknown flag, a missing
required flag, or an extra flag with a value it does not take. Commands run in-process
(:func:`moesym.cli.main`): the compiled models are built once for the whole test.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from moesym.cli import COMMANDS, main

Q8 = ["qwen3-8b", "--hardware", "h100"]
Q30 = ["qwen3-30b-a3b", "--hardware", "h100"]

# (valid command, its number flags, whether it takes --json); {tmp} is the test's folder
BASES = [
    (["predict", *Q8, "--phase", "decode", "--batch", "8", "--context", "512"],
     ["--batch", "--context", "--gpus", "--tp", "--micro-batches", "--mtp"], True),
    (["predict", *Q30, "--phase", "serve", "--batch", "8", "--isl", "256", "--osl", "32"],
     ["--batch", "--isl", "--osl", "--gpus", "--ep", "--prefix-hit", "--price"], True),
    (["predict", *Q30, "--phase", "prefill", "--tokens", "1024", "--context", "1024"],
     ["--tokens", "--context", "--gpus", "--cp", "--pp"], True),
    (["memory", *Q8, "--context", "512"], ["--context", "--batch", "--gpus"], True),
    (["kernel", "gemm", "--m", "8", "--n", "4096", "--k", "4096", "--hardware", "h100"],
     ["--m", "--n", "--k"], True),
    (["comm", "dispatch", "--tokens", "128", "--hidden", "7168", "--topk", "8", "--experts", "256",
      "--ep", "8", "--mode", "normal", "--hardware", "h800"],
     ["--tokens", "--hidden", "--topk", "--experts", "--ep"], True),
    (["routing", "--experts", "128", "--topk", "8", "--tokens", "64", "--ep", "8"],
     ["--experts", "--topk", "--tokens", "--ep"], True),
    (["derive", "crossover", *Q30], ["--gpus", "--ep", "--context"], True),
    (["sweep", *Q8, "--phase", "decode", "--batch", "1,8", "--context", "512", "--out",
      "{tmp}/s.csv"], ["--batch", "--context", "--gpus"], False),
    (["optimize", *Q8, "--phase", "decode", "--context", "512"],
     ["--context", "--gpus", "--tpot-ms", "--max-size", "--max-points"], True),
    (["simulate", *Q8, "--isl", "64", "--osl", "4", "--concurrency", "2", "--num-prompts", "4"],
     ["--isl", "--osl", "--concurrency", "--num-prompts", "--seed", "--warmup-requests",
      "--chunk", "--mem-fraction"], True),
    (["simulate", *Q8, "--isl", "64", "--osl", "4", "--request-rate", "5", "--num-prompts", "4"],
     ["--request-rate", "--num-prompts", "--duration", "--timeline-points"], True),
    (["validate", "--cases", "{tmp}/bad.json"], [], True),
    (["report", *Q8, "--phase", "decode", "--batch", "8", "--context", "512", "--out",
      "{tmp}/r.html"], ["--batch", "--context", "--gpus"], False),
    (["list", "hardware"], [], True),
]
if "fleet" in COMMANDS:  # another engineer's command, once it exists
    BASES.append((["fleet", *Q8, "--rate", "1", "--duration", "60", "--isl", "64", "--osl", "4",
                   "--ttft-ms", "1000", "--tpot-ms", "100"],
                  ["--rate", "--duration", "--isl", "--osl", "--ttft-ms", "--tpot-ms"], True))

BAD_NUMBERS = ["0", "-1", "-0.5", "nan", "inf", "-inf", "1e300", "1e-300", "abc", "", "1.5",
               "99999999999999999999", "0x10", "1e8", "-4x8", "1,,2", "2e-9"]
BAD_MODELS = ["nosuch-model", "{tmp}/bad.json", "{tmp}/latin1.json", "{tmp}/empty.json",
              "{tmp}/folder", "{tmp}/list.json", "{tmp}/sparse.json"]
BAD_HARDWARE = ["nosuch", "{tmp}/bad.toml", "{tmp}/latin1.toml", "{tmp}/folder",
                "{tmp}/missing.toml", "{tmp}/inf.toml"]
EXTRA = [["--weights", "int3"], ["--weights", "q4_k_m", "--engine", "trtllm"], ["--kv", "fp4"],
         ["--routing", "zipf:-1"], ["--engine", "nosuch"], ["--mesh", "-4x8"], ["--pp", "0"],
         ["--gpus", "3", "--tp", "2"], ["--overlap", "{tmp}/latin1.toml"],
         ["--context-dist", "{tmp}/missing.txt"], ["--expert-cache", "-1"],
         ["--dispatch-axis", "diagonal"], ["--redundant-experts", "1000000"],
         ["--group-size", "0"], ["--mtp", "100000"], ["--accept", "2"], ["--bogus"]]


def _files(tmp) -> None:
    (tmp / "bad.json").write_text("{not json")
    (tmp / "latin1.json").write_bytes(b'{"hidden_size": 4096, "name": "\xe9"}')
    (tmp / "empty.json").write_text("")
    (tmp / "list.json").write_text("[1, 2]")
    (tmp / "sparse.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "vocab_size": 151936, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 100,
        "max_position_embeddings": 40960}))
    (tmp / "bad.toml").write_text("[peak_TFLOPs\nbf16 = ")
    (tmp / "latin1.toml").write_bytes(b'name = "\xe9"\n')
    (tmp / "inf.toml").write_text('name = "x"\nhbm_TBps = inf\n')
    (tmp / "folder").mkdir(exist_ok=True)


def _set(argv: list, flag: str, value: str) -> list:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def cases(n: int, seed: int = 51) -> list[list[str]]:
    """``n`` broken command lines, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        argv, numbers, takes_json = rng.choice(BASES)
        for _ in range(rng.choice((1, 1, 2))):
            kind = rng.randrange(6)
            if kind <= 1 and numbers:
                argv = _set(argv, rng.choice(numbers), rng.choice(BAD_NUMBERS))
            elif kind == 2 and argv[0] in ("predict", "memory", "derive", "sweep", "optimize",
                                           "simulate", "report", "fleet"):
                model_at = 2 if argv[0] == "derive" else 1
                argv = list(argv)
                argv[model_at] = rng.choice(BAD_MODELS)
            elif kind == 3 and "--hardware" in argv:
                argv = _set(argv, "--hardware", rng.choice(BAD_HARDWARE))
            elif kind == 4 and argv[0] not in ("kernel", "comm", "routing", "list", "validate"):
                argv = list(argv) + rng.choice(EXTRA)
            else:  # drop a flag and its value (a required one, often)
                flags = [i for i, a in enumerate(argv) if a.startswith("--") and i + 1 < len(argv)
                         and not argv[i + 1].startswith("--")]
                if flags:
                    i = rng.choice(flags)
                    argv = argv[:i] + argv[i + 2:]
        if takes_json and rng.random() < 0.6:
            argv = list(argv) + ["--json"]
        out.append(argv)
    return out


def _no_constant(name):
    raise ValueError(f"non-finite JSON constant {name}")


_NONFINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.I)


def check(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    o, e = out.getvalue(), err.getvalue()
    where = " ".join(argv)
    assert rc in (0, 2), f"exit {rc}: {where}\n{e[-500:]}"
    assert "Traceback" not in e, where
    if rc == 2:
        last = e.strip().splitlines()[-1]
        assert last.startswith("moesym: error: "), (where, last)
        return
    if "--json" in argv:
        obj = json.loads(o, parse_constant=_no_constant)

        def walk(x):
            if isinstance(x, float):
                assert math.isfinite(x), where
            elif isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(obj)
    else:
        m = _NONFINITE.search(o)
        assert m is None, (where, o[max(0, m.start() - 80):m.end() + 20])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    _files(tmp)
    return tmp


def _run_all(folder, n, seed):
    import warnings

    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for argv in cases(n, seed):
            argv = [a.replace("{tmp}", str(folder)) for a in argv]
            try:
                check(argv)
            except AssertionError as exc:
                failures.append(str(exc)[:400])
    assert not failures, f"{len(failures)} of {n}:\n" + "\n".join(failures[:10])


def test_generated_bad_inputs(folder):
    assert len(BASES) >= 14 and len({b[0][0] for b in BASES}) >= 12  # every command
    _run_all(folder, 120, 51)


@pytest.mark.slow
def test_generated_bad_inputs_more(folder):
    _run_all(folder, 600, 5151)
