"""Tables of imported public measurements (``traincast data import``).

``data_op_timings`` holds one canonical op row per measured layer/kernel
(see ``traincast.predict.opfeatures``: kind and shape fields), with the GPU name
as the data names it and ``time_ms`` (milliseconds). ``data_imports``
records each imported file once (re-importing a file replaces its rows).
"""

from sqlalchemy import BigInteger, Column, Double, ForeignKey, Index, Integer, Table, Text

from traincast.store.schema import metadata

data_imports = Table(
    "data_imports", metadata,
    Column("file", Text, primary_key=True),       # path relative to the imported folder
    Column("source", Text, nullable=False),       # 'justus2018' | 'neusight'
    Column("gpu", Text, nullable=False),
    Column("op", Text, nullable=False),           # conv2d | dense | the NeuSight op folder
    Column("rows", Integer, nullable=False),
    Column("skipped_rows", Integer, nullable=False),  # NaN / malformed rows not imported
    Column("imported_s", Double, nullable=False),
)

_SHAPE = ("b", "m", "n", "k", "cn", "cin", "cout", "h", "w", "kh", "kw", "stride")

data_op_timings = Table(
    "data_op_timings", metadata,
    Column("file", Text, ForeignKey("data_imports.file"), nullable=False),
    Column("source", Text, nullable=False),
    Column("gpu", Text, nullable=False),
    Column("op", Text, nullable=False),
    Column("kind", Text, nullable=False),         # matmul | conv | norm | softmax | elementwise
    *[Column(c, BigInteger) for c in _SHAPE],
    Column("pad", Double),
    Column("ho", BigInteger), Column("wo", BigInteger),
    Column("rows", BigInteger), Column("cols", BigInteger), Column("numel", BigInteger), Column("n_in", BigInteger),
    Column("train_step", Integer, nullable=False),  # 1: TensorFlow forward+backward+update (Justus), 0: forward kernel
    Column("framework_tf", Integer, nullable=False),
    Column("optimizer_code", Integer, nullable=False),
    Column("act", Integer, nullable=False),
    Column("bias", Integer, nullable=False),
    Column("time_ms", Double, nullable=False),
    Index("data_op_timings_gpu", "gpu", "kind"),
)
