"""Model coverage: which models traincast forecasts, which it refuses (and why), and how long a trace takes.

Sources (``--sources``, comma-separated):
  transformers  every transformers model type with a trainable head class (``CONFIG_MAPPING_NAMES`` joined with
                the ``MODEL_FOR_*_MAPPING_NAMES`` head mappings of ``transformers.models.auto.modeling_auto``),
                each built from its *default* config (``{"model_type": T}``, nothing shrunk) with the head
                traincast picks by default;
  timm          every ``timm.list_models()`` name, as ``timm:NAME``;
  torchvision   every torchvision classification model;
  diffusers     the config files given with ``--diffusers-configs DIR`` (``*.json``).
Any further source strings (a config path, ``timm:NAME``, ``pkg.mod:factory``) can be given as arguments.

Each model runs in a worker process (``--jobs`` of them) through the path the CLI uses
(``traincast.predict.options.forecast_from_options``: trace on the meta device, then the forecast), at batch
``--batch`` and ``--seq-len`` tokens (a model whose positions are fewer, CLIP's 77: its own limit), on ``--gpu``, with a per-model ``--timeout``. Outcomes:
  forecast   a forecast came back;
  refused    a ``TraincastError`` (one line, exit 2 in the CLI) -- grouped by reason below;
  traceback  any other exception (a bug: goal 0);
  timeout    the model took longer than ``--timeout`` (the worker is killed and restarted).
Results go to a JSON cache (``--cache``) after every model, so an interrupted run resumes where it stopped.

    python benchmarks/model_coverage.py --sources transformers --cache coverage.json
    python benchmarks/model_coverage.py --sources transformers --sample 30 --seed 0
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path


# --- what to run ----------------------------------------------------------------------------------------------
def transformers_types() -> list[str]:
    """Every transformers model type that has a trainable head class (a class in a head mapping)."""
    from transformers.models.auto import configuration_auto as ca
    from transformers.models.auto import modeling_auto as ma

    heads: set[str] = set()
    for var, mapping in vars(ma).items():
        if var.startswith("MODEL_FOR_") and var.endswith("_MAPPING_NAMES"):
            heads |= set(mapping)
    return sorted(t for t in ca.CONFIG_MAPPING_NAMES if t in heads)


def sources(which: list[str], diffusers_dir: str | None) -> list[str]:
    out: list[str] = []
    for s in which:
        if s == "transformers":
            out += [f"hf:{t}" for t in transformers_types()]
        elif s == "timm":
            import timm

            out += [f"timm:{n}" for n in timm.list_models()]
        elif s == "torchvision":
            from traincast.workload import zoo

            out += list(zoo.all_torchvision_names())
        elif s == "diffusers":
            if not diffusers_dir:
                sys.exit("--sources diffusers needs --diffusers-configs DIR (a folder of diffusers config .json files)")
            out += sorted(str(p) for p in Path(diffusers_dir).glob("*.json"))
        else:
            sys.exit(f"unknown source {s!r}: transformers | timm | torchvision | diffusers")
    return out


def _model_arg(source: str, tmp: Path) -> str:
    """The model argument the CLI would get: a default config.json for ``hf:TYPE``, else the source itself."""
    if source.startswith("hf:"):
        folder = tmp / source[3:]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"model_type": source[3:]}))
        return str(folder / "config.json")
    return source


# --- the worker -----------------------------------------------------------------------------------------------
def _worker(conn, opts: dict) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")
    from traincast.errors import TraincastError
    from traincast.predict.compose import WorkloadFamily
    from traincast.predict.options import forecast_from_options

    tmp = Path(tempfile.mkdtemp(prefix="coverage-"))
    while True:
        source = conn.recv()
        if source is None:
            return
        t0 = time.perf_counter()
        res: dict = {"source": source}
        try:
            model = _model_arg(source, tmp)
            # --seq-len goes to sequence models (Hugging Face configs); image models take images
            seq_len = opts["seq_len"] if source.startswith("hf:") or source.endswith(".json") else None
            try:
                fam = WorkloadFamily(model, optimizer=opts["optimizer"], precision=opts["precision"], seq_len=seq_len)
                wl = fam.trace(opts["batch"])
            except TraincastError as exc:  # a text tower shorter than --seq-len (CLIP's 77): its own length
                m = re.search(r"--seq-len \d+ exceeds .*'s (\d+) positions", str(exc))
                if not m:
                    raise
                seq_len = int(m.group(1))
                fam = WorkloadFamily(model, optimizer=opts["optimizer"], precision=opts["precision"], seq_len=seq_len)
                wl = fam.trace(opts["batch"])
                res["seq_len"] = seq_len
            res["trace_s"] = round(wl.trace_s, 3)
            res["build_trace_s"] = round(time.perf_counter() - t0, 3)
            f = forecast_from_options(model, gpu=opts["gpu"], batch_size=opts["batch"], seq_len=seq_len,
                                      optimizer=opts["optimizer"], precision=opts["precision"], family=fam)
            res.update(outcome="forecast", parameters=wl.parameters, iteration_s=f.iteration_s,
                       inputs=wl.input_description)
        except TraincastError as exc:
            res.update(outcome="refused", reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        except BaseException as exc:  # noqa: BLE001 - what the benchmark counts
            if isinstance(exc, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(exc.__traceback__)
            where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
            res.update(outcome="traceback", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                       where=where, traceback="".join(traceback.format_exception(exc))[-3000:])
        res["wall_s"] = round(time.perf_counter() - t0, 3)
        conn.send(res)


class Worker:
    def __init__(self, opts: dict):
        self.opts = opts
        self.start()

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.opts), daemon=True)
        self.proc.start()
        self.source = None
        self.t0 = 0.0

    def submit(self, source: str) -> None:
        self.source, self.t0 = source, time.perf_counter()
        self.conn.send(source)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()


# --- the run --------------------------------------------------------------------------------------------------
def _save(cache: Path, results: dict) -> None:
    tmp = cache.with_suffix(cache.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    tmp.replace(cache)


def _progress(done: int, total: int, counts: Counter, t0: float, current: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 30
    fill = int(width * done / max(1, total))
    rate = (time.perf_counter() - t0) / max(1, done)
    eta = rate * (total - done)
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} "
                     f"ok {counts['forecast']} refused {counts['refused']} tb {counts['traceback']} "
                     f"timeout {counts['timeout']} eta {eta / 60:.0f} min  {current[:30]:30s}")
    sys.stderr.flush()


def run(todo: list[str], results: dict, opts: dict, jobs: int, timeout_s: float, cache: Path | None) -> None:
    pending = list(todo)
    workers = [Worker(opts) for _ in range(max(1, min(jobs, len(pending))))]
    counts = Counter(r["outcome"] for r in results.values())
    done, total, t0 = 0, len(todo), time.perf_counter()
    try:
        while pending or any(w.source for w in workers):
            for w in workers:
                if w.source is None and pending:
                    w.submit(pending.pop(0))
            busy = [w for w in workers if w.source]
            ready = mp.connection.wait([w.conn for w in busy], timeout=1.0)
            for w in busy:
                res, src = None, w.source
                if w.conn in ready:
                    try:
                        res = w.conn.recv()
                    except EOFError:  # the worker died (out of memory, a crash in C)
                        res = {"source": w.source, "outcome": "traceback", "reason": "worker process died",
                               "wall_s": round(time.perf_counter() - w.t0, 3)}
                        w.start()
                elif time.perf_counter() - w.t0 > timeout_s:
                    res = {"source": w.source, "outcome": "timeout", "reason": f"over {timeout_s:g} s",
                           "wall_s": round(time.perf_counter() - w.t0, 3)}
                    w.kill()
                    w.start()
                elif not w.proc.is_alive():
                    res = {"source": w.source, "outcome": "traceback", "reason": "worker process died",
                           "wall_s": round(time.perf_counter() - w.t0, 3)}
                    w.start()
                if res is not None:
                    res["source"] = src
                    results[src] = res
                    counts[res["outcome"]] += 1
                    done += 1
                    w.source = None
                    if cache:
                        _save(cache, results)
                    _progress(done, total, counts, t0, res["source"])
    finally:
        for w in workers:
            if w.proc.is_alive():
                w.kill()
        if sys.stderr.isatty():
            sys.stderr.write("\n")


def _reason_key(reason: str) -> str:
    """A refusal's reason without the model's own names and numbers, to group alike ones."""
    r = re.sub(r"^cannot (trace|build) [^:]+: ", "", reason)
    r = re.sub(r"\b\w+(For\w+|Model|LMHeadModel)\b", "<Class>", r)
    r = re.sub(r"'[^']*'", "'...'", r)
    r = re.sub(r"\d+", "N", r)
    return r[:150]


def report(results: dict, sources_run: list[str]) -> None:
    rows = [results[s] for s in sources_run if s in results]
    n = len(rows)
    if not n:
        print("nothing run")
        return
    by = Counter(r["outcome"] for r in rows)
    print(f"models: {n}")
    for k in ("forecast", "refused", "traceback", "timeout"):
        print(f"  {k:9s} {by[k]:5d}  {100 * by[k] / n:5.1f}%")
    kinds = defaultdict(Counter)
    for r in rows:
        kinds[r["source"].split(":", 1)[0] if ":" in r["source"] else "other (torchvision, files)"][r["outcome"]] += 1
    if len(kinds) > 1:
        for k, c in sorted(kinds.items()):
            tot = sum(c.values())
            print(f"  {k}: {c['forecast']}/{tot} forecast ({100 * c['forecast'] / tot:.1f}%)")
    times = sorted(r["trace_s"] for r in rows if "trace_s" in r)
    if times:
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        slow = sorted((r for r in rows if "trace_s" in r), key=lambda r: -r["trace_s"])[:5]
        print(f"trace time (s): median {statistics.median(times):.2f}, p90 {p90:.2f}, max {times[-1]:.2f} "
              f"(slowest: " + ", ".join(f"{r['source']} {r['trace_s']:.1f}" for r in slow) + ")")
    groups = defaultdict(list)
    for r in rows:
        if r["outcome"] == "refused":
            groups[_reason_key(r["reason"])].append(r["source"])
    if groups:
        print("refused, by reason:")
        for key, srcs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(srcs):4d}  {key}")
            print(f"        {', '.join(srcs[:8])}{' ...' if len(srcs) > 8 else ''}")
    for kind in ("traceback", "timeout"):
        bad = [r for r in rows if r["outcome"] == kind]
        if bad:
            print(f"{kind}s:")
            for r in bad:
                print(f"  {r['source']}: {r.get('reason', '')} {r.get('where', '')}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("extra", nargs="*", help="further model sources (config paths, timm:NAME, pkg.mod:factory)")
    ap.add_argument("--sources", default="transformers", help="transformers,timm,torchvision,diffusers ('' for none)")
    ap.add_argument("--diffusers-configs", default=None, help="folder of diffusers config .json files")
    ap.add_argument("--sample", type=int, default=None, help="a random sample of N sources")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated sources to run (e.g. hf:bert,hf:vit)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--gpu", default="A100-SXM4-80GB")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per model")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--cache", type=Path, default=None, help="JSON file of results; resumes what it holds")
    ap.add_argument("--retry", default="", help="outcomes to run again from the cache: e.g. traceback,timeout,refused")
    args = ap.parse_args(argv)

    todo = sources([s for s in args.sources.split(",") if s], args.diffusers_configs)
    if args.only:
        todo = [s.strip() for s in args.only.split(",") if s.strip()]
    if args.sample is not None and args.sample < len(todo):
        todo = sorted(random.Random(args.seed).sample(todo, args.sample))
    todo += [s for s in args.extra if s not in todo]
    results: dict = {}
    if args.cache and args.cache.is_file():
        results = json.loads(args.cache.read_text())
    retry = {s for s in args.retry.split(",") if s}
    pending = [s for s in todo if s not in results or results[s]["outcome"] in retry]
    print(f"{len(todo)} sources, {len(todo) - len(pending)} from the cache, {len(pending)} to run "
          f"(batch {args.batch}, seq-len {args.seq_len}, {args.gpu}, {args.precision}, {args.optimizer})",
          flush=True)
    opts = dict(batch=args.batch, seq_len=args.seq_len, gpu=args.gpu, precision=args.precision,
                optimizer=args.optimizer)
    try:
        run(pending, results, opts, args.jobs, args.timeout, args.cache)
    except KeyboardInterrupt:
        print("\ninterrupted; the cache holds what finished", file=sys.stderr)
    report(results, todo)


if __name__ == "__main__":
    main()
