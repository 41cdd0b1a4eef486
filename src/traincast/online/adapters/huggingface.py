"""Hugging Face ``transformers.Trainer`` callback that records into the store or a traincast server.

    from traincast.online.adapters.huggingface import TraincastCallback
    trainer = Trainer(..., callbacks=[TraincastCallback(job="bert-ft")])
    trainer = Trainer(..., callbacks=[TraincastCallback(job="bert-ft", server="http://host:8000", token=...)])

The keyword arguments are those of :func:`traincast.online.track` (``server=``, ``token=``, ``model=``, ...).
"""

from __future__ import annotations

from transformers import TrainerCallback

from traincast.online.recorder import Tracker

_METRICS = ("eval_accuracy", "eval_f1", "eval_loss")


class TraincastCallback(TrainerCallback):
    """Records each optimizer step, the logged loss, epoch ends and evaluations."""

    def __init__(self, job: str, store=None, **track_kwargs):
        self.job = job
        self.store = store
        self.track_kwargs = track_kwargs
        self.tracker: Tracker | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        kw = dict(self.track_kwargs)
        if state.max_steps and state.max_steps > 0:
            kw.setdefault("total_steps", int(state.max_steps))
        epochs = getattr(args, "num_train_epochs", None)
        if epochs and float(epochs).is_integer() and kw.get("total_steps"):
            kw.setdefault("total_epochs", int(epochs))
            kw.setdefault("steps_per_epoch", max(kw["total_steps"] // int(epochs), 1))
        kw.setdefault("batch_size", getattr(args, "per_device_train_batch_size", None))
        total = kw.pop("total_steps", None)
        self.tracker = Tracker(self.job, total, store=self.store, **kw)

    def on_step_end(self, args, state, control, **kwargs):
        if self.tracker is not None and state.global_step > self.tracker.current_step:
            self.tracker.step(step=int(state.global_step))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.tracker is None or not logs:
            return
        if "loss" in logs or "learning_rate" in logs:
            self.tracker.update(int(state.global_step), loss=logs.get("loss"), lr=logs.get("learning_rate"))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.tracker is None:
            return
        metrics = metrics or {}
        self.tracker.eval_end(next((metrics[k] for k in _METRICS if k in metrics), None))

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.tracker is not None:
            self.tracker.epoch_end()

    def on_train_end(self, args, state, control, **kwargs):
        if self.tracker is not None:
            self.tracker.close()
