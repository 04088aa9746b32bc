"""Published serving benchmarks of many deployments: InferenceX's open DeepSeek-R1 runs, each
simulated as the benchmark ran it (``moesym validate --serving``).

The runs are ``bench_data/serving/inferencex_dsr1_1k1k.csv`` (its source and columns in
bench_data/README.md): per run the GPU, the framework and its version, the weights, speculative
decoding, the deployment (one pool, or prefill and decode workers with their TP, EP and attention
data parallelism), the server's launch flags that InferenceX's launch scripts set, the client's
concurrency and what was measured. Each run is simulated by :func:`moesym.serving.simulate`
(or its disaggregated twin) with the benchmark's client: a closed loop at the concurrency, 10 x
concurrency requests, prompt and output lengths uniform in [0.8 N, N] (InferenceX's
``--random-range-ratio 0.8``), every request measured. Nothing here is fitted on these runs;
the constants that are (the engines' host time per eagerly launched kernel) say so where they
are written, with their held-out errors.

Rules for what a run does not record (each stated where it is applied, :func:`setup`):

* the engine profile by framework and version (:data:`ENGINES`);
* the weights: ``fp8`` is DeepSeek's FP8 block-scale checkpoint; ``fp4`` the NVFP4 checkpoint
  on NVIDIA and the MXFP4 one on AMD (routed experts in FP4, the rest FP8);
* draft tokens where the run's recipe is not in the launch snapshot (:data:`DRAFT_DEFAULT`);
* the KV cache in FP8 where the recipe is not known (every known disaggregated recipe uses it).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from functools import cache
from statistics import median

from ..errors import MoesymError
from ..io.progress import progress_bar
from ..io.resources import data_dir
from ..readers.model import load_model
from ..serving import simulate, simulate_disaggregated
from ..serving.clients import Client, range_ratio
from ..serving.engine import Launch
from ..specs.deployment import A2AMode, Deployment, eplb_slots
from ..specs.hardware import load_hardware

__all__ = ["ENGINES", "METRICS", "RANDOM_PROMPT_ACCEPT", "SOURCE", "ServingRun", "load_runs",
           "serving_summary", "setup", "simulate_run", "validate_runs"]

SOURCE = ("SemiAnalysis InferenceX public runs (benchmarks.json of SemiAnalysisAI/InferenceX-app @ "
          "3a600f1; launch flags from SemiAnalysisAI/InferenceX @ 843c625), DeepSeek-R1 "
          "1024/1024")

#: framework (InferenceX's name) -> the engine profile that runs it
ENGINES = {"sglang": "sglang-0.5.9", "trt": "trtllm", "dynamo-trt": "dynamo-trt",
           "dynamo-sglang": "dynamo-sglang", "mori-sglang": "mori-sglang", "atom": "atom"}

#: draft tokens per step where the run's recipe is not in the launch snapshot: Dynamo-SGLang's
#: 1k/1k recipes run 2 EAGLE steps (srt-slurm recipes b200-fp4/1k1k/disagg/mtp), SGLang's default
#: for DeepSeek-V3 is 3 (server_args.py auto_choose_speculative_params), TensorRT-LLM's
#: aggregated scripts 3 (1 under attention DP), ATOM's FP8 script 3
DRAFT_DEFAULT = {"dynamo-sglang": 2, "mori-sglang": 3, "atom": 3}

#: acceptance of a draft token on the benchmark's random-token prompts (DeepSeek's MTP module
#: accepts 85-90% of its second token on text, DeepSeek-V3 technical report sec. 5.4.3: not on
#: random tokens); the --accept these runs are simulated with
#: written 2026-11-29 by benchmarks/fit_serving.py, fitted on the mean TPOT of the aggregated MTP runs (67 InferenceX open runs, 15 launch configurations, each held out in turn: held-out median |error| 14.5%, in fit 14.3%)
RANDOM_PROMPT_ACCEPT = 0.635

_INT = ("id", "conc", "prefill_workers", "prefill_gpus", "prefill_tp", "prefill_ep",
        "decode_workers", "decode_gpus", "decode_tp", "decode_ep")
_OPT_INT = ("mtp", "chunk", "max_running", "max_num_tokens", "cuda_graph_max_bs",
            "recv_interval")
_FLOAT = ("ttft_mean_ms", "ttft_median_ms", "ttft_p99_ms", "tpot_mean_ms", "tpot_median_ms",
          "tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu")


@dataclass(frozen=True)
class ServingRun:
    """One published run (a row of the table, typed)."""

    id: int
    date: str
    hardware: str
    framework: str
    version: str
    precision: str
    spec: str
    mtp: int | None
    disagg: bool
    layout: str
    prefill_workers: int
    prefill_gpus: int
    prefill_tp: int
    prefill_ep: int
    prefill_dpa: bool
    decode_workers: int
    decode_gpus: int
    decode_tp: int
    decode_ep: int
    decode_dpa: bool
    kv: str
    chunk: int | None
    max_running: int | None
    max_num_tokens: int | None
    cuda_graph_max_bs: int | None
    kv_fraction: float | None
    recv_interval: int | None
    prefill_graphs: bool | None
    moe_backend: str
    conc: int
    ttft_mean_ms: float
    ttft_median_ms: float
    ttft_p99_ms: float
    tpot_mean_ms: float
    tpot_median_ms: float
    tput_per_gpu: float
    output_tput_per_gpu: float
    input_tput_per_gpu: float

    @property
    def gpus(self) -> int:
        if not self.disagg:
            return self.decode_gpus
        return (self.prefill_workers * self.prefill_gpus
                + self.decode_workers * self.decode_gpus)

    @property
    def engine(self) -> str:
        return ENGINES[self.framework]

    @property
    def group(self) -> str:
        """The GPU and framework (the validation table's grouping)."""
        return f"{self.hardware} {self.framework}"

    @property
    def config(self) -> str:
        """The launch configuration: GPU, framework, weights, speculation, layout."""
        lay = (f"{self.decode_gpus}g tp{self.decode_tp} ep{self.decode_ep}"
               f"{' dpa' if self.decode_dpa else ''}")
        if self.disagg:
            lay = (f"{self.prefill_workers}x({self.prefill_gpus}g ep{self.prefill_ep}"
                   f"{' dpa' if self.prefill_dpa else ''}) + {self.decode_workers}x("
                   f"{self.decode_gpus}g ep{self.decode_ep}{' dpa' if self.decode_dpa else ''})")
        return (f"{self.hardware} {self.framework} {self.precision}"
                f"{' mtp' if self.spec == 'mtp' else ''} {lay}")


def _typed(raw: dict) -> ServingRun:
    out = {}
    for k, v in raw.items():
        if k in _INT:
            out[k] = int(v)
        elif k in _OPT_INT:
            out[k] = int(float(v)) if v else None
        elif k in _FLOAT:
            out[k] = float(v)
        elif k == "kv_fraction":
            out[k] = float(v) if v else None
        elif k in ("disagg", "prefill_dpa", "decode_dpa"):
            out[k] = v == "true"
        elif k == "prefill_graphs":
            out[k] = {"true": True, "false": False}.get(v)
        else:
            out[k] = v
    return ServingRun(**out)


@cache
def load_runs() -> tuple[ServingRun, ...]:
    """Every published run of the shipped table."""
    path = data_dir("bench_data") / "serving" / "inferencex_dsr1_1k1k.csv"
    with path.open(newline="", encoding="utf-8") as f:
        return tuple(_typed(r) for r in csv.DictReader(f))


def _weights(run: ServingRun, vendor: str) -> str:
    if run.precision == "fp8":
        return "fp8"
    four = "mxfp4" if vendor == "amd" else "nvfp4"
    return f"moe={four},attn=fp8,dense=fp8"


def _draft(run: ServingRun, dpa: bool) -> int:
    if run.spec != "mtp":
        return 0
    if run.mtp:
        return run.mtp
    if run.framework in ("trt", "dynamo-trt"):
        return 1 if dpa else 3
    return DRAFT_DEFAULT[run.framework]


def _deployment(run: ServingRun, side: str, model, hw, engine: str, accept: float):
    g = getattr(run, f"{side}_gpus")
    dpa = getattr(run, f"{side}_dpa")
    ep = getattr(run, f"{side}_ep")
    tp = 1 if dpa else getattr(run, f"{side}_tp")
    # attention data parallelism with experts over every GPU: a token all-to-all (DeepEP, MoRI,
    # TensorRT-LLM's own) where EP spans the GPUs; TP attention leaves every token on every GPU
    a2a = A2AMode.AUTO if dpa and ep == g else A2AMode.ALLGATHER if ep > 1 else A2AMode.AUTO
    mtp = _draft(run, dpa)
    return eplb_slots(model, Deployment(gpus=g, tp=tp, ep=ep, weights=_weights(run, hw.vendor),
                      kv=run.kv or "fp8", engine=engine, mtp=mtp, accept=accept if mtp else None,
                      a2a=a2a,
                      gpus_per_node=min(g, hw.gpus_per_node) if g <= hw.scale_up_domain_gpus
                      else hw.gpus_per_node,
                      prefill_graphs=run.prefill_graphs))


def setup(run: ServingRun, accept: float = RANDOM_PROMPT_ACCEPT):
    """(model, hardware, engine, deployments (prefill, decode), replicas or None, launch) of a
    run as the benchmark ran it; ``accept``: a draft token's acceptance (MTP runs)."""

    model = load_model("deepseek-v3")
    hw = load_hardware(run.hardware)
    engine = run.engine
    dep_d = _deployment(run, "decode", model, hw, engine, accept)
    # every TensorRT-LLM script with attention DP sets attention_dp_config {enable_balance:
    # true, batching_wait_iters: 0, timeout_iters: 60} (dsr1_*_trt*.sh)
    balance = 60 if run.framework in ("trt", "dynamo-trt") and run.decode_dpa else 0
    # a disaggregated recipe not in the snapshot is taken to cap the requests no lower than
    # the concurrency (every recipe there sets max_running_requests, 512 to 1024)
    running = run.max_running or (run.conc if run.disagg else None)
    launch = Launch(chunk=_chunk(run, dep_d), max_running=running,
                    step_tokens=run.max_num_tokens, recv_interval=run.recv_interval,
                    kv_fraction=run.kv_fraction, cuda_graph_max_bs=run.cuda_graph_max_bs,
                    dp_balance_steps=balance)
    if not run.disagg:
        return model, hw, engine, (dep_d, dep_d), None, launch
    dep_p = _deployment(run, "prefill", model, hw, engine, accept)
    launch = replace(launch, chunk=_chunk(run, dep_p))
    return model, hw, engine, (dep_p, dep_d), (run.prefill_workers, run.decode_workers), launch


def _chunk(run: ServingRun, dep) -> int | None:
    """Prompt tokens per step per attention DP rank: SGLang divides its --chunked-prefill-size
    by the DP size under DP attention (server_args.py, attention DP handling)."""
    if run.chunk is None:
        return None
    return max(1, run.chunk // dep.dp) if "sglang" in run.framework else run.chunk


def simulate_run(run: ServingRun, seed: int = 0, accept: float = RANDOM_PROMPT_ACCEPT) -> dict:
    """The run simulated: mean and median TTFT (ms), mean TPOT (ms), all tokens per second
    per GPU of the deployment, and the TTFT's components."""

    model, hw, engine, (dep_p, dep_d), replicas, launch = setup(run, accept)
    client = Client(concurrency=run.conc, num_prompts=10 * run.conc)
    lengths = range_ratio(1024, 0.8), range_ratio(1024, 0.8)
    if replicas is None:
        r = simulate(model, hw, dep_d, client, *lengths, engine=engine, seed=seed,
                     launch=launch, timeline_points=1, itl=False)
    else:
        r = simulate_disaggregated(model, hw, dep_p, dep_d, replicas, client, *lengths,
                                   engine=engine, seed=seed, launch=replace(launch, chunk=None),
                                   launch_prefill=replace(type(launch)(), chunk=launch.chunk),
                                   timeline_points=1, itl=False)
    out = {"ttft_mean_ms": r["ttft_ms"]["mean"], "ttft_median_ms": r["ttft_ms"]["p50"],
           "tpot_mean_ms": r["tpot_ms"]["mean"],
           "tput_per_gpu": r["output_tokens_per_gpu_s"] + r["input_tokens_per_gpu_s"],
           "ttft_components_ms": r.get("ttft_components_ms", {})}
    if replicas is not None:  # the hand-off it ran with (benchmarks/fit_serving.py pd-handoff)
        out["pd_handoff_ms"] = r["disaggregation"]["pd_handoff_ms"]
    return out


#: the metrics compared, measured column -> what it is
METRICS = {"tpot_mean_ms": "TPOT mean", "ttft_mean_ms": "TTFT mean",
           "ttft_median_ms": "TTFT median", "tput_per_gpu": "tokens/s/GPU"}


def validate_runs(runs=None, *, progress: bool = False, seed: int = 0) -> list[dict]:
    """Each run simulated against what was measured: per run its keys, the measured and
    predicted value and the signed relative error of each of :data:`METRICS`, or ``skipped``
    with the one-line reason where moesym cannot run it."""
    rows = []
    for run in progress_bar(list(load_runs() if runs is None else runs),
                            "validate: serving runs", progress):
        row = {"id": run.id, "group": run.group, "config": run.config, "conc": run.conc,
               "date": run.date, "version": run.version, "gpus": run.gpus}
        try:
            pred = simulate_run(run, seed)
        except MoesymError as exc:
            rows.append({**row, "skipped": str(exc)})
            continue
        for k in METRICS:
            meas = getattr(run, k)
            row[k] = {"measured": meas, "predicted": pred[k],
                      "error": pred[k] / meas - 1 if meas else math.nan}
        row["ttft_components_ms"] = pred["ttft_components_ms"]
        if "pd_handoff_ms" in pred:
            row["pd_handoff_ms"] = pred["pd_handoff_ms"]
        rows.append(row)
    return rows


def serving_summary(rows: list[dict]) -> dict:
    """Median |error| of each metric per GPU and framework and over every run, with the runs
    skipped and why."""
    def stats(group: list[dict]) -> dict:
        done = [r for r in group if "skipped" not in r]
        return {"runs": len(done), "skipped": len(group) - len(done),
                "median_abs_error": {k: median(abs(r[k]["error"]) for r in done) if done
                                     else math.nan for k in METRICS}}

    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    reasons: dict = {}
    for r in rows:
        if "skipped" in r:
            reasons[r["skipped"]] = reasons.get(r["skipped"], 0) + 1
    return {"groups": [{"group": g, **stats(v)} for g, v in sorted(groups.items())],
            "all": stats(rows), "skip_reasons": reasons}
