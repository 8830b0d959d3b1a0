"""Shared helpers of the Python package's tests."""

import numpy as np


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
