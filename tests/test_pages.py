"""Fresh pages on CPUs: glibc hands large tensors' pages back after each use (so they fault in again), the
environment the forecast's note recommends stops that, and the note says how much of the step it is."""

import os
import subprocess
import sys

import pytest

from traincast.hardware.catalog import get_catalog
from traincast.predict.host import predictor_params
from traincast.predict.pages import MALLOC_KEEP, NOTE_SHARE, fresh_page_seconds, fresh_pages_note
from traincast.predict.registry import default_predictor
from traincast.predict.roofline import fresh_output_bytes
from traincast.workload import trace

_FAULTS = """
import resource, torch
def step():  # a step's activations: large tensors alive together, then all freed
    xs = [torch.empty(10 * 2**20).fill_(1.0) for _ in range(8)]  # 40 MiB each
    ys = [torch.empty(2**20).fill_(1.0) for _ in range(16)]  # 4 MiB each
    del xs, ys
for _ in range(2):
    step()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 4)
"""


def _faults_per_step(env_extra: dict) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env_extra
    out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_glibc_faults_a_steps_tensors_in_anew_every_step_unless_told_to_keep_its_pages():
    pages = (8 * 40 + 16 * 4) * 2**20 / 4096
    # most pages of the tensors, every step: the 40 MiB ones are mapped anew, the 4 MiB ones come from the top of a
    # heap that was handed back (how much of it depends on the heap's layout: 70-100% of the pages seen here)
    assert _faults_per_step({}) > 0.5 * pages
    keep = dict(kv.split("=", 1) for kv in MALLOC_KEEP.split())
    assert _faults_per_step(keep) < 0.01 * pages


def test_the_note_gives_the_fresh_page_share_and_the_step_without_it():
    from traincast.hardware.records import Cluster
    from traincast.predict.compose import step_time

    cpu, pred = get_catalog().device("generic-2core-avx2"), default_predictor()
    wl = trace("efficientnet_b0", batch_size=32)
    params = predictor_params(pred, cpu)
    rate, min_bytes = params.fresh_alloc_gb_per_s * 1e9, params.fresh_alloc_min_bytes
    assert min_bytes == 32 * 2**20
    fresh = sum(fresh_output_bytes(o.aten, o.output_shapes, o.bytes_written, min_bytes, o.dtype) for o in wl.ops)
    # the first stage's activations alone (32 x 32 x 112 x 112 fp32 = 49 MiB each) are fresh
    assert fresh > 10 * 32 * 32 * 112 * 112 * 4
    assert fresh_page_seconds(wl, pred, cpu) == pytest.approx(fresh / rate)
    it = step_time(wl, Cluster(cpu), pred).iteration_s
    note = fresh_pages_note(wl, pred, cpu, it)
    s = fresh / rate
    assert s >= NOTE_SHARE * it and note is not None
    assert f"{1e3 * s:.4g} ms" in note and f"{1e3 * (it - s):.4g} ms" in note and MALLOC_KEEP in note
    # at batch 2 no output reaches 32 MiB: nothing to say
    small = trace("efficientnet_b0", batch_size=2)
    assert fresh_page_seconds(small, pred, cpu) == 0.0
    assert fresh_pages_note(small, pred, cpu, 1.0) is None
    # GPUs' caching allocators keep their memory: never on a GPU
    assert fresh_pages_note(wl, pred, get_catalog().device("A100-SXM4-80GB"), it) is None


def test_predict_prints_the_note_on_a_cpu(capsys):
    from traincast.cli.main import _register_all, run

    _register_all()
    assert run(["predict", "efficientnet_b0", "-b", "32", "--gpu", "generic-2core-avx2", "--json"]) == 0
    import json

    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("large tensors:") and MALLOC_KEEP in n for n in notes)
