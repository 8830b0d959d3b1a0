"""Tiny random-initialised Hugging Face models of each LLaMA-family architecture, with
transformers' own logits, as test fixtures for einsum-models (no network, no torch in the
tests).

Each family gets a directory under the output (default: einsum-models/tests/fixtures/):

- `config.json` and the weights as `save_pretrained` writes them (one `model.safetensors`,
  or shards with `model.safetensors.index.json` where the family asks for it), in f32;
- `reference.safetensors`: `input_ids` (i64, the prompt), `logits` (f32, `[tokens, vocab]`,
  transformers in f32) and `logits_bf16` (the same model cast to bf16, its logits as f32),
  so a test can compare its bf16 error against transformers' own; and for generation,
  `generate_prompt` (i64), `generated` (i64, the 32 tokens transformers' greedy `generate`
  adds, end-of-sequence ignored) and `margins` (f32, each step's top-1 minus top-2 logit). The
  prompt is the first of seeded random prompts whose every margin is at least
  `MIN_MARGIN`, 100 times the f32 logit tolerance, so that greedy decoding by another
  implementation within that tolerance must pick the same tokens.

Every parameter is random (norm weights around 1, biases nonzero), so a weight read into
the wrong place or a missing bias changes the logits. The families cover what the loader must
handle: Llama 3.2 style (llama3 rope scaling, tied embeddings), Llama 2 style (default rope,
untied), Mistral, and Qwen2 (q/k/v biases), one of them sharded.

`--big DIR` instead writes one f32 LLaMA of about 2.7 GB (not committed) to measure the
loader's peak host memory.

Usage: python3 scripts/make_hf_fixtures.py [--out DIR] [--big DIR]
(needs torch and transformers; the committed fixtures were made with the versions the
script prints)
"""

import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file

TOKENS = [1, 17, 93, 5, 64, 2, 120, 33, 7, 88, 41, 12]

# Generation: new tokens per prompt, the prompt's length, and the smallest top-1/top-2 logit
# margin a step may have (100 times the 1e-5 logit tolerance).
NEW_TOKENS = 32
PROMPT_TOKENS = 8
MIN_MARGIN = 1e-3

COMMON = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
)

FAMILIES = {
    # Llama 3.2 style: llama3 rope scaling whose original context (16) is shorter than the
    # model's, so the scaling changes the low frequencies; tied embeddings.
    "llama3": (
        transformers.LlamaConfig,
        dict(
            COMMON,
            tie_word_embeddings=True,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            ),
        ),
        None,
    ),
    # Llama 2 style: default rope, untied head; written in shards.
    "llama2": (
        transformers.LlamaConfig,
        dict(COMMON, tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        "100KB",
    ),
    "mistral": (
        transformers.MistralConfig,
        dict(COMMON, tie_word_embeddings=False, sliding_window=None,
             rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        None,
    ),
    # Qwen2: q/k/v projections with biases.
    "qwen2": (
        transformers.Qwen2Config,
        dict(COMMON, tie_word_embeddings=False, use_sliding_window=False,
             rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        None,
    ),
}


def randomise(model, seed):
    """Every parameter random: weights N(0, 0.1), norm weights 1 + N(0, 0.1), biases N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.1
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits[0].float()


def greedy(model, vocab, seed):
    """The first seeded random prompt whose greedy continuation keeps every step's top-1/top-2
    margin above MIN_MARGIN: the prompt, the new tokens and the margins."""
    eos = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    g = torch.Generator().manual_seed(1000 + seed)
    for _ in range(200):
        prompt = torch.randint(0, vocab, (1, PROMPT_TOKENS), generator=g)
        with torch.no_grad():
            out = model.generate(
                prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True, return_dict_in_generate=True
            )
        top2 = torch.stack([step[0].topk(2).values for step in out.scores])
        margins = (top2[:, 0] - top2[:, 1]).float()
        if margins.min().item() >= MIN_MARGIN:
            model.generation_config.eos_token_id = eos
            return prompt[0], out.sequences[0, PROMPT_TOKENS:], margins
    raise RuntimeError("no prompt with every greedy margin above MIN_MARGIN")


def make(out, name, config_class, kwargs, shard, seed):
    config = config_class(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomise(model, seed)
    model.eval()
    ids = torch.tensor([TOKENS])
    logits = logits_of(model, ids)
    prompt, generated, margins = greedy(model, kwargs["vocab_size"], seed)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    # Saved before the bf16 run: casting the model to bf16 rounds its weights in place.
    model.save_pretrained(d, max_shard_size=shard or "1GB")
    logits_bf16 = logits_of(model.to(torch.bfloat16), ids)
    save_file(
        {
            "input_ids": ids[0].to(torch.int64),
            "logits": logits.contiguous(),
            "logits_bf16": logits_bf16.contiguous(),
            "generate_prompt": prompt.to(torch.int64).contiguous(),
            "generated": generated.to(torch.int64).contiguous(),
            "margins": margins.contiguous(),
        },
        os.path.join(d, "reference.safetensors"),
    )
    err = ((logits_bf16 - logits).norm() / logits.norm()).item()
    print(f"{name}: {sorted(os.listdir(d))}, bf16 relative error {err:.3e}, smallest greedy margin {margins.min():.3e}")


def make_big(d):
    """About 2.7 GB of f32 LLaMA (largest tensor: the 32000 x 4096 embedding, 524 MB)."""
    config = transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=2, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32000, max_position_embeddings=256, tie_word_embeddings=False,
    )
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(d)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{d}: {size / 1e9:.2f} GB")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "einsum-models", "tests", "fixtures"))
    parser.add_argument("--big", help="write the 2 GB measurement checkpoint here instead")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(0)
    if args.big:
        make_big(args.big)
        return
    for seed, (name, (config_class, kwargs, shard)) in enumerate(FAMILIES.items()):
        make(args.out, name, config_class, kwargs, shard, seed)


if __name__ == "__main__":
    main()
