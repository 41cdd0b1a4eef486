"""benchmarks/converge_pool.py pools --save rows as the protocols' rules read them."""

from __future__ import annotations

import json


def _row(origin, true, pred, covered, method="traincast", skipped=False):
    return dict(origin=origin, true=true, pred=pred, err=abs(pred - true) / true, covered=covered, method=method,
                skipped=skipped)


def test_pooled_median_band_and_early_late_over_files(tmp_path, capsys, benchmark_module):
    a = [_row(0.25, 100, 90, True), _row(0.25, 100, 130, False), _row(0.5, 200, 210, True),
         _row(0.25, 100, 50, True, method="optimus-auto")]  # another method: left out
    b = [_row(0.25, 100, 80, True), dict(origin=0.25, skipped=True, method="traincast")]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    pool = benchmark_module("converge_pool")
    s = pool.summary([r for r in a + b if r["method"] == "traincast" and not r.get("skipped")], 0.25)
    assert s["n"] == 3 and s["median"] == 0.2 and s["early"] == 2 and s["late"] == 1
    assert abs(s["band"] - 2 / 3) < 1e-12 and abs(s["within12"] - 1 / 3) < 1e-12
    assert pool.main([str(pa), str(pb)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("pooled") and "25%: 20.0% band 67% n=3 early/late 2/1 within 12% 33%" in out[0]
    assert out[1].startswith("a ") and out[2].startswith("b ")
