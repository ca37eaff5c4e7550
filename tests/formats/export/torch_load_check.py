#!/usr/bin/python3
"""Checks a PyTorch checkpoint written by blz's TorchZipWriter (formats/export/torch_zip.h).

usage: torch_load_check.py FILE EXPECT.json MODE
  MODE zip    Python's zipfile reads FILE and testzip() finds no bad CRC (stdlib only).
  MODE stub   zip, then data.pkl is unpickled without torch: only the opcodes and globals that
              torch.load(weights_only=True) accepts, each persistent id resolved to its
              data/<key> entry; names, dtypes, shapes, strides and values checked (stdlib only).
  MODE torch  torch.load(FILE, weights_only=True) (and with mmap=True where torch has it);
              names, dtypes, shapes, contiguity and values checked.

EXPECT.json: {"archive": NAME, "tensors": [{"name", "dtype" (torch name, e.g. "float32"),
"shape", "sha256" (of the little-endian C-order bytes), "sum" (exact sum of the values, or
null: not checked)}]}.
Exit 0 when everything matches; otherwise prints what differs and exits 1.
"""

import collections
import hashlib
import json
import pickle
import pickletools
import struct
import sys
import zipfile

STORAGE_DTYPES = {
    "DoubleStorage": ("float64", 8), "FloatStorage": ("float32", 4),
    "HalfStorage": ("float16", 2), "BFloat16Storage": ("bfloat16", 2),
    "LongStorage": ("int64", 8), "IntStorage": ("int32", 4), "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1), "BoolStorage": ("bool", 1),
}
# Opcodes torch/_weights_only_unpickler.py accepts (torch 1.13 .. 2.x).
WEIGHTS_ONLY_OPS = {
    "PROTO", "STOP", "GLOBAL", "REDUCE", "BUILD", "NEWOBJ", "MARK", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "EMPTY_TUPLE", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET", "SETITEM", "SETITEMS",
    "APPEND", "APPENDS", "BINPERSID", "BININT", "BININT1", "BININT2", "LONG1", "BINUNICODE",
    "BINFLOAT", "NEWFALSE", "NEWTRUE", "NONE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
}
STRUCT_CODES = {"float64": "d", "float32": "f", "float16": "e", "int64": "q", "int32": "i",
                "int16": "h", "int8": "b", "uint8": "B", "bool": "?"}


def fail(msg):
    print("torch_load_check: " + msg, file=sys.stderr)
    sys.exit(1)


def contiguous_strides(shape):
    strides, s = [], 1
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    return list(reversed(strides))


def values_sum(dtype, data):
    if dtype == "bfloat16":
        n = len(data) // 2
        halves = struct.unpack("<%dH" % n, data)
        return sum(struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves)
    code = STRUCT_CODES[dtype]
    n = len(data) // struct.calcsize(code)
    return float(sum(struct.unpack("<%d%s" % (n, code), data)))


def check_zip(path, expect):
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            fail("zipfile: bad CRC in " + bad)
        names = z.namelist()
    archive = expect["archive"]
    want = [archive + "/data.pkl", archive + "/byteorder"]
    want += ["%s/data/%d" % (archive, i) for i in range(len(expect["tensors"]))]
    want += [archive + "/version", archive + "/.data/serialization_id"]
    if names != want:
        fail("zipfile: entries %r, expected %r" % (names[:8], want[:8]))


def compare(i, exp, name, dtype, shape, stride, data):
    label = "tensor %d %r" % (i, exp["name"])
    if name != exp["name"]:
        fail("%s: name %r" % (label, name))
    if dtype != exp["dtype"]:
        fail("%s: dtype %s, expected %s" % (label, dtype, exp["dtype"]))
    if list(shape) != exp["shape"]:
        fail("%s: shape %r, expected %r" % (label, list(shape), exp["shape"]))
    if list(stride) != contiguous_strides(exp["shape"]):
        fail("%s: stride %r not contiguous" % (label, list(stride)))
    if hashlib.sha256(data).hexdigest() != exp["sha256"]:
        fail("%s: bytes differ (sha256)" % label)


class _Storage:
    def __init__(self, cls_name):
        self.cls_name = cls_name


def check_stub(path, expect):
    archive = expect["archive"]
    with zipfile.ZipFile(path) as z:
        pkl = z.read(archive + "/data.pkl")
        if z.read(archive + "/byteorder") != b"little":
            fail("byteorder is not 'little'")
        if z.read(archive + "/version") != b"3\n":
            fail("version is not '3\\n'")
        for op, _, _ in pickletools.genops(pkl):
            if op.name not in WEIGHTS_ONLY_OPS:
                fail("data.pkl: opcode %s is refused by weights_only" % op.name)
        if pkl[:2] != b"\x80\x02":
            fail("data.pkl: not pickle protocol 2")

        def rebuild(storage, offset, size, stride, requires_grad, hooks):
            if offset != 0 or requires_grad is not False or hooks != collections.OrderedDict():
                fail("rebuild arguments: offset %r requires_grad %r hooks %r" %
                     (offset, requires_grad, hooks))
            return (storage, tuple(size), tuple(stride))

        class Stub(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("collections", "OrderedDict"):
                    return collections.OrderedDict
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild
                if module == "torch" and name in STORAGE_DTYPES:
                    return _Storage(name)
                fail("data.pkl: global %s.%s" % (module, name))

            def persistent_load(self, pid):
                if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                        and isinstance(pid[1], _Storage) and pid[3] == "cpu"):
                    fail("data.pkl: persistent id %r" % (pid,))
                dtype, size = STORAGE_DTYPES[pid[1].cls_name]
                data = z.read("%s/data/%s" % (archive, pid[2]))
                if len(data) != pid[4] * size:
                    fail("data/%s: %d bytes for numel %d" % (pid[2], len(data), pid[4]))
                return (dtype, data)

        import io
        obj = Stub(io.BytesIO(pkl)).load()
    if type(obj) is not collections.OrderedDict:
        fail("data.pkl: not an OrderedDict")
    if len(obj) != len(expect["tensors"]):
        fail("%d tensors, expected %d" % (len(obj), len(expect["tensors"])))
    for i, ((name, (storage, shape, stride)), exp) in enumerate(zip(obj.items(),
                                                                     expect["tensors"])):
        dtype, data = storage
        compare(i, exp, name, dtype, shape, stride, data)
        if exp.get("sum") is not None and values_sum(dtype, data) != exp["sum"]:
            fail("tensor %r: sum %r, expected %r" % (name, values_sum(dtype, data), exp["sum"]))


def check_torch(path, expect):
    import torch
    loads = [{}]
    if "mmap" in torch.load.__code__.co_varnames:
        loads.append({"mmap": True})
    for extra in loads:
        sd = torch.load(path, weights_only=True, **extra)
        if not isinstance(sd, collections.OrderedDict):
            fail("torch.load gave %s, not an OrderedDict" % type(sd).__name__)
        if list(sd.keys()) != [t["name"] for t in expect["tensors"]]:
            fail("torch.load: names differ")
        for i, (exp, (name, t)) in enumerate(zip(expect["tensors"], sd.items())):
            if not t.is_contiguous() or t.requires_grad:
                fail("tensor %r: not contiguous or requires_grad" % name)
            flat = t.reshape(-1).view(torch.uint8)
            data = bytes(flat.tolist())
            compare(i, exp, name, str(t.dtype).replace("torch.", ""), t.shape, t.stride(), data)
            total = t.double().sum().item()
            if exp.get("sum") is not None and total != exp["sum"]:
                fail("tensor %r: torch sum %r, expected %r" % (name, total, exp["sum"]))


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("zip", "stub", "torch"):
        fail("usage: torch_load_check.py FILE EXPECT.json zip|stub|torch")
    path, mode = sys.argv[1], sys.argv[3]
    with open(sys.argv[2]) as f:
        expect = json.load(f)
    check_zip(path, expect)
    if mode == "stub":
        check_stub(path, expect)
    elif mode == "torch":
        check_torch(path, expect)
    print("torch_load_check: %s ok (%d tensors)" % (mode, len(expect["tensors"])))


if __name__ == "__main__":
    main()
