"""The catalog: aliases, suggestions, sources, user files, and the GPUs of the shared data."""

import csv
import gzip

import pytest

from traincast.errors import SpecError, UnknownNameError
from traincast.hardware import get_catalog


def test_every_row_has_source_and_date():
    cat = get_catalog()
    for d in cat.devices.values():
        assert d.source and d.date, d.name
        assert d.fp32_tflops > 0 and d.memory_bytes > 0 and d.memory_bandwidth_gb_per_s > 0
    for i in cat.instances.values():
        assert i.source and i.date, i.name


def test_aliases_and_default_variants():
    cat = get_catalog()
    assert cat.device("A100").name == "A100-SXM4-40GB"
    assert cat.device("a100-80gb").name == "A100-SXM4-80GB"
    assert cat.device("Tesla_V100-PCIE-32GB").name == "V100-PCIE-32GB"
    assert cat.device("titan x").name == "TitanX-Maxwell"
    k80 = cat.device("K80")
    assert k80.memory_gib == 12  # one die of the board
    assert cat.device("H100").tf32_tflops < 500  # dense, not the sparse figure


def test_typos_get_close_suggestions():
    with pytest.raises(UnknownNameError, match="did you mean.*V100"):
        get_catalog().device("V1000")
    with pytest.raises(UnknownNameError, match="did you mean.*p3.16xlarge"):
        get_catalog().instance("p3.16xlarg")


def test_required_gpus_are_there():
    cat = get_catalog()
    for name in ["K80", "M60", "P100", "V100-PCIE-16GB", "V100-SXM2-16GB", "T4", "RTX2080Ti", "A10G", "L4",
                 "A100-PCIE-40GB", "A100-PCIE-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-PCIE-80GB",
                 "H100-SXM5-80GB", "H200", "B200", "K40", "GTX1080Ti", "Titan X", "Quadro P600", "Quadro P2000",
                 "P4", "P4000", "RTX2070"]:
        cat.device(name)
    assert any(d.kind == "cpu" for d in cat.devices.values())
    for name in ["NC6", "NC12", "NC24", "NV6", "NV12", "NV24", "p3.16xlarge", "p4d.24xlarge", "p5.48xlarge",
                 "g5.xlarge", "g6.xlarge", "a2-highgpu-8g", "a3-highgpu-8g", "ND96asr_v4", "ND96isr_H100_v5"]:
        assert cat.instance(name).usd_per_hour > 0


def test_every_gpu_in_the_shared_data_resolves(shared_data):
    cat = get_catalog()
    names = {p.name.removesuffix(".csv.gz") for p in (shared_data / "kernels" / "neusight").glob("*/*.csv.gz")}
    with open(shared_data / "models" / "neusight_labels.csv") as f:
        names |= {r["gpu"] for r in csv.DictReader(f) if not r["gpu"].startswith("AMD") or True}
    for p in (shared_data / "layers" / "justus2018").glob("*"):
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt") as f:
            row = next(csv.DictReader(f))
        if "gpu" in row:
            names.add(row["gpu"])
    for n in sorted(names):
        cat.device(n)


def test_user_catalog_adds_devices_and_instances(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("""
devices:
  - name: MyGPU
    peak_tflops: {fp32: 10, fp16: 80}
    memory_gb: 24
    memory_bandwidth_gb_per_s: 700
    source: lab measurement
    date: 2026-11
instances:
  - {name: lab-box, gpu: MyGPU, gpus: 4, usd_per_hour: 3.5, source: internal, date: 2026-11}
""")
    cat = get_catalog([f])
    assert cat.instance("lab-box").device.fp16_tflops == 80
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices:\n  - name: X\n    peak_tflops: {fp32: 1}\n    memory_gb: -3\n    memory_bandwidth_gb_per_s: 1\n")
    with pytest.raises(SpecError, match=r"bad.yaml: devices\[0\].memory_gb: Input should be greater than 0 \(got -3\)"):
        get_catalog([bad])
    bad.write_text("devices:\n  - name: X\n    peak_tflops: {fp32: 1}\n    memory_gb: 8\n    memory_bandwith_gb_per_s: 1\n")
    with pytest.raises(SpecError, match=r"devices\[0\].memory_bandwith_gb_per_s: unknown field; did you mean "
                                        r"'memory_bandwidth_gb_per_s'"):
        get_catalog([bad])


def test_the_shared_catalog_is_read_only():
    """Every caller of get_catalog() shares one catalog: nobody can add to it or change its rows."""
    from traincast.hardware.catalog import Catalog, get_catalog

    cat = get_catalog()
    with pytest.raises(TypeError):
        cat.devices["X"] = cat.device("A100")
    with pytest.raises(TypeError, match="read-only"):
        cat.add_device(cat.device("A100"))
    own = Catalog()  # a catalog of one's own is built by adding
    own.add_device(cat.device("A100"))
    assert list(own.devices) == ["A100-SXM4-40GB"]
