"""Shared helpers: small hand-made scenarios with table durations."""

from __future__ import annotations

import pytest
import yaml

from traincast.plan.durations import OptionTable, ScenarioDurations
from traincast.plan.scenario import parse_scenario


def tiny_doc(**over):
    doc = {
        "name": "tiny",
        "nodes": 2,
        "n_jobs": 20,
        "arrivals": {"process": "poisson", "mean_interarrival_s": 60},
        "deadline": {"factor": [1.5, 3.0], "reference": "fastest"},
        "weight_usd_per_h": [1.0, 4.0],
        "vm_types": [
            {"name": "small", "gpu": "K80", "gpus": 1, "usd_per_hour": 1.0},
            {"name": "big", "gpu": "K80", "gpus": 2, "usd_per_hour": 1.2},
        ],
        "job_classes": [
            {"name": "A", "model": "resnet50", "dataset_size": 1000, "epochs": 1, "batch_size": 32,
             "durations_s": {"K80": {1: 3600, 2: 2400}}},
            {"name": "B", "model": "alexnet", "dataset_size": 1000, "epochs": 1, "batch_size": 32,
             "durations_s": {"K80": {1: 1800, 2: 1200}}},
        ],
    }
    doc.update(over)
    return doc


@pytest.fixture
def tiny():
    return parse_scenario(tiny_doc())


def write_yaml(path, doc):
    path.write_text(yaml.safe_dump(doc))
    return path


def one_gpu_scenario(jobs, durations, nodes=1):
    """One 1-GPU VM type; ``jobs``: (class, arrival, deadline, weight); ``durations``: class -> s."""
    doc = tiny_doc(
        nodes=nodes,
        vm_types=[{"name": "vm1", "gpu": "K80", "gpus": 1, "usd_per_hour": 3.6}],
        job_classes=[{"name": c, "model": "alexnet", "dataset_size": 1, "epochs": 1, "batch_size": 1,
                      "durations_s": {"K80": {1: d}}} for c, d in durations.items()],
        jobs=[{"id": i, "class": c, "arrival_s": a, "deadline_s": dl, "weight_usd_per_h": w}
              for i, (c, a, dl, w) in enumerate(jobs)],
    )
    sc = parse_scenario(doc)
    table = OptionTable(sc, ScenarioDurations(sc, use_forecast=False))
    return sc, table


@pytest.fixture
def make_doc():
    return tiny_doc


@pytest.fixture
def dump_yaml():
    return write_yaml


@pytest.fixture
def one_gpu():
    return one_gpu_scenario
