"""vTrain's multi-node measurements as benchmarks/parallel_vtrain_multi.py reads them."""

import importlib.util
from pathlib import Path


def _module():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "parallel_vtrain_multi.py"
    spec = importlib.util.spec_from_file_location("parallel_vtrain_multi", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vtrain_multi_node_rows_are_read_whole_and_consistent():
    rows = _module().load_rows()
    assert len(rows) == 109
    assert {r["gpus"] for r in rows} == {64, 256, 512}
    assert {r["params_b"] for r in rows} == {3.6, 18.4, 39.1, 175.0}
    for r in rows:
        assert r["tp"] * r["dp"] * r["pp"] == r["gpus"], r
        assert r["gpus"] % 8 == 0 and r["L"] % r["pp"] == 0 and r["a"] % r["tp"] == 0, r
        assert (r["gbs"] // r["dp"]) % r["mb"] == 0, r  # whole micro-batches per replica
        assert r["measured_ms"] > 0
    # the first and last rows of the source, by hand
    assert (rows[0]["h"], rows[0]["tp"], rows[0]["dp"], rows[0]["mb"], rows[0]["measured_ms"]) == (3072, 1, 64, 8, 3566.5)
    assert (rows[-1]["h"], rows[-1]["tp"], rows[-1]["pp"], rows[-1]["measured_ms"]) == (12288, 8, 32, 62636.8)
