#!/usr/bin/env python3
"""Reads a GGUF file with gguf-py (PyPI `gguf`) and prints it in the canonical text form
that tests/model/gguf_test.cpp builds from onepass's own reader, so the two can be compared:

    version 3
    alignment 32
    data_offset 1024
    kv <key> <value>
    tensor <name> <ggml type id> <dims, outermost first> <file offset> <bytes> <fnv1a64>

Values: "<type id>:<scalar>" (f32 as %.9g, f64 as %.17g, strings as hex bytes, bools as
true/false) and arrays as "9[<element type id>](<item>,<item>,...)".
Usage: gguf_check.py [--no-checksum] FILE.gguf   (--no-checksum prints "-" for the data
checksums, for large models)
"""
import sys

from gguf import GGUFReader, GGUFValueType

STRING = int(GGUFValueType.STRING)
ARRAY = int(GGUFValueType.ARRAY)
BOOL = int(GGUFValueType.BOOL)
F32 = int(GGUFValueType.FLOAT32)
F64 = int(GGUFValueType.FLOAT64)


def fnv1a(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def decode(parts, i, gtype):
    """Formats the value of type `gtype` whose parts start at parts[i]; returns (text, next i).

    gguf-py keeps a field as a flat list of numpy arrays: a string is [length, bytes], a
    scalar is [value], an array is [element type, count, <parts of each element>...].
    """
    if gtype == STRING:
        return f"{STRING}:{bytes(parts[i + 1]).hex()}", i + 2
    if gtype == ARRAY:
        element = int(parts[i][0])
        count = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(count):
            text, i = decode(parts, i, element)
            items.append(text)
        return f"{ARRAY}[{element}](" + ",".join(items) + ")", i
    value = parts[i][0]
    if gtype == BOOL:
        text = "true" if bool(value) else "false"
    elif gtype == F32:
        text = "%.9g" % float(value)
    elif gtype == F64:
        text = "%.17g" % float(value)
    else:
        text = str(int(value))
    return f"{gtype}:{text}", i + 1


def main() -> int:
    args = sys.argv[1:]
    checksum = "--no-checksum" not in args
    args = [a for a in args if a != "--no-checksum"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    reader = GGUFReader(args[0])
    version = int(reader.fields["GGUF.version"].parts[0][0])
    print(f"version {version}")
    print(f"alignment {reader.alignment}")
    print(f"data_offset {reader.data_offset}")
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):  # header pseudo-fields (version, counts)
            continue
        # parts: [key length, key bytes, value type, <value parts>...]
        text, end = decode(field.parts, 3, int(field.parts[2][0]))
        assert end == len(field.parts), f"{name}: {len(field.parts) - end} parts left over"
        print(f"kv {name} {text}")
    for tensor in reader.tensors:
        dims = ",".join(str(int(d)) for d in reversed(tensor.shape.tolist()))
        digest = "-"
        if checksum:
            data = tensor.data.tobytes()
            assert len(data) == int(tensor.n_bytes), tensor.name
            digest = fnv1a(data)
        print(f"tensor {tensor.name} {int(tensor.tensor_type)} {dims} {int(tensor.data_offset)} "
              f"{int(tensor.n_bytes)} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
