import numpy as np
import pytest

from traincast.errors import ConfigError, SpecError, TraincastError, UnknownNameError
from traincast.plan.durations import (EstimateDurations, ForecastDurations, OptionTable,
                                      ScenarioDurations, TableDurations)
from traincast.plan.scenario import (builtin_scenarios, generate_jobs, gpu_key, load_scenario,
                                     parse_scenario, poisson_arrivals_s)


def test_builtin_ardagna2019_reproduces_the_talk_setting():
    assert "ardagna2019" in builtin_scenarios()
    sc = load_scenario("ardagna2019")
    vms = {v.name: (gpu_key(v.gpu), v.gpus, v.usd_per_hour) for v in sc.vm_types}
    assert vms["NC6"] == ("k80", 1, 0.56)
    assert vms["NC24"] == ("k80", 4, 2.25)
    assert vms["NV12"] == ("m60", 2, 1.24)
    assert vms["inhouse-2"] == ("gtx1080ti", 8, 1.13)
    assert len(sc.vm_types) == 9
    assert [c.name for c in sc.job_classes] == ["JJ1", "JJ2", "JJ3", "JJ4", "JJ5", "JJ6"]
    jj4 = sc.job_class("JJ4")
    assert (jj4.model, jj4.dataset_size, jj4.epochs, jj4.batch_size) == ("alexnet", 130000, 12, 256)
    assert sc.n_jobs == 10 * sc.nodes
    assert sc.mean_interarrival_s == 30
    # with_overrides keeps jobs = 10 x nodes
    assert sc.with_overrides(nodes=50).n_jobs == 500


def test_poisson_arrival_statistics():
    rng = np.random.default_rng(7)
    t = poisson_arrivals_s(40_000, 30.0, rng)
    gaps = np.diff(t)
    assert t[0] == 0 and np.all(gaps >= 0)
    assert abs(gaps.mean() - 30.0) / 30.0 < 0.02
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.03  # exponential: CV = 1
    # counts in 300 s windows are Poisson(10): variance == mean
    counts = np.histogram(t, bins=np.arange(0, t[-1], 300.0))[0]
    assert abs(counts.mean() - 10) < 0.3
    assert abs(counts.var() / counts.mean() - 1.0) < 0.1


def test_generated_jobs_are_deterministic_and_valid(tiny):
    table = OptionTable(tiny, ScenarioDurations(tiny, use_forecast=False))
    a = generate_jobs(tiny, table.reference_s, np.random.default_rng(3))
    b = generate_jobs(tiny, table.reference_s, np.random.default_rng(3))
    c = generate_jobs(tiny, table.reference_s, np.random.default_rng(4))
    assert a == b and a != c
    assert len(a) == tiny.n_jobs
    for j in a:
        lo, hi = tiny.deadline_factor
        ref = table.fastest_s(j.job_class)
        assert lo * ref - 1e-6 <= j.deadline_s - j.arrival_s <= hi * ref + 1e-6
        assert 1.0 <= j.weight_usd_per_h <= 4.0


def test_option_table_and_overrides(tiny):
    table = OptionTable(tiny, ScenarioDurations(tiny, use_forecast=False))
    opts = {(o.vm.name, o.gpus): o.duration_s for o in table.options("A")}
    assert opts == {("small", 1): 3600, ("big", 1): 3600, ("big", 2): 2400}
    assert table.fastest_s("B") == 1200


def test_table_durations_by_class_or_model(tiny):
    prov = TableDurations({("A", "K80", 1): 10.0, ("alexnet", "Tesla K80", 1): 20.0})
    small = tiny.vm("small")
    assert prov.duration_s(tiny.job_class("A"), small, 1) == 10.0
    assert prov.duration_s(tiny.job_class("B"), small, 1) == 20.0
    assert prov.duration_s(tiny.job_class("B"), small, 2) is None


def test_forecast_durations_are_cached(monkeypatch, tiny):
    import sys
    import types

    calls = []

    class Fc:
        def __init__(self, total, fits=True):
            self.total_s, self.fits_in_memory = total, fits

    def forecast(model, *, gpu, gpus=1, nodes=1, batch_size, per_gpu_batch=False, epochs=1.0,
                 dataset_size, precision="fp32", optimizer="sgd", instance=None, seq_len=None):
        calls.append((model, gpu, gpus))
        return Fc(1000.0 / gpus, fits=gpus < 2)

    fake = types.ModuleType("traincast.predict")
    fake.forecast = forecast
    monkeypatch.setitem(sys.modules, "traincast.predict", fake)
    prov = ForecastDurations()
    cls = tiny.job_class("A")
    small, big = tiny.vm("small"), tiny.vm("big")
    assert prov.duration_s(cls, small, 1) == 1000.0
    assert prov.duration_s(cls, big, 1) == 1000.0  # same GPU type and count: cached
    assert prov.duration_s(cls, big, 2) is None     # does not fit in memory
    assert len(calls) == 2


def test_scenario_durations_use_the_estimate_without_forecasts():
    sc = load_scenario("ardagna2019")
    prov = ScenarioDurations(sc, use_forecast=False)
    table = OptionTable(sc, prov)
    assert prov.origins["scenario"] > 0 and prov.origins["estimate"] > 0 and prov.origins["forecast"] == 0
    # more GPUs of one type are faster; faster GPUs are faster
    by = {(o.vm.name, o.gpus): o.duration_s for o in table.options("JJ5")}
    assert by[("NC24", 4)] < by[("NC12", 2)] < by[("NC6", 1)]
    assert by[("inhouse-2", 1)] < by[("NC6", 1)]
    est = EstimateDurations(sc.estimate)
    assert est.duration_s(sc.job_class("JJ1"), sc.vm("NC6"), 1) is None  # no FLOPs for deepspeech


BAD = [
    ({"vm_types": [{"name": "NC999"}]}, (UnknownNameError, SpecError), "NC999"),
    ({"job_classes": [{"name": "X", "model": "nosuchnet", "dataset_size": 10, "epochs": 1,
                       "batch_size": 2}]}, UnknownNameError, "nosuchnet"),
    ({"arrivals": {"mean_interarrival_s": -5}}, SpecError, "arrivals.mean_interarrival_s: Input should be greater than 0"),
    ({"nodes": 0}, SpecError, "nodes: Input should be greater than or equal to 1"),
    ({"jobs": [{"class": "A", "arrival_s": 100, "deadline_s": 50}]}, ConfigError, "past"),
    ({"jobs": [{"class": "A", "arrival_s": -1, "deadline_s": 50}]}, SpecError, "jobs[0].arrival_s"),
    ({"jobs": [{"class": "Z", "arrival_s": 0, "deadline_s": 50}]}, UnknownNameError, "Z"),
    ({"bogus": 1}, SpecError, "bogus: unknown field"),
    ({"job_clases": []}, SpecError, "job_clases: unknown field; did you mean 'job_classes'"),
    ({"deadline": {"factor": [3, 1]}}, ConfigError, "deadline.factor"),
    ({"job_classes": [{"name": "A", "model": "alexnet", "dataset_size": 1, "epochs": 1,
                       "batch_size": 1, "durations_s": {"H100": {1: 5}}}]}, UnknownNameError, "H100"),
    ({"job_classes": [{"name": "A", "model": "alexnet", "dataset_size": 1, "epochs": 1,
                       "batch_size": 1, "durations_s": {"K80": {1: -5}}}]}, SpecError, "job_classes[0].durations_s.K80[1]: Input should be greater than 0"),
    # a catalog instance's name with values given inline: the inline values are the ones used, and checked
    ({"vm_types": [{"name": "NC6", "gpu": "K80", "gpus": 1, "usd_per_hour": -0.56}]}, SpecError, "usd_per_hour"),
    ({"vm_types": [{"name": "NC6", "gpu": "M600", "gpus": 1, "usd_per_hour": 0.56}]}, UnknownNameError, "M600"),
]


@pytest.mark.parametrize("over,exc,word", BAD)
def test_bad_scenarios_raise_one_line_errors(make_doc, over, exc, word):
    with pytest.raises(exc) as info:
        parse_scenario(make_doc(**over))
    msg = str(info.value)
    assert isinstance(info.value, TraincastError)
    assert word in msg and "\n" not in msg


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [1, 2\n")
    with pytest.raises(SpecError, match="YAML"):
        load_scenario(bad)
    with pytest.raises(SpecError, match="does not exist"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(UnknownNameError):
        load_scenario("ardagna2020")
