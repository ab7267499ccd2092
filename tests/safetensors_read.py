#!/usr/bin/env python3
"""An independent safetensors reader, for checking ckpt's files from outside.

Usage: safetensors_read.py FILE

Prints one JSON object, {name: {"dtype": ..., "shape": [...], "sha256": ...}},
for every tensor in FILE (sorted by name). It uses only the standard library
and shares no code with ckpt, so a file it accepts is readable by readers
that are not ckpt. Like the format's reference implementation, it rejects a
header whose tensors do not tile the data section exactly (a hole, an
overlap, bytes past the end or left over), a duplicate name, an unknown dtype
or a shape that does not match its byte range. Exit status 1 and a message on
stderr for a bad file.
"""

import hashlib
import json
import struct
import sys

DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}


class BadFile(Exception):
    pass


def no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise BadFile(f"duplicate key {key!r} in the header")
        obj[key] = value
    return obj


def is_count(v):
    # bool is an int in Python; a JSON true is not a dimension.
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise BadFile("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise BadFile(f"header length {n} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"),
                            object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadFile(f"header is not JSON: {e}")
    if not isinstance(header, dict):
        raise BadFile("header is not a JSON object")
    section = data[8 + n:]

    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise BadFile(f"tensor {name!r} is not an object")
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if dtype not in DTYPE_SIZES:
            raise BadFile(f"tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(map(is_count, shape)):
            raise BadFile(f"tensor {name!r} has a bad shape")
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(map(is_count, offsets)) or offsets[1] < offsets[0]):
            raise BadFile(f"tensor {name!r} has bad data_offsets")
        size = DTYPE_SIZES[dtype]
        for d in shape:
            size *= d
        if offsets[1] - offsets[0] != size:
            raise BadFile(f"tensor {name!r}: data_offsets do not match shape")
        tensors.append((offsets[0], offsets[1], name, dtype, shape))

    tensors.sort()
    expect = 0
    for begin, end, name, _, _ in tensors:
        if begin != expect:
            raise BadFile(f"tensor {name!r} does not start where the previous "
                          f"one ends ({begin} != {expect})")
        expect = end
    if expect != len(section):
        raise BadFile(f"tensors cover {expect} bytes of a {len(section)}-byte "
                      "data section")

    return {
        name: {
            "dtype": dtype,
            "shape": shape,
            "sha256": hashlib.sha256(section[begin:end]).hexdigest(),
        }
        for begin, end, name, dtype, shape in tensors
    }


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        out = read(sys.argv[1])
    except (BadFile, OSError) as e:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
