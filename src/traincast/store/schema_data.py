"""Tables of imported public measurements (``traincast data import``).

``data_op_timings`` holds one canonical op row per measured layer/kernel
(see ``traincast.predict.opfeatures``: kind and shape fields), with the GPU name
as the data names it and ``time_ms`` (milliseconds). ``data_imports``
records each imported file once (re-importing a file replaces its rows).
"""

VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS data_imports (
    file TEXT PRIMARY KEY,              -- path relative to the imported folder
    source TEXT NOT NULL,               -- 'justus2018' | 'neusight'
    gpu TEXT NOT NULL,
    op TEXT NOT NULL,                   -- conv2d | dense | the NeuSight op folder
    rows INTEGER NOT NULL,
    skipped_rows INTEGER NOT NULL,      -- NaN / malformed rows not imported
    imported_s REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS data_op_timings (
    file TEXT NOT NULL REFERENCES data_imports(file),
    source TEXT NOT NULL,
    gpu TEXT NOT NULL,
    op TEXT NOT NULL,
    kind TEXT NOT NULL,                 -- matmul | conv | norm | softmax | elementwise
    b INTEGER, m INTEGER, n INTEGER, k INTEGER,
    cn INTEGER, cin INTEGER, cout INTEGER, h INTEGER, w INTEGER, kh INTEGER, kw INTEGER,
    stride INTEGER, pad REAL, ho INTEGER, wo INTEGER,
    rows INTEGER, cols INTEGER, numel INTEGER, n_in INTEGER,
    train_step INTEGER NOT NULL,        -- 1: TensorFlow forward+backward+update (Justus), 0: forward kernel
    framework_tf INTEGER NOT NULL,
    optimizer_code INTEGER NOT NULL,
    act INTEGER NOT NULL,
    bias INTEGER NOT NULL,
    time_ms REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS data_op_timings_gpu ON data_op_timings(gpu, kind);
"""
