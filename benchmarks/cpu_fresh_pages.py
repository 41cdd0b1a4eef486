"""How much of a CPU training step is the system handing out fresh pages, measured, against what the forecast charges.

Each (torchvision model, batch) is timed in fresh processes twice per round: with glibc's defaults, and with
``traincast.predict.pages.MALLOC_KEEP`` in the environment (glibc keeps what it has: no page is handed back, so
none is faulted in again). Per step: the median time, the minor page faults (``getrusage``) and the system CPU time;
beside them the forecast's fresh-page bytes and seconds (``traincast.predict.pages.fresh_page_seconds``, the
catalog's CPU or ``--profile``) and its step with and without them. The difference of the two measured steps is
what fresh pages cost; the faults say how many bytes were fresh.

    python benchmarks/cpu_fresh_pages.py [--cases efficientnet_b0:8,efficientnet_b0:32,...] [--rounds 2]
                                         [--profile PROFILE] [--steps 4]

Run it on a quiet machine (see validate_cpu.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_CASES = "efficientnet_b0:8,efficientnet_b0:16,efficientnet_b0:32,resnet18:16,resnet18:32,mobilenet_v2:32"


def child(model: str, batch: int, steps: int) -> None:
    """Time ``steps`` training steps (after two warm-up steps) in this process; print one JSON line."""
    import resource
    import time

    import torch

    from traincast.workload.zoo import torchvision_model

    torch.manual_seed(0)
    m = torchvision_model(model, "cpu")
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(batch, 3, 224, 224)
    y = torch.randint(0, 1000, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"step_s": statistics.median(times), "faults": (r1.ru_minflt - r0.ru_minflt) / steps,
                      "sys_s": (r1.ru_stime - r0.ru_stime) / steps}))


def run_child(model: str, batch: int, steps: int, keep: bool) -> dict:
    from traincast.predict.pages import MALLOC_KEEP

    env = dict(os.environ)
    if keep:
        env.update(kv.split("=", 1) for kv in MALLOC_KEEP.split())
    else:
        for kv in MALLOC_KEEP.split():
            env.pop(kv.split("=", 1)[0], None)
    r = subprocess.run([sys.executable, __file__, "--child", f"{model}:{batch}", "--steps", str(steps)], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{model} b{batch} failed: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def forecast(model: str, batch: int, profile: str | None):
    """(step s, fresh-page s, fresh bytes) the forecast gives, on the profile's device or the catalog's 2-core CPU."""
    from traincast.hardware.catalog import get_catalog
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import step_time
    from traincast.predict.host import predictor_params
    from traincast.predict.pages import fresh_page_seconds
    from traincast.predict.registry import default_predictor
    from traincast.workload import trace

    if profile:
        from traincast.predict.profile import find_profile

        prof = find_profile(profile)
        dev, pred = prof.device_record(), prof.predictor()
    else:
        dev, pred = get_catalog().device("generic-2core-avx2"), default_predictor()
    wl = trace(model, batch_size=batch)
    st = step_time(wl, Cluster(dev), pred)
    s = fresh_page_seconds(wl, pred, dev)
    rate = predictor_params(pred, dev).fresh_alloc_gb_per_s * 1e9
    return st.iteration_s, s, s * rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="model:batch pairs, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--profile", default=None, help="a `traincast calibrate` profile (default: the catalog's CPU)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        m, b = args.child.split(":")
        child(m, int(b), args.steps)
        return
    if args.rounds < 1 or args.steps < 1:
        ap.error("--rounds and --steps must be at least 1")
    try:
        cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",") if c]
    except (IndexError, ValueError):
        ap.error(f"--cases {args.cases!r}: give model:batch pairs, e.g. resnet18:16")
    print(f"# python benchmarks/cpu_fresh_pages.py --cases {args.cases} --rounds {args.rounds} --steps {args.steps}"
          + (f" --profile {args.profile}" if args.profile else ""))
    print(f"{'case':22s} {'default step':>14s} {'pages kept':>12s} {'saved':>14s} {'faulted':>9s} {'sys':>7s}   "
          f"forecast: {'step':>8s} {'fresh':>8s} {'bytes':>8s} {'kept':>8s}")
    for m, b in cases:
        runs = {keep: [run_child(m, b, args.steps, keep) for _ in range(args.rounds)] for keep in (False, True)}
        d = [r["step_s"] for r in runs[False]]
        k = [r["step_s"] for r in runs[True]]
        faults = statistics.median(r["faults"] for r in runs[False]) * 4096
        sys_s = statistics.median(r["sys_s"] for r in runs[False])
        saved = statistics.median(d) - statistics.median(k)
        f_step, f_fresh, f_bytes = forecast(m, b, args.profile)
        print(f"{m + ' b' + str(b):22s} {statistics.median(d):6.2f} s ({min(d):.2f}-{max(d):.2f}) {statistics.median(k):6.2f} s "
              f"{saved:6.2f} s ({100 * saved / statistics.median(d):3.0f}%) {faults / 1e9:6.2f} GB {sys_s:5.2f} s   "
              f"          {f_step:6.2f} s {f_fresh:6.2f} s {f_bytes / 1e9:5.2f} GB {f_step - f_fresh:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
