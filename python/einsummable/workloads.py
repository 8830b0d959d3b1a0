"""The named workloads of the command line as graphs: ``llama_block(tokens=256, d_model=128)``
is the workload ``llama-block:tokens=256,d_model=128``. Keys left out take the command
line's defaults (LLaMA-3-8B's sizes); an unknown key raises ``WorkloadError`` listing the
valid ones. Every function takes ``dtype`` (``f32``, ``f16`` or ``bf16``)."""

from ._native import Graph, workload as _workload


def _spec(name: str, params: dict) -> str:
    keys = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{name}:{keys}" if keys else name


def matmul(dtype: str = "f32", **params: int) -> Graph:
    """``matmul``: keys ``m``, ``k``, ``n`` (``n`` alone: square)."""
    return _workload(_spec("matmul", params), dtype)


def ffn(dtype: str = "f32", **params: int) -> Graph:
    """``ffn``: keys ``tokens``, ``d_model``, ``d_ff``."""
    return _workload(_spec("ffn", params), dtype)


def attention(dtype: str = "f32", **params: int) -> Graph:
    """LLaMA's causal grouped-query attention alone: ``tokens``, ``seqs``, ``heads_q``,
    ``heads_kv``, ``d_head``."""
    return _workload(_spec("attention", params), dtype)


def llama_block(dtype: str = "f32", **params: int) -> Graph:
    """One LLaMA block: ``tokens``, ``seqs``, ``d_model``, ``heads_q``, ``heads_kv``,
    ``d_head``, ``d_ff``."""
    return _workload(_spec("llama-block", params), dtype)


def llama(dtype: str = "f32", **params: int) -> Graph:
    """A stack of LLaMA blocks: ``layers`` and the keys of ``llama_block``."""
    return _workload(_spec("llama", params), dtype)


def llama3_8b(dtype: str = "f32", **params: int) -> Graph:
    """LLaMA-3-8B with its final norm and vocabulary head (``layers``, ``tokens``, ``seqs``
    override)."""
    return _workload(_spec("llama3-8b", params), dtype)


def llama3_70b(dtype: str = "f32", **params: int) -> Graph:
    """LLaMA-3-70B with its final norm and vocabulary head."""
    return _workload(_spec("llama3-70b", params), dtype)


def chain(which: str, dtype: str = "f32", scale: int = 1) -> Graph:
    """The matrix chain ``which`` (``a`` to ``e``) of Section 6, every dimension divided by
    ``scale``."""
    return _workload(_spec(f"chain-{which}", {"scale": scale}), dtype)
