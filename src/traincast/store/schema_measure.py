"""Tables of the measure package (see docs/measure.md for every column).

All times are milliseconds (``*_ms``), sizes bytes (``*_bytes``), FLOPs count a
multiply-add as two. Every figure refers to ``measure_fingerprints.id`` (the
machine and software it was measured on). ``*_json`` columns hold JSON text
(dicts/lists).
"""

from sqlalchemy import BigInteger, Column, Double, ForeignKey, Index, Integer, Table, Text

from traincast.store.schema import metadata


def _fp():
    return Column("fingerprint_id", Text, ForeignKey("measure_fingerprints.id"))


measure_fingerprints = Table(
    "measure_fingerprints", metadata,
    Column("id", Text, primary_key=True),          # 16 hex of sha256 over the fields below
    Column("device", Text, nullable=False),        # 'cpu' or 'cuda:N'
    Column("cpu_model", Text),
    Column("cpu_logical_cores", Integer),
    Column("cpu_affinity_cores", Integer),
    Column("num_threads", Integer),                # torch.get_num_threads() while measuring
    Column("gpu_name", Text),
    Column("gpu_count", Integer),
    Column("gpu_memory_bytes", BigInteger),
    Column("gpu_capability", Text),
    Column("gpu_driver", Text),
    Column("torch_version", Text),
    Column("cuda_version", Text),
    Column("cudnn_version", Integer),
    Column("python_version", Text),
    Column("os", Text),
    Column("hostname_hash", Text),
    Column("created_s", Double, nullable=False),
)

measure_campaigns = Table(
    "measure_campaigns", metadata,
    Column("id", Text, primary_key=True),          # given by --campaign or derived from the settings
    Column("seed", Integer, nullable=False),
    Column("ops", Text, nullable=False),           # comma list of op names drawn from
    Column("phase", Text, nullable=False),         # 'forward' | 'train'
    Column("device", Text, nullable=False),
    Column("dtype", Text, nullable=False),
    Column("size", Text, nullable=False),          # 'small' | 'medium' | 'large' (shape caps)
    Column("fixed_json", Text, nullable=False),    # parameters pinned by --set
    Column("policy_json", Text, nullable=False),   # TimingPolicy used
    Column("n_target", Integer, nullable=False),   # samples asked for last time
    Column("created_s", Double, nullable=False),
    Column("updated_s", Double, nullable=False),
)

measure_layer_samples = Table(
    "measure_layer_samples", metadata,
    Column("campaign_id", Text, ForeignKey("measure_campaigns.id", ondelete="CASCADE"), primary_key=True),
    Column("idx", Integer, primary_key=True, autoincrement=False),  # its config is a function of (seed, idx)
    Column("op", Text, nullable=False),            # traincast.measure.ops name: conv2d, linear, sdpa, ...
    Column("op_class", Text, nullable=False),      # workload OP_CLASSES: conv, matmul, attention, norm, ...
    Column("phase", Text, nullable=False),         # 'forward' (autograd on) | 'train' (fwd + bwd + SGD step)
    Column("device", Text, nullable=False),
    Column("dtype", Text, nullable=False),
    Column("params_json", Text, nullable=False),
    Column("input_shapes_json", Text, nullable=False),
    Column("output_shape_json", Text, nullable=False),
    Column("flops", Double),                       # FLOPs of what was timed (phase)
    Column("fwd_flops", Double),
    Column("flops_source", Text),                  # 'counter' (FlopCounterMode) | 'formula'
    Column("bytes_read", Double),
    Column("bytes_written", Double),
    Column("weight_bytes", Double),
    Column("median_ms", Double),                   # NULL when error is set
    Column("iqr_ms", Double),
    Column("cov", Double),
    Column("mean_ms", Double),
    Column("min_ms", Double),
    Column("n_repeats", Integer),
    Column("inner", Integer),                      # calls per timed repeat (short ops are looped)
    Column("n_outliers", Integer),
    Column("threads", Integer),
    Column("load_1m", Double),
    Column("error", Text),                         # why the sample could not be timed (e.g. out of memory)
    _fp(),
    Column("created_s", Double, nullable=False),
    Index("measure_layer_samples_op", "op", "phase", "device"),
)

measure_model_timings = Table(
    "measure_model_timings", metadata,
    Column("id", Integer, primary_key=True),
    Column("model", Text, nullable=False),
    Column("batch_size", Integer, nullable=False),
    Column("seq_len", Integer),
    Column("device", Text, nullable=False),
    Column("optimizer", Text),
    Column("precision", Text),
    Column("warmup", Integer, nullable=False),
    Column("n_steps", Integer, nullable=False),
    Column("median_ms", Double, nullable=False),   # one whole training step
    Column("iqr_ms", Double, nullable=False),
    Column("cov", Double, nullable=False),
    Column("mean_ms", Double, nullable=False),
    Column("min_ms", Double, nullable=False),
    Column("step_ms_json", Text, nullable=False),  # every timed step
    Column("profiled_steps", Integer, nullable=False),
    Column("profiled_step_ms", Double),
    Column("per_phase_json", Text),
    Column("per_module_json", Text),
    Column("per_aten_json", Text),
    Column("threads", Integer),
    Column("load_1m", Double),
    _fp(),
    Column("created_s", Double, nullable=False),
)

measure_ddp_timings = Table(
    "measure_ddp_timings", metadata,
    Column("id", Integer, primary_key=True),
    Column("model", Text, nullable=False),
    Column("procs", Integer, nullable=False),
    Column("batch_size", Integer, nullable=False),  # per process
    Column("backend", Text, nullable=False),        # 'gloo' | 'nccl'
    Column("device", Text, nullable=False),
    Column("warmup", Integer, nullable=False),
    Column("n_steps", Integer, nullable=False),
    Column("iter_median_ms", Double, nullable=False),
    Column("iter_iqr_ms", Double, nullable=False),
    Column("iter_cov", Double, nullable=False),
    Column("comm_hook_ms", Double),
    Column("allreduce_median_ms", Double),
    Column("allreduce_iqr_ms", Double),
    Column("grad_bytes", BigInteger),
    Column("bucket_bytes_json", Text),
    Column("threads_per_proc", Integer),
    Column("detail_json", Text),
    _fp(),
    Column("created_s", Double, nullable=False),
)
