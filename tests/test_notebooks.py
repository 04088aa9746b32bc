"""Run every notebook in notebooks/ top to bottom, offline (code cells executed in order).

Outputs are not committed; this executes the cells with plain Python so no Jupyter kernel is
needed. Plots go to a temporary folder.
"""

import json
import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
FAST = {"calibration"}  # the rest run in the slow tier


def test_there_are_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    assert {"quickstart", "closed_forms", "capacity_planning", "calibration"} <= names


@pytest.mark.parametrize("path", [p if p.stem in FAST else pytest.param(p, marks=pytest.mark.slow)
                                  for p in NOTEBOOKS], ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name}: commit notebooks without outputs"
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        exec(compile(src, f"{path.name}[cell {i}]", "exec"), ns)  # noqa: S102
    assert any(f.suffix == ".png" for f in tmp_path.iterdir()) or path.stem == "calibration"
    os.chdir(path.parent)
