"""A two-layer FFN compiled for 4 devices returns NumPy's own results."""

import numpy as np
import pytest

import einsummable as es
from conftest import ffn, ffn_reference, random_inputs, rel_error


@pytest.mark.parametrize("optimizer", ["dp", "greedy", "random"])
def test_two_layer_ffn_on_4_devices_equals_numpy(optimizer):
    g = ffn()
    exe = es.compile(g, devices=4, optimizer=optimizer)
    values = random_inputs(g, seed=1)
    out = exe.run(values)
    assert list(out) == ["y"]
    y = out["y"]
    assert y.dtype == np.float32 and y.shape == (64, 32)
    assert rel_error(y, ffn_reference(values)) <= 1e-5
    # The plan really is spread over the 4 devices: some operator is split.
    assert any(n > 1 for op in exe.plan()["ops"] for n in op["splits"].values())


def test_declared_roles_let_megatron_plan_a_hand_built_graph():
    g = ffn()
    with pytest.raises(es.PlanError, match="ffn_hidden"):
        es.compile(g, devices=4, optimizer="megatron")
    with pytest.raises(es.GraphError, match="unknown index role `hidden`; valid: tokens"):
        g.role("d_ff", "hidden")
    g.role("d_ff", "ffn_hidden")
    # As written: the ReLU fused into the first matmul would make two operators.
    exe = es.compile(g, devices=4, optimizer="megatron", rewrites=False)
    assert [op["splits"].get("d_ff") for op in exe.plan()["ops"]] == [4, 4, 4]
    values = random_inputs(g, seed=8)
    assert rel_error(exe.run(values)["y"], ffn_reference(values)) <= 1e-5


def test_inputs_stay_loaded_between_runs():
    g = ffn()
    exe = es.compile(g, devices=4)
    values = random_inputs(g, seed=2)
    first = exe.run(values)["y"]
    # Only x changes; the weights loaded by the first run are kept.
    x2 = -values["x"]
    second = exe.run({"x": x2})["y"]
    assert rel_error(second, ffn_reference({**values, "x": x2})) <= 1e-5
    assert not np.allclose(first, second)


def test_f16_in_and_out():
    g = ffn("f16")
    exe = es.compile(g, devices=4)
    values = random_inputs(g, seed=3)
    y = exe.run(values)["y"]
    assert y.dtype == np.float16
    assert rel_error(y, ffn_reference(values)) <= 1e-2


def test_a_graph_compiled_twice_is_a_snapshot():
    g = ffn()
    before = es.compile(g, devices=2)
    t = g.outputs["y"]
    g.save(g.unary(t, "neg"), "minus_y")
    after = es.compile(g, devices=2)
    values = random_inputs(g, seed=4)
    assert before.outputs == ["y"]
    out = after.run(values)
    np.testing.assert_array_equal(out["minus_y"], -out["y"])
    np.testing.assert_array_equal(before.run(values)["y"], out["y"])
