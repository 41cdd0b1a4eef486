"""Saved models as data: a documented archive, not a pickle tied to class paths.

A traincast model file is a zip archive holding

``manifest.json``
    ``{"format": "traincast-model", "format_version": 1, "kind": "<what model>", "sklearn_version": "1.9.1",
    "traincast_version": "...", "created": "...", "state": {...}}``: the model's hyperparameters and learned
    state as plain JSON (what a reader needs to put the estimators together again);
``estimators/<name>.skops``
    each scikit-learn estimator, written by ``skops.io`` (a JSON schema plus NumPy arrays; loading it runs no
    code and admits only the scikit-learn, NumPy and SciPy types listed in ``TRUSTED_PREFIXES``).

A file written by another scikit-learn minor version is refused with a message naming both versions and the
one command that refits it: tree and network internals change between releases, and a model that loads
but predicts differently is worse than one that does not load.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import zipfile
from pathlib import Path

from traincast.errors import DataError

FORMAT = "traincast-model"
FORMAT_VERSION = 1
TRUSTED_PREFIXES = ("sklearn.", "numpy.", "scipy.", "functools.partial", "builtins.")


def _minor(version: str) -> tuple[str, ...]:
    return tuple(str(version).split(".")[:2])


def save_model_archive(path: str | Path, kind: str, state: dict, estimators: dict[str, object]) -> int:
    """Write ``state`` (JSON-able) and ``estimators`` (name -> scikit-learn estimator) to ``path``; returns the
    file's size in bytes."""
    import sklearn
    import skops.io as sio

    from traincast import __version__

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind,
                "sklearn_version": sklearn.__version__, "traincast_version": __version__,
                "created": _dt.datetime.now().isoformat(timespec="seconds"), "estimators": sorted(estimators),
                "state": state}
    path = Path(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
        for name, est in estimators.items():
            z.writestr(f"estimators/{name}.skops", sio.dumps(est))
    data = buf.getvalue()
    path.write_bytes(data)
    return len(data)


def load_model_archive(path: str | Path, kind: str, refit: str) -> tuple[dict, dict[str, object]]:
    """(state, estimators) of a model archive of ``kind``; DataError naming the problem (and ``refit``, the
    command that rebuilds the model) for a missing file, another format, kind or scikit-learn version."""
    import sklearn
    import skops.io as sio

    path = Path(path)
    label = str(path)
    if path.is_dir():
        raise DataError(f"{label!r} is a folder, not a traincast model file")
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise DataError(f"no model file {label!r}; build one with `{refit}`") from None
    except (zipfile.BadZipFile, OSError) as exc:
        hint = " (a pickle from traincast before 2026-11-25: those are no longer read)" if label.endswith(".pkl") else ""
        raise DataError(f"{label!r} is not a traincast model file{hint} ({exc}); rebuild it with `{refit}`") from None
    with z:
        try:
            manifest = json.loads(z.read("manifest.json"))
        except (KeyError, ValueError, UnicodeDecodeError):
            raise DataError(f"{label!r} has no readable manifest.json: not a traincast model file; rebuild it with "
                            f"`{refit}`") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise DataError(f"{label!r} is not a traincast model file; rebuild it with `{refit}`")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{label!r} is model format {manifest.get('format_version')}, this traincast reads "
                            f"{FORMAT_VERSION}; rebuild it with `{refit}`")
        if manifest.get("kind") != kind:
            raise DataError(f"{label!r} holds a {manifest.get('kind')!r} model, not a {kind!r} one")
        saved = str(manifest.get("sklearn_version", "?"))
        if _minor(saved) != _minor(sklearn.__version__):
            raise DataError(f"{label!r} was saved by scikit-learn {saved}; this is scikit-learn {sklearn.__version__}. "
                            f"Rebuild it with `{refit}` (or install scikit-learn=={saved})")
        estimators = {}
        for name in manifest.get("estimators", []):
            try:
                blob = z.read(f"estimators/{name}.skops")
                untrusted = sio.get_untrusted_types(data=blob)
                bad = [t for t in untrusted if not t.startswith(TRUSTED_PREFIXES)]
                if bad:
                    raise DataError(f"{label!r}: estimator {name!r} holds types traincast does not load "
                                    f"({', '.join(bad[:3])})")
                estimators[name] = sio.loads(blob, trusted=untrusted)
            except DataError:
                raise
            except Exception as exc:  # noqa: BLE001 - a damaged archive member, whatever skops raises
                raise DataError(f"{label!r}: estimator {name!r} cannot be read ({type(exc).__name__}); rebuild the "
                                f"model with `{refit}`") from None
    return dict(manifest.get("state") or {}), estimators
