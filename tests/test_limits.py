"""Limits of the machine: outputs that cannot be allocated, scratch memory
that cannot be had, absurd thread counts and Ctrl-C.  Each ends in a Python
exception (or a normal return), never a crash."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fastnorm

# A float32 input whose every element is the same 4 bytes (zero strides):
# 2**41 values, 8 TiB of output.
HUGE = np.broadcast_to(np.float32(1.5), (2**20, 2**21))
ROWS = np.broadcast_to(np.float64(1.0), (2**20, 1))     # per-row statistics of HUGE
COLS = np.broadcast_to(np.float64(1.0), (1, 2**21))     # per-column (axis 0)

IMPOSSIBLE = {
    "mean_var": lambda: fastnorm.mean_var(np.broadcast_to(np.float32(1.0), (2**40, 2)), axis=1),
    "layer_norm": lambda: fastnorm.layer_norm(HUGE),
    "rms_norm": lambda: fastnorm.rms_norm(HUGE),
    "batch_norm": lambda: fastnorm.batch_norm(HUGE, axis=0),
    "group_norm": lambda: fastnorm.group_norm(HUGE, 1),
    "instance_norm": lambda: fastnorm.instance_norm(HUGE),
    "weight_norm": lambda: fastnorm.weight_norm(HUGE),
    "weight_standardize": lambda: fastnorm.weight_standardize(HUGE),
    "layer_norm_backward": lambda: fastnorm.layer_norm_backward(HUGE, HUGE, ROWS, ROWS),
    "rms_norm_backward": lambda: fastnorm.rms_norm_backward(HUGE, HUGE, ROWS),
    "batch_norm_backward": lambda: fastnorm.batch_norm_backward(HUGE, HUGE, COLS, COLS, axis=0),
    "group_norm_backward": lambda: fastnorm.group_norm_backward(HUGE, HUGE, ROWS, ROWS, 1),
}


@pytest.mark.parametrize("name", list(IMPOSSIBLE))
def test_an_output_that_cannot_be_allocated_is_a_memory_error(name):
    with pytest.raises(MemoryError):
        IMPOSSIBLE[name]()


def test_scratch_memory_that_cannot_be_allocated_is_a_memory_error():
    # One slice of 2**50 values split across threads needs a block of
    # statistics per 4096 values: terabytes.  The kernel's malloc fails and
    # the call raises (with one thread it would instead read the 2**50
    # values, for days).
    fastnorm.set_num_threads(2)
    x = np.broadcast_to(np.float64(1.0), (2**50,))
    with pytest.raises(MemoryError, match="scratch"):
        fastnorm.mean_var(x)


@pytest.mark.parametrize("setting", ["set_num_threads(100_000)", "set_num_threads(2**40)",
                                     "OMP_NUM_THREADS=100000"])
def test_a_thread_count_beyond_the_system_limits_does_not_crash(run_python, setting):
    # set_num_threads(100000) made OpenMP start a team of 100000 threads,
    # past the process limit: a segfault.  2**40 was an OverflowError.  A
    # call now starts at most max(64, processors) threads.
    env = {}
    code = "import numpy as np, fastnorm\n"
    if setting.startswith("OMP"):
        env["OMP_NUM_THREADS"] = setting.split("=")[1]
    else:
        code += f"fastnorm.{setting}\n"
    code += textwrap.dedent("""
        x = np.random.default_rng(0).standard_normal((3, 100_000))
        y = fastnorm.layer_norm(x)
        fastnorm.set_num_threads(1)
        assert (y == fastnorm.layer_norm(x)).all()
        print("ok", fastnorm.get_num_threads())
    """)
    r = run_python(code, **env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ok")


def test_ctrl_c_while_calls_run_is_a_keyboard_interrupt():
    # The GIL is released inside a call; SIGINT is handled when the call
    # returns: a KeyboardInterrupt, not a crash or a hang.
    # Python only turns SIGINT into KeyboardInterrupt if SIGINT was not
    # ignored when it started, and a shell ignores it for background jobs
    # (a CI script run with &): the child sets the handler itself.
    code = textwrap.dedent("""
        import signal, numpy as np, fastnorm
        signal.signal(signal.SIGINT, signal.default_int_handler)
        x = np.random.default_rng(0).standard_normal((64, 50_000)).astype(np.float32)
        print("ready", flush=True)
        for _ in range(100_000):
            fastnorm.layer_norm(x)
    """)
    # From the tests folder: in the repository root the source folder
    # fastnorm/ would shadow the installed package.
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert "KeyboardInterrupt" in err, err[-2000:]
    # An uncaught KeyboardInterrupt ends Python with status 1 or, since
    # 3.8 on POSIX, by SIGINT itself (-2); a crash would be SIGSEGV/SIGABRT.
    assert p.returncode in (1, -signal.SIGINT), (p.returncode, err[-2000:])
