"""Entry point of one DDP worker process: ``python -m traincast.measure._ddp_worker RANK WORLD PORT CFG OUT``."""

import json
import sys

from traincast.measure.ddp import _worker

if __name__ == "__main__":
    rank, world, port, cfg_path, out_path = sys.argv[1:6]
    with open(cfg_path) as f:
        cfg = json.load(f)
    _worker(int(rank), int(world), int(port), cfg, out_path, destroy=False)
    # Leave without running gloo's C++ destructors: tearing a process group down
    # while the peer closes its sockets sometimes aborts the process
    # ("terminate called without an active exception") after the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(0)
