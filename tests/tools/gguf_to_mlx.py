#!/usr/bin/env python3
"""Writes an mlx-lm style model directory from a GGUF file, independently of onepass:
gguf-py reads and dequantizes the weights, numpy converts them to Hugging Face's layout, and
the `tokenizers` library builds tokenizer.json from the GGUF vocabulary.

    gguf_to_mlx.py check
        exit 0 when gguf, numpy and tokenizers import (exit 3 otherwise: tests skip)
    gguf_to_mlx.py convert MODEL.gguf OUT_DIR [f16|bf16|f32|qBITS_GROUP [stacked|per-expert]]
        OUT_DIR gets config.json, model.safetensors (every tensor in the given type, f16 by
        default), tokenizer.json and tokenizer_config.json. qBITS_GROUP (q8_64, q4_32, ...)
        stores the matrices as mlx-lm does: affine BITS-bit groups of GROUP values, packed
        into u32 words low bits first, with f16 scales and biases; vectors stay f16. GGUF
        q8_0 blocks become q8_32 groups and q4_0 / q4_1 blocks q4_32 groups exactly (the
        same scale, the offset as the bias); float matrices are quantised, and matrices
        in other block formats stay f16 (marked unquantised in config.json). A directory
        already converted from the same file by the same scripts is left as it is.

Families: llama (Q and K rows back from llama.cpp's interleaved-RoPE order), qwen2, qwen3,
gemma2, gemma3 (norm weights back from GGUF's 1 + w to the stored w), phi3, and the mixtures
of experts qwen3moe (mlx-lm's qwen3_moe), olmoe and llama with experts (mixtral): the router
as `gate`, the experts stacked [experts, out, in] in `switch_mlp` as mlx-lm writes them, or
(layout per-expert) one tensor per expert as Hugging Face checkpoints keep them
(`experts.E.gate_proj`, `up_proj`, `down_proj`; Mixtral's `experts.E.w1`, `w3`, `w2`; a
quantised expert's scales and biases beside it). Their f32 tensors (norms, routers) stay f32
so that the routing is the GGUF file's, except that qBITS_GROUP quantises the routers as
mlx-lm does (Qwen3-MoE's at 8 bits in groups of 64, a per-layer entry of config.json's
quantization; Mixtral's and OLMoE's as the other matrices). The config.json keys follow the
families' Hugging Face configurations: Gemma 3 lists layer_types, Gemma 2 relies on its
default alternation.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def need_packages():
    try:
        import numpy  # noqa: F401
        import gguf  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as error:
        print(f"gguf_to_mlx: {error}", file=sys.stderr)
        sys.exit(3)


# GGUF per-layer tensor -> Hugging Face module, by family where the names differ.
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
GEMMA_LAYER_NAMES = dict(LAYER_NAMES, **{
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
})
PHI3_LAYER_NAMES = dict(LAYER_NAMES, **{"ffn_up.weight": "mlp.gate_up_proj.weight"})


def moe_layer_names(module):
    """mlx-lm's mixture: the router `gate` and the experts stacked in `switch_mlp`."""
    return dict(LAYER_NAMES, **{
        "ffn_gate_inp.weight": f"{module}.gate.weight",
        "ffn_gate_exps.weight": f"{module}.switch_mlp.gate_proj.weight",
        "ffn_up_exps.weight": f"{module}.switch_mlp.up_proj.weight",
        "ffn_down_exps.weight": f"{module}.switch_mlp.down_proj.weight",
    })


QWEN3_MOE_LAYER_NAMES = moe_layer_names("mlp")
MIXTRAL_LAYER_NAMES = moe_layer_names("block_sparse_moe")
# A Hugging Face checkpoint's names of one expert's matrices.
EXPERT_NAMES = {"gate_proj": "gate_proj", "up_proj": "up_proj", "down_proj": "down_proj"}
MIXTRAL_EXPERT_NAMES = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}

# GGUF architecture -> mlx-lm model_type ("llama" with experts is Mixtral).
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
               "gemma3": "gemma3_text", "phi3": "phi3", "qwen3moe": "qwen3_moe", "olmoe": "olmoe"}


def model_type(fields, arch):
    if arch == "llama" and int(fields.get("llama.expert_count", 0)) > 0:
        return "mixtral"
    return MODEL_TYPES[arch]


def hf_name(name, arch, kind):
    fixed = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".", 2)
    if parts[0] != "blk" or len(parts) != 3:
        raise SystemExit(f"gguf_to_mlx: unexpected tensor {name}")
    table = GEMMA_LAYER_NAMES if arch in ("gemma2", "gemma3") else (
        PHI3_LAYER_NAMES if arch == "phi3" else
        QWEN3_MOE_LAYER_NAMES if kind in ("qwen3_moe", "olmoe") else
        MIXTRAL_LAYER_NAMES if kind == "mixtral" else LAYER_NAMES)
    if parts[2] not in table:
        raise SystemExit(f"gguf_to_mlx: no Hugging Face name for {name} ({arch})")
    return f"model.layers.{parts[1]}.{table[parts[2]]}"


def unpermute(w, heads):
    """Inverse of llama.cpp's Q/K row permutation for interleaved RoPE."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_config(fields, arch, tensors):
    def meta(key, default=None):
        return fields.get(f"{arch}.{key}", default)

    hidden = int(meta("embedding_length"))
    heads = int(meta("attention.head_count"))
    head_dim = int(meta("attention.key_length", hidden // heads))
    layers = int(meta("block_count"))
    vocab = int(meta("vocab_size", len(fields["tokenizer.ggml.tokens"])))
    kind = model_type(fields, arch)
    config = {
        "architectures": [{"gemma3_text": "Gemma3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "phi3": "Phi3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                           "mixtral": "MixtralForCausalLM",
                           "olmoe": "OlmoeForCausalLM"}.get(kind, "LlamaForCausalLM")],
        "model_type": kind,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(meta("feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(meta("context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "torch_dtype": "float16",
    }
    if meta("rope.scaling.type") == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(meta("rope.scaling.factor"))}
    if arch in ("qwen3", "qwen3moe"):
        config["attention_bias"] = False
    if kind == "qwen3_moe":
        config["num_experts"] = int(meta("expert_count"))
        config["num_experts_per_tok"] = int(meta("expert_used_count"))
        config["moe_intermediate_size"] = int(meta("expert_feed_forward_length",
                                                   meta("feed_forward_length")))
        config["norm_topk_prob"] = True
        config["decoder_sparse_step"] = 1
        config["mlp_only_layers"] = []
    if kind == "mixtral":
        config["num_local_experts"] = int(meta("expert_count"))
        config["num_experts_per_tok"] = int(meta("expert_used_count"))
    if kind == "olmoe":
        # OlmoeConfig: intermediate_size is one expert's; the top-k weights keep their share
        # of the softmax over all experts; Q and K are not clamped.
        config["intermediate_size"] = int(meta("expert_feed_forward_length",
                                               meta("feed_forward_length")))
        config["num_experts"] = int(meta("expert_count"))
        config["num_experts_per_tok"] = int(meta("expert_used_count"))
        config["norm_topk_prob"] = False
        config["clip_qkv"] = None
    if arch in ("gemma2", "gemma3"):
        config["hidden_activation"] = "gelu_pytorch_tanh"
        config["query_pre_attn_scalar"] = head_dim
        config["sliding_window"] = int(meta("attention.sliding_window"))
    if arch == "gemma2":
        config["final_logit_softcapping"] = float(meta("final_logit_softcapping", 30.0))
        config["attn_logit_softcapping"] = float(meta("attn_logit_softcapping", 50.0))
    if arch == "gemma3":
        config["final_logit_softcapping"] = None
        config["attn_logit_softcapping"] = None
        config["rope_local_base_freq"] = float(meta("rope.local.freq_base", 10000.0))
        config["rope_scaling"] = config.get("rope_scaling")
        config["_sliding_window_pattern"] = 6
        config["layer_types"] = ["full_attention" if l % 6 == 5 else "sliding_attention"
                                 for l in range(layers)]
    return config, heads, int(config["num_key_value_heads"])


def write_safetensors(path, arrays):
    header = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for name, (dtype, array) in arrays.items():
        size = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".part", "wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for _, array in arrays.values():
            out.write(array.tobytes())
    os.replace(path + ".part", path)


def as_dtype(values, dtype):
    import numpy as np
    if dtype == "f32":
        return "F32", values.astype(np.float32)
    if dtype == "f16":
        return "F16", values.astype(np.float16)
    # bf16: round to nearest even on the top 16 bits
    bits = values.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return "BF16", rounded


def parse_quantization(dtype):
    """(bits, group_size) of "qBITS_GROUP", or None."""
    if not dtype.startswith("q"):
        return None
    bits, group = (int(v) for v in dtype[1:].split("_"))
    if bits not in (2, 3, 4, 5, 6, 8) or group not in (32, 64, 128) or 32 % bits:
        raise SystemExit(f"gguf_to_mlx: quantization {dtype} is not one this script writes "
                         "(bits 2, 4 or 8; group 32, 64 or 128)")
    return bits, group


def exact_affine(t, bits, group):
    """(q, scale, bias) of a GGUF q8_0 / q4_0 / q4_1 matrix whose blocks are mlx groups of
    the same values, else None: q8_0 w = d * q (q signed) = d * (q + 128) - 128 d; q4_0
    w = d * (q - 8); q4_1 w = d * q + m."""
    import numpy as np
    from gguf import GGMLQuantizationType as T
    kind = t.tensor_type
    if group != 32 or (kind, bits) not in ((T.Q8_0, 8), (T.Q4_0, 4), (T.Q4_1, 4)):
        return None
    rows = int(np.prod([int(d) for d in t.shape[1:]]))
    raw = np.asarray(t.data, dtype=np.uint8).reshape(rows, -1)
    block = {T.Q8_0: 34, T.Q4_0: 18, T.Q4_1: 20}[kind]
    blocks = raw.reshape(rows, -1, block)
    d = blocks[:, :, 0:2].copy().view(np.float16)[..., 0]
    if kind == T.Q8_0:
        q = blocks[:, :, 2:].view(np.int8).astype(np.int32) + 128
        bias = (d.astype(np.float32) * -128).astype(np.float16)
    else:
        packed = blocks[:, :, 4:] if kind == T.Q4_1 else blocks[:, :, 2:]
        q = np.concatenate([packed & 0x0F, packed >> 4], axis=2).astype(np.int32)
        if kind == T.Q4_1:
            bias = blocks[:, :, 2:4].copy().view(np.float16)[..., 0]
        else:
            bias = (d.astype(np.float32) * -8).astype(np.float16)
    return q.reshape(rows, -1).astype(np.uint32), d, bias


def affine_quantize(values, bits, group):
    """mlx's affine format: per group, w = scale * q + bias with q in [0, 2^bits - 1]."""
    import numpy as np
    rows, cols = values.shape
    groups = values.reshape(rows, cols // group, group).astype(np.float32)
    low, high = groups.min(axis=2), groups.max(axis=2)
    levels = (1 << bits) - 1
    scale = ((high - low) / levels).astype(np.float16)
    scale = np.where(scale == 0, np.float16(1e-4), scale)
    bias = low.astype(np.float16)
    q = np.rint((groups - bias.astype(np.float32)[..., None]) / scale.astype(np.float32)[..., None])
    q = np.clip(q, 0, levels).astype(np.uint32).reshape(rows, cols)
    return q, scale, bias


def pack(q, bits):
    """u32 words of `bits`-bit values, the first value in the lowest bits."""
    import numpy as np
    rows, cols = q.shape
    per_word = 32 // bits
    q = q.reshape(rows, cols // per_word, per_word)
    words = np.zeros((rows, cols // per_word), dtype=np.uint32)
    for j in range(per_word):
        words |= q[:, :, j] << np.uint32(bits * j)
    return words


def tokenizer_kind(model, pre, arch):
    if model == "llama":
        return "gemma" if arch in ("gemma2", "gemma3") else "llama2"
    kinds = {"qwen2": "qwen2", "deepseek-r1-qwen": "deepseek-r1-qwen", "llama-bpe": "llama3",
             "llama3": "llama3", "smollm": "smollm", "tekken": "tekken", "default": "gpt2",
             "gpt2": "gpt2"}
    if pre not in kinds:
        raise SystemExit(f"gguf_to_mlx: no tokenizer.json recipe for pre-tokenizer '{pre}'")
    return kinds[pre]


def write_tokenizer(fields, arch, out_dir):
    sys.path.insert(0, HERE)
    import tokenizer_reference

    tokens = list(fields["tokenizer.ggml.tokens"])
    vocab_data = {
        "model": fields.get("tokenizer.ggml.model", ""),
        "tokens": tokens,
        "scores": [float(s) for s in fields.get("tokenizer.ggml.scores", [])],
        "types": [int(t) for t in fields.get("tokenizer.ggml.token_type", [])],
        "merges": list(fields.get("tokenizer.ggml.merges", [])),
    }
    kind = tokenizer_kind(vocab_data["model"], fields.get("tokenizer.ggml.pre", "default"), arch)
    tokenizer_reference.make_hf_one(kind, vocab_data, {}, out_dir)
    # tokenizer_config.json as the GGUF file says: its BOS / EOS, whether BOS is added, its
    # chat template (none: the runtime's family default).
    config = {}
    for key, field in (("bos_token", "tokenizer.ggml.bos_token_id"),
                       ("eos_token", "tokenizer.ggml.eos_token_id")):
        if field in fields:
            config[key] = tokens[int(fields[field])]
    config["add_bos_token"] = bool(fields.get("tokenizer.ggml.add_bos_token", False))
    config["add_eos_token"] = False
    if "tokenizer.chat_template" in fields:
        config["chat_template"] = fields["tokenizer.chat_template"]
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as out:
        json.dump(config, out, ensure_ascii=False, indent=1)


def split_experts(arrays, kind):
    """The stacked experts [experts, ...] of every `switch_mlp` array as one array per expert."""
    names = MIXTRAL_EXPERT_NAMES if kind == "mixtral" else EXPERT_NAMES
    out = {}
    for name, (dtype, array) in arrays.items():
        if ".switch_mlp." not in name:
            out[name] = (dtype, array)
            continue
        # model.layers.L.mlp.switch_mlp.gate_proj.weight -> model.layers.L.mlp, gate_proj, weight
        stacked, matrix, suffix = name.rsplit(".", 2)
        module = stacked.replace(".switch_mlp", "")
        for expert in range(array.shape[0]):
            out[f"{module}.experts.{expert}.{names[matrix]}.{suffix}"] = (dtype, array[expert].copy())
    return out


def stamp_of(gguf_path, dtype, layout):
    digest = hashlib.sha256()
    for script in (__file__, os.path.join(HERE, "tokenizer_reference.py")):
        with open(script, "rb") as f:
            digest.update(f.read())
    info = os.stat(gguf_path)
    return {"gguf": os.path.abspath(gguf_path), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "dtype": dtype, "layout": layout, "scripts": digest.hexdigest()}


def convert(gguf_path, out_dir, dtype="f16", layout="stacked"):
    quantization = parse_quantization(dtype)
    if quantization is None and dtype not in ("f16", "bf16", "f32"):
        raise SystemExit(f"gguf_to_mlx: type {dtype} is not f16, bf16, f32 or qBITS_GROUP")
    if layout not in ("stacked", "per-expert"):
        raise SystemExit(f"gguf_to_mlx: layout {layout} is not stacked or per-expert")
    stamp_path = os.path.join(out_dir, "onepass-conversion.json")
    stamp = stamp_of(gguf_path, dtype, layout)
    if os.path.exists(stamp_path):
        with open(stamp_path, encoding="utf-8") as f:
            if json.load(f) == stamp:
                return 0
        os.remove(stamp_path)
    os.makedirs(out_dir, exist_ok=True)
    need_packages()
    import numpy as np
    import gguf
    from gguf import quants

    reader = gguf.GGUFReader(gguf_path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    arch = fields["general.architecture"]
    if arch not in MODEL_TYPES:
        raise SystemExit(f"gguf_to_mlx: architecture {arch} is not converted ({', '.join(MODEL_TYPES)})")
    tensors = {t.name: t for t in reader.tensors}
    config, heads, kv_heads = make_config(fields, arch, tensors)
    kind = config["model_type"]
    # A mixture's routing is discrete: the f32 tensors (norms, routers) stay f32, so that no
    # rounding moves a token near a tie to another expert than the GGUF file chooses; only a
    # quantised directory's routers are quantised, as mlx-lm quantises them.
    keep_f32 = kind in ("qwen3_moe", "mixtral", "olmoe")

    FLOAT_TYPES = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                   gguf.GGMLQuantizationType.BF16)
    arrays = {}
    unquantized = []
    layer_formats = {}
    for name, t in tensors.items():
        shape = tuple(int(d) for d in reversed(t.shape))
        values = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        permute = None
        if arch == "llama" and name.endswith("attn_q.weight"):
            permute = heads
        elif arch == "llama" and name.endswith("attn_k.weight"):
            permute = kv_heads
        module = hf_name(name, arch, kind)
        layer_format = quantization
        router = name.endswith("ffn_gate_inp.weight")
        if quantization and router and kind == "qwen3_moe":
            # mlx-lm's quant_predicate for Qwen3-MoE: the router at 8 bits in groups of 64.
            layer_format = (8, 64)
            layer_formats[module[:-len(".weight")]] = {"group_size": 64, "bits": 8}
        f32 = (keep_f32 and t.tensor_type == gguf.GGMLQuantizationType.F32
               and not (quantization and router))
        quantize = (layer_format and not f32 and values.ndim in (2, 3)
                    and values.shape[-1] % layer_format[1] == 0)
        parts = exact_affine(t, *layer_format) if quantize else None
        if quantize and parts is None and t.tensor_type not in FLOAT_TYPES:
            # Requantising quantised values would add a second rounding: the matrix stays
            # f16, unquantised, as mlx-lm's mixed quantisation marks such a layer.
            quantize = False
            unquantized.append(module[:-len(".weight")])
        if quantize:
            # Experts [E, out, in] are quantised as E x out rows of `in` values.
            rows = values.reshape(-1, values.shape[-1])
            parts = parts or affine_quantize(rows, *layer_format)
            if permute:
                parts = tuple(unpermute(p, permute) for p in parts)
            q, scales, biases = parts
            base = module[:-len(".weight")]
            arrays[module] = ("U32", pack(q, layer_format[0]).reshape(*shape[:-1], -1))
            arrays[base + ".scales"] = ("F16", scales.reshape(*shape[:-1], -1))
            arrays[base + ".biases"] = ("F16", biases.reshape(*shape[:-1], -1))
            continue
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            values = values - 1.0  # GGUF stores Gemma's 1 + w
        if permute:
            values = unpermute(values, permute)
        arrays[module] = as_dtype(values, "f32" if f32 else "f16" if quantization else dtype)
    if quantization:
        config["quantization"] = {"group_size": quantization[1], "bits": quantization[0]}
        for module in unquantized:
            config["quantization"][module] = False
        config["quantization"].update(layer_formats)
        config["quantization_config"] = dict(config["quantization"])
    if layout == "per-expert":
        arrays = split_experts(arrays, kind)
    arrays = dict(sorted(arrays.items()))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), arrays)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as out:
        json.dump(config, out, indent=1)
    write_tokenizer(fields, arch, out_dir)
    with open(stamp_path, "w", encoding="utf-8") as out:
        json.dump(stamp, out)
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "check":
        need_packages()
        return 0
    if len(argv) in (4, 5, 6) and argv[1] == "convert":
        return convert(*argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
