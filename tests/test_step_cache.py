"""The built step model on disk (moesym.model.step_cache): a step read back is the step a fresh
build gives, node for node (its printed structure, ``sp.srepr``, and its numbers); an entry is
keyed by every input of the build and by the package, and a damaged one is rebuilt; the
warnings of the build are said again when it is read back; an error is not stored."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import moesym as ms
from moesym.errors import MoesymError
from moesym.model import step_cache
from moesym.model.step import build_step
from moesym.numeric import cache
from moesym.symbolic.compile import evaluate
from moesym.symbolic.expr import nodes, symbols_of

MODEL, HW = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h20")
DEP = ms.Deployment(gpus=8, ep=8, micro_batches=2)
WL = ms.Workload("decode", batch=64, context=4096)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("MOESYM_CACHE_DIR", str(d))
    return d


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.json")) if d.is_dir() else []


def _exprs(step) -> dict:
    """Every expression of a step model, by where it sits."""
    out = {"expr": step.expr, "layer_s": step.layer_s, "layer_compute_s": step.layer_compute_s,
           "dense_layer_s": step.dense_layer_s, "once_s": step.once_s}
    out.update({f"per_layer_s.{k}": v for k, v in step.per_layer_s.items()})
    for k, t in step.terms.items():
        out.update({f"terms.{k}.{f}": getattr(t, f)
                    for f in ("compute_s", "memory_s", "comm_s", "overhead_s", "total_s")})
    out.update({f"work.{k}.{q}": e for k, w in step.work.items() for q, e in w.items()})
    return out


def _assert_same_step(a, b, numbers: bool = False) -> None:
    """``a`` is ``b`` node for node (``sp.srepr``: classes, arguments in their order, numbers
    to the bit) with the same bound values and specs; with ``numbers`` also the step time at
    random batches and contexts, and predict's whole report from each step's compiled model."""
    ea, eb = _exprs(a), _exprs(b)
    assert ea.keys() == eb.keys()
    for k in ea:
        assert sp.srepr(ea[k]) == sp.srepr(eb[k]), k
    assert dict(a.values) == dict(b.values)
    assert (a.model, a.hardware, a.deployment, a.workload) == \
        (b.model, b.hardware, b.deployment, b.workload)
    if not numbers:
        return
    rng = np.random.default_rng(7)
    grid = {ms.S.batch: rng.integers(1, 4096, 64).astype(float),
            ms.S.context: rng.integers(128, 131072, 64).astype(float)}
    vals = {s: v for s, v in a.values.items() if s not in grid}
    assert symbols_of(a.expr) <= set(vals) | set(grid)
    np.testing.assert_array_equal(evaluate(a.expr, vals, grid), evaluate(b.expr, vals, grid))
    assert a.predict() == b.predict()


def test_a_stored_step_reads_back_as_the_built_one():
    built = build_step(MODEL, HW, DEP, WL)
    # what SymPy had worked out on each node (its cached assumptions) comes back with it
    facts = lambda e: [dict(n._assumptions) for n in nodes(e, lambda n: not n.is_Atom)]  # noqa: E731
    data, known = step_cache.dumps(built), facts(built.expr)
    loaded = step_cache.loads(data)[0]
    got = facts(loaded.expr)  # equal nodes are stored once, with what the first copy knew
    assert len(got) == len(known) and sum(map(len, got)) >= 0.9 * sum(map(len, known))
    assert all(k[f] == g[f] for k, g in zip(known, got) for f in k.keys() & g.keys())
    _assert_same_step(loaded, built, numbers=True)


def test_a_deepseek_v3_step_reads_back_as_the_built_one():
    """The largest step (MLA, group-limited routing, two-batch overlap, FP8 GEMMs)."""
    dep = ms.Deployment(gpus=128, ep=128, weights="fp8", micro_batches=2)
    built = build_step(ms.load_model("deepseek-v3"), ms.load_hardware("h800"), dep, WL)
    _assert_same_step(step_cache.loads(step_cache.dumps(built))[0], built)


def test_cached_step_is_stored_once_and_equals_a_fresh_build(cache_dir):
    first = step_cache.cached_step(MODEL, HW, DEP, WL)
    assert len(_entries(cache_dir)) == 1
    again = step_cache.cached_step(MODEL, HW, DEP, WL)  # read back
    assert len(_entries(cache_dir)) == 1
    fresh = build_step(MODEL, HW, DEP, WL)
    _assert_same_step(first, fresh)
    _assert_same_step(again, fresh)


@pytest.mark.parametrize("other", [
    (MODEL, HW, DEP.with_(micro_batches=1), WL),
    (MODEL, HW, DEP.with_(weights="fp8"), WL),
    (MODEL, ms.load_hardware("h100"), DEP, WL),
    (ms.load_model("qwen3-235b-a22b"), HW, DEP, WL),
    (MODEL, HW, DEP, ms.Workload("decode", batch=64, context=8192)),
    (MODEL, HW, DEP, ms.Workload("prefill", tokens=4096, context=4096)),
])
def test_every_input_of_the_build_is_in_the_key(cache_dir, other):
    step_cache.cached_step(MODEL, HW, DEP, WL)
    got = step_cache.cached_step(*other)
    assert len(_entries(cache_dir)) == 2
    _assert_same_step(got, build_step(*other))


def test_package_or_sympy_change_changes_the_key(cache_dir, monkeypatch):
    step_cache.cached_step(MODEL, HW, DEP, WL)
    monkeypatch.setitem(cache._state, "fingerprint", "another moesym")
    step_cache.cached_step(MODEL, HW, DEP, WL)
    assert len(_entries(cache_dir)) == 2
    monkeypatch.setattr(sp, "__version__", "0.0-another")
    step_cache.cached_step(MODEL, HW, DEP, WL)
    assert len(_entries(cache_dir)) == 3


@pytest.mark.parametrize("damage", ["garbage", "truncate", "edit", "bad pickle"])
def test_damaged_entry_is_rebuilt_not_trusted(cache_dir, damage):
    step_cache.cached_step(MODEL, HW, DEP, WL)
    (entry,) = _entries(cache_dir)
    text = entry.read_text()
    data = json.loads(text)
    if damage == "garbage":
        entry.write_bytes(os.urandom(200))
    elif damage == "truncate":
        entry.write_text(text[: len(text) // 2])
    elif damage == "edit":  # another pickle without fixing the digest
        data["payload"]["step_pickle"] = data["payload"]["step_pickle"][:-8] + "AAAAAAA="
        entry.write_text(json.dumps(data))
    else:  # a well-formed entry (digest fixed) whose pickle does not read back
        data["payload"]["step_pickle"] = "bm90IGEgcGlja2xl"
        data["digest"] = cache._digest(data["payload"])
        entry.write_text(json.dumps(data))
    _assert_same_step(step_cache.cached_step(MODEL, HW, DEP, WL),
                      build_step(MODEL, HW, DEP, WL))
    assert cache.load(entry.stem) is not None  # rewritten whole


def test_the_build_warnings_are_said_again_when_read_back(cache_dir):
    """A100 has no FP8 tensor cores: the build warns, and a step read back warns the same."""
    args = (MODEL, ms.load_hardware("a100"), DEP.with_(weights="fp8"), WL)

    def said():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step_cache.cached_step(*args)
        return [(w.category, str(w.message)) for w in caught]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_step(*args)
    direct = [(w.category, str(w.message)) for w in caught]
    assert any("no fp8 tensor cores" in m for _, m in direct)
    assert said() == direct  # built (and stored)
    assert len(_entries(cache_dir)) == 1
    assert said() == direct  # read back


def test_a_build_error_is_not_stored(cache_dir):
    args = (MODEL, HW, DEP.with_(cp=2), WL)  # context parallelism splits prefill only
    for _ in range(2):
        with pytest.raises(MoesymError, match="--cp"):
            step_cache.cached_step(*args)
    assert _entries(cache_dir) == []


def test_no_cache_neither_reads_nor_writes(cache_dir, monkeypatch):
    monkeypatch.setenv("MOESYM_NO_CACHE", "1")
    _assert_same_step(step_cache.cached_step(MODEL, HW, DEP, WL), build_step(MODEL, HW, DEP, WL))
    assert _entries(cache_dir) == []
