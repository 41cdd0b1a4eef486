"""YAML documents read with libyaml's C parser where PyYAML was built with it, else with PyYAML's pure-Python one.

Both are the safe loader (plain scalars, lists and mappings; no Python objects). The C parser reads the shipped
catalog about ten times faster, which every command that loads a catalog, a profile or a scenario pays once.
"""

from __future__ import annotations

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text):
    """``yaml.safe_load`` with the fastest safe loader this PyYAML has; raises ``yaml.YAMLError`` as it does."""
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a safe loader
