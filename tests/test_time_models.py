"""Issue 30 item 3: the time models behind one interface (:class:`moesym.kernels.time_model.TimeModel`) and
one registry (:data:`moesym.specs.time_models.TIME_MODELS`) that ``--timing`` and ``Deployment``
both read."""

from __future__ import annotations

import argparse

import pytest

import moesym as ms
from moesym.cli.common import timing_name
from moesym.errors import SpecError
from moesym.kernels.table_timing import TableTiming
from moesym.kernels.tile_step import TileStepTiming
from moesym.kernels.timing import KernelTiming
from moesym.symbolic.symbols import S
from moesym.terms.attention import gemm
from moesym.specs.time_models import TIME_MODELS
from moesym.kernels.registry import time_model
from moesym.kernels.time_model import RooflineTiming, TimeModel


@pytest.fixture
def tables(tmp_path):
    """A folder with one measured GEMM table for the H800."""
    path = tmp_path / "gemm" / "h800" / "data.csv"
    path.parent.mkdir(parents=True)
    path.write_text("m,k,n,latency_us,mfu\n16,4096,6144,10.0,0.1\n64,4096,6144,30.0,0.1\n")
    return tmp_path


def test_the_command_line_and_the_deployment_refuse_the_same_names(tmp_path):
    for name in ("kernels", "tables:", "kernel:x", "roofline:", f"tables:{tmp_path / 'none'}"):
        with pytest.raises(argparse.ArgumentTypeError) as cli:
            timing_name(name)
        with pytest.raises(SpecError) as dep:
            ms.Deployment(timing=name)
        assert str(dep.value) == f"`timing` {cli.value}"  # the field; the CLI names --timing
    for name in ("kernel", "roofline", f"tables:{tmp_path}"):
        assert timing_name(name) == name == ms.Deployment(timing=name).timing


def test_every_registered_name_builds_its_time_model(tables):
    hw = ms.load_hardware("h800")
    built = {k: time_model(e.label().replace("DIR", str(tables)), hw)
             for k, e in TIME_MODELS.items()}
    assert {k: type(t) for k, t in built.items()} == {
        "kernel": KernelTiming, "roofline": RooflineTiming, "tables": TableTiming}
    assert all(isinstance(t, TimeModel) for t in built.values())
    with pytest.raises(ValueError, match="unknown time model 'kernels'"):
        time_model("kernels", hw)


def test_graph_replay_sets_the_kernel_models_elementwise_floor_under_every_wrapper(tables):
    hw, floor = ms.load_hardware("h800"), 1.5e-6
    kernel, table = time_model("kernel", hw), time_model(f"tables:{tables}", hw)
    assert kernel.calib.elementwise_launch_s != floor
    assert kernel.graph_replayed(floor).calib.elementwise_launch_s == floor
    replayed = table.graph_replayed(floor)
    assert replayed.kernel == kernel.graph_replayed(floor) and replayed.tables is table.tables
    assert TileStepTiming(kernel).graph_replayed(floor).inner == kernel.graph_replayed(floor)
    assert RooflineTiming().graph_replayed(floor) == RooflineTiming()  # no launches of its own


def test_only_measured_tables_ask_for_the_numbers_and_report(tables):
    hw = ms.load_hardware("h800")

    def never():
        raise AssertionError("a model that times shapes alone asked for the numbers")

    kernel = time_model("kernel", hw)
    assert kernel.bind(never) is kernel and RooflineTiming().bind(never) == RooflineTiming()
    assert kernel.report() is None and TileStepTiming(kernel).report() is None
    bound = TileStepTiming(time_model(f"tables:{tables}", hw)).bind(lambda: ({}, {"attn": "fp8"}))
    assert isinstance(bound, TileStepTiming) and bound.inner.formats == {"attn": "fp8"}
    bound.time(gemm("qkv_proj", S.batch, 6144, 4096, S.w_bytes, S.act_bytes))  # a measured shape
    assert bound.report() == bound.inner.report()
    assert "measured (h800) for qkv_proj within the measured range" in bound.report()
