"""Where traincast keeps a user's files: ``$TRAINCAST_HOME``, else ``$XDG_DATA_HOME/traincast``
(``~/.local/share/traincast``): device profiles (``profiles/``), GPU adaptations (``adaptations/``) and the
embedded database."""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    base = os.environ.get("TRAINCAST_HOME")
    if base:
        return Path(base).expanduser()
    return Path(os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share"))) / "traincast"


def profiles_dir() -> Path:
    return home_dir() / "profiles"


def adaptations_dir() -> Path:
    return home_dir() / "adaptations"
