"""Load and faults of `traincast serve`, on loopback only, bounded in time.

Phase "load": W writers (each one running job) post their steps in small batches as fast as the server
answers, while R readers poll the remaining time of random jobs (GET /api/v1/jobs/{job}/eta), for D
seconds. Reported: requests/s (median and IQR over 5-second windows), p50/p99 latency of writes and
reads, errors (any answer but 2xx, any failed connection), and rows lost (steps the server acknowledged
that are not in the database afterwards).

Phase "fault": the same load, and T trackers (``track(..., server=URL)``, each with its own spool) stepping
every 20 ms; the server is killed with SIGKILL at K seconds and started again on the same port and
database. Writers retry a batch until it is acknowledged. Reported: rows lost among those acknowledged
before the kill, rows missing at the end (writers' and trackers'), what the trackers' spools held at most
and hold at the end (goal: 0).

    python benchmarks/serve_load.py --db sqlite --db postgres            # 200 writers, 20 readers, 60 s
    python benchmarks/serve_load.py --writers 20 --duration 10 --db sqlite   # a quick look
    python benchmarks/serve_load.py --db sqlite --phases forecast            # a repeated forecast: from the cache

Rate limits are off on the server under test (--rate-limit 0): this measures the server, not its limiter.
Client and server share this machine's cores; the figures are of both together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import aiohttp  # noqa: E402
import numpy as np  # noqa: E402

from traincast.online import track  # noqa: E402
from traincast.online.recorder import Spool  # noqa: E402
from traincast.serve.runner import ServerProcess  # noqa: E402
from traincast.store import Store  # noqa: E402
from traincast.store.pgserver import PostgresServer  # noqa: E402

TOKEN = "load-test-token-" + "L" * 24
ROWS_PER_POST = 5


class Stats:
    def __init__(self):
        self.lat = {"write": [], "read": []}
        self.times = {"write": [], "read": []}
        self.errors = {"write": 0, "read": 0}
        self.error_kinds: dict[str, int] = {}
        self.error_times: list[float] = []

    def ok(self, kind, latency_s):
        self.lat[kind].append(latency_s)
        self.times[kind].append(time.monotonic())

    def err(self, kind, what):
        self.errors[kind] += 1
        self.error_times.append(time.monotonic())
        self.error_kinds[what] = self.error_kinds.get(what, 0) + 1


def pct(xs, q):
    return float(np.percentile(xs, q)) * 1e3 if xs else float("nan")


def windows(times, t0, t1, w=5.0):
    """Requests per second in each full w-second window: (median, q1, q3)."""
    if not times:
        return (0.0, 0.0, 0.0)
    edges = np.arange(t0, t1 - w + 1e-9, w)
    arr = np.sort(np.array(times))
    counts = [(np.searchsorted(arr, e + w) - np.searchsorted(arr, e)) / w for e in edges]
    if not counts:
        return (len(times) / (t1 - t0),) * 3
    q1, med, q3 = np.percentile(counts, [25, 50, 75])
    return float(med), float(q1), float(q3)


async def writer(client, url, job, stop, stats, acked, retry):
    step = 4  # 0..3 were seeded
    while not stop.is_set():
        rows = [{"step": step + i, "time": time.time(), "loss": 1.0 / (step + i)} for i in range(ROWS_PER_POST)]
        while True:
            t0 = time.perf_counter()
            try:
                async with client.post(f"{url}/api/v1/jobs/{job}/metrics", json=rows) as r:
                    await r.read()
                    status = r.status
                if status == 200:
                    stats.ok("write", time.perf_counter() - t0)
                    acked.append((job, rows[-1]["step"], time.monotonic()))
                    break
                stats.err("write", f"HTTP {status}")
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                stats.err("write", type(exc).__name__)
            if not retry:
                break
            await asyncio.sleep(0.2)  # the server is down: try the same rows again
        step += ROWS_PER_POST
    return step


async def reader(client, url, jobs, stop, stats):
    rng = random.Random(id(stats))
    while not stop.is_set():
        job = rng.choice(jobs)
        t0 = time.perf_counter()
        try:
            async with client.get(f"{url}/api/v1/jobs/{job}/eta", params={"total_steps": 10**6}) as r:
                await r.read()
                status = r.status
            if status == 200:
                stats.ok("read", time.perf_counter() - t0)
            else:
                stats.err("read", f"read HTTP {status}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            stats.err("read", "read " + type(exc).__name__)
            await asyncio.sleep(0.2)


async def run_load(url, n_writers, n_readers, duration_s, prefix, retry=False, at=None):
    """``at``: {seconds: callable} run (in a thread) at those times of the phase."""
    stats = Stats()
    acked: list = []
    jobs = [f"{prefix}-w{i:03d}" for i in range(n_writers)]
    conn = aiohttp.TCPConnector(limit=n_writers + n_readers + 10)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}, connector=conn,
                                     timeout=aiohttp.ClientTimeout(total=30)) as client:
        # seed every job with a few timed rows, so that its ETA can be read from the start
        async def seed(j):
            async with client.post(f"{url}/api/v1/jobs/{j}/metrics", json={
                    "meta": {"total_steps": 10**6},
                    "rows": [{"step": s, "time": time.time() + s * 1e-3} for s in range(4)]}) as r:
                assert r.status == 200, await r.text()

        await asyncio.gather(*[seed(j) for j in jobs])
        stop = asyncio.Event()
        t0 = time.monotonic()
        tasks = [asyncio.create_task(writer(client, url, j, stop, stats, acked, retry)) for j in jobs]
        tasks += [asyncio.create_task(reader(client, url, jobs, stop, stats)) for _ in range(n_readers)]
        events = sorted((at or {}).items())
        for when, fn in events:
            await asyncio.sleep(max(0.0, t0 + when - time.monotonic()))
            await asyncio.to_thread(fn)
        await asyncio.sleep(max(0.0, t0 + duration_s - time.monotonic()))
        stop.set()
        ends = await asyncio.gather(*tasks[:n_writers])
        await asyncio.gather(*tasks[n_writers:])
        t1 = time.monotonic()
    return stats, acked, jobs, t0, t1, ends


def count_rows(db, prefix):
    """{job: set of steps} in the database for the jobs of this phase."""
    out: dict[str, set] = {}
    with Store(db) as s:
        for name, step in s.conn.execute(
                "SELECT j.name, s.step FROM online_steps s JOIN online_jobs j ON j.id = s.job_id WHERE j.name LIKE ?",
                (prefix + "-%",)):
            out.setdefault(name, set()).add(int(step))
    return out


def lost(acked, have, before=None):
    """Acknowledged rows missing from the database (each ack covers ROWS_PER_POST steps up to its last)."""
    n = 0
    for job, last, t in acked:
        if before is not None and t >= before:
            continue
        steps = set(range(last - ROWS_PER_POST + 1, last + 1))
        n += len(steps - have.get(job, set()))
    return n


def report(name, stats, t0, t1, acked, have):
    w, r = stats.lat["write"], stats.lat["read"]
    wr, rr = windows(stats.times["write"], t0, t1), windows(stats.times["read"], t0, t1)
    d = {
        "phase": name, "seconds": round(t1 - t0, 1),
        "writes": len(w), "writes_per_s": round(len(w) / (t1 - t0), 1), "writes_per_s_5s_median_iqr": [round(x, 1) for x in wr],
        "reads": len(r), "reads_per_s": round(len(r) / (t1 - t0), 1), "reads_per_s_5s_median_iqr": [round(x, 1) for x in rr],
        "write_p50_ms": round(pct(w, 50), 1), "write_p99_ms": round(pct(w, 99), 1),
        "read_p50_ms": round(pct(r, 50), 1), "read_p99_ms": round(pct(r, 99), 1),
        "errors": stats.errors, "error_kinds": stats.error_kinds,
        "rows_acknowledged": len(acked) * ROWS_PER_POST, "rows_lost": lost(acked, have),
    }
    return d


def phase_load(db, args, log):
    with ServerProcess(db, TOKEN, args=("--rate-limit", "0", "--compute-per-min", "0"), log=log) as srv:
        stats, acked, jobs, t0, t1, _ = asyncio.run(run_load(srv.url, args.writers, args.readers, args.duration, "load"))
    have = count_rows(db, "load")
    return report("load", stats, t0, t1, acked, have)


def phase_fault(db, args, log, tmp):
    srv = ServerProcess(db, TOKEN, args=("--rate-limit", "0", "--compute-per-min", "0"), log=log).start()
    trackers, spool_max, stop = [], [0], threading.Event()
    spools = [tmp / f"spool-{i}.db" for i in range(args.trackers)]
    kill_t = {}

    def tracker_loop(i):
        with track(f"fault-t{i:03d}", 10**6, server=srv.url, token=TOKEN, spool=spools[i], flush_every_s=0.5,
                   close_timeout_s=60) as t:
            trackers.append(t)
            while not stop.is_set():
                t.step(loss=1.0)
                time.sleep(0.02)
            trackers.append(("done", i, t.current_step))

    def watch_spools():
        while not stop.is_set():
            n = sum(Spool(p).count()[1] for p in spools if p.exists())
            spool_max[0] = max(spool_max[0], n)
            time.sleep(0.5)

    def kill():
        kill_t["at"] = time.monotonic()
        srv.kill()

    def restart():
        srv.start()
        kill_t["back"] = time.monotonic()

    threads = [threading.Thread(target=tracker_loop, args=(i,), daemon=True) for i in range(args.trackers)]
    threads.append(threading.Thread(target=watch_spools, daemon=True))
    for th in threads:
        th.start()
    try:
        stats, acked, jobs, t0, t1, _ = asyncio.run(run_load(
            srv.url, args.writers, args.readers, args.duration, "fault", retry=True,
            at={args.kill_at: kill, args.kill_at + args.down_s: restart}))
        stop.set()
        for th in threads:
            th.join(120)
        have = count_rows(db, "fault")
        left = sum(Spool(p).count()[1] for p in spools if p.exists())
        done = {i: last for kind, i, last in (x for x in trackers if isinstance(x, tuple))}
        missing_t = sum(len(set(range(last + 1)) - have.get(f"fault-t{i:03d}", set())) for i, last in done.items())
    finally:
        srv.stop()
    d = report("fault", stats, t0, t1, acked, have)
    d.update({
        "killed_at_s": round(kill_t["at"] - t0, 1), "down_s": round(kill_t["back"] - kill_t["at"], 1),
        "rows_lost_acknowledged_before_kill": lost(acked, have, before=kill_t["at"]),
        # requests in flight when the server died, and refused while it was down (writers retry them)
        "errors_outside_outage": sum(1 for t in stats.error_times if not kill_t["at"] - 0.5 <= t <= kill_t["back"] + 1.0),
        "trackers": len(done), "tracker_rows": sum(v + 1 for v in done.values()), "tracker_rows_missing": missing_t,
        "spool_rows_max": spool_max[0], "spool_rows_left": left,
    })
    return d


def phase_forecast(db, args, log):
    """A large model's forecast over HTTP: the first (traced), 20 repeats (cached answer), and the same model
    on other hardware (cached trace, new answer)."""
    import urllib.request

    def post(url, body):
        req = urllib.request.Request(url + "/api/v1/forecast", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            r.read()
        return time.perf_counter() - t0

    body = {"model": args.forecast_model, "gpu": "A100-SXM4-80GB", "gpus": 8, "batch_size": 64, "epochs": 1,
            "dataset_size": 100_000, "precision": "amp-bf16", "optimizer": "adamw"}
    with ServerProcess(db, TOKEN, args=("--rate-limit", "0", "--compute-per-min", "0"), log=log) as srv:
        first = post(srv.url, body)
        warm = [post(srv.url, body) for _ in range(20)]
        other = post(srv.url, {**body, "gpu": "H100-SXM5-80GB"})
    q1, med, q3 = np.percentile(warm, [25, 50, 75])
    return {"phase": "forecast", "model": args.forecast_model, "first_s": round(first, 2),
            "repeat_median_ms": round(med * 1e3, 2), "repeat_iqr_ms": [round(q1 * 1e3, 2), round(q3 * 1e3, 2)],
            "other_gpu_same_trace_s": round(other, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", action="append", choices=("sqlite", "postgres"), help="repeat for both (default both)")
    ap.add_argument("--writers", type=int, default=200)
    ap.add_argument("--readers", type=int, default=20)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of each phase (at most 300)")
    ap.add_argument("--trackers", type=int, default=20, help="track(server=...) clients in the fault phase")
    ap.add_argument("--kill-at", type=float, default=None, help="seconds into the fault phase (default: a third)")
    ap.add_argument("--down-s", type=float, default=3.0, help="seconds the server stays dead")
    ap.add_argument("--phases", default="load,fault", help="comma list of load, fault, forecast")
    ap.add_argument("--forecast-model", default="llama-7b")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    args.duration = min(args.duration, 300.0)
    args.kill_at = args.kill_at if args.kill_at is not None else args.duration / 3
    results = []
    for kind in args.db or ["sqlite", "postgres"]:
        with tempfile.TemporaryDirectory(prefix="traincast-load-") as tmp:
            tmp = Path(tmp)
            pg = PostgresServer().start() if kind == "postgres" else None
            try:
                db = pg.url if pg else str(tmp / "load.db")
                for phase in args.phases.split(","):
                    if phase == "fault":
                        d = phase_fault(db, args, tmp / "serve.log", tmp)
                    else:
                        d = {"load": phase_load, "forecast": phase_forecast}[phase](db, args, tmp / f"serve-{phase}.log")
                    d = {"db": kind, "writers": args.writers, "readers": args.readers, **d}
                    results.append(d)
                    print(json.dumps(d), flush=True)
            finally:
                if pg:
                    pg.stop()
    print()
    hdr = f"{'db':9} {'phase':6} {'writes/s':>9} {'[5s IQR]':>15} {'reads/s':>8} {'w p50/p99 ms':>14} {'r p50/p99 ms':>14} {'errors':>7} {'lost':>5}"
    print(hdr)
    for d in results:
        if d["phase"] == "forecast":
            print(f"{d['db']:9} forecast of {d['model']}: first {d['first_s']} s, repeated {d['repeat_median_ms']} ms "
                  f"(IQR {d['repeat_iqr_ms'][0]}-{d['repeat_iqr_ms'][1]}), on another GPU {d['other_gpu_same_trace_s']} s")
            continue
        e = d["errors"]["write"] + d["errors"]["read"]
        iqr = d["writes_per_s_5s_median_iqr"]
        print(f"{d['db']:9} {d['phase']:6} {d['writes_per_s']:9.1f} {f'[{iqr[1]:.0f}-{iqr[2]:.0f}]':>15} {d['reads_per_s']:8.1f} "
              f"{d['write_p50_ms']:6.1f}/{d['write_p99_ms']:<7.1f} {d['read_p50_ms']:6.1f}/{d['read_p99_ms']:<7.1f} {e:7d} {d['rows_lost']:5d}")
        if d["phase"] == "fault":
            print(f"    killed at {d['killed_at_s']} s for {d['down_s']} s ({d['errors_outside_outage']} errors outside "
                  f"the outage); acknowledged before the kill and lost: "
                  f"{d['rows_lost_acknowledged_before_kill']}; trackers {d['trackers']}: {d['tracker_rows']} rows, "
                  f"{d['tracker_rows_missing']} missing; spools held at most {d['spool_rows_max']} rows, "
                  f"{d['spool_rows_left']} left")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    bad = any(d.get("rows_lost") or d.get("tracker_rows_missing") or d.get("spool_rows_left")
              or (d["phase"] == "load" and sum(d["errors"].values())) or d.get("errors_outside_outage")
              for d in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
