"""Buffers for pointer parameters: array.array, memoryview, bytes-like
objects and numpy arrays to execute's {"type", "base64"} form and back."""
import array
import base64
import os
import sys

# fdod's element types with their size and array.array typecode.
ELEM_TYPES = {
    "i8": (1, "b"), "u8": (1, "B"), "i16": (2, "h"), "u16": (2, "H"),
    "i32": (4, "i"), "u32": (4, "I"), "i64": (8, "q"), "u64": (8, "Q"),
    "f32": (4, "f"), "f64": (8, "d"),
}

_SIGNED = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_UNSIGNED = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}
_FLOAT = {4: "f32", 8: "f64"}


def _elem_of_format(fmt, itemsize):
    """A struct/array format character (native) and item size -> fdod's type."""
    code = fmt.lstrip("@=<>!")
    if code in ("f", "d", "e"):
        elem = _FLOAT.get(itemsize)
    elif code in ("b", "h", "i", "l", "q", "n"):
        elem = _SIGNED.get(itemsize)
    elif code in ("B", "H", "I", "L", "Q", "N", "c", "?"):
        elem = _UNSIGNED.get(itemsize)
    else:
        elem = None
    if elem is None:
        raise TypeError(f"buffer format {fmt!r} ({itemsize}-byte items) has no fdod element type")
    return elem


def _numpy_elem(obj):
    np = sys.modules.get("numpy")
    if np is None or not isinstance(obj, np.ndarray):
        return None
    kind, size = obj.dtype.kind, obj.dtype.itemsize
    table = {"i": _SIGNED, "u": _UNSIGNED, "f": _FLOAT, "b": {1: "u8"}}.get(kind, {})
    if size not in table:
        raise TypeError(f"numpy dtype {obj.dtype} has no fdod element type")
    return table[size]


def is_buffer(obj):
    if isinstance(obj, (bytes, bytearray, memoryview, array.array)):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def encode(obj, elem=None):
    """obj -> (wire dict, element type). bytes/bytearray are u8 unless elem says otherwise."""
    raw, found = raw_bytes(obj, elem)
    return {"type": found, "base64": base64.b64encode(raw).decode("ascii")}, found


# Buffers of this many bytes or more go as memfds when fdod offers buffers.memfd
# (libfdo's FDO_MEMFD_MIN_BYTES).
MEMFD_MIN_BYTES = 65536


def sealed_memfd(raw):
    """A memfd holding raw, sealed so it can no longer change (what fdod accepts)."""
    import fcntl
    fd = os.memfd_create("fdo-buffer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW |
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def raw_bytes(obj, elem=None):
    """obj -> (its bytes, element type)."""
    np_elem = _numpy_elem(obj)
    if np_elem is not None:
        if sys.byteorder != "little" or obj.dtype.byteorder == ">":
            raise TypeError("numpy buffers must be little-endian")
        raw = obj.tobytes(order="C")
        found = np_elem
    elif isinstance(obj, array.array):
        raw, found = obj.tobytes(), _elem_of_format(obj.typecode, obj.itemsize)
    elif isinstance(obj, memoryview):
        raw, found = obj.tobytes(), _elem_of_format(obj.format, obj.itemsize)
    elif isinstance(obj, (bytes, bytearray)):
        raw, found = bytes(obj), "u8"
    else:
        raise TypeError(f"{type(obj).__name__} is not a buffer "
                        "(use array.array, memoryview, bytes or a numpy array)")
    if elem is not None:
        if elem not in ELEM_TYPES:
            raise ValueError(f"unknown element type {elem!r} (expected one of "
                             f"{', '.join(ELEM_TYPES)})")
        if len(raw) % ELEM_TYPES[elem][0] != 0:
            raise ValueError(f"{len(raw)} bytes is not a whole number of {elem} elements")
        found = elem
    return raw, found


def decode(wire, like=None):
    """A returned buffer -> an object of the same kind as `like` (numpy array
    for numpy input, else array.array)."""
    elem = wire["type"]
    if elem not in ELEM_TYPES:
        raise ValueError(f"fdod returned a buffer of unknown type {elem!r}")
    raw = base64.b64decode(wire["base64"]) if "base64" in wire else None
    np = sys.modules.get("numpy")
    if np is not None and isinstance(like, np.ndarray):
        out = np.frombuffer(raw, dtype=like.dtype).copy() if raw is not None \
            else np.array(wire.get("data", []), dtype=like.dtype)
        return out.reshape(like.shape) if out.size == like.size else out
    typecode = ELEM_TYPES[elem][1]
    out = array.array(typecode)
    if raw is not None:
        out.frombytes(raw)
    else:
        out.extend(wire.get("data", []))
    return out
