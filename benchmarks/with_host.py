"""Run another benchmark script with the GPU host's issue costs set to given values (a sensitivity or a protocol's
candidate), instead of the catalog's: every forecast on a GPU that would use the catalog's host costs uses these.

Forecasts whose predictor carries a profile's host costs keep them; CPUs (no separate host) are unchanged.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/with_host.py FORWARD_US BACKWARD_US benchmarks/SCRIPT.py [ARGS...]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        fwd, bwd = float(argv[0]), float(argv[1])
    except ValueError:
        print(f"with_host: FORWARD_US and BACKWARD_US must be numbers, got {argv[0]!r} {argv[1]!r}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "src"))
    import traincast.predict.host as host

    catalog_costs = host.host_costs

    def host_costs(predictor, device):
        if device.kind == "gpu" and not host.host_measured(predictor):
            return fwd, bwd
        return catalog_costs(predictor, device)

    host.host_costs = host_costs
    script = argv[2]
    sys.argv = [script, *argv[3:]]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
