#!/usr/bin/env python3
"""Independent references for onepass's tokenizer tests.

  dump-gguf MODEL.gguf OUT.json         the tokenizer.* keys of a GGUF file (PyPI `gguf`'s
                                        GGUFReader) as TokenizerData JSON
  encode DATA.json TEXTS.json OUT.json  token ids (and decoded text) of each text, computed by
                                        the PyPI `tokenizers` library from the same vocabulary
                                        and merges with the model's pre-tokenizer

Exit status 3 means a needed package is missing (the C++ test then skips).
"""
import json
import sys

# Pre-tokenizer splits as published in the models' tokenizer.json files.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def need(module):
    try:
        return __import__(module)
    except ImportError:
        print(f"tokenizer_reference: python package '{module}' is missing", file=sys.stderr)
        sys.exit(3)


def field_value(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def dump_gguf(path, out_path):
    gguf = need("gguf")
    reader = gguf.GGUFReader(path)

    def token_id(key):
        value = field_value(reader, key)
        return -1 if value is None else int(value)

    tokens = field_value(reader, "tokenizer.ggml.tokens", [])
    eot = field_value(reader, "tokenizer.ggml.eot_token_id")
    data = {
        "model": field_value(reader, "tokenizer.ggml.model", ""),
        "pre": field_value(reader, "tokenizer.ggml.pre", ""),
        "tokens": list(tokens),
        "scores": [float(s) for s in field_value(reader, "tokenizer.ggml.scores", [])],
        "token_types": [int(t) for t in field_value(reader, "tokenizer.ggml.token_type", [])],
        "merges": list(field_value(reader, "tokenizer.ggml.merges", [])),
        "bos_id": token_id("tokenizer.ggml.bos_token_id"),
        "eos_id": token_id("tokenizer.ggml.eos_token_id"),
        "unk_id": token_id("tokenizer.ggml.unknown_token_id"),
        "pad_id": token_id("tokenizer.ggml.padding_token_id"),
        "eot_id": None if eot is None else int(eot),
        "add_bos": bool(field_value(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos": bool(field_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_space_prefix": bool(field_value(reader, "tokenizer.ggml.add_space_prefix", True)),
        "chat_template": field_value(reader, "tokenizer.chat_template", ""),
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(data, out, ensure_ascii=False)


def build_tokenizer(data):
    need("tokenizers")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    if data["model"] != "gpt2":
        raise SystemExit(f"tokenizer_reference: only byte-level BPE (gpt2), not {data['model']}")
    vocab = {}
    for index, token in enumerate(data["tokens"]):
        vocab.setdefault(token, index)
    merges = []
    for merge in data["merges"]:
        space = merge.index(" ", 1)
        merges.append((merge[:space], merge[space + 1:]))

    pre = data["pre"] or "default"
    byte_level_split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    byte_level_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    ignore_merges = False
    if pre in ("gpt2", "default"):
        pre_tokenizer = byte_level_split
    elif pre == "smollm":
        pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level_split])
    elif pre in ("llama-bpe", "llama3"):
        pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"), byte_level_only])
        ignore_merges = True
    elif pre == "qwen2":
        pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), byte_level_only])
    else:
        raise SystemExit(f"tokenizer_reference: unknown pre-tokenizer {pre}")

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    types = data["token_types"] or [1] * len(data["tokens"])
    control = [AddedToken(t, special=True, normalized=False)
               for t, kind in zip(data["tokens"], types) if kind in (2, 3) and t]
    user = [AddedToken(t, special=False, normalized=False)
            for t, kind in zip(data["tokens"], types) if kind == 4 and t]
    tokenizer.add_special_tokens(control)
    tokenizer.add_tokens(user)
    return tokenizer


def encode(data_path, texts_path, out_path):
    with open(data_path, encoding="utf-8") as f:
        data = json.load(f)
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    tokenizer = build_tokenizer(data)
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    ids = [e.ids for e in encodings]
    decoded = tokenizer.decode_batch(ids, skip_special_tokens=False)
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump({"ids": ids, "decoded": decoded}, out, ensure_ascii=False)


def main(argv):
    commands = {"dump-gguf": (dump_gguf, 2), "encode": (encode, 3)}
    if len(argv) < 2 or argv[1] not in commands or len(argv) != 2 + commands[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    function, _ = commands[argv[1]]
    function(*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
