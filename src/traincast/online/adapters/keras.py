"""Keras ``Callback`` that records into the store or a traincast server.

    from traincast.online.adapters.keras import TraincastCallback
    model.fit(x, y, epochs=10, callbacks=[TraincastCallback(job="mnist")])
    model.fit(..., callbacks=[TraincastCallback(job="mnist", server="http://host:8000", token=...)])

Keras 3 runs on PyTorch here (``KERAS_BACKEND=torch``, set when TensorFlow is not installed and Keras
not yet imported); the keyword arguments are those of :func:`traincast.online.track`.
"""

from __future__ import annotations

import importlib.util
import os

if "keras" not in __import__("sys").modules and importlib.util.find_spec("tensorflow") is None:
    os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras 3 without TensorFlow: its PyTorch backend

try:
    import keras
except ImportError:
    from tensorflow import keras

from traincast.online.recorder import Tracker

_METRICS = ("val_accuracy", "val_acc", "val_loss")


class TraincastCallback(keras.callbacks.Callback):
    """Records each batch, its loss, epoch ends and validations."""

    def __init__(self, job: str, store=None, **track_kwargs):
        super().__init__()
        self.job = job
        self.store = store
        self.track_kwargs = track_kwargs
        self.tracker: Tracker | None = None

    def on_train_begin(self, logs=None):
        kw = dict(self.track_kwargs)
        params = self.params or {}
        steps, epochs = params.get("steps"), params.get("epochs")
        total = kw.pop("total_steps", None) or (steps * epochs if steps and epochs else None)
        if steps and epochs:
            kw.setdefault("steps_per_epoch", int(steps))
            kw.setdefault("total_epochs", int(epochs))
        self.tracker = Tracker(self.job, total, store=self.store, **kw)

    def on_train_batch_end(self, batch, logs=None):
        if self.tracker is not None:
            self.tracker.step(loss=(logs or {}).get("loss"), lr=self._lr())

    def _lr(self):
        """The optimizer's current learning rate (a schedule's value at this step), None where unknown."""
        try:
            lr = self.model.optimizer.learning_rate
            return float(lr.numpy() if hasattr(lr, "numpy") else lr)
        except (AttributeError, TypeError, ValueError):
            return None

    def on_test_begin(self, logs=None):
        if self.tracker is not None:
            self.tracker.eval_start()

    def on_test_end(self, logs=None):
        if self.tracker is not None:
            self.tracker.eval_end((logs or {}).get("accuracy", (logs or {}).get("loss")))

    def on_epoch_end(self, epoch, logs=None):
        if self.tracker is not None:
            logs = logs or {}
            self.tracker.epoch_end(next((logs[k] for k in _METRICS if k in logs), None))

    def on_train_end(self, logs=None):
        if self.tracker is not None:
            self.tracker.close()
