"""What a cubin defines, read from its ELF without a GPU or a CUDA tool: the kernels (entry points) and
the size of each of their parameters.

A cubin is an ELF64 file. Each kernel is a global function symbol marked as a CUDA entry (st_other
0x10); its section `.nv.info.<name>` holds attribute records, of which EIATTR_KPARAM_INFO (0x17) gives
each parameter's ordinal and size. cuobjdump reads the same, but one from an older toolkit found on the
PATH cannot read a newer cubin.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

STT_FUNC, STB_GLOBAL, STO_CUDA_ENTRY = 2, 1, 0x10
EIFMT_SVAL, EIATTR_KPARAM_INFO = 0x04, 0x17


class CubinError(Exception):
    pass


def _sections(data: bytes) -> dict[str, tuple]:
    """Section name -> (type, offset, size, link, every section's header)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, kind, _flags, _addr, offset, size, link, _info in headers:
        out[_string(data, names_at + name)] = (kind, offset, size, link, headers)
    return out


def _string(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode(errors="replace")


def kernels(path: str | Path) -> dict[str, list[int]]:
    """The cubin's kernels by name, each with the byte size of its parameters in order."""
    try:
        data = Path(path).read_bytes()
        sections = _sections(data)
    except (OSError, struct.error, ValueError, IndexError) as exc:
        raise CubinError(f"cannot read {path}: {exc}") from None
    symtab = sections.get(".symtab")
    if symtab is None:
        raise CubinError(f"{path}: no symbol table")
    _, offset, size, link, headers = symtab
    strings = headers[link][4]
    found: dict[str, list[int]] = {}
    for i in range(size // 24):
        name, info, other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, offset + i * 24)
        if info & 0xF == STT_FUNC and info >> 4 == STB_GLOBAL and other & STO_CUDA_ENTRY:
            kernel = _string(data, strings + name)
            found[kernel] = _params(data, sections.get(f".nv.info.{kernel}"))
    return found


def _params(data: bytes, section: Any) -> list[int]:
    """The parameter sizes of one kernel, by ordinal, from its .nv.info section's records."""
    if section is None:
        return []
    _, offset, size, _, _ = section
    params: dict[int, int] = {}
    at, end = offset, offset + size
    while at + 4 <= end:
        fmt, attr, value = struct.unpack_from("<BBH", data, at)
        at += 4
        if fmt != EIFMT_SVAL:
            continue  # a record without a payload: the 16 bits are its value
        if attr == EIATTR_KPARAM_INFO and value >= 12:
            _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", data, at)
            params[ordinal] = (flags >> 18) & 0x3FFF
        at += value
    return [params[i] for i in sorted(params)]
