"""End-to-end job regression: augmentation, selection, model ranking, extrapolation, CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from traincast.cli.main import _register_all, app, run
from traincast.errors import DataError, TraincastError
from traincast.fit import jobs as J


def _law(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """epoch_s = 0.8 * batch / gpus + 3 (+ 0.05 * batch / gpus + 2 on resnet), with 0.5 % noise."""
    rng = np.random.default_rng(seed)
    batch = rng.choice([16, 32, 64, 128, 256, 512], n)
    gpus = rng.choice([1, 2, 4, 8], n)
    net = rng.choice(["alexnet", "resnet"], n)
    t = 0.8 * batch / gpus + 3.0 + np.where(net == "resnet", 0.05 * batch / gpus + 2.0, 0.0)
    t *= 1 + 0.005 * rng.standard_normal(n)
    return pd.DataFrame({"batch": batch, "gpus": gpus, "network": net, "epoch_s": t})


@pytest.fixture(scope="module")
def law_records():
    return J.records_from_frame(_law(), "epoch_s")


def test_augmentation_names_and_values():
    df = _law(20)
    f = J.JobFeatures(["batch", "gpus"], ["network"]).fit(df)
    names = list(f.feature_names_)
    assert "1/gpus" in names and "batch*1/gpus" in names and "network=resnet" in names
    assert "gpus*1/gpus" not in names
    X = f.transform(df)
    np.testing.assert_allclose(X[:, names.index("batch*1/gpus")], df.batch / df.gpus)


def test_augmented_linear_learns_law_and_beats_plain_on_extrapolation(law_records):
    reg = J.JobRegressor(models=["linear_plain", "linear"]).fit(law_records)
    cv = {s.model: s.mape_pct for s in reg.ranking_}
    assert cv["linear"] < 2.0
    assert cv["linear"] < cv["linear_plain"]
    assert reg.best_.model == "linear"
    assert reg.score(law_records) > 0.99

    ext = J.extrapolate(law_records, "batch", 64, models=["linear_plain", "linear"])
    assert ext.n_train > 0 and ext.n_test > 0
    assert ext.score_of("linear").mape_pct < 2.0
    assert ext.score_of("linear").mape_pct < ext.score_of("linear_plain").mape_pct
    ext_g = J.extrapolate(law_records, "gpus", 2, models=["linear_plain", "linear"])
    assert ext_g.score_of("linear").mape_pct < ext_g.score_of("linear_plain").mape_pct


def test_forward_selection_finds_the_law(law_records):
    reg = J.JobRegressor(models=["linear"], select="sfs").fit(law_records)
    assert "batch*1/gpus" in reg.selected_features_
    assert len(reg.selected_features_) <= 20
    assert reg.best_.mape_pct < 2.0


def test_ranking_contains_every_model():
    rec = J.records_from_frame(_law(80, seed=1), "epoch_s")
    reg = J.JobRegressor(cv=3).fit(rec)
    assert {s.model for s in reg.ranking_} == set(J.MODEL_NAMES)
    mapes = [s.mape_pct for s in reg.ranking_]
    assert mapes == sorted(mapes)
    assert all(np.isfinite(s.rmse) for s in reg.ranking_)
    text = J.format_ranking(reg.ranking_)
    for label in J.MODEL_LABELS.values():
        assert label in text
    assert reg.predict(rec.X).shape == (80,)


def test_leave_one_group_out():
    rec = J.records_from_frame(_law(120, seed=2), "epoch_s")
    res = J.leave_one_group_out(rec, "network", models=["linear"])
    assert [r.description for r in res] == ["hold out network = alexnet", "hold out network = resnet"]
    assert all(r.n_test > 0 for r in res)


@pytest.mark.parametrize("frame,target,msg", [
    (pd.DataFrame({"a": range(20), "b": range(20)}), "epoch_s", "not in the data"),
    (pd.DataFrame({"a": range(20), "epoch_s": ["x"] * 20}), "epoch_s", "not numeric"),
    (pd.DataFrame({"a": range(1, 5), "epoch_s": range(1, 5)}), "epoch_s", "too few"),
])
def test_bad_records(frame, target, msg):
    with pytest.raises(DataError, match=msg):
        J.records_from_frame(frame, target)


def test_unknown_columns():
    rec = J.records_from_frame(_law(40), "epoch_s")
    with pytest.raises(DataError, match="unknown column"):
        J.extrapolate(rec, "nosuch", 3)
    with pytest.raises(TraincastError):
        J.parse_extrapolation("batch")
    with pytest.raises(TraincastError, match="unknown model"):
        J.JobRegressor(models=["svm"]).fit(rec)


@pytest.fixture(scope="module")
def cli():
    _register_all()
    return lambda *a: run(list(a), app)


def test_cli_missing_target_exits_2(cli, tmp_path, capsys):
    p = tmp_path / "jobs.csv"
    _law(40).drop(columns=["epoch_s"]).to_csv(p, index=False)
    assert cli("fit", "jobs", str(p), "--target", "epoch_s") == 2
    assert "epoch_s" in capsys.readouterr().err
    assert cli("fit", "jobs", str(tmp_path / "none.csv"), "--target", "epoch_s") == 2


def test_cli_fit_jobs_json(cli, tmp_path, capsys):
    p = tmp_path / "jobs.csv"
    _law(120).to_csv(p, index=False)
    code = cli("fit", "jobs", str(p), "--target", "epoch_s", "--models", "linear_plain,linear",
               "--extrapolate", "batch:64", "--holdout-group", "network", "--json")
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"] == "linear" and out["rows"] == 120
    assert len(out["holdouts"]) == 3
    assert out["holdouts"][0]["scores"][0]["model"] == "linear"
    assert cli("fit", "jobs", str(p), "--target", "epoch_s", "--holdout-group", "nosuch") == 2
    assert cli("fit", "jobs", str(p), "--target", "epoch_s", "--extrapolate", "network:3") == 2
