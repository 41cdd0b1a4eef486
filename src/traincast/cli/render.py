"""Rendering helpers: human units and rich tables."""

from __future__ import annotations

import json
import math
import os
import sys

from rich.console import Console
from rich.table import Table

# Piped or redirected output (`traincast gpus | grep H100`, `> report.txt`) has no terminal to measure; rich
# would then wrap every table at 80 columns and cut names to "H1…". Such output gets room for the widest
# table instead; COLUMNS, when set, still decides.
PIPE_WIDTH = 200


def make_console(stderr: bool = False) -> Console:
    """A console that measures its terminal, or gets ``PIPE_WIDTH`` columns when piped or redirected."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not (os.environ.get("COLUMNS") or stream.isatty())
    return Console(stderr=stderr, width=PIPE_WIDTH if wide else None)


console = make_console()


def dur(seconds: float | None) -> str:
    """A duration for people: ``-`` when unknown, ``never`` when infinite (a rate of zero), else us to days."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if math.isinf(seconds):
        return "never" if seconds > 0 else "-"
    seconds = max(seconds, 0.0)
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        h, m = divmod(int(round(seconds / 60)), 60)
        return f"{h} h {m:02d} m"
    return f"{seconds / 86400:.1f} d"


def usd(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def size(nbytes: float) -> str:
    for unit, f in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= f:
            return f"{nbytes / f:.2f} {unit}"
    return f"{nbytes:.0f} B"


def flops(x: float) -> str:
    for unit, f in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= f:
            return f"{x / f:.2f} {unit}"
    return f"{x:.0f} FLOP"


def count(n: float) -> str:
    for unit, f in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= f:
            return f"{n / f:.2f}{unit}"
    return str(int(n))


def split_list(s: str, what: str, cast=str) -> tuple:
    """A comma-separated option value as a tuple; ConfigError naming the option when it is bad."""
    from traincast.errors import ConfigError

    kind = {int: "whole numbers", float: "numbers"}.get(cast, "values")
    vals = []
    for x in (x.strip() for x in s.split(",")):
        if not x:
            continue
        try:
            vals.append(cast(x))
        except ValueError:
            raise ConfigError(f"{what} must be a comma-separated list of {kind}; {x!r} is not one (in {s!r})") from None
    vals = tuple(vals)
    if not vals:
        raise ConfigError(f"{what} is empty")
    return vals


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def table(title: str, columns: list[str], rows: list[list], justify_right_from: int = 1,
          compact: bool = False) -> Table:
    from rich import box

    t = Table(title=title, title_justify="left", header_style="bold",
              box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD, pad_edge=not compact,
              collapse_padding=compact)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= justify_right_from else "left", no_wrap=compact)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t
