"""A small byte-level BPE tokenizer for the llama3 Hugging Face fixture, and the Python
`tokenizers` library's own encodings of a few strings, as test fixtures for `einsummable`'s
`--tokenizer` (no network, no Python in the tests).

The fixture model (einsum-models/tests/fixtures/llama3, made by make_hf_fixtures.py) has a
vocabulary of only 128 tokens, too few for the 256 bytes of a full byte-level alphabet. The
tokenizer therefore keeps the byte-level pre-tokenizer and decoder of the LLaMA 3 tokenizers
(GPT-2's byte-to-character map, and its regex with a look-ahead, the part that needs
`fancy-regex` on the Rust side) over a restricted alphabet: tab, newline, printable ASCII and
the UTF-8 bytes of a few accented letters. Any other byte encodes as `<unk>`. The rest of the
vocabulary is BPE merges trained on a fixed corpus, so the file is the same on every run.

Written into the fixture directory (default: einsum-models/tests/fixtures/llama3/):

- `tokenizer.json`: specials `<unk>` (0), `<s>` (the config's `bos_token_id`) and `</s>` (its
  `eos_token_id`), a template post-processor that puts `<s>` before every sequence, as
  LLaMA's does, and exactly `vocab_size` tokens in all;
- `tokenizer_reference.json`: for each of `CASES` (ASCII, runs of spaces, tabs and newlines,
  non-ASCII text in and outside the alphabet, an empty string), the library's ids with the
  special tokens added and its decoding of those ids with the special tokens skipped.

Usage: /tmp/hfvenv/bin/python scripts/make_tokenizer_fixture.py [--out DIR]
(needs the `tokenizers` Python package; the reference records its version)
"""

import argparse
import json
import os

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

# The training corpus: fixed text, so that the merges (and so the ids) never change.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "the theory of the thing is that there is another thing there",
    "Hello, world! Hello again, world.",
    "in the beginning the model reads the tokens, then it writes new tokens",
    "def main():\n    print('hello')\n    return 0\n",
    "Café, naïve, über, señor, Köln: accents on the letters.",
    "and then and then and then",
]

# Bytes of the alphabet besides tab, newline and printable ASCII: é, ï, ü, ñ, ö in UTF-8.
EXTRA_TEXT = "éïüñö"

# Strings whose ids and decoding the Rust side must reproduce.
CASES = [
    "Hello, world!",
    "the theory of the thing",
    "  two leading spaces,   three inner,\tone tab\n\nand two newlines  ",
    "Café über señor, naïve Köln",
    "Crème brûlée — 東京 🦀",
    "",
]

SPECIALS = {"<unk>": 0}


def bytes_to_unicode():
    """GPT-2's map from the 256 bytes to printable characters (the ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars)))


def alphabet():
    """The byte-level characters of tab, newline, printable ASCII and `EXTRA_TEXT`'s bytes."""
    table = bytes_to_unicode()
    raw = {9, 10} | set(range(0x20, 0x7F)) | set(EXTRA_TEXT.encode("utf-8"))
    return sorted(table[b] for b in raw)


def build(config):
    vocab_size = config["vocab_size"]
    bos, eos = config.get("bos_token_id"), config.get("eos_token_id")
    specials = dict(SPECIALS)
    if bos is not None:
        specials["<s>"] = bos
    if isinstance(eos, int):
        specials["</s>"] = eos
    order = sorted(specials, key=specials.get)
    # The trainer numbers its special tokens first, in order: they must be 0, 1, 2, ...
    assert [specials[s] for s in order] == list(range(len(order))), specials

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    chars = alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=order,
        initial_alphabet=chars,
        limit_alphabet=len(chars),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    if "<s>" in specials:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", specials["<s>"])]
        )
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    for name, id in specials.items():
        assert tok.token_to_id(name) == id, (name, id)
    return tok


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    default = os.path.join(root, "einsum-models", "tests", "fixtures", "llama3")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=default, help="the fixture directory (its config.json is read)")
    args = parser.parse_args()
    with open(os.path.join(args.out, "config.json")) as f:
        config = json.load(f)
    tok = build(config)
    tok.save(os.path.join(args.out, "tokenizer.json"), pretty=True)

    cases = []
    for text in CASES:
        ids = tok.encode(text).ids
        assert all(0 <= i < config["vocab_size"] for i in ids), ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    reference = {"tokenizers_version": tokenizers.__version__, "cases": cases}
    with open(os.path.join(args.out, "tokenizer_reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"tokenizers {tokenizers.__version__}: {tok.get_vocab_size()} tokens written to {args.out}")
    for c in cases:
        print(repr(c["text"]), c["ids"], repr(c["decoded"]))


if __name__ == "__main__":
    main()
