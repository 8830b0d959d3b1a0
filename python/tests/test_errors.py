"""Bad graphs and bad inputs raise EinsummableError subclasses with the Rust message."""

import importlib.util

import numpy as np
import pytest

import einsummable as es


def small():
    g = es.Graph()
    x = g.input("x", {"tokens": 8, "d_model": 4})
    w = g.input("w", {"d_model": 4, "d_ff": 16})
    return g, x, w


def test_index_mismatch_names_the_operator_and_the_indices():
    g, x, w = small()
    # Operands are bound by index name: the shared d_model is contracted wherever it sits.
    g.matmul(w, x)
    with pytest.raises(es.EinsummableError) as e:
        g.matmul(w, g.input("u", {"tokens": 8, "d_out": 2}))  # no index name in common
    assert isinstance(e.value, es.GraphError)
    message = str(e.value)
    assert "matmul #" in message and "share no index name" in message, message
    assert "d_ff" in message and "tokens" in message and "d_out" in message, message
    with pytest.raises(es.GraphError, match="d_model"):
        g.einsum("td,dk->tk", x, g.input("v", {"d_model": 5, "k": 2}))


def test_builder_arguments_are_checked():
    g, x, w = small()
    with pytest.raises(es.GraphError, match="unknown unary operation `softplus`"):
        g.unary(x, "softplus")
    with pytest.raises(es.GraphError, match="unknown binary"):
        g.binary(x, x, "pow")
    with pytest.raises(es.GraphError, match="softmax"):
        g.softmax(x, "vocab")
    with pytest.raises(es.DTypeError, match="f64"):
        g.input("y", {"i": 2}, "f64")
    other, ox, _ = small()
    with pytest.raises(es.GraphError, match="another graph"):
        g.matmul(x, other.input("z", {"d_model": 4, "k": 2}))
    y = g.matmul(x, w)
    g.save(y, "y")
    with pytest.raises(es.GraphError, match="saved already"):
        g.save(y, "again")
    # Failed calls leave the graph usable and compilable.
    exe = es.compile(g, devices=2)
    assert exe.outputs == ["y"]


def test_bad_arrays_raise_dtype_errors():
    g, x, w = small()
    g.save(g.matmul(x, w), "y")
    exe = es.compile(g, devices=2)
    good = {"x": np.ones((8, 4), np.float32), "w": np.ones((4, 16), np.float32)}
    with pytest.raises(es.DTypeError, match="input `x`.*float32 array, got float64"):
        exe.run({**good, "x": np.ones((8, 4))})
    with pytest.raises(es.DTypeError, match=r"input `w`.*shape \[4, 16\], got \[16, 4\]"):
        exe.run({**good, "w": np.ones((16, 4), np.float32)})
    with pytest.raises(es.EinsummableError, match="`z` is not an input of the graph; its inputs are x, w"):
        exe.run({**good, "z": np.ones(1, np.float32)})
    with pytest.raises(es.EinsummableError, match="input `w` is not loaded"):
        exe.run({"x": good["x"]})
    # A non-contiguous, byte-swapped array is taken by value.
    xt = np.ascontiguousarray(good["x"].T).T.astype(">f4")
    y = exe.run({**good, "x": xt})["y"]
    np.testing.assert_allclose(y, np.ones((8, 4)) @ np.ones((4, 16)))


def test_bf16_without_numpy_support_is_a_typed_error():
    g = es.Graph()
    x = g.input("x", {"i": 4, "j": 4}, "bf16")
    g.save(g.unary(x, "neg"), "y")
    exe = es.compile(g, devices=1)
    with pytest.raises(es.DTypeError, match="bfloat16"):
        exe.run({"x": np.ones((4, 4), np.float32)})
    if importlib.util.find_spec("ml_dtypes") is not None:
        import ml_dtypes

        y = exe.run({"x": np.ones((4, 4), ml_dtypes.bfloat16)})["y"]
        assert y.dtype == ml_dtypes.bfloat16 and float(y[0, 0]) == -1.0


def test_bad_options_name_the_valid_ones():
    g, x, w = small()
    g.save(g.matmul(x, w))
    with pytest.raises(es.PlanError, match="unknown optimizer `best`; valid: dp, greedy"):
        es.compile(g, optimizer="best")
    with pytest.raises(es.PlanError, match="unknown cost model"):
        es.compile(g, cost="money")
    with pytest.raises(es.TopologyError):
        es.compile(g, topology="dgx-z900")
    with pytest.raises(es.EinsummableError, match="memory_budget"):
        es.compile(g, memory_budget=-1.0)
    with pytest.raises(es.EinsummableError, match="saves no tensor"):
        es.compile(es.Graph())
    with pytest.raises(es.PlanError, match="at least 1"):
        es.compile(g, devices=0)


def test_bad_workloads_are_workload_errors():
    with pytest.raises(es.WorkloadError, match="unknown key `width`"):
        es.workloads.ffn(width=3)
    with pytest.raises(es.WorkloadError):
        es.workload("mlp")
    with pytest.raises(es.WorkloadError):
        es.experiment("figure9")


def test_unknown_backend_and_synthesizer():
    g, x, w = small()
    g.save(g.matmul(x, w))
    with pytest.raises(es.EinsummableError, match="tpu"):
        es.compile(g, backend="tpu")
    for keyword in ["synthesizer", "schedule"]:
        with pytest.raises(es.EinsummableError, match="synthesizer `fast`: expected naive or search"):
            es.compile(g, **{keyword: "fast"})


def test_synthesizer_and_schedule_must_agree():
    g, x, w = small()
    g.save(g.matmul(x, w))
    with pytest.raises(es.EinsummableError, match="synthesizer `search` and schedule `naive`"):
        es.compile(g, synthesizer="search", schedule="naive")


def test_a_duplicate_input_name_is_refused():
    g = es.Graph()
    g.input("x", {"i": 2})
    with pytest.raises(es.GraphError, match="input `x`"):
        g.input("x", {"i": 2})
