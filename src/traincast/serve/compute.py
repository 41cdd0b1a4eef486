"""Forecasts and plans for the API: the CLI's library calls, with their answers cached.

``forecast_json`` makes the same library call as ``traincast predict`` (``traincast.predict.forecast``, with
``make_predictor`` for a learned predictor) and answers with the same JSON as ``predict --json``;
``plan_json`` calls ``traincast.plan.pareto.plan`` as ``traincast plan --json`` does. Answers are cached by
the request (an LRU of ``cache_size`` entries), and traces by model configuration (``WorkloadFamily``,
shared by forecasts of one model on any hardware), so a repeated forecast answers from memory. One
computation runs at a time (tracing uses process-wide PyTorch dispatch state); a request that waits longer
than ``compute_wait_s`` gets 503.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path



class Busy(Exception):
    pass


class LRU:
    def __init__(self, size: int):
        self.size = size
        self.d: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            if key in self.d:
                self.d.move_to_end(key)
                self.hits += 1
                return self.d[key]
            self.misses += 1
            return None

    def put(self, key, value) -> None:
        with self.lock:
            self.d[key] = value
            self.d.move_to_end(key)
            while len(self.d) > self.size:
                self.d.popitem(last=False)


def dumps(obj) -> str:
    """As the CLI prints JSON (``print_json``: ``default=str``), on one line."""
    return json.dumps(obj, default=str)


class Compute:
    def __init__(self, cache_size: int = 256, uploads_dir: Path | None = None, wait_s: float = 300.0):
        self.answers = LRU(cache_size)
        self.families = LRU(16)
        self.lock = threading.Lock()
        self.wait_s = wait_s
        self.uploads = Path(uploads_dir) if uploads_dir else Path(tempfile.mkdtemp(prefix="traincast-uploads-"))

    # --------------------------------------------------------------- models
    def model_source(self, model: str | None, hf_config: dict | None) -> tuple[str, str]:
        """(what to trace, its cache key): a zoo name, or the uploaded config written to a file of ours."""
        if hf_config is None:
            return model, model
        text = json.dumps(hf_config, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        mt = "".join(ch for ch in str(hf_config.get("model_type", "hf")) if ch.isalnum() or ch in "-_")[:40] or "hf"
        folder = self.uploads / f"{mt}-{digest}"
        path = folder / "config.json"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / "config.json.tmp"
            tmp.write_text(text)
            tmp.replace(path)
        return str(path), f"hf:{digest}"

    def _run(self, key: str, fn):
        hit = self.answers.get(key)
        if hit is not None:
            return hit
        if not self.lock.acquire(timeout=self.wait_s):
            raise Busy(f"the server is busy with other forecasts; retry later (waited {self.wait_s:g} s)")
        try:
            hit = self.answers.get(key)  # computed while this one waited
            if hit is None:
                hit = fn()
                self.answers.put(key, hit)
            return hit
        finally:
            self.lock.release()

    def _family(self, source: str, mkey: str, optimizer, precision, seq_len, freeze, kernels: str = "eager",
                memory_format: str = "contiguous"):
        from traincast.predict import WorkloadFamily

        fkey = (mkey, optimizer, precision, seq_len, freeze, kernels, memory_format)
        fam = self.families.get(fkey)
        if fam is None:
            fam = WorkloadFamily(source, optimizer=optimizer, precision=precision, seq_len=seq_len, freeze=freeze,
                                 kernels=kernels, memory_format=memory_format)
            self.families.put(fkey, fam)
        return fam

    # -------------------------------------------------------------- forecast
    def forecast_json(self, req) -> str:
        """``traincast predict --json`` for the request's options, as JSON text."""
        source, mkey = self.model_source(req.model, req.hf_config)
        opts = req.model_dump(exclude={"model", "hf_config"})
        key = "forecast:" + json.dumps({"model": mkey, **opts}, sort_keys=True)
        return self._run(key, lambda: dumps(self.forecast(source, mkey, **opts).to_dict()))

    def forecast(self, source: str, mkey: str, *, gpu, gpus, nodes, batch_size, per_gpu_batch, epochs, dataset_size,
                 precision, optimizer, sync, no_overlap, freeze, instance, seq_len, network_gbit, predictor,
                 adaptation, kernels="eager", memory_format="contiguous", **layout):
        """The library call of ``traincast predict`` (:func:`traincast.predict.options.forecast_from_options`)."""
        from traincast.predict.options import forecast_from_options

        fam = self._family(source, mkey, optimizer, precision, seq_len, freeze, kernels, memory_format)
        return forecast_from_options(source, gpu=gpu, gpus=gpus, nodes=nodes, batch_size=batch_size,
                                     per_gpu_batch=per_gpu_batch, epochs=epochs, dataset_size=dataset_size,
                                     precision=precision, optimizer=optimizer, sync=sync, no_overlap=no_overlap,
                                     freeze=freeze, instance=instance, seq_len=seq_len, network_gbit=network_gbit,
                                     predictor=predictor, adaptation=adaptation, family=fam, kernels=kernels,
                                     memory_format=memory_format, **layout)

    # ----------------------------------------------------------- parallelize
    def parallelize_json(self, req) -> str:
        """``traincast parallelize --json`` for the request's options, as JSON text."""
        from traincast.hardware import get_catalog
        from traincast.predict.parallel.search import parallelize
        from traincast.predict.parallel.strategy import RECOMPUTATIONS, SHARDINGS

        source, mkey = self.model_source(req.model, req.hf_config)
        opts = req.model_dump(exclude={"model", "hf_config"})
        key = "parallelize:" + json.dumps({"model": mkey, **opts}, sort_keys=True)

        def run():
            fam = self._family(source, mkey, req.optimizer, req.precision, req.seq_len, None, req.kernels)
            res = parallelize(source, gpu=req.gpu, gpus=req.gpus, nodes=req.nodes, batch_size=req.batch_size,
                              seq_len=req.seq_len, precision=req.precision, optimizer=req.optimizer,
                              instance=req.instance, network_gbit_per_s=req.network_gbit, catalog=get_catalog(),
                              family=fam, top=req.top, max_tp=req.max_tp, micro_batches=tuple(req.micro_batches),
                              shardings=tuple(SHARDINGS.canonical(x.lower()) for x in req.shardings),
                              recomputes=tuple(RECOMPUTATIONS.canonical(x.lower()) for x in req.recomputes),
                              kernels=req.kernels)
            return dumps(res.to_dict())

        return self._run(key, run)

    # ------------------------------------------------------------------ plan
    def plan_json(self, req) -> str:
        """``traincast plan --json --plot ''`` for the request's options, as JSON text."""
        from traincast.hardware import get_catalog
        from traincast.plan.pareto import parse_deadline_s, plan
        from traincast.predict.goodput import Reliability

        source, mkey = self.model_source(req.model, req.hf_config)
        opts = req.model_dump(exclude={"model", "hf_config"})
        # a deadline given as a date or weekday is resolved now: the key holds it to the minute, not the text
        deadline_s = parse_deadline_s(req.deadline) if req.deadline else None
        opts["deadline"] = None if deadline_s is None else round(deadline_s / 60)
        key = "plan:" + json.dumps({"model": mkey, **opts}, sort_keys=True)

        def run():
            res = plan(source, epochs=req.epochs, dataset_size=req.dataset_size, steps=req.steps, tokens=req.tokens,
                       batch_size=req.batch_size,
                       per_gpu_batch=req.per_gpu_batch, gpus=tuple(req.gpus),
                       gpu_types=tuple(req.gpu_types) if req.gpu_types else None,
                       instances=tuple(req.instances) if req.instances else None,
                       deadline_s=deadline_s, budget_usd=req.budget,
                       precision=req.precision, optimizer=req.optimizer, seq_len=req.seq_len, catalog=get_catalog(),
                       predictor=req.predictor, adaptation=req.adaptation, kernels=req.kernels,
                       reliability=Reliability.from_options(req.gpu_mtbf_hours, req.restart_minutes,
                                                            req.checkpoint_every, req.checkpoint_gb_per_s))
            return dumps(res.to_dict())

        return self._run(key, run)

    # --------------------------------------------------------------- compare
    def compare_json(self, req) -> str:
        """One model on each GPU type: ``predict --json`` for each, in a list (errors per GPU, not for all)."""
        from traincast.errors import TraincastError

        out = []
        for g in req.gpu_types:
            opts = dict(gpu=g, gpus=req.gpus, nodes=None, batch_size=req.batch_size, per_gpu_batch=req.per_gpu_batch,
                        epochs=req.epochs, dataset_size=req.dataset_size, precision=req.precision,
                        optimizer=req.optimizer, sync="nccl", no_overlap=False, freeze=None, instance=None,
                        seq_len=req.seq_len, network_gbit=None, predictor=None, adaptation="none")
            from traincast.serve.models import ForecastRequest

            one = ForecastRequest(model=req.model, hf_config=req.hf_config, **opts)
            try:
                out.append({"gpu": g, "forecast": json.loads(self.forecast_json(one))})
            except TraincastError as exc:
                out.append({"gpu": g, "error": str(exc)})
        return json.dumps(out, default=str)


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
