"""Shared helpers of the Python package's tests."""

import numpy as np

import einsummable as es


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max|got - want| / max(max|want|, 1): the Rust checks' scaled error."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1.0))


def random_inputs(graph, seed: int = 0) -> dict:
    """Uniform values in [-1, 1) for every input of `graph`, in its dtypes (f32 or f16)."""
    rng = np.random.default_rng(seed)
    dtypes = {"f32": np.float32, "f16": np.float16}
    return {
        name: rng.uniform(-1.0, 1.0, t.shape).astype(dtypes[t.dtype])
        for name, t in graph.inputs.items()
    }


def ffn(dtype: str = "f32") -> es.Graph:
    """The two-layer FFN the tests share: y = relu(x @ w1) @ w2, x [64, 32], d_ff 128."""
    g = es.Graph()
    x = g.input("x", {"tokens": 64, "d_model": 32}, dtype)
    w1 = g.input("w1", {"d_model": 32, "d_ff": 128}, dtype)
    w2 = g.input("w2", {"d_ff": 128, "d_model": 32}, dtype)
    g.save(g.matmul(g.unary(g.matmul(x, w1), "relu"), w2), "y")
    return g


def ffn_reference(v: dict) -> np.ndarray:
    """The FFN of `ffn` in float64 NumPy."""
    x, w1, w2 = (v[k].astype(np.float64) for k in ("x", "w1", "w2"))
    return np.maximum(x @ w1, 0.0) @ w2
