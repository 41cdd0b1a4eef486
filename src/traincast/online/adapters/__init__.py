"""Thin adapters from training frameworks to :class:`traincast.online.Tracker`.

Each module imports its framework when it is imported itself:
``traincast.online.adapters.huggingface.TraincastCallback`` (transformers),
``traincast.online.adapters.lightning.TraincastCallback`` (Lightning),
``traincast.online.adapters.keras.TraincastCallback`` (Keras).
"""
