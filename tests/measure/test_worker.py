"""Measurement work in fresh processes (traincast.measure.worker)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from traincast.errors import ConfigError, UnknownNameError
from traincast.measure import worker
from traincast.workload import zoo


def test_call_runs_in_another_process_and_returns_or_raises():
    assert worker.call(os.getpid) != os.getpid()
    assert worker.call(divmod, 7, 2) == (3, 1)
    assert worker.call(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(UnknownNameError, match="no-such-model"):
        worker.call(zoo.get, "no-such-model")


def test_a_process_that_dies_without_an_answer_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"died \(exit code 3\)"):
        worker.call(os._exit, 3)
    with worker.start(time.sleep, (30,)) as w:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="ran past 1 s"):
            w.result(timeout=1)
        assert time.monotonic() - t0 < 15 and w.poll() is not None


def test_wait_all_stops_the_others_when_one_rank_fails():
    """A rank that fails would leave its peers waiting in a collective: they are stopped at once."""
    sleeper = worker.start(time.sleep, (60,))
    failing = worker.start(zoo.get, ("no-such-model",))
    try:
        t0 = time.monotonic()
        with pytest.raises(UnknownNameError):
            worker.wait_all([sleeper, failing], timeout=120)
        assert time.monotonic() - t0 < 30
        assert sleeper.poll() is not None
    finally:
        sleeper.close()
        failing.close()
    with worker.start(divmod, (9, 4)) as a, worker.start(pow, (2, 5)) as b:
        assert worker.wait_all([a, b]) == [(2, 1), 32]


def test_a_caller_script_without_a_main_guard_is_not_rerun(tmp_path):
    """multiprocessing's spawn re-imports the caller's script in the child; the worker does not."""
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent("""
        import os
        from traincast.measure import worker
        print("child pid differs:", worker.call(os.getpid) != os.getpid())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("child pid differs: True") == 1


class _TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def test_what_does_not_survive_pickling_comes_back_as_a_plain_error():
    """An exception whose constructor takes other arguments dumps but does not load; a value that does not
    pickle cannot be sent at all: both come back as errors naming what happened."""
    import pickle

    status, err = pickle.loads(worker._sendable(("err", _TwoArgError(1, 2)), divmod))
    assert status == "err" and type(err) is RuntimeError and "_TwoArgError: 1/2" in str(err)
    status, err = pickle.loads(worker._sendable(("ok", lambda: 0), divmod))
    assert status == "err" and "result of 'divmod' cannot be sent back" in str(err)
    assert pickle.loads(worker._sendable(("ok", (3, 1)), divmod)) == ("ok", (3, 1))
