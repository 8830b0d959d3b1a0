"""Hugging Face models: ``from_pretrained(DIR)`` reads a LLaMA-family model directory
(``config.json`` and its safetensors weights: LLaMA 2/3/3.1/3.2, Mistral, Qwen2), and
``Model.compile`` plans it for several devices and loads its weights onto them.

    import einsummable as es
    model = es.from_pretrained("path/to/Llama-3.2-1B", tokens=128)
    exe = model.compile(devices=4)
    logits = exe.run({"tokens": [1, 15043, 3186]})["logits"]   # [3, vocab]

The graph is built for ``tokens`` positions; a shorter prompt is padded at its end, which
changes no logit of the prompt's own positions (attention is causal), and ``run`` returns
the prompt's rows only.

Generation plans the prefill and the decode step once each and runs the decode step token by
token over a KV cache that stays on the devices:

    gen = es.from_pretrained("path/to/Llama-3.2-1B").generator(devices=4)
    new_ids = gen.generate([1, 15043, 3186], max_new_tokens=32)        # a list of ints
    batch = gen.generate([[1, 2, 3], [1, 4]], max_new_tokens=8)          # needs batch=2
"""

from ._native import compile as _compile
from ._native import DTypeError, RunError, hf_generator, hf_graph


class Model:
    """A Hugging Face model directory as a graph: the input ``tokens`` (i32 ids), one input
    per checkpoint tensor (named as in the checkpoint) and the output ``logits``."""

    def __init__(self, directory, tokens=128, dtype=None):
        self.directory = str(directory)
        self.tokens = tokens
        self.dtype = dtype
        self.graph = hf_graph(self.directory, tokens, dtype)

    def compile(self, **options):
        """``einsummable.compile`` of the model's graph with the same keywords, then its
        weights loaded from the checkpoint, each read once onto the devices."""
        exe = _compile(self.graph, **options)
        loaded = set(exe.load_checkpoint(self.directory))
        missing = [name for name, _, _ in exe.inputs if name != "tokens" and name not in loaded]
        if missing:
            raise RunError(f"the checkpoint in {self.directory} has no tensor `{missing[0]}` the model's config asks for")
        return ModelExecutable(exe, self.tokens)

    def generator(self, devices=8, batch=1, max_tokens=None, **options):
        """A ``Generator`` of this model: its decode step compiled for ``batch`` sequences of
        at most ``max_tokens`` tokens (default: the model's context, at most 2048) on
        ``devices`` devices, weights loaded. Keywords: ``optimizer`` (a name), ``topology``,
        ``backend``, ``memory_budget`` (GB), ``seed``; the dtype is the model's."""
        native = hf_generator(self.directory, devices, batch, max_tokens, self.dtype, **options)
        return Generator(native)

    def __repr__(self):
        return f"Model({self.directory!r}, tokens={self.tokens})"


class Generator:
    """A model's prefill and decode step, compiled once: ``generate(prompt_ids, ...)``
    returns the new token ids, a list of ints for one prompt (a list of ints, or a 1-d array
    or tensor) and a list of lists for a batch of prompts (a list of lists)."""

    def __init__(self, native):
        self.native = native

    def generate(self, prompt_ids, max_new_tokens=32, temperature=0.0, top_k=None, top_p=None, seed=0,
                 stop_tokens=None):
        """Up to ``max_new_tokens`` new ids per prompt: greedy at ``temperature`` 0, else
        sampled at that temperature among the ``top_k`` likeliest tokens and the ``top_p``
        nucleus, drawn from ``seed``; a sequence ends at one of ``stop_tokens`` (default: the
        config's eos ids; ``[]`` never stops early)."""
        if hasattr(prompt_ids, "numpy"):
            prompt_ids = prompt_ids.cpu().numpy()
        if hasattr(prompt_ids, "tolist"):
            prompt_ids = prompt_ids.tolist()
        prompts = list(prompt_ids)
        single = not prompts or not isinstance(prompts[0], (list, tuple))
        batch = [list(map(int, prompts))] if single else [list(map(int, p)) for p in prompts]
        out = self.native.generate(batch, max_new_tokens, temperature, top_k, top_p, seed, stop_tokens)
        return out[0] if single else out

    def __getattr__(self, name):
        return getattr(self.native, name)

    def __repr__(self):
        return repr(self.native)


class ModelExecutable:
    """A compiled model with its weights loaded: ``run({"tokens": ids})`` returns
    ``{"logits": [len(ids), vocab]}``; the plan, prediction and explanation are the
    executable's."""

    def __init__(self, executable, tokens):
        self.executable = executable
        self.tokens = tokens

    def run(self, inputs):
        inputs = dict(inputs)
        ids = inputs.get("tokens")
        if ids is None:
            return self.executable.run(inputs)
        import numpy as np

        ids = np.asarray(ids if not hasattr(ids, "numpy") else ids.cpu().numpy())
        n = ids.shape[0] if ids.ndim == 1 else -1
        if ids.ndim != 1 or not 0 < n <= self.tokens:
            raise DTypeError(f"input `tokens`: 1 to {self.tokens} ids in a list or 1-d array, got shape {ids.shape}")
        padded = np.zeros(self.tokens, dtype=ids.dtype)
        padded[:n] = ids
        inputs["tokens"] = padded
        return {name: value[:n] for name, value in self.executable.run(inputs).items()}

    def __getattr__(self, name):
        return getattr(self.executable, name)

    def __repr__(self):
        return repr(self.executable)


def from_pretrained(directory, tokens=128, dtype=None):
    """The model in ``directory`` (its ``config.json``; the weights are read by
    ``Model.compile``) over prompts of up to ``tokens`` tokens, stored in ``dtype``
    (``"f32"``, ``"f16"``, ``"bf16"``; default: the config's)."""
    return Model(directory, tokens, dtype)
