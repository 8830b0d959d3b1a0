"""An executable (and the graph it came from) is usable from any Python thread: calls from
several threads are served in turn on the executable's own thread, and a failure there is an
`EinsummableError`, never a `PanicException` (a `BaseException` that `except Exception` misses)."""

import threading

import einsummable as es
from conftest import ffn, ffn_reference, random_inputs, rel_error


def in_thread(f):
    """Runs `f` on a new thread: its value, or the exception (any BaseException) it raised."""
    outcome = {}

    def body():
        try:
            outcome["value"] = f()
        except BaseException as e:  # noqa: BLE001 -- a PanicException is what is looked for
            outcome["raised"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "raised" in outcome:
        raise AssertionError(f"the thread raised {type(outcome['raised']).__name__}: {outcome['raised']}")
    return outcome["value"]


def test_an_executable_runs_on_another_thread():
    exe = es.compile(ffn(), devices=4)
    v = random_inputs(ffn(), 1)
    y = in_thread(lambda: exe.run(v)["y"])
    assert rel_error(y, ffn_reference(v)) <= 1e-5
    # and its reports, from there too
    plan = in_thread(exe.plan)
    assert plan["devices"] == 4 and in_thread(exe.predict)["predicted_ms"] == plan["predicted_ms"]
    assert "exchange programs:" in in_thread(exe.explain)
    assert repr(exe).startswith("Executable(graph on 4 devices")


def test_compiled_on_one_thread_run_on_several_at_once():
    exe = in_thread(lambda: es.compile(ffn(), devices=4))
    inputs = [random_inputs(ffn(), seed) for seed in range(4)]
    results = [None] * len(inputs)
    failures = []

    def run(i):
        try:
            for _ in range(3):
                results[i] = exe.run(inputs[i])["y"]
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # Each call loads all its inputs and runs whole: no thread sees another's values.
    for v, y in zip(inputs, results):
        assert rel_error(y, ffn_reference(v)) <= 1e-5


def test_the_graph_is_free_while_it_compiles():
    g = ffn()
    compiling, resume = threading.Event(), threading.Event()

    def progress(line):
        if not compiling.is_set():
            compiling.set()
            resume.wait(60)

    compiled = {}
    t = threading.Thread(target=lambda: compiled.setdefault("exe", es.compile(g, devices=4, progress=progress)))
    t.start()
    try:
        assert compiling.wait(60)
        # The compile holds its own snapshot: the graph grows meanwhile, from this thread.
        x = g.inputs["x"]
        g.save(g.unary(x, "neg"), "minus_x")
    finally:
        resume.set()
        t.join()
    exe = compiled["exe"]
    assert exe.outputs == ["y"]
    v = random_inputs(ffn(), 2)
    assert rel_error(exe.run(v)["y"], ffn_reference(v)) <= 1e-5
    assert es.compile(g, devices=4).outputs == ["y", "minus_x"]
