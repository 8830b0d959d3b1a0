"""Greedy generation on the CPU: einsummable's `generate` against transformers' `generate`, on
the same random-initialised LLaMA (the shape of benches/decode.rs: 4 layers, d_model 512, 8
query and 2 key/value heads of 64, d_ff 1536, a vocabulary of 1024), f32, one sequence, both
on the same cores (torch limited to `--threads`).

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
    cargo build --release
    /tmp/hfvenv/bin/python scripts/compare_generate.py --binary target/release/einsummable

Prints the decode tokens per second of each (the prefill excluded: transformers' time for
`max_new_tokens=1` is subtracted from its time for N), their ratio, and whether the two
generated the same tokens.
"""

import argparse
import json
import subprocess
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=1024,
    rms_norm_eps=1e-5,
    max_position_embeddings=4096,
    rope_theta=500000.0,
    tie_word_embeddings=False,
)


def transformers_rate(model, prompt, new_tokens, repeats):
    """Decode tokens per second of transformers' greedy `generate`, and its tokens."""

    def timed(n):
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            best = min(best, time.perf_counter() - started)
        return best, out[0, prompt.shape[1] :].tolist()

    prefill, _ = timed(1)
    total, tokens = timed(new_tokens)
    return (new_tokens - 1) / (total - prefill), tokens


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/einsummable")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = LlamaConfig(**CONFIG, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, args.prompt_tokens))
    with torch.no_grad():
        theirs, their_tokens = transformers_rate(model, prompt, args.new_tokens, args.repeats)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        ids = ",".join(map(str, prompt[0].tolist()))
        cmd = [args.binary, "generate", f"hf:{d}", "--prompt-tokens", ids, "--max-new-tokens", str(args.new_tokens)]
        cmd += ["--devices", "1", "--no-stop", "--json"]
        ours = max(
            (json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout) for _ in range(args.repeats)),
            key=lambda r: r["decode_tokens_per_s"],
        )
    same = ours["tokens"][0] == their_tokens
    print(f"decode tokens/s on {args.threads} threads, {args.prompt_tokens}-token prompt, {args.new_tokens} new tokens")
    print(f"transformers {theirs:.1f}, einsummable {ours['decode_tokens_per_s']:.1f}, ratio {ours['decode_tokens_per_s'] / theirs:.2f}")
    print(f"same tokens: {same}")


if __name__ == "__main__":
    main()
