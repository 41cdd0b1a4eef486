"""Tables of the measure package (see docs/measure.md for every column).

All times are milliseconds (``*_ms``), sizes bytes (``*_bytes``), FLOPs count a
multiply-add as two. Every figure refers to ``measure_fingerprints.id`` (the
machine and software it was measured on). JSON columns hold dicts/lists and
can be read in SQL with ``json_extract``.
"""

VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS measure_fingerprints (
    id TEXT PRIMARY KEY,                -- 16 hex of sha256 over the fields below
    device TEXT NOT NULL,               -- 'cpu' or 'cuda:N'
    cpu_model TEXT,
    cpu_logical_cores INTEGER,
    cpu_affinity_cores INTEGER,
    num_threads INTEGER,                -- torch.get_num_threads() while measuring
    gpu_name TEXT,
    gpu_count INTEGER,
    gpu_memory_bytes INTEGER,
    gpu_capability TEXT,
    gpu_driver TEXT,
    torch_version TEXT,
    cuda_version TEXT,
    cudnn_version INTEGER,
    python_version TEXT,
    os TEXT,
    hostname_hash TEXT,
    created_s REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS measure_campaigns (
    id TEXT PRIMARY KEY,                -- given by --campaign or derived from the settings
    seed INTEGER NOT NULL,
    ops TEXT NOT NULL,                  -- comma list of op names drawn from
    phase TEXT NOT NULL,                -- 'forward' | 'train'
    device TEXT NOT NULL,
    dtype TEXT NOT NULL,
    size TEXT NOT NULL,                 -- 'small' | 'medium' | 'large' (shape caps)
    fixed_json TEXT NOT NULL,           -- parameters pinned by --set
    policy_json TEXT NOT NULL,          -- TimingPolicy used
    n_target INTEGER NOT NULL,          -- samples asked for last time
    created_s REAL NOT NULL,
    updated_s REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS measure_layer_samples (
    campaign_id TEXT NOT NULL REFERENCES measure_campaigns(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,               -- sample number; its config is a function of (seed, idx)
    op TEXT NOT NULL,                   -- traincast.measure.ops name: conv2d, linear, sdpa, ...
    op_class TEXT NOT NULL,             -- workload OP_CLASSES: conv, matmul, attention, norm, ...
    phase TEXT NOT NULL,                -- 'forward' (autograd on) | 'train' (fwd + bwd + SGD step)
    device TEXT NOT NULL,
    dtype TEXT NOT NULL,
    params_json TEXT NOT NULL,          -- the op's configuration, e.g. {"batch":8,"in_channels":64,...}
    input_shapes_json TEXT NOT NULL,    -- [[...], ...] activations then weights
    output_shape_json TEXT NOT NULL,
    flops REAL,                         -- FLOPs of what was timed (phase)
    fwd_flops REAL,                     -- forward FLOPs alone
    flops_source TEXT,                  -- 'counter' (FlopCounterMode) | 'formula'
    bytes_read REAL,                    -- of what was timed
    bytes_written REAL,
    weight_bytes REAL,                  -- parameters of the op
    median_ms REAL,                     -- NULL when error is set
    iqr_ms REAL,
    cov REAL,                           -- std/mean without Tukey outliers
    mean_ms REAL,
    min_ms REAL,
    n_repeats INTEGER,
    inner INTEGER,                      -- calls per timed repeat (short ops are looped)
    n_outliers INTEGER,
    threads INTEGER,
    load_1m REAL,                       -- 1-minute load average when timed (others' work on the machine)
    error TEXT,                         -- why the sample could not be timed (e.g. out of memory)
    fingerprint_id TEXT REFERENCES measure_fingerprints(id),
    created_s REAL NOT NULL,
    PRIMARY KEY (campaign_id, idx)
);
CREATE INDEX IF NOT EXISTS measure_layer_samples_op ON measure_layer_samples(op, phase, device);

CREATE TABLE IF NOT EXISTS measure_model_timings (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    seq_len INTEGER,
    device TEXT NOT NULL,
    optimizer TEXT,
    precision TEXT,
    warmup INTEGER NOT NULL,
    n_steps INTEGER NOT NULL,
    median_ms REAL NOT NULL,            -- one whole training step
    iqr_ms REAL NOT NULL,
    cov REAL NOT NULL,
    mean_ms REAL NOT NULL,
    min_ms REAL NOT NULL,
    step_ms_json TEXT NOT NULL,         -- every timed step
    profiled_steps INTEGER NOT NULL,    -- steps under torch.profiler (0: no breakdown)
    profiled_step_ms REAL,              -- mean step time under the profiler (its overhead included)
    per_phase_json TEXT,                -- {"forward": ms, "backward": ms, "optimizer": ms, "other": ms}
    per_module_json TEXT,               -- {module path: {"forward_ms":..,"backward_ms":..,"total_ms":..}}
    per_aten_json TEXT,                 -- {aten name: {"forward_ms":..,"backward_ms":..,"optimizer_ms":..,"other_ms":..,"count":..}}
    threads INTEGER,
    load_1m REAL,
    fingerprint_id TEXT REFERENCES measure_fingerprints(id),
    created_s REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS measure_ddp_timings (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    procs INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,        -- per process
    backend TEXT NOT NULL,              -- 'gloo' | 'nccl'
    device TEXT NOT NULL,
    warmup INTEGER NOT NULL,
    n_steps INTEGER NOT NULL,
    iter_median_ms REAL NOT NULL,       -- DDP training iteration (slowest rank each step)
    iter_iqr_ms REAL NOT NULL,
    iter_cov REAL NOT NULL,
    comm_hook_ms REAL,                  -- median per step: sum over buckets of all-reduce issue -> done (overlaps backward)
    allreduce_median_ms REAL,           -- standalone all-reduce of all gradient buckets, back to back
    allreduce_iqr_ms REAL,
    grad_bytes INTEGER,                 -- total gradient size
    bucket_bytes_json TEXT,             -- [bytes of each DDP bucket]
    threads_per_proc INTEGER,
    detail_json TEXT,                   -- per-rank figures, all-reduce per bucket size, ...
    fingerprint_id TEXT REFERENCES measure_fingerprints(id),
    created_s REAL NOT NULL
);
"""
