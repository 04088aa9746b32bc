"""The compiled-model disk cache (issue 15): a cached answer equals a fresh one, a corrupt,
edited or stale entry is rebuilt and never trusted, an unwritable folder costs one warning, and a
cached ``predict`` runs without importing SymPy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from moesym.numeric import cache
from moesym.cli import main

ARGV = ["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "decode", "--batch", "64",
        "--context", "4096", "--json"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("MOESYM_CACHE_DIR", str(d))
    return d


def _predict(capsys, argv=ARGV) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.json")) if d.is_dir() else []


def test_cached_answer_equals_the_fresh_one(cache_dir, capsys):
    fresh = _predict(capsys, ARGV + ["--no-cache"])
    assert _entries(cache_dir) == []  # --no-cache neither reads nor writes
    first = _predict(capsys)
    assert len(_entries(cache_dir)) == 1
    again = _predict(capsys)
    assert fresh == first == again


def test_other_batch_reuses_the_entry_and_matches_a_fresh_build(cache_dir, capsys):
    _predict(capsys)
    argv = [a if a != "64" else "17" for a in ARGV]
    cached = _predict(capsys, argv)
    assert len(_entries(cache_dir)) == 1  # the workload's numbers are not part of the key
    assert cached == _predict(capsys, argv + ["--no-cache"])


@pytest.mark.parametrize("damage", ["garbage", "truncate", "edit", "foreign"])
def test_damaged_entry_is_rebuilt_not_trusted(cache_dir, capsys, damage):
    good = _predict(capsys)
    (entry,) = _entries(cache_dir)
    text = entry.read_text()
    if damage == "garbage":
        entry.write_bytes(os.urandom(200))
    elif damage == "truncate":
        entry.write_text(text[: len(text) // 2])
    elif damage == "edit":  # change one number of the source without fixing the digest
        data = json.loads(text)
        data["payload"]["source"] = data["payload"]["source"].replace("1.0 /", "2.0 /", 1)
        entry.write_text(json.dumps(data))
    else:  # a well-formed entry stored under another key
        data = json.loads(text)
        data["key"] = "0" * 64
        entry.write_text(json.dumps(data))
    assert _predict(capsys) == good
    assert cache.load(entry.stem) is not None  # rewritten whole


def test_package_change_changes_the_key(cache_dir, capsys, monkeypatch):
    _predict(capsys)
    monkeypatch.setitem(cache._state, "fingerprint", "another moesym")
    _predict(capsys)
    assert len(_entries(cache_dir)) == 2


def test_unwritable_cache_folder_warns_once_and_still_answers(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOESYM_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    monkeypatch.setitem(cache._state, "warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = _predict(capsys)
        _predict(capsys)
    msgs = [str(w.message) for w in caught if "not writable" in str(w.message)]
    assert len(msgs) == 1 and "MOESYM_CACHE_DIR" in msgs[0]
    assert fresh["step_time_s"] > 0


def test_xdg_cache_home_is_honoured(tmp_path, monkeypatch):
    monkeypatch.delenv("MOESYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "moesym"


def _fresh_process(argv, cache_dir, then: str) -> subprocess.CompletedProcess:
    """``main(argv)`` in a new Python process, its output captured as ``out``, then the
    statement ``then`` (which prints)."""
    code = ("import sys, io, contextlib\n"
            "from moesym.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as out:\n    main({argv!r})\n"
            + then)
    env = {**os.environ, "MOESYM_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)


def test_cached_predict_imports_neither_sympy_pandas_nor_scipy(cache_dir):
    then = ("print(sorted(m for m in ('sympy', 'pandas', 'matplotlib', 'scipy') "
            "if m in sys.modules))")
    run = lambda: _fresh_process(ARGV, cache_dir, then).stdout.strip()  # noqa: E731
    assert "sympy" in run()  # the first run builds the model
    assert run() == "[]"  # the second loads it


DERIVE = ["derive", "memory-batch", "qwen3-30b-a3b", "--hardware", "a100", "--weights", "fp8"]


def _derive(capsys, argv) -> tuple:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out


def _answers(d: Path) -> list[Path]:
    return [p for p in _entries(d) if "derive_answer" in json.loads(p.read_text())["payload"]]


def test_stored_derive_answer_prints_as_a_fresh_solve(cache_dir, capsys):
    """A derive answer is stored beside the compiled models (one entry for its text and its
    JSON): read back, both print byte for byte what a fresh solve prints."""
    fresh = [_derive(capsys, DERIVE + extra + ["--no-cache"]) for extra in ([], ["--json"])]
    assert _entries(cache_dir) == []
    first = [_derive(capsys, DERIVE + extra) for extra in ([], ["--json"])]
    assert len(_answers(cache_dir)) == 1  # --json prints the same answer
    again = [_derive(capsys, DERIVE + extra) for extra in ([], ["--json"])]
    assert fresh == first == again
    assert fresh[0][0] == 0 and "exact answer : " in fresh[0][1]
    assert json.loads(fresh[1][1])["value"] > 0


def test_stored_derive_answer_skips_sympy_and_says_its_warnings(cache_dir):
    """Read back, a derive answer imports no SymPy, and the warnings of its solve (A100 has no
    FP8 tensor cores) are said again, as a fresh solve says them."""
    run = lambda: _fresh_process(DERIVE, cache_dir,  # noqa: E731
                                 "print(out.getvalue(), 'sympy' in sys.modules)")
    fresh, stored = run(), run()
    assert fresh.stdout.endswith(" True\n") and stored.stdout.endswith(" False\n")
    assert fresh.stdout[:-6] == stored.stdout[:-7]
    assert "a100 has no fp8 tensor cores" in fresh.stderr and fresh.stderr == stored.stderr


def test_an_error_is_not_stored(cache_dir, capsys):
    argv = ["derive", "memory-batch", "qwen3-30b-a3b", "--hardware", "blackhole-p150"]
    for _ in range(2):
        assert main(argv) == 2
        assert "does not fit" in capsys.readouterr().err
    assert _answers(cache_dir) == []


def test_bytecode_is_kept_read_back_and_a_damaged_file_is_compiled_again(cache_dir,
                                                                           monkeypatch):
    source = "def f0(a0):\n    return (a0 * 3 + 1,)\n"
    first = cache.code(source, "<moesym generated>")
    (kept,) = sorted(cache_dir.glob("*.code"))

    def no_compile(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(cache, "compile", no_compile, raising=False)
    again = cache.code(source, "<moesym generated>")  # read back: compile is not called
    ns1, ns2 = {}, {}
    exec(first, ns1)  # noqa: S102 - the test's own source
    exec(again, ns2)  # noqa: S102
    assert ns1["f0"](2) == ns2["f0"](2) == (7,)
    kept.write_bytes(kept.read_bytes()[:40] + b"\x00garbage")  # digest no longer matches
    with pytest.raises(AssertionError, match="compiled again"):
        cache.code(source, "<moesym generated>")
    monkeypatch.delattr(cache, "compile")
    ns3 = {}
    exec(cache.code(source, "<moesym generated>"), ns3)  # noqa: S102
    assert ns3["f0"](2) == (7,)
    cache.disable()
    try:
        for p in cache_dir.glob("*.code"):
            p.unlink()
        cache.code(source, "<moesym generated>")
        assert list(cache_dir.glob("*.code")) == []  # off: nothing kept
    finally:
        cache.disable(False)


def test_eplb_imbalance_table_is_kept_and_read_back_exactly(cache_dir):
    from moesym.routing import zipf

    args = (64, 2, 8, 4, 0.8, "round_robin")
    zipf._imbalance_at_table.cache_clear()
    fresh = zipf._imbalance_at_table(*args)
    zipf._imbalance_at_table.cache_clear()
    (entry,) = _entries(cache_dir)
    payload = json.loads(entry.read_text())["payload"]
    assert payload["imbalance"] == list(fresh)
    # read back (the estimator not run again) and bit-identical to the computed values
    monkey = zipf.eplb_imbalance
    zipf.eplb_imbalance = None  # would fail if called
    try:
        back = zipf._imbalance_at_table(*args)
    finally:
        zipf.eplb_imbalance = monkey
        zipf._imbalance_at_table.cache_clear()
    assert back == fresh
    assert fresh == tuple(float(zipf.eplb_imbalance(64, 2, 8, 4, 0.8, t))
                          for t in zipf.TABLE_TOKENS)
