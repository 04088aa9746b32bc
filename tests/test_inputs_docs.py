"""Docs that answer honestly (issue 51): every pointer in a ``--help`` text resolves (a README
section by its heading, or a file of the project), and the README's llama-bench table shows
what ``moesym predict`` prints for the same rows."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from moesym.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _helps():
    """(command path, flag, help text) of every option of every (sub)command."""
    out = []

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
            elif a.help:
                out.append((" ".join(path), "/".join(a.option_strings) or a.dest, a.help))

    walk(build_parser(), ["moesym"])
    return out


def _headings() -> set[str]:
    """README section names: its headings and its bold paragraph labels."""
    heads = {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", README, re.M)}
    bold = {m.group(1).strip().rstrip(".") for m in re.finditer(r"^\*\*(.+?)\*\*", README, re.M)}
    return heads | bold


def test_help_pointers_resolve():
    heads = _headings()
    seen = 0
    for cmd, flag, text in _helps():
        for section in re.findall(r"README: ([^);]+)", text):
            seen += 1
            assert section.strip() in heads, f"{cmd} {flag}: README has no section {section!r}"
        for path in re.findall(r"[\w./-]+\.md\b", text):
            seen += 1
            assert (ROOT / path).is_file(), f"{cmd} {flag}: {path} does not exist"
        assert not re.search(r"\bsee README\)", text), f"{cmd} {flag}: name the README section"
    assert seen > 0


# the README table: device, format -> the command's flags
_ROWS = {"M2 Ultra, Q4_0": ("m2-ultra", "q4_0"), "RTX 4090, Q8_0": ("rtx-4090", "q8_0")}


def _table():
    rows = {}
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in _ROWS and len(cells) == 7:
            rows[cells[0]] = cells
    return rows


def test_readme_llama_bench_table_is_what_predict_prints(cli_json):
    rows = _table()
    assert set(rows) == set(_ROWS)
    for label, (hw, fmt) in _ROWS.items():
        c = rows[label]
        base = ["predict", "llama-7b", "--hardware", hw, "--weights", fmt, "--engine",
                "llama.cpp", "--eager"]
        tg = cli_json(base + ["--phase", "decode", "--batch", "1", "--context", "64"])
        pp = cli_json(base + ["--phase", "prefill", "--tokens", "512", "--context", "512"])
        # printed as predict prints them: one decimal
        assert c[2] == f"{tg['tokens_per_gpu_s']:.1f}", (label, c[2], tg["tokens_per_gpu_s"])
        assert c[5] == f"{pp['tokens_per_gpu_s']:.1f}", (label, c[5], pp["tokens_per_gpu_s"])
        # the held-out columns are the fit report's (benchmarks/single_device_fit.md)
        fit = (ROOT / "benchmarks" / "single_device_fit.md").read_text(encoding="utf-8")
        for test, col in (("tg128", 3), ("pp512", 6)):
            held = c[col].split()[0]
            pattern = rf"\| {hw} \| {fmt.upper()} \| {test} \| [\d.]+ \| {re.escape(held)} \|"
            assert re.search(pattern, fit), (label, test, held)


@pytest.mark.parametrize("flag", ["--weights", "--overlap"])
def test_named_pointers_are_the_docs_pages(flag):
    texts = [t for _, f, t in _helps() if flag in f.split("/")]
    assert texts and all(".md" in t for t in texts)
