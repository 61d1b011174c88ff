#!/usr/bin/env python3
"""Independent float64 reference for Gemma 3 GGUF files: gguf-py dequantizes the weights,
numpy runs the forward pass in float64 (pip install gguf numpy).

    gemma3_reference.py check
        exit 0 when gguf and numpy import (the C++ tests skip otherwise)
    gemma3_reference.py logits MODEL TOKENS OUT
        TOKENS holds int32 token ids; OUT gets the logits after every one of them,
        float32 [tokens, vocab] row-major, the first token at position 0

The architecture follows Gemma 3's published definition: embeddings times sqrt(hidden);
RMS norms (GGUF norm weights already include Gemma's +1); per-head RMS norm of Q and K;
NeoX RoPE; every layer but each sixth (l % 6 == 5) is local, with RoPE base 10000 and a
sliding window of `sliding_window` keys, the others use rope.freq_base over every key;
attention scale 1/sqrt(key_length); GELU (tanh) gated FFN; RMS norms of the attention and
FFN outputs before each residual add; the LM head is the token embedding.
"""
import sys


def main(argv):
    try:
        import numpy as np
        import gguf
        from gguf import quants
    except ImportError as error:
        print(f"gguf-py unavailable: {error}", file=sys.stderr)
        return 3
    if len(argv) == 2 and argv[1] == "check":
        return 0
    if len(argv) != 5 or argv[1] != "logits":
        print(__doc__, file=sys.stderr)
        return 2
    reader = gguf.GGUFReader(argv[2])
    tokens = np.fromfile(argv[3], dtype=np.int32)
    fields = {name: field.contents() for name, field in reader.fields.items()
              if not name.startswith("tokenizer.")}
    arch = fields["general.architecture"]
    if arch != "gemma3":
        print(f"not a gemma3 file: {arch}", file=sys.stderr)
        return 2

    def meta(key):
        return fields[f"{arch}.{key}"]

    hidden = int(meta("embedding_length"))
    layers = int(meta("block_count"))
    heads = int(meta("attention.head_count"))
    kv_heads = int(meta("attention.head_count_kv"))
    head_dim = int(meta("attention.key_length"))
    eps = float(meta("attention.layer_norm_rms_epsilon"))
    theta_global = float(meta("rope.freq_base"))
    theta_local = 10000.0
    window = int(meta("attention.sliding_window"))

    tensors = {t.name: t for t in reader.tensors}

    def weight(name):
        t = tensors[name]
        return np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float64)

    def rms_norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, theta):  # x [T, heads, head_dim], NeoX halves
        half = head_dim // 2
        positions = np.arange(x.shape[0], dtype=np.float64)
        inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / head_dim)
        angle = positions[:, None] * inv[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    embd_t = tensors["token_embd.weight"]
    embd_rows = np.asarray(embd_t.data)  # raw rows, dequantized in slabs below
    vocab = embd_rows.shape[0]

    def embedding_rows(first, count):
        return np.asarray(quants.dequantize(embd_rows[first:first + count], embd_t.tensor_type),
                          dtype=np.float64).reshape(count, hidden)

    n = len(tokens)
    x = np.stack([embedding_rows(int(t), 1)[0] for t in tokens]) * np.sqrt(float(hidden))
    group = heads // kv_heads
    causal = np.tril(np.ones((n, n), dtype=bool))
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    for l in range(layers):
        p = f"blk.{l}."
        local = l % 6 != 5
        h = rms_norm(x, weight(p + "attn_norm.weight"))
        q = (h @ weight(p + "attn_q.weight").T).reshape(n, heads, head_dim)
        k = (h @ weight(p + "attn_k.weight").T).reshape(n, kv_heads, head_dim)
        v = (h @ weight(p + "attn_v.weight").T).reshape(n, kv_heads, head_dim)
        q = rms_norm(q, weight(p + "attn_q_norm.weight"))
        k = rms_norm(k, weight(p + "attn_k_norm.weight"))
        theta = theta_local if local else theta_global
        q, k = rope(q, theta), rope(k, theta)
        mask = causal & (distance < window) if local else causal
        out = np.empty((n, heads, head_dim))
        for head in range(heads):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(float(head_dim))
            scores = np.where(mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            out[:, head, :] = scores @ v[:, kv, :]
        o = out.reshape(n, heads * head_dim) @ weight(p + "attn_output.weight").T
        x = x + rms_norm(o, weight(p + "post_attention_norm.weight"))
        h = rms_norm(x, weight(p + "ffn_norm.weight"))
        gate = h @ weight(p + "ffn_gate.weight").T
        up = h @ weight(p + "ffn_up.weight").T
        d = (gelu_tanh(gate) * up) @ weight(p + "ffn_down.weight").T
        x = x + rms_norm(d, weight(p + "post_ffw_norm.weight"))
    x = rms_norm(x, weight("output_norm.weight"))
    logits = np.empty((n, vocab), dtype=np.float32)
    slab = 16384
    for first in range(0, vocab, slab):
        count = min(slab, vocab - first)
        logits[:, first:first + count] = x @ embedding_rows(first, count).T
    logits.tofile(argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
