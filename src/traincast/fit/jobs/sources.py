"""Job records made from the shared data (vTrain, MLPerf) and from the store's whole-step timings."""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from traincast.errors import ConfigError, DataError

VTRAIN_COLUMNS = {
    "# GPUs": "gpus", "global batch": "global_batch", "micro batch": "micro_batch",
    "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
    "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
    "pipeline parallelism": "pp", "iteration time (ms)": "iteration_ms",
}


def vtrain_records(path: str | Path) -> pd.DataFrame:
    """Tidy job records from the vTrain Megatron-GPT A100 iterations (target ``iteration_ms``).

    Adds two derived features: ``microbatches`` per pipeline (global / (micro x dp))
    and ``gflop_per_gpu`` (6 x 12 L h^2 x tokens / GPUs, the dense training FLOPs).
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no such file: {str(path)!r}")
    raw = pd.read_csv(p)
    missing = [c for c in VTRAIN_COLUMNS if c not in raw.columns]
    if missing:
        raise DataError(f"{p.name}: missing column(s) {', '.join(map(repr, missing))}")
    df = raw[list(VTRAIN_COLUMNS)].rename(columns=VTRAIN_COLUMNS).apply(pd.to_numeric, errors="coerce").dropna()
    df = df.astype({c: int for c in df.columns if c != "iteration_ms"})
    df.insert(10, "microbatches", df.global_batch // (df.micro_batch * df.dp))
    params = 12.0 * df.layers * df.hidden.astype(float) ** 2
    df.insert(11, "gflop_per_gpu", 6.0 * params * df.global_batch * df.seq_len / df.gpus / 1e9)
    return df.reset_index(drop=True)


def accelerator_peaks_tflops() -> dict[str, float]:
    """Dense fp16/bf16 peak TFLOP/s per MLPerf accelerator type, for a numeric handle on unseen types
    (``fit/data/mlperf_accelerators.yaml``, each with its source)."""
    from importlib import resources

    from traincast import yamlio

    data = yamlio.safe_load(resources.files("traincast.fit").joinpath("data", "mlperf_accelerators.yaml").read_text())
    return {k: float(v["peak_tflops"]) for k, v in data["accelerators"].items()}


def _accel_type(name) -> Optional[str]:
    if not isinstance(name, str) or not name.strip():
        return None
    s = name.lower()
    if "a100" in s:
        return "A100"
    if "v100" in s:
        return "V100"
    if re.search(r"tpu[\s-]*v3", s):
        return "TPU-v3"
    return None  # TPU of unknown generation, IPU, Ascend, Gaudi: too few rows, no peak figure


def mlperf_records(folder: str | Path) -> pd.DataFrame:
    """Tidy job records from the MLPerf training summaries (target ``ttt_min``, time to train).

    Keeps successful V100 / A100 / TPU-v3 rows with a known accelerator count and
    batch size; features: version, benchmark, gpu (type), gpus, nodes,
    global_batch, peak_tflops (per accelerator).
    """
    files = sorted(glob.glob(str(Path(folder) / "training_v*_summary.csv")))
    if not files:
        raise DataError(f"no training_v*_summary.csv files under {str(folder)!r}")
    peaks = accelerator_peaks_tflops()
    rows = []
    for f in files:
        version = re.search(r"training_v([\d.]+)_summary", f).group(1)
        d = pd.read_csv(f)
        for _, r in d.iterrows():
            gpu = _accel_type(r.get("accelerator"))
            if gpu is None or "success" not in str(r.get("statuses", "")):
                continue
            total = pd.to_numeric(r.get("total_acc"), errors="coerce")
            if not total or total <= 0 or pd.isna(total):
                total = pd.to_numeric(r.get("nodes"), errors="coerce") * pd.to_numeric(r.get("acc_per_node"), errors="coerce")
            batch = pd.to_numeric(r.get("global_batch_size"), errors="coerce")
            ttt = pd.to_numeric(r.get("ttt_min_olympic"), errors="coerce")
            if not (total > 0 and batch > 0 and ttt > 0):
                continue
            bench = "maskrcnn" if r["benchmark"] == "mask" else str(r["benchmark"])
            rows.append({"version": f"v{version}", "benchmark": bench, "gpu": gpu, "gpus": int(total),
                         "nodes": max(1, int(pd.to_numeric(r.get("nodes"), errors="coerce") or 1)),
                         "global_batch": int(batch), "peak_tflops": peaks[gpu], "ttt_min": float(ttt)})
    return pd.DataFrame(rows)


def build_job_records(data_dir: str | Path, source: str = "vtrain") -> tuple[pd.DataFrame, str]:
    """The tidy records of ``source`` ('vtrain' or 'mlperf') under the shared data folder, and their target."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data folder {str(data_dir)!r} does not exist")
    if source == "vtrain":
        return vtrain_records(root / "models" / "vtrain_a100_single_node.csv"), "iteration_ms"
    if source == "mlperf":
        return mlperf_records(root / "mlperf"), "ttt_min"
    raise ConfigError(f"unknown job-record source {source!r}; known: vtrain, mlperf")


#: target column of the job records made from `traincast bench model` timings (seconds per training step)
STORE_TARGET = "step_s"


@dataclass(frozen=True)
class StoreJobs:
    """Job records made from the whole-step timings in the store (``measure_model_timings``)."""

    frame: pd.DataFrame
    stored_rows: int
    skipped: dict  # reason -> rows


def store_job_records(conn, model: Optional[str] = None, device: Optional[str] = None) -> StoreJobs:
    """One job record per stored `traincast bench model` run (``traincast.measure.load_model_timings``).

    Columns: model, device, hardware (the CPU or GPU model of the run's fingerprint), optimizer,
    precision, batch_size, seq_len (only when some run has one; 0 for the others), threads,
    parameters and fwd_gflop_per_sample (from ``traincast.workload.trace`` of the model, traced once
    per model/optimizer/precision/sequence length at its smallest stored batch), and the target
    ``step_s`` (median seconds per training step). Runs whose model cannot be traced (an
    ``nn.Module`` timed directly, a spec file no longer there) are skipped and counted by reason.
    """
    from traincast.errors import TraincastError
    from traincast.measure.model import load_model_timings
    from traincast.workload import trace

    rows = load_model_timings(conn, model=model, device=device)
    if not rows:
        which = " and ".join(f"{k} {v!r}" for k, v in (("model", model), ("device", device)) if v)
        raise DataError("no whole-step timings in the store" + (f" for {which}" if which else "")
                        + "; record some with `traincast bench model MODEL --batch-size B`")
    hw = {r[0]: (r[1] or r[2]) for r in conn.execute("SELECT id, gpu_name, cpu_model FROM measure_fingerprints")}
    traced: dict[tuple, object] = {}
    min_batch: dict[tuple, int] = {}
    for r in rows:
        key = (r["model"], r["optimizer"] or "sgd", r["precision"] or "fp32", r["seq_len"])
        min_batch[key] = min(min_batch.get(key, r["batch_size"]), r["batch_size"])
    skipped: dict[str, int] = {}
    out = []
    for r in rows:
        key = (r["model"], r["optimizer"] or "sgd", r["precision"] or "fp32", r["seq_len"])
        if key not in traced:
            b = min_batch[key]
            try:
                wl = trace(key[0], batch_size=b, optimizer=key[1], precision=key[2], seq_len=key[3])
                traced[key] = (wl.parameters, wl.flops("forward") / b / 1e9)
            except TraincastError as exc:
                traced[key] = f"cannot trace {key[0]!r}: {str(exc).splitlines()[0]}"
        t = traced[key]
        if isinstance(t, str):
            skipped[t] = skipped.get(t, 0) + 1
            continue
        out.append({"model": r["model"], "device": r["device"], "hardware": hw.get(r["fingerprint_id"]) or "unknown",
                    "optimizer": key[1], "precision": key[2], "batch_size": int(r["batch_size"]),
                    "seq_len": r["seq_len"], "threads": r["threads"], "parameters": int(t[0]),
                    "fwd_gflop_per_sample": float(t[1]), STORE_TARGET: float(r["median_ms"]) / 1e3})
    frame = pd.DataFrame(out, columns=["model", "device", "hardware", "optimizer", "precision", "batch_size",
                                       "seq_len", "threads", "parameters", "fwd_gflop_per_sample", STORE_TARGET])
    if frame["seq_len"].isna().all():
        frame = frame.drop(columns=["seq_len"])
    else:
        frame["seq_len"] = frame["seq_len"].fillna(0).astype(int)
    if frame["threads"].notna().all():
        frame["threads"] = frame["threads"].astype(int)
    return StoreJobs(frame, len(rows), skipped)


# --------------------------------------------------------------------------- features
