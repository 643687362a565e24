"""Each C kernel's signature, read from the one place it is written: c/minillm_kernels.h.

The .c files include that header, so the compiler holds every definition to its declaration;
this module reads the same declarations and gives ctypes their argument and return types. A
kernel's signature is therefore written once, and a change to it reaches both sides."""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

HEADER = Path(__file__).parent / "c" / "minillm_kernels.h"

# C types in the header -> ctypes. Every pointer is passed as an address (a tensor's data_ptr()).
_SCALARS = {"int64_t": ctypes.c_int64, "int": ctypes.c_int, "float": ctypes.c_float}
_RETURNS = {"void": None, "int": ctypes.c_int}


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[str, ...]  # the parameters' names, in order
    argtypes: tuple
    restype: object  # None (void) or ctypes.c_int


def _ctype(declaration: str):
    """The ctypes type of one parameter declaration, e.g. 'const float *W' or 'int64_t N'."""
    if "*" in declaration:
        return ctypes.c_void_p
    words = declaration.replace("const", " ").split()
    if len(words) != 2 or words[0] not in _SCALARS:
        raise ValueError(f"{HEADER.name}: cannot pass a {declaration!r} through ctypes "
                         f"(pointers and {', '.join(_SCALARS)} only)")
    return _SCALARS[words[0]]


def _name(declaration: str) -> str:
    return re.split(r"[\s*]+", declaration.strip())[-1]


def read(header: Path = HEADER) -> dict[str, Signature]:
    """name -> Signature for every function the header declares."""
    text = re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S)  # comments out
    text = re.sub(r"^\s*#.*?(?<!\\)$", " ", text, flags=re.M | re.S)  # preprocessor lines out
    found = {}
    for returns, name, params in re.findall(r"\b(void|int)\s+(\w+)\s*\(([^)]*)\)\s*;", text):
        declarations = [p.strip() for p in params.split(",") if p.strip() not in ("", "void")]
        found[name] = Signature(name, tuple(_name(d) for d in declarations),
                                tuple(_ctype(d) for d in declarations), _RETURNS[returns])
    if not found:
        raise ValueError(f"{header} declares no function")
    return found


SIGNATURES = read()
