"""traincast: forecast the time and cost of training deep-learning models.

    >>> import traincast
    >>> wl = traincast.trace("resnet50", batch_size=32)
    >>> f = traincast.forecast("resnet50", gpu="A100", gpus=8, batch_size=256, epochs=90)
    >>> with traincast.track(job="my-run", total_steps=10_000) as t:   # a running job
    ...     t.step(loss=0.7)
"""

__version__ = "0.1.0"


def __getattr__(name):  # lazy: importing traincast does not import torch
    if name == "trace":
        from traincast.workload import trace

        return trace
    if name == "forecast":
        from traincast.predict import forecast

        return forecast
    if name == "track":
        from traincast.online import track

        return track
    if name == "plan":
        from traincast.plan.pareto import plan

        return plan
    raise AttributeError(f"module 'traincast' has no attribute {name!r}")
