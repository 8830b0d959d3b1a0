"""Hugging Face models from Python: the fixture checkpoints (made by
scripts/make_hf_fixtures.py with transformers) load, compile on several devices and give
transformers' logits; ids come as lists, int64 arrays or torch tensors; bf16 torch tensors
are accepted as bf16 inputs."""

import json
import pathlib
import struct

import numpy as np
import pytest

import einsummable as es

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "einsum-models" / "tests" / "fixtures"
FAMILIES = ["llama3", "llama2", "mistral", "qwen2"]


def reference(family: str) -> dict:
    """transformers' prompt and logits, read from the fixture's safetensors file."""
    data = (FIXTURES / family / "reference.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def relative(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(family):
    r = reference(family)
    model = es.from_pretrained(FIXTURES / family, tokens=16)
    exe = model.compile(devices=4)
    logits = exe.run({"tokens": r["input_ids"].tolist()})["logits"]
    assert logits.shape == r["logits"].shape
    assert relative(logits, r["logits"]) <= 1e-4, family
    # The same prompt as an int64 array, on the executable already loaded.
    again = exe.run({"tokens": r["input_ids"]})["logits"]
    assert np.array_equal(again, logits)


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(es.WorkloadError, match="config.json"):
        es.from_pretrained(tmp_path)
    model = es.from_pretrained(FIXTURES / "llama3", tokens=4)
    exe = model.compile(devices=2)
    with pytest.raises(es.DTypeError, match="tokens"):
        exe.run({"tokens": list(range(5))})
    with pytest.raises(es.RunError, match="outside the vocabulary"):
        exe.run({"tokens": [1, 500]})
    # A config naming a tensor the checkpoint lacks: the error names the tensor.
    (tmp_path / "config.json").write_text((FIXTURES / "llama2" / "config.json").read_text())
    broken = dict(json.loads((FIXTURES / "llama2" / "config.json").read_text()), num_hidden_layers=3)
    (tmp_path / "config.json").write_text(json.dumps(broken))
    for f in (FIXTURES / "llama2").glob("model*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    with pytest.raises(es.EinsummableError, match="model.layers.2"):
        es.from_pretrained(tmp_path, tokens=4).compile(devices=1)


def test_torch_tensors_are_inputs():
    torch = pytest.importorskip("torch")
    r = reference("qwen2")
    exe = es.from_pretrained(FIXTURES / "qwen2", tokens=12).compile(devices=2)
    logits = exe.run({"tokens": torch.tensor(r["input_ids"])})["logits"]
    assert relative(logits, r["logits"]) <= 1e-4
    g = es.Graph()
    x = g.input("x", {"i": 4}, "bf16")
    g.save(g.unary(x, "neg"), "y")
    y = es.compile(g, devices=1).run({"x": torch.tensor([1.0, 2.0, -0.5, 3.0], dtype=torch.bfloat16)})["y"]
    assert [float(v) for v in y] == [-1.0, -2.0, 0.5, -3.0]


def test_the_builder_has_the_models_operators():
    g = es.Graph()
    ids = g.input("ids", {"tokens": 5}, "i32")
    table = g.input("table", {"vocab": 7, "d_model": 4})
    x = g.embedding(table, ids, "vocab")
    both = g.concat([g.slice(x, "d_model", 0, 2), g.slice(x, "d_model", 2, 4)], "d_model")
    logits = g.einsum("td,vd->tv", g.cast(g.cast(both, "bf16"), "f32"), table)
    g.save(g.argmax(logits, "vocab"), "top")
    exe = es.compile(g, devices=2)
    t = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    top = exe.run({"ids": [0, 3, 6, 3, 1], "table": t})["top"]
    assert top.dtype == np.int32 and top.shape == (5,)
    # The casts round the looked-up rows to bf16 and back before the scores.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rounded = t.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = np.argmax(rounded[[0, 3, 6, 3, 1]] @ t.T, axis=1)
    assert top.tolist() == want.tolist()


@pytest.mark.parametrize("family", ["llama3", "qwen2"])
def test_greedy_generation_gives_transformers_tokens(family):
    r = reference(family)
    prompt, generated = r["generate_prompt"], r["generated"].tolist()
    gen = es.from_pretrained(FIXTURES / family).generator(devices=2, max_tokens=len(prompt) + 32)
    # transformers' tokens were generated past end-of-sequence: no stop token.
    assert gen.generate(prompt.tolist(), max_new_tokens=32, stop_tokens=[]) == generated
    # An int64 array, and a batch of one as a list of lists.
    assert gen.generate(prompt, max_new_tokens=4, stop_tokens=[]) == generated[:4]
    assert gen.generate([prompt.tolist()], max_new_tokens=4, stop_tokens=[]) == [generated[:4]]
    assert gen.compiles == 2


def test_generation_batches_samples_and_refuses():
    r = reference("llama2")
    prompt = r["generate_prompt"].tolist()
    gen = es.from_pretrained(FIXTURES / "llama2").generator(devices=2, batch=2, max_tokens=32)
    out = gen.generate([prompt, prompt[:3]], max_new_tokens=6, stop_tokens=[])
    assert len(out) == 2 and all(len(t) == 6 for t in out)
    assert out[0] == r["generated"].tolist()[:6]
    a = gen.generate(prompt, max_new_tokens=8, temperature=1.2, top_k=40, top_p=0.9, seed=5, stop_tokens=[])
    b = gen.generate(prompt, max_new_tokens=8, temperature=1.2, top_k=40, top_p=0.9, seed=5, stop_tokens=[])
    assert a == b and all(0 <= t < 128 for t in a)
    with pytest.raises(es.EinsummableError, match="max_tokens"):
        gen.generate(prompt, max_new_tokens=64)
    with pytest.raises(es.EinsummableError, match="1 to 2"):
        gen.generate([prompt, prompt, prompt], max_new_tokens=2)
