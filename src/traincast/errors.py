"""Errors a user can cause.

Every error that follows from what a user typed or wrote (an unknown model or
GPU, a malformed spec, an impossible configuration) is a ``TraincastError``
subclass whose message says what was wrong and what would be right. The CLI
prints the message and exits with code 2; nothing a user can type produces a
traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TraincastError(Exception):
    """Base class of all errors a user can cause."""

    exit_code = 2


class UnknownNameError(TraincastError):
    """A model, GPU, instance, op or optimizer name that is not known."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        self.kind = kind
        self.name = name
        known = sorted(set(known))
        self.known = known
        self.suggestions = suggest(name, known)
        msg = f"unknown {kind} {name!r}"
        if self.suggestions:
            msg += f"; did you mean {', '.join(repr(s) for s in self.suggestions)}?"
        else:
            shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
            msg += f"; known: {shown}"
        super().__init__(msg)

    def __reduce__(self):  # survives pickling (errors raised in a worker process come back whole)
        return type(self), (self.kind, self.name, self.known)


class SpecError(TraincastError):
    """A malformed model spec, catalog file or scenario file."""


class ConfigError(TraincastError):
    """An impossible or inconsistent configuration (batch < GPUs, negative sizes...)."""


class TraceError(TraincastError):
    """A model that cannot be traced with the inputs given (shapes that do not compose)."""


class DataError(TraincastError):
    """Input data files (CSV, logs) that cannot be read."""


def suggest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Close matches for ``name`` among ``known``, case-insensitively."""
    known = list(known)
    lower = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(lower), n=n, cutoff=0.6)
    # substring matches help for things like 'a100' -> 'A100-SXM4-80GB'
    for k_low, k in lower.items():
        if len(hits) >= n:
            break
        if name.lower() in k_low and k_low not in hits:
            hits.append(k_low)
    return [lower[h] for h in hits]


def positive(name: str, value: float | int) -> None:
    """Raise ConfigError unless ``value`` is a finite number > 0."""
    if value is None or not 0 < value < float("inf"):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def png_path(path, create_folder: bool = False, option: str = "--plot"):
    """``path`` as a PNG file to write (:func:`writable_file`, and it must end in .png); with
    ``create_folder`` its folder is made. Checked before any long work."""
    from pathlib import Path

    p = Path(path).expanduser()
    if not p.is_dir():
        if p.suffix.lower() != ".png":
            raise ConfigError(f"plot path must end in .png, got {str(path)!r}")
        if create_folder and not p.parent.exists():
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot make the folder {str(p.parent)!r} for the plot: {exc.strerror or exc}") from None
    return writable_file(p, option)


def writable_file(path, option: str = "--out"):
    """``path`` as a file to write later: not a folder, in a folder that exists (ConfigError otherwise), so that
    a long run does not end in an error about where to put its result."""
    from pathlib import Path

    p = Path(path).expanduser()
    if p.is_dir():
        raise ConfigError(f"{option} {str(path)!r} is a folder; give a file name")
    if not p.parent.is_dir():
        raise ConfigError(f"{option} {str(path)!r}: folder {str(p.parent)!r} does not exist")
    return p


def read_text_file(path, what: str = "file") -> str:
    """The UTF-8 text of a file the user named; a folder, a missing file or bytes that are not UTF-8 text are one
    clear error naming the file (:class:`DataError`)."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise DataError(f"{what} {str(p)!r} is a folder; give a file")
    try:
        return p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{what} {str(p)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{what} {str(p)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from None
