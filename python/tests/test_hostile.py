"""The Python half of the hostile-input corpus: odd and hostile calls each raise an
EinsummableError subclass (an ``Exception``, never a ``PanicException``, never a crash) or
give the right result."""

import math

import numpy as np
import pytest

import einsummable as es


def graph():
    g = es.Graph()
    x = g.input("x", {"tokens": 8, "d_model": 4})
    w = g.input("w", {"d_model": 4, "d_ff": 16})
    return g, x, w


def attention_inputs(g, layout=("heads", "tokens", "d_head")):
    sizes = {"heads": 4, "kv_heads": 2, "tokens": 8, "d_head": 4}
    q = g.input("q", {n: sizes[n] for n in layout})
    kv_layout = tuple("kv_heads" if n == "heads" else n for n in layout)
    k = g.input("k", {n: sizes[n] for n in kv_layout})
    v = g.input("v", {n: sizes[n] for n in kv_layout})
    return q, k, v


# Each case builds on a fresh graph and must raise the named EinsummableError subclass.
BUILDER_CASES = {
    # Operands bound by index name, never by position.
    "binary with a misspelt index": (es.GraphError, lambda g, x, w: g.binary(x, g.input("b", {"d_modle": 4}), "add")),
    "binary with clashing extents": (es.GraphError, lambda g, x, w: g.binary(x, g.input("b", {"d_model": 5}), "add")),
    "matmul sharing no index": (es.GraphError, lambda g, x, w: g.matmul(x, g.input("u", {"a": 4, "b": 2}))),
    "matmul sharing both indices": (es.GraphError, lambda g, x, w: g.matmul(x, g.input("u", {"d_model": 4, "tokens": 8}))),
    "einsum letter naming two indices": (es.GraphError, lambda g, x, w: g.einsum("td,df->tf", x, g.input("u", {"d_out": 4, "f": 2}))),
    "rmsnorm weight over another index": (es.GraphError, lambda g, x, w: g.rmsnorm(x, g.input("n", {"d_ff": 4}), "d_model")),
    "attention in Hugging Face's layout": (
        es.GraphError,
        lambda g, x, w: g.attention(*attention_inputs(g, ("tokens", "heads", "d_head")), "tokens", "d_head"),
    ),
    "attention with an unknown sequence": (
        es.GraphError,
        lambda g, x, w: g.attention(*attention_inputs(g), "seq", "d_head"),
    ),
    # Bad arguments.
    "an empty equation": (es.GraphError, lambda g, x, w: g.einsum("", x)),
    "an equation with no arrow": (es.GraphError, lambda g, x, w: g.einsum("td", x)),
    "an equation with too many operands": (es.GraphError, lambda g, x, w: g.einsum("td,df,fe->te", x, w)),
    "a zero extent": (es.GraphError, lambda g, x, w: g.input("z", {"i": 0})),
    "a repeated index": (es.GraphError, lambda g, x, w: g.einsum("tt->t", x)),
    "softmax over an unknown index": (es.GraphError, lambda g, x, w: g.softmax(x, "vocab")),
    "reduce over an unknown index": (es.GraphError, lambda g, x, w: g.reduce(x, ["vocab"])),
    "an unknown reduction": (es.GraphError, lambda g, x, w: g.reduce(x, ["d_model"], "median")),
    "a NaN eps": (es.GraphError, lambda g, x, w: g.rmsnorm(x, g.input("n", {"d_model": 4}), "d_model", math.nan)),
    "a negative eps": (es.GraphError, lambda g, x, w: g.rmsnorm(x, g.input("n", {"d_model": 4}), "d_model", -1.0)),
    "sequence ends that overrun": (es.GraphError, lambda g, x, w: g.rope(x, "tokens", "d_model", seq_ends=[4, 16])),
    "sequence ends that go back": (es.GraphError, lambda g, x, w: g.rope(x, "tokens", "d_model", seq_ends=[6, 4, 8])),
    "an unknown role": (es.EinsummableError, lambda g, x, w: g.role("d_ff", "experts")),
    "an unknown dtype": (es.DTypeError, lambda g, x, w: g.input("y", {"i": 2}, "int4")),
}


@pytest.mark.parametrize("name", sorted(BUILDER_CASES))
def test_bad_builder_calls_raise_typed_errors(name):
    error, call = BUILDER_CASES[name]
    g, x, w = graph()
    with pytest.raises(error):
        call(g, x, w)
    # The failed call leaves the graph usable.
    g.save(g.matmul(x, w), "y")
    assert es.compile(g, devices=2).outputs == ["y"]


COMPILE_CASES = {
    "zero devices": dict(devices=0),
    "a billion devices": dict(devices=10**9),
    "a negative memory budget": dict(memory_budget=-1.0),
    "a NaN memory budget": dict(memory_budget=math.nan),
    "an unknown optimizer": dict(optimizer="best"),
    "an unknown topology": dict(topology="dgx-z900"),
    "a topology that is a directory": dict(topology="/"),
    "a topology that is /dev/zero": dict(topology="/dev/zero"),
    "an unknown schedule": dict(schedule="fast"),
    "an unknown synthesizer": dict(synthesizer="fast"),
}


@pytest.mark.parametrize("name", sorted(COMPILE_CASES))
def test_bad_compile_options_raise_typed_errors(name):
    g, x, w = graph()
    g.save(g.matmul(x, w), "y")
    with pytest.raises(es.EinsummableError):
        es.compile(g, **COMPILE_CASES[name])


def test_bad_arrays_raise_typed_errors_and_odd_ones_are_taken_by_value():
    g, x, w = graph()
    g.save(g.matmul(x, w), "y")
    exe = es.compile(g, devices=2)
    rng = np.random.default_rng(0)
    good = {"x": rng.standard_normal((8, 4), np.float32), "w": rng.standard_normal((4, 16), np.float32)}
    for bad in [
        {**good, "x": np.ones((8, 4, 1), np.float32)},
        {**good, "x": np.ones((0, 4), np.float32)},
        {**good, "x": np.ones((8, 4), np.int32)},
        {**good, "x": np.array(["a"] * 32).reshape(8, 4)},
        {**good, "x": None},
        {**good, "x": [[1.0] * 4] * 8},
        {**good, 3: good["x"]},
    ]:
        with pytest.raises((es.EinsummableError, TypeError)):
            exe.run(bad)
    # Strided and Fortran-ordered arrays are the same values.
    wide = np.zeros((8, 8), np.float32)
    wide[:, ::2] = good["x"]
    y = exe.run({**good, "x": wide[:, ::2]})["y"]
    np.testing.assert_allclose(y, good["x"] @ good["w"], rtol=1e-5, atol=1e-5)
    y = exe.run({**good, "x": np.asfortranarray(good["x"])})["y"]
    np.testing.assert_allclose(y, good["x"] @ good["w"], rtol=1e-5, atol=1e-5)


def test_non_finite_inputs_reach_the_outputs():
    g, x, w = graph()
    g.save(g.matmul(x, w), "y")
    exe = es.compile(g, devices=2)
    xv = np.ones((8, 4), np.float32)
    xv[3, 1] = np.nan
    xv[5, 2] = np.inf
    y = exe.run({"x": xv, "w": np.ones((4, 16), np.float32)})["y"]
    assert np.isnan(y[3]).all() and np.isposinf(y[5]).all()
    assert np.isfinite(np.delete(y, [3, 5], axis=0)).all()


@pytest.mark.parametrize(
    "spec",
    [
        "mlp",
        "matmul:n=0",
        "matmul:n=-1",
        "matmul:n=18446744073709551616",
        "matmul:n=4,n=5",
        "llama:layers=1000000",
        "",
        ":",
        "matmul:=3",
    ],
)
def test_bad_workloads_raise_workload_errors(spec):
    with pytest.raises(es.EinsummableError):
        es.workload(spec)


def test_a_graph_too_large_to_run_is_refused_at_compile():
    # The graph itself is small (its tensors are descriptions); its plan would not fit.
    g = es.workload("llama:tokens=1000000000000")
    with pytest.raises(es.EinsummableError):
        es.compile(g, devices=8)
