"""PyTorch Lightning ``Callback`` that records into the store or a traincast server.

    from traincast.online.adapters.lightning import TraincastCallback
    trainer = L.Trainer(callbacks=[TraincastCallback(job="cnn-run1")])
    trainer = L.Trainer(callbacks=[TraincastCallback(job="cnn-run1", server="http://host:8000", token=...)])

The keyword arguments are those of :func:`traincast.online.track` (``server=``, ``token=``, ``model=``, ...).
"""

from __future__ import annotations

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from traincast.online.recorder import Tracker


def _lr(trainer):
    """The learning rate of the first optimizer's first parameter group (None where there is none)."""
    try:
        return float(trainer.optimizers[0].param_groups[0]["lr"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def _scalar(x):
    if isinstance(x, dict):
        x = x.get("loss")
    try:
        return float(x.detach().item() if hasattr(x, "detach") else x)
    except (TypeError, ValueError, AttributeError):
        return None


class TraincastCallback(Callback):
    """Records each optimizer step (``trainer.global_step``), its loss, epoch ends and validations."""

    def __init__(self, job: str, store=None, metric: str = "val_loss", **track_kwargs):
        self.job = job
        self.store = store
        self.metric = metric
        self.track_kwargs = track_kwargs
        self.tracker: Tracker | None = None

    def on_train_start(self, trainer, pl_module):
        if trainer.global_rank != 0:
            return
        kw = dict(self.track_kwargs)
        total = kw.pop("total_steps", None)
        if total is None:
            est = getattr(trainer, "estimated_stepping_batches", None)
            total = int(est) if est and est != float("inf") else None
        if trainer.max_epochs and trainer.max_epochs > 0 and total:
            kw.setdefault("total_epochs", int(trainer.max_epochs))
            kw.setdefault("steps_per_epoch", max(total // int(trainer.max_epochs), 1))
        self.tracker = Tracker(self.job, total, store=self.store, **kw)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.tracker is not None and trainer.global_step > self.tracker.current_step:
            self.tracker.step(loss=_scalar(outputs), step=int(trainer.global_step), lr=_lr(trainer))

    def on_train_epoch_end(self, trainer, pl_module):
        if self.tracker is not None:
            self.tracker.epoch_end()

    def on_validation_start(self, trainer, pl_module):
        if self.tracker is not None and not trainer.sanity_checking:
            self.tracker.eval_start()

    def on_validation_end(self, trainer, pl_module):
        if self.tracker is not None and not trainer.sanity_checking:
            self.tracker.eval_end(_scalar(trainer.callback_metrics.get(self.metric)))

    def on_train_end(self, trainer, pl_module):
        if self.tracker is not None:
            self.tracker.close()
