#!/usr/bin/env python3
"""Independent references for onepass's tokenizer tests.

  dump-gguf MODEL.gguf OUT.json         the tokenizer.* keys of a GGUF file (PyPI `gguf`'s
                                        GGUFReader) as TokenizerData JSON
  encode DATA.json TEXTS.json OUT.json  token ids (and decoded text) of each text, computed by
                                        the PyPI `tokenizers` library from the same vocabulary
                                        and merges with the model's pre-tokenizer

  make-hf KINDS MODEL.gguf OUT_DIR      OUT_DIR/KIND/tokenizer.json (and tokenizer_config.json)
                                        for each KIND of the comma-separated KINDS, built with
                                        `tokenizers` from the vocabulary of a GGUF file, with the
                                        normalizer / pre-tokenizer / post-processor of a family
                                        (qwen2, deepseek-r1-qwen, deepseek-v3, tekken, llama3,
                                        smollm, gpt2; gemma, llama2, metaspace-first)
  encode-hf DIR TEXTS.json OUT.json     ids (without and with special tokens) and decoded text
                                        of each text, by `tokenizers` from DIR/tokenizer.json

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
    elif pre in ("qwen2", "deepseek-r1-qwen"):
        pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), byte_level_only])
    elif pre == "tekken":
        pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(TEKKEN_SPLIT), behavior="isolated"), byte_level_only])
        ignore_merges = True
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


TEKKEN_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek-V3's three splits: digit groups, CJK runs, then words and punctuation.
DEEPSEEK3_SPLITS = [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]


def gguf_vocab(path):
    gguf = need("gguf")
    reader = gguf.GGUFReader(path)
    return {
        "model": field_value(reader, "tokenizer.ggml.model", ""),
        "tokens": list(field_value(reader, "tokenizer.ggml.tokens", [])),
        "scores": [float(s) for s in field_value(reader, "tokenizer.ggml.scores", [])],
        "types": [int(t) for t in field_value(reader, "tokenizer.ggml.token_type", [])],
        "merges": list(field_value(reader, "tokenizer.ggml.merges", [])),
    }


def spm_merges(tokens, scores):
    """Merges of a SentencePiece vocabulary, as Hugging Face's converter derives them: every
    split of a token into two tokens, ordered by the merged token's score, then by the
    parts' ids."""
    ids = {}
    for index, token in enumerate(tokens):
        ids.setdefault(token, index)
    merges = []
    for index, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                merges.append((-scores[index], ids[left], ids[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def make_hf(kinds, gguf_path, out_dir):
    import os
    vocab_data = gguf_vocab(gguf_path)
    merges_cache = {}
    for kind in kinds.split(","):
        make_hf_one(kind, vocab_data, merges_cache, os.path.join(out_dir, kind))


def make_hf_one(kind, vocab_data, merges_cache, out_dir):
    need("tokenizers")
    import os
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors

    tokens, types = vocab_data["tokens"], vocab_data["types"] or [1] * len(vocab_data["tokens"])
    vocab = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    config = {}
    byte_level_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    spm_kinds = ("gemma", "llama2", "metaspace-first")
    if kind in spm_kinds:
        if vocab_data["model"] != "llama":
            raise SystemExit(f"tokenizer_reference: {kind} needs a SentencePiece vocabulary")
        if "spm" not in merges_cache:
            merges_cache["spm"] = spm_merges(tokens, vocab_data["scores"])
        merges = merges_cache["spm"]
        unk = next((t for t, k in zip(tokens, types) if k == 2), None)
        model = models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True,
                           byte_fallback=True)
    else:
        if vocab_data["model"] != "gpt2":
            raise SystemExit(f"tokenizer_reference: {kind} needs a byte-level BPE vocabulary")
        merges = []
        for merge in vocab_data["merges"]:
            space = merge.index(" ", 1)
            merges.append((merge[:space], merge[space + 1:]))
        model = models.BPE(vocab=vocab, merges=merges, ignore_merges=kind in ("tekken", "llama3"))
    tokenizer = Tokenizer(model)
    if kind in ("qwen2", "deepseek-r1-qwen"):
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), byte_level_only])
    elif kind == "deepseek-v3":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in DEEPSEEK3_SPLITS]
            + [byte_level_only])
    elif kind == "tekken":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(TEKKEN_SPLIT), behavior="isolated"), byte_level_only])
    elif kind == "llama3":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"), byte_level_only])
    elif kind == "gpt2":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif kind == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif kind == "gemma":
        tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
        tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    elif kind == "llama2":
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    elif kind == "metaspace-first":
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme="first", split=False)
    else:
        raise SystemExit(f"tokenizer_reference: unknown kind {kind}")
    if kind in spm_kinds:
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if kind != "gemma":
            steps.append(decoders.Strip(" ", 1, 0))
        tokenizer.decoder = decoders.Sequence(steps)
    else:
        tokenizer.decoder = decoders.ByteLevel()

    control = [AddedToken(t, special=True, normalized=False)
               for t, k in zip(tokens, types) if k in (2, 3) and t]
    user = [AddedToken(t, special=False, normalized=False)
            for t, k in zip(tokens, types) if k == 4 and t]
    tokenizer.add_special_tokens(control)
    tokenizer.add_tokens(user)

    # BOS as the families' files add it: a TemplateProcessing post-processor (Llama 3, Gemma,
    # Llama 2), which Gemma's and Llama 2's tokenizer_config.json repeat as add_bos_token.
    bos = next((t for t in ("<|begin_of_text|>", "<bos>", "<s>", "<|endoftext|>") if t in vocab), None)
    if (kind == "llama3" or kind in spm_kinds) and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])])
    if kind in spm_kinds and bos is not None:
        config["add_bos_token"] = True
    if bos is not None:
        config["bos_token"] = {"content": bos, "special": True} if kind == "gemma" else bos
    eos = next((t for t in ("<eos>", "</s>", "<|im_end|>", "<|endoftext|>") if t in vocab), None)
    if eos is not None:
        config["eos_token"] = eos
    config["chat_template"] = CHAT_TEMPLATE
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as out:
        json.dump(config, out, ensure_ascii=False)


# A template with a system turn, a loop, a filter and the generation prompt.
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
                 "[SYS] {{ message['content'] | trim }}\n{% else %}<{{ message['role'] }}>"
                 "{{ message['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def encode_hf(directory, texts_path, out_path):
    need("tokenizers")
    import os
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    plain = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    special = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]
    decoded = tokenizer.decode_batch(plain, skip_special_tokens=False)
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump({"ids": plain, "ids_with_specials": special, "decoded": decoded}, out,
                  ensure_ascii=False)


def main(argv):
    commands = {"dump-gguf": (dump_gguf, 2), "encode": (encode, 3), "make-hf": (make_hf, 3),
                "encode-hf": (encode_hf, 3)}
    if len(argv) < 2 or argv[1] not in commands or len(argv) != 2 + commands[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    function, _ = commands[argv[1]]
    function(*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
