import os
from pathlib import Path

import pytest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="session")
def benchmark_module():
    """Load a script of benchmarks/ as a module by its name: ``benchmark_module("converge_pool")``."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA


@pytest.fixture(scope="session")
def resnet50_b8():
    from traincast.workload import trace

    return trace("resnet50", batch_size=8)
