"""The Hugging Face, Lightning and Keras callbacks inside real short training loops of each framework,
recording into a local store and into a `traincast serve` process."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras 3 on PyTorch (before anything imports keras)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from traincast.online import get_job, load_series  # noqa: E402
from traincast.serve.runner import ServerProcess  # noqa: E402
from traincast.store import Store  # noqa: E402

TOKEN = "adapter-token-" + "a" * 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("srv")
    with ServerProcess(d / "srv.db", TOKEN, home=d / "home") as srv:
        yield srv


@pytest.fixture(params=["store", "server"])
def target(request, tmp_path, server):
    """(keyword arguments of the callback, a function that opens the store the rows land in)."""
    if request.param == "store":
        db = tmp_path / "local.db"
        return {"store": str(db)}, lambda: Store(db)
    return ({"server": server.url, "token": TOKEN, "spool": str(tmp_path / "spool.db"), "flush_every_s": 0.1},
            lambda: Store(server.db))


def _job(request):
    return request.node.name.replace("[", "-").rstrip("]")


def test_huggingface_trainer(target, tmp_path, request):
    from transformers import Trainer, TrainingArguments

    from traincast.online.adapters.huggingface import TraincastCallback

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 2)

        def forward(self, x, labels=None):
            out = self.lin(x)
            return {"loss": nn.functional.cross_entropy(out, labels), "logits": out}

    torch.manual_seed(0)
    data = [{"x": torch.randn(8), "labels": torch.tensor(i % 2)} for i in range(96)]
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), num_train_epochs=2, per_device_train_batch_size=8,
                             logging_steps=4, eval_strategy="epoch", report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True)
    kw, open_store = target
    job = _job(request)
    cb = TraincastCallback(job=job, model="tiny", **kw)
    Trainer(model=Tiny(), args=args, train_dataset=data, eval_dataset=data[:16], callbacks=[cb]).train()
    with open_store() as store:
        s, info = load_series(store, job), get_job(store, job)
    assert list(s.steps) == list(range(25))  # 96 / 8 = 12 steps an epoch, 2 epochs, and the origin
    assert info.total_steps == 24 and info.steps_per_epoch == 12 and info.batch_size == 8 and info.model == "tiny"
    logged = s.loss[np.isfinite(s.loss)]
    assert len(logged) == 6 and np.all(logged > 0)  # every 4th step carries the logged loss
    assert np.all(np.isfinite(s.time_s)) and np.all(np.diff(s.time_s) >= 0)
    kinds = [e.kind for e in s.events]
    assert kinds.count("epoch_end") == 2 and kinds.count("eval_end") == 2


def test_lightning_trainer(target, request):
    try:
        import lightning.pytorch as L
    except ImportError:
        import pytorch_lightning as L

    from traincast.online.adapters.lightning import TraincastCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 2)

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.lin(x), y)

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.lin(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(80, 8), torch.randint(0, 2, (80,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=8)
    kw, open_store = target
    job = _job(request)
    trainer = L.Trainer(max_epochs=3, callbacks=[TraincastCallback(job=job, **kw)], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, num_sanity_val_steps=1)
    trainer.fit(Tiny(), dl, dl)
    with open_store() as store:
        s, info = load_series(store, job), get_job(store, job)
    assert list(s.steps) == list(range(31)) and info.total_steps == 30 and info.steps_per_epoch == 10
    assert np.all(np.isfinite(s.loss[1:])) and s.loss[-1] < 1.5
    kinds = [e.kind for e in s.events]
    # the sanity check before training is not an evaluation of the run
    assert kinds.count("epoch_end") == 3 and kinds.count("eval_start") == 3 and kinds.count("eval_end") == 3
    assert all(e.value is not None for e in s.events if e.kind == "eval_end")  # val_loss


def test_keras_fit_on_the_torch_backend(target, request):
    import keras

    from traincast.online.adapters.keras import TraincastCallback

    assert keras.backend.backend() == "torch"
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    kw, open_store = target
    job = _job(request)
    model.fit(x, y, batch_size=8, epochs=2, validation_split=0.25, verbose=0,
              callbacks=[TraincastCallback(job=job, **kw)])
    with open_store() as store:
        s, info = load_series(store, job), get_job(store, job)
    assert list(s.steps) == list(range(13))  # 48 training rows / 8 = 6 steps an epoch, 2 epochs
    assert info.total_steps == 12 and info.steps_per_epoch == 6 and info.total_epochs == 2
    assert np.all(np.isfinite(s.loss[1:]))
    kinds = [e.kind for e in s.events]
    assert kinds.count("epoch_end") == 2 and kinds.count("eval_end") == 2
    assert [e.value for e in s.events if e.kind == "epoch_end"][0] is not None  # val_accuracy
