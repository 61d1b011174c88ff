#!/usr/bin/env python3
"""Independent reference for onepass's GGML block formats, using gguf-py (pip install gguf).

    gguf_quants.py check
        exit 0 when gguf and numpy import (the C++ tests skip otherwise)
    gguf_quants.py dequantize TYPE IN OUT
        IN holds raw GGUF bytes of TYPE (whole blocks); OUT gets the values as float32
    gguf_quants.py quantize TYPE IN OUT
        IN holds float32 values; OUT gets gguf-py's bytes of TYPE (types gguf-py can
        quantize: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0)

TYPE is an onepass dtype name: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k
iq4_nl iq4_xs.
"""
import sys

TYPES = {
    "f32": "F32",
    "f16": "F16",
    "bf16": "BF16",
    "q4_0": "Q4_0",
    "q4_1": "Q4_1",
    "q8_0": "Q8_0",
    "q4_k": "Q4_K",
    "q5_k": "Q5_K",
    "q6_k": "Q6_K",
    "q5_0": "Q5_0",
    "q5_1": "Q5_1",
    "q2_k": "Q2_K",
    "q3_k": "Q3_K",
    "iq4_nl": "IQ4_NL",
    "iq4_xs": "IQ4_XS",
}


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
    if len(argv) != 5 or argv[1] not in ("dequantize", "quantize") or argv[2] not in TYPES:
        print(__doc__, file=sys.stderr)
        return 2
    mode, name, src, dst = argv[1:]
    qtype = getattr(gguf.GGMLQuantizationType, TYPES[name])
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if mode == "dequantize":
        raw = np.fromfile(src, dtype=np.uint8)
        if raw.size % block_bytes:
            print(f"{src}: {raw.size} bytes is not a whole number of {name} blocks", file=sys.stderr)
            return 1
        # One row of whole blocks; dequantize works on the last axis.
        values = quants.dequantize(raw.reshape(1, -1), qtype)
        np.asarray(values, dtype=np.float32).reshape(-1).tofile(dst)
    else:
        values = np.fromfile(src, dtype=np.float32)
        if values.size % block_elems:
            print(f"{src}: {values.size} values is not a whole number of {name} blocks", file=sys.stderr)
            return 1
        packed = quants.quantize(values.reshape(1, -1), qtype)
        np.ascontiguousarray(packed).view(np.uint8).reshape(-1).tofile(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
