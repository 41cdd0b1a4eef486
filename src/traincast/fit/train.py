"""Build the shipped learned op-time model (``traincast fit layers``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from traincast.errors import DataError
from traincast.fit.learn import OpTimeRegressor, exclude_gpu_groups, training_rows

MAX_MODEL_BYTES = 20 * 1024 * 1024
DEFAULT_ROWS_PER_FILE = 1500
DEFAULT_ESTIMATOR = "hybrid"  # see docs/learned.md, "Choosing the estimator"


def harness_floors(rows) -> dict:
    """Per kind of kernel (``traincast.predict.learned.harness_floor_keys``): the smallest measured latency
    on each GPU (catalog name) and the median of those over the GPUs (``default``, for a GPU the data
    lacks). The kernel data's timing harness adds about that much to every kernel of the kind."""
    from traincast.predict import opfeatures as F
    from traincast.predict.learned import harness_floor_keys

    if rows is None or len(rows) == 0:
        return {}
    keys = harness_floor_keys(rows)
    names = rows["gpu"].astype(str)
    gpus = names.map({g: F._device_by_name(g).name for g in names.unique()}).to_numpy()
    t = rows["time_ms"].to_numpy(dtype=float)
    out = {}
    for key in sorted(set(keys)):
        sel = keys == key
        per = {g: float(np.min(t[sel & (gpus == g)])) for g in sorted(set(gpus[sel]))}
        out[str(key)] = dict(per, default=float(np.median(list(per.values()))))
    return out


def fit_layers(data_dir=None, out: str | Path | None = None, max_rows_per_file: int = DEFAULT_ROWS_PER_FILE,
               exclude_groups=(), store=None, seed: int = 0, log=None, save: bool | None = None,
               exclude_sources=(), **params) -> tuple[OpTimeRegressor, Path | None]:
    """Fit an :class:`OpTimeRegressor` on the Justus + NeuSight rows (files, or an imported ``store``)
    and save it as data (:meth:`~traincast.predict.opmodel.OpTimeModel.save`) to ``out`` (default: the shipped
    model path).

    ``save``: None saves where ``out`` is given or no GPU group was left out (a
    model fitted without some GPUs never replaces the shipped one unasked);
    False never saves (returns path None); True always does."""
    from traincast.predict import opfeatures as F

    t0 = time.perf_counter()
    if store is not None:
        from traincast.fit.importer import load_from_store

        rows = load_from_store(store)
        rows = rows.groupby(["source", "gpu", "op"], group_keys=False).apply(
            lambda g: g.sample(min(len(g), max_rows_per_file), random_state=seed))
        rows = F.attach_devices(rows.reset_index(drop=True))
        rows["gpu_group"] = rows["gpu"].map(F.gpu_group)
        rows = exclude_gpu_groups(rows, exclude_groups)
    else:
        rows = training_rows(data_dir, max_rows_per_file=max_rows_per_file, seed=seed, exclude_groups=exclude_groups,
                             exclude_sources=exclude_sources)
    if rows.empty:
        raise DataError("no training rows left (every GPU excluded?)")
    params.setdefault("estimator", DEFAULT_ESTIMATOR)
    model = OpTimeRegressor(**params).fit(rows, rows["time_ms"].to_numpy())
    neu = rows[rows["source"] == "neusight"]
    model.min_time_ms_ = float(neu["time_ms"].min()) if len(neu) else 0.0
    model.harness_floor_ms_ = harness_floors(neu)
    model.n_rows_ = int(len(rows))
    model.trained_on_groups_ = tuple(sorted(rows["gpu_group"].unique()))
    model.fit_seconds_ = time.perf_counter() - t0
    if log:
        log(f"fitted on {len(rows)} rows of {', '.join(model.trained_on_groups_)} in {model.fit_seconds_:.0f} s"
            f" (estimator {model.estimator}, ratios to the {model.get_params()['normalizer']} time)")
        for line in model.summary():
            log(f"  {line}")
    path = None
    if save is None:
        save = out is not None or not (exclude_groups or exclude_sources)
    if save:
        from traincast.predict.learned import default_model_path

        path = Path(out) if out is not None else default_model_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        size = model.save(path)
        if size > MAX_MODEL_BYTES:
            path.unlink()
            raise DataError(f"the model is {size / 2**20:.1f} MiB, over the 20 MiB limit; lower max_iter or max_leaf_nodes")
        if log:
            log(f"saved {path} ({size / 2**20:.2f} MiB)")
    return model, path
