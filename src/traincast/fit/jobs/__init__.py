"""End-to-end job regression (Gianniti/Ardagna 2018-19, AI Gauge offline).

Job-level records -- one row per training configuration (network, GPU type and
count, batch sizes, parallelism...) with a measured time (``epoch_s``,
``iteration_ms``, ``ttt_min``) -- are fitted with off-the-shelf regressors:

* feature augmentation for the linear models: the inverse ``1/x`` of every
  positive numeric feature and the pairwise cross-over products of the
  numeric features and their inverses (so ``batch/gpus`` is one column);
  categorical features are one-hot encoded;
* optional feature selection for the linear models: sequential forward
  selection by cross-validated MAPE, or Draper-Smith stepwise regression by
  partial-F p-values (statsmodels);
* model selection among linear regression (plain and augmented), ridge,
  decision tree, random forest, gradient boosting and an MLP, each with a small
  hyperparameter grid, by K-fold cross-validated mean absolute percentage
  error, fitted on the log of the target where that scores better;
* extrapolation tests (train on ``col <= threshold``, test above) and
  leave-one-group-out tests (e.g. an unseen GPU type).

Everything is a library call; ``traincast fit jobs`` and
``benchmarks/job_regression.py`` are thin wrappers.

The package: ``records`` (reading and checking job records), ``sources`` (records from the shared data and
the store), ``features`` (augmentation), ``selection`` (forward and stepwise selection), ``models`` (the
regressor families, ``JobRegressor``), ``experiments`` (extrapolation, leave-one-group-out, predicting with a
saved model), ``report`` (rankings).
"""

from traincast.fit.jobs.experiments import (
    HoldoutResult,
    JobPredictions,
    check_extrapolation_column,
    extrapolate,
    leave_one_group_out,
    parse_extrapolation,
    predict_jobs,
)
from traincast.fit.jobs.features import JobFeatures
from traincast.fit.jobs.models import (
    AUGMENTED_MODELS,
    MODEL_LABELS,
    MODEL_NAMES,
    SELECTIONS,
    JobRegressor,
    ModelScore,
    mape_pct,
    rmse,
)
from traincast.fit.jobs.records import MIN_ROWS, JobRecords, load_jobs, read_csv, records_from_frame
from traincast.fit.jobs.report import format_ranking, ranking_rows
from traincast.fit.jobs.selection import forward_select, stepwise_select
from traincast.fit.jobs.sources import (
    STORE_TARGET,
    StoreJobs,
    build_job_records,
    mlperf_records,
    store_job_records,
    vtrain_records,
)

__all__ = [
    "AUGMENTED_MODELS", "MIN_ROWS", "MODEL_LABELS", "MODEL_NAMES", "SELECTIONS", "STORE_TARGET",
    "HoldoutResult", "JobFeatures", "JobPredictions", "JobRecords", "JobRegressor", "ModelScore", "StoreJobs",
    "build_job_records", "check_extrapolation_column", "extrapolate", "format_ranking", "forward_select",
    "leave_one_group_out", "load_jobs", "mape_pct", "mlperf_records", "parse_extrapolation", "predict_jobs",
    "ranking_rows", "read_csv", "records_from_frame", "rmse", "stepwise_select", "store_job_records",
    "vtrain_records",
]
