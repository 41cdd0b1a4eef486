"""Training steps measured on a GPU by ``benchmarks/gpu_campaign.py`` against ``traincast predict``'s forecast.

Protocol, written before the first campaign was measured (2026-11-27):

1. Rows: every row of the campaign's JSON lines without an ``error``. The device they were measured on is named
   by ``--gpu`` (a catalog name; the script prints the measured board's own name beside it).
2. Forecast: ``traincast predict MODEL --gpu GPU -b B --precision P --optimizer O [--seq-len S]`` with every other
   option at its default (``forecast_from_options``), its iteration time against the measured median step; its
   peak memory per GPU against the allocator's peak (``torch.cuda.max_memory_allocated``; the forecast counts
   the framework's reserved overhead too, so it is printed, not scored).
3. Figures: MAPE and the median signed error (forecast/measured - 1) with its IQR and the share of rows forecast
   too fast, over all rows and per group (vision AMP, vision FP32, text AMP, text FP32, and the small-batch
   pass), each with its row count. Worst rows are listed.
4. Split: each row is ``dev`` or ``held`` by the parity of the first byte of sha256(key). A change to the
   predictor made after these rows were seen is chosen on ``dev`` rows only and reported once on ``held`` rows
   beside the figure before the change (``--split dev|held``). Nothing is fitted to these rows.

Addendum, written before the second lease's rows were measured (2026-11-27, an H200 lent; no H200 step had been
measured by this project, and no parameter was ever set from an H200 row):

5. The H200 rows are scored three ways, each reported, none tuned afterwards: (a) the defaults with
   ``--gpu H200-SXM-141GB`` (a GPU this project never measured: the unseen-GPU figure); (b) with the host-only
   profile ``traincast calibrate --device cuda --host-only`` measured in the same lease (``--profile``: what a user
   gets from a 30-second calibration of their own machine); (c) scaled from another GPU's measured rows
   (``--scale-from H100_ROWS --scale-gpu H100-SXM5-80GB``: forecast = that GPU's measured step of the same key x
   the forecast ratio of the two GPUs, the way a user who timed a job on one GPU asks about another, and
   Habitat's question; ``traincast predict --measured-step-ms MS --measured-on GPU`` since), over the keys both
   files hold.

6. Written after the H200 rows were scored and before this was run (2026-11-27, evening): the H100 rows forecast
   with the H200 lease's host-only profile on the H100 (``--profile h200_host_profile_2026-11-27.yaml --gpu
   H100-SXM5-80GB``): whether one host measurement carries to another machine of the same kind with another GPU
   (a user who calibrates the host once for a fleet). Reported once, beside (a) on the same rows.

7. Written 2026-11-28, after the third lease's kernel rows were fitted (``benchmarks/gpu_kernels.py --fit``) and
   before any campaign row was forecast with the result: PyTorch's native depthwise kernels (``dw_native`` in
   ``efficiency.yaml``) are scored on the rows of the networks built on depthwise convolutions (``--models``
   mobilenet_v2, mobilenet_v3_large, mnasnet1_0, efficientnet_b0, efficientnet_v2_s, convnext_tiny,
   shufflenet_v2_x1_0, maxvit_t) of both campaigns, (a) with the defaults and (b) with the H200 host-only
   profile, before and after; and over all rows, to show what else moves. The mechanism stays in the defaults if
   the depthwise rows' MAPE does not rise on either campaign in either way (gpu_kernels.py's protocol).

8. Written 2026-11-28, after the attention kernel rows were seen (their efficiency rises with the keys each query
   attends: causal and full rows of equal keys per query agree within 4%) and before any whole-model row was
   forecast with it: a ramp of fused attention's efficiency with keys per query, ``eff x k / (k + k0)``
   (``attention_half_keys`` k0 in ``efficiency.yaml``, Hopper only, the catalog's 0.33 / 0.53 kept as the
   long-sequence values), k0 fitted on the dev half of the head-dim-128 flash and cuDNN kernel rows
   (``gpu_kernels.py --fit``), scored on their held half. Then once on the campaigns' text rows (every row with a
   sequence length; both campaigns, defaults and the H200 host profile) and the published H100 throughput rows
   (``fp8_cp_validation.py``, eager and ``--kernels compiled``), before and after. It stays if the held kernel rows
   improve, the text rows' MAPE does not rise on either campaign in either way, and the published H100 MAPE does
   not rise by more than 1 point in either kernel mode.

9. Written 2026-11-28 after the rows of addendum 7 were scored (ConvNeXt's among them, so this is no blind test):
   a dispatch fix, not a fit. Convolutions whose input has channels-last strides run PyTorch's channels-last kernels
   (cuDNN's on NVIDIA GPUs), so the trace marks them channels-last: no layout transposes, and not the native
   depthwise kernels of addendum 7, which had been applied to ConvNeXt's 15 such depthwise convolutions. It is kept
   whatever the rows say (the native kernels do not run there: the profiles of the third lease), and reported once:
   the ConvNeXt rows and all rows of both campaigns, defaults and the H200 host profile, before and after.

10. Written 2026-11-28, before cuDNN's channels-last depthwise kernels were fitted (``gpu_kernels.py``'s protocol
   for them) and before any campaign row was forecast with them: scored once on the depthwise networks' rows of
   both campaigns (``--models`` as in 7), defaults and the H200 host profile, before and after, and on all rows;
   kept only if the depthwise rows' MAPE rises in none of the four.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/gpu_measured.py benchmarks/data/gpu_campaign/h100_2026-11-27.jsonl
       --gpu H100-SXM5-80GB [--split all|dev|held] [--predictor NAME | --profile FILE] [--worst 8]
       [--scale-from OTHER_ROWS --scale-gpu OTHER_GPU]
``--profile``: the profile ``traincast calibrate --device cuda`` fitted on the measured machine in the same lease
(its own five calibration models at batch 32 and 128; two of them, resnet18 and mobilenet_v2, are campaign models
too) -- the figure a user who calibrates on their own GPU gets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.predict.options import forecast_from_options  # noqa: E402


def split_of(key: str) -> str:
    return "dev" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "held"


def group_of(r: dict) -> str:
    kind = "text" if r["seq_len"] else "vision"
    if r["precision"] == "fp32":
        return f"{kind} fp32"
    small = (kind == "vision" and r["batch_size"] == 32) or r.get("pass") == 3
    return f"{kind} amp" + (" 2nd batch" if small else "")


def model_path(m: str) -> str:
    p = ROOT / "benchmarks" / "data" / "gpu_campaign" / Path(m).name
    return str(p) if m.endswith(".json") and p.exists() else m


def load(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    text_first = {}
    for r in rows:  # the text models' first (amp) batch: a later amp row of another batch is the second pass
        if r["seq_len"] and r["precision"] != "fp32":
            text_first.setdefault(r["model"], r["batch_size"])
            r["pass"] = 1 if text_first[r["model"]] == r["batch_size"] else 3
    return rows


def refit(path: Path) -> str:
    """The profile at ``path`` fitted again from the (model, batch, measured step) rows it stores, by
    ``traincast.fit.calibration.fit_parameters`` as it is now; saved in a temporary folder, its path
    returned. The steps were measured in FP32 (``calibrate``'s precision), with the device's fused attention."""
    import tempfile

    from traincast.fit.calibration import Measured, _trace_measured, fit_parameters, fused_attention_for
    from traincast.predict.profile import DeviceProfile, find_profile

    prof = find_profile(str(path))
    dev = prof.device_record()
    meas = [Measured(s["model"], s["batch_size"], s["measured_s"], 0.0, 0.0, {}) for s in prof.fit["steps"]]
    wls = [_trace_measured(m, fused_attention_for("cuda")) for m in meas]
    fitted = fit_parameters(wls, [m.measured_s for m in meas], dev)
    new = DeviceProfile(name=prof.name + "-refit", device=prof.device, overrides=fitted.params.to_table(),
                        fingerprint=prof.fingerprint, date=prof.date)
    out = Path(tempfile.mkdtemp()) / f"{new.name}.yaml"
    new.save(out)
    print("refit: " + ", ".join(f"{n}={fitted.params.value(n):.3g}" for n in fitted.free) +
          f"; rms log error {fitted.rms_log_error:.3f}")
    return str(out)


def stats(err: list[float]) -> str:
    e = np.asarray(err)
    q1, q3 = np.percentile(e, [25, 75])
    return (f"n={len(e):3d}  MAPE {100 * np.mean(np.abs(e)):5.1f}%  median {100 * np.median(e):+6.1f}% "
            f"(IQR {100 * q1:+.1f}..{100 * q3:+.1f}%)  too fast {100 * np.mean(e < 0):3.0f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--gpu", default=None, help="catalog GPU the rows are forecast on (default H100-SXM5-80GB; "
                    "with --profile: only a host-only profile takes it, its host with this GPU)")
    ap.add_argument("--split", choices=("all", "dev", "held"), default="all")
    ap.add_argument("--predictor", default=None, help="predictor name (default: predict's default)")
    ap.add_argument("--profile", default=None, help="a device profile (`traincast calibrate --device cuda` on the "
                    "measured machine): forecast with it instead of the catalog GPU")
    ap.add_argument("--refit", action="store_true", help="with --profile: fit its parameters again from the steps "
                    "it stores, with this checkout's calibration code, and forecast with that fit")
    ap.add_argument("--scale-from", type=Path, default=None, help="another GPU's campaign rows: forecast each row "
                    "as that GPU's measured step of the same key x the forecast ratio (this GPU / --scale-gpu)")
    ap.add_argument("--scale-gpu", default=None, help="with --scale-from: the catalog name of the GPU it was measured on")
    ap.add_argument("--exclude", default="", help="comma-separated row keys left out (say why where they are)")
    ap.add_argument("--worst", type=int, default=8)
    ap.add_argument("--models", default="", help="comma-separated model names: only their rows")
    a = ap.parse_args(argv)
    if a.refit:
        if not a.profile:
            ap.error("--refit needs --profile")
        a.profile = refit(Path(a.profile))
    if a.scale_from and not a.scale_gpu:
        ap.error("--scale-from needs --scale-gpu (the GPU its rows were measured on)")
    if not a.profile:
        a.gpu = a.gpu or "H100-SXM5-80GB"
    rows = load(a.rows)
    other = {}
    if a.scale_from:
        other = {r["key"]: r for r in load(a.scale_from) if "error" not in r}
        rows = [r for r in rows if r["key"] in other]
    drop = set(filter(None, a.exclude.split(",")))
    rows = [r for r in rows if (a.split == "all" or split_of(r["key"]) == a.split) and r["key"] not in drop]
    if a.models:
        rows = [r for r in rows if r["model"] in set(a.models.split(","))]
    bad = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    boards = sorted({r["fingerprint"].get("gpu_name") or "?" for r in rows})
    print(f"{len(rows)} rows measured on {', '.join(boards)} (torch "
          f"{', '.join(sorted({r['fingerprint'].get('torch_version', '?') for r in rows}))}); "
          f"forecast for {' on '.join(filter(None, (a.profile, a.gpu)))}"
          f"{f' scaled from {a.scale_gpu} rows measured ({a.scale_from.name})' if a.scale_from else ''}; split {a.split}; {len(bad)} rows failed to measure")
    out = []
    for r in rows:
        where = dict(profile=a.profile, gpu=a.gpu) if a.profile else dict(gpu=a.gpu, predictor=a.predictor)
        if a.scale_from:  # the other GPU's measured step x the forecast ratio of the two GPUs (predict's option)
            where.update(measured_step_ms=other[r["key"]]["step"]["median_ms"], measured_on=a.scale_gpu)
        f = forecast_from_options(model_path(r["model"]), batch_size=r["batch_size"], precision=r["precision"],
                                  optimizer=r["optimizer"], seq_len=r["seq_len"], **where)
        meas = r["step"]["median_ms"] / 1e3
        mem = r.get("peak_allocated_bytes")
        o = dict(key=r["key"], group=group_of(r), meas=meas, fc=f.iteration_s, err=f.iteration_s / meas - 1,
                 mem_err=(f.peak_memory_bytes / mem - 1) if mem else None)
        if f.measured:  # this GPU / the other: forecast (unscaled) and measured
            o.update(fc_ratio=f.iteration_s / f.measured["ratio"] / f.measured["forecast_s"],
                     meas_ratio=meas / f.measured["measured_s"])
        out.append(o)
    groups = sorted({o["group"] for o in out})
    print(f"{'all':22s} {stats([o['err'] for o in out])}")
    for g in groups:
        print(f"{g:22s} {stats([o['err'] for o in out if o['group'] == g])}")
    if a.scale_from:
        print(f"step time {a.gpu} / {a.scale_gpu}, median (range) per group:")
        for g in groups:
            fr = [o["fc_ratio"] for o in out if o["group"] == g]
            mr = [o["meas_ratio"] for o in out if o["group"] == g]
            print(f"  {g:20s} forecast {np.median(fr):.3f} ({min(fr):.2f}-{max(fr):.2f})  measured {np.median(mr):.3f} "
                  f"({min(mr):.2f}-{max(mr):.2f})")
    mem = [o["mem_err"] for o in out if o["mem_err"] is not None]
    if mem:
        print(f"{'memory (vs allocated)':22s} {stats(mem)}")
    print("worst rows (forecast / measured):")
    for o in sorted(out, key=lambda o: -abs(o["err"]))[: a.worst]:
        print(f"  {o['key']:45s} {1e3 * o['fc']:9.2f} / {1e3 * o['meas']:9.2f} ms  {100 * o['err']:+6.1f}%")
    for r in bad:
        print(f"  failed: {r['key']}: {r['error'][:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
