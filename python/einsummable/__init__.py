"""Einsummable from Python: build a computation with ``Graph``, ``compile`` it for several
devices (the logical optimizer, exchange programs and task graph of the Rust library), and
``run`` it on NumPy arrays.

    import numpy as np, einsummable as es
    g = es.Graph()
    x = g.input("x", {"tokens": 64, "d_model": 32})
    w = g.input("w", {"d_model": 32, "d_ff": 128})
    g.save(g.unary(g.matmul(x, w), "relu"), "y")
    exe = es.compile(g, devices=4)
    y = exe.run({"x": np.ones((64, 32), np.float32), "w": np.ones((32, 128), np.float32)})["y"]

Every failure raises ``EinsummableError`` (a subclass per kind: ``GraphError``,
``PlanError``, ``CompileError``, ``RunError``, ``TopologyError``, ``WorkloadError``,
``DTypeError``) with the Rust message.
"""

from ._native import (
    Candidate,
    CompileError,
    DTypeError,
    EinsummableError,
    Executable,
    Graph,
    GraphError,
    Op,
    PlanError,
    Problem,
    RunError,
    Tensor,
    TopologyError,
    WorkloadError,
    compile,
    experiment,
    optimizers,
    workload,
)
from . import workloads
from .models import Generator, Model, ModelExecutable, from_pretrained

__all__ = [
    "Candidate",
    "CompileError",
    "DTypeError",
    "EinsummableError",
    "Executable",
    "Graph",
    "GraphError",
    "Op",
    "PlanError",
    "Problem",
    "RunError",
    "Tensor",
    "TopologyError",
    "WorkloadError",
    "compile",
    "experiment",
    "from_pretrained",
    "Generator",
    "Model",
    "ModelExecutable",
    "optimizers",
    "workload",
    "workloads",
]
