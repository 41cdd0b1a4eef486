import torch

from traincast.measure.fingerprint import Fingerprint, fingerprint
from traincast.measure.records import save_fingerprint


def test_fingerprint_fields_and_id(store):
    fp = fingerprint("cpu", 1)
    assert fp.cpu_logical_cores >= 1 and fp.cpu_model
    assert fp.num_threads == 1 and fp.torch_version == torch.__version__
    assert fp.device == "cpu" and fp.gpu_name is None
    assert len(fp.hostname_hash) == 12
    assert fp.id == fingerprint("cpu", 1).id  # stable
    assert fp.id != fingerprint("cpu", 2).id  # threads matter
    assert isinstance(fp, Fingerprint)
    fid = save_fingerprint(store.conn, fp)
    save_fingerprint(store.conn, fp)  # idempotent
    rows = store.conn.execute("SELECT id, num_threads FROM measure_fingerprints").fetchall()
    assert [tuple(r) for r in rows] == [(fid, 1)]


def test_fingerprint_cuda_path_with_fake_device(monkeypatch):
    class Props:
        name, total_memory, major, minor = "NVIDIA H100 80GB HBM3", 80 * 2**30, 9, 0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    monkeypatch.setattr("traincast.measure.fingerprint._gpu_driver", lambda i: "550.54.15")
    fp = fingerprint("cuda")
    assert fp.device == "cuda:0" and fp.gpu_name.startswith("NVIDIA H100")
    assert fp.gpu_capability == "9.0" and fp.gpu_driver == "550.54.15" and fp.gpu_count == 1
