"""Ctrl-C (SIGINT) interrupts a compile or a run under way with KeyboardInterrupt at once, not
when the call ends, and leaves the graph and the executable usable."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import einsummable as es
from conftest import ffn, rel_error


def test_ctrl_c_interrupts_a_compile_under_way():
    lines = []
    caught = threading.Event()

    def progress(line):
        lines.append(line)
        if len(lines) == 1:
            # Ctrl-C at the first stage; the compile then waits here until its caller has had
            # the KeyboardInterrupt (the timeout only keeps a failing run from hanging).
            os.kill(os.getpid(), signal.SIGINT)
            caught.wait(60)

    g = ffn()
    try:
        with pytest.raises(KeyboardInterrupt):
            es.compile(g, devices=4, progress=progress)
        # The interrupt came while the compile was still held at its first stage.
        assert len(lines) == 1, lines
    finally:
        caught.set()
    # The abandoned compile calls the callback no more; the graph compiles again, and runs.
    exe = es.compile(g, devices=4)
    rng = np.random.default_rng(3)
    v = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s, _ in exe.inputs}
    want = np.maximum(v["x"].astype(np.float64) @ v["w1"], 0.0) @ v["w2"]
    assert rel_error(exe.run(v)["y"], want) <= 1e-5
    assert len(lines) == 1, lines


class Announced:
    """An array that sets `event` when NumPy takes its value (as `run` starts)."""

    def __init__(self, value: np.ndarray, event: threading.Event):
        self.value, self.event = value, event

    def __array__(self, dtype=None, copy=None):
        self.event.set()
        return self.value


def test_ctrl_c_during_a_run_is_raised_by_the_run():
    n = 384  # a run of two n x n x n matmuls
    g = es.Graph()
    x = g.input("x", {"i": n, "j": n})
    w = g.input("w", {"j": n, "k": n})
    g.save(g.matmul(g.matmul(x, w), g.input("u", {"k": n, "l": n})), "y")
    exe = es.compile(g, devices=2)
    eye = np.eye(n, dtype=np.float32)
    exe.run({"x": np.zeros((n, n), np.float32), "w": eye, "u": eye})  # y = x
    started = threading.Event()
    main = threading.main_thread().ident
    this = test_ctrl_c_during_a_run_is_raised_by_the_run.__code__

    def interrupt():
        # Ctrl-C once `run` has its input and this thread is back in the test's frame: inside
        # `run`'s own code, no longer in `Announced.__array__`. This thread holds the GIL
        # meanwhile, so `run` cannot have returned.
        started.wait(60)
        while sys._current_frames()[main].f_code is not this:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    # How the call to `run` ends: `c_return` (it returned a value, and the interpreter raised
    # the KeyboardInterrupt after it) or `c_exception` (it raised the KeyboardInterrupt itself).
    ends = []

    def profile(frame, event, arg):
        if event in ("c_return", "c_exception") and getattr(arg, "__self__", None) is exe:
            ends.append(event)

    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sys.setprofile(profile)
            try:
                exe.run({"x": Announced(np.ones((n, n), np.float32), started)})
            finally:
                sys.setprofile(None)
    finally:
        started.set()
        sender.join()
    assert ends == ["c_exception"]
    # The executable is usable: x is the interrupted run's (once under way, the run finishes
    # on the executable's thread) or, had the Ctrl-C come before it loaded anything, the
    # zeros before it.
    y = exe.run({})["y"]
    assert np.array_equal(y, np.ones((n, n), np.float32)) or np.array_equal(y, np.zeros((n, n), np.float32)), y[0, :4]
