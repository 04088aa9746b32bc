"""Fit moesym's analytical kernel model to a kernel-table folder and print held-out errors.

    python benchmarks/kernel_fit_report.py DIR [--gpu h800 --gpu h20] [--write]
        [--transfer-to h100,h200,...]

DIR is in the InferSim layout (e.g. InferSim's ``bench_data``, or bench_data/ written by
benchmarks/kernels/bench_kernels.py). ``--write`` stores the fitted ``[kernel]`` table in the
project's hardware/<gpu>.toml (the rest of the file is kept); ``--transfer-to`` also writes the
(first) fitted GPU's table, marked NOT FITTED, into GPUs that have no measurements of their own
(the fit is per SM: SM count, peaks and bandwidth still come from each GPU's own file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from moesym.io.resources import data_dir
from moesym.specs.kernel_calib import DEFAULTS, transferred
from moesym.kernels.fit import attention_rows, fit_attention, fit_gemm, write_kernel_table
from moesym.kernels.tables import KernelTables
from moesym.specs.hardware import load_hardware


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--gpu", action="append", default=None)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--source", default=None, help="data source named in the TOML comment")
    ap.add_argument("--transfer-to", default="",
                    help="comma list of unmeasured GPUs that take the first fitted GPU's table")
    a = ap.parse_args(argv)
    gpus = a.gpu or sorted({p.name for p in (a.folder / "gemm").glob("*") if p.is_dir()})
    for gpu in gpus:
        hw = load_hardware(gpu)
        t = KernelTables.load(a.folder, gpu)
        rows = t.all_gemm_rows()
        if not len(rows):
            print(f"{gpu}: no GEMM tables")
            continue
        dtype = "fp8" if "fp8" in hw.peaks_flops else "bf16"
        g = fit_gemm(rows, sms=hw.sms, peak_flops=hw.peak_flops(dtype), hbm_bw_Bps=hw.hbm_bw_Bps,
                     base=DEFAULTS, op_bytes=1 if dtype == "fp8" else 2)
        calib = g.calib
        print(f"== {gpu} GEMM ({len(rows)} rows): {g.summary()}")
        print(g.per_group.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        att = attention_rows(t)
        ares = None
        if len(att):
            ares = fit_attention(att, sms=hw.sms, peak_flops=hw.peak_flops("bf16"),
                                 hbm_bw_Bps=hw.hbm_bw_Bps, base=calib)
            calib = ares.calib
            print(f"== {gpu} attention ({len(att)} rows): {ares.summary()}")
            print(ares.per_group.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        vals = calib.to_toml_values()
        print("fitted:", ", ".join(f"{k}={v:.4g}" for k, v in vals.items()))
        if a.write:
            src = a.source or str(a.folder)
            calib = type(calib)(**{**calib.__dict__, "source": f"fit to {src} ({gpu})"})
            lines = [f"data: {src}, gpu {gpu}; held-out = every third M row of each shape family",
                     f"GEMM+grouped-GEMM (FP8): {g.summary()}"]
            if ares is not None:
                lines.append(f"attention: {ares.summary()}")
            write_kernel_table(data_dir("hardware") / f"{gpu}.toml", calib, lines)
            print(f"wrote [kernel] to hardware/{gpu}.toml")
            for other in filter(None, a.transfer_to.split(",")):
                if gpu != gpus[0]:
                    break
                src_o = f"transferred from the {gpu} fit ({other} not measured)"
                write_kernel_table(
                    data_dir("hardware") / f"{other}.toml",
                    transferred(calib, hw, load_hardware(other), src_o),
                    [f"NOT FITTED on {other}: transferred from hardware/{gpu}.toml's fit; the fit "
                     f"is per SM (the SM count and peaks come from this file; the per-SM load "
                     f"rate scaled up with the per-SM tensor rate: moesym.specs.kernel_calib.transferred)",
                     f"refit with: python benchmarks/kernel_fit_report.py BENCH_DIR --gpu {other} "
                     f"--write"])
                print(f"wrote transferred [kernel] to hardware/{other}.toml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
