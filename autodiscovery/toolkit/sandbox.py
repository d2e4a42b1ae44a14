"""A candidate is text from an agent, compiled on the user's machine, its compile errors sent back to
the agent: it must not be able to read the host. Before any build its preprocessor directives are
checked (an `#include` only of a toolkit header by name, only harmless pragmas, nothing that reads a
file or probes for one); builds run in an empty folder with a reduced environment; and what the
compiler says is cut to the diagnostics about the candidate's own file before it is stored or sent.
"""

from __future__ import annotations

import os
import re

from autodiscovery import AutoDiscoveryError

CUDA_HEADERS = frozenset({
    "cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
    "mma.h", "cooperative_groups.h", "cooperative_groups/memcpy_async.h", "cooperative_groups/reduce.h",
    "cuda/barrier", "cuda/pipeline", "cuda/std/cstdint", "cuda/ptx", "stdint.h", "cstdint", "stddef.h",
    "cstddef", "math.h", "cmath", "float.h", "cfloat", "limits.h", "climits", "type_traits",
})
"""Device code may include these, by name (the CUDA toolkit's own and the C/C++ basics it builds on)."""
HOST_HEADERS = CUDA_HEADERS | frozenset({
    "cstdio", "stdio.h", "cstdlib", "stdlib.h", "cstring", "string.h", "vector", "algorithm", "numeric",
    "chrono", "random", "utility", "array", "memory",
})
"""A whole program (the co-design campaign's, host code included) may also include these."""
PRAGMAS = frozenset({"unroll", "nounroll", "once", "nv_diag_suppress", "nv_diag_warning", "nv_diag_default",
                     "nv_diag_error", "diag_suppress", "diag_default", "diag_warning"})
"""Pragmas that only steer code generation or diagnostics."""
DIRECTIVES = frozenset({"define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else",
                        "endif", "error", "warning"})
"""Directives that read nothing (`include` and `pragma` are checked on their own)."""


class RefusedSource(AutoDiscoveryError):
    """A candidate that could read the host: refused, never compiled."""


def _logical_lines(source: str) -> list[str]:
    """The lines the preprocessor sees: continuations joined, comments gone, string contents kept."""
    text = re.sub(r"\\[ \t]*\r?\n", "", source)  # a backslash, even with trailing blanks, joins lines
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out).splitlines()


def refusal(source: str, headers: frozenset[str] = CUDA_HEADERS) -> str | None:
    """Why `source` may not be compiled (one line), or None."""
    if "??=" in source or "??/" in source:
        return "trigraphs (??= ??/) are refused: they can hide a directive"
    if re.search(r"\.incbin\b", source, re.IGNORECASE):
        return ".incbin is refused: it reads a file into the object"
    for line in _logical_lines(source):
        for word in ("__has_include_next", "__has_include", "_Pragma", "__pragma"):
            if word in line:
                return f"{word} is refused: it can probe for or read files on the host"
        m = re.match(r"\s*(?:#|%:)\s*([A-Za-z_]*)(.*)", line)
        if m is None:
            continue
        name, rest = m.group(1), m.group(2).strip()
        if name == "":
            continue  # the null directive
        if name == "include":
            inc = re.fullmatch(r"<([A-Za-z0-9_./]+)>", rest)
            if inc is None:
                what = "a quoted #include" if rest.startswith('"') else f"#include {rest[:60]}"
                return f"{what} is refused: only toolkit headers by name, like #include <cuda_bf16.h>"
            header = inc.group(1)
            if header.startswith("/") or ".." in header.split("/"):
                return f"#include <{header}> is refused: a path, not a header name"
            if header not in headers:
                return f"#include <{header}> is refused: not one of the headers a candidate may use"
        elif name == "pragma":
            word = (rest.split() or [""])[0].split("(")[0]
            if word not in PRAGMAS:
                return f"#pragma {word or '(empty)'} is refused: only {', '.join(sorted(PRAGMAS))}"
        elif name not in DIRECTIVES:
            return f"#{name} is refused: it is not a directive a candidate needs"
    return None


def check(source: str, headers: frozenset[str] = CUDA_HEADERS) -> None:
    """Raise RefusedSource with the reason if `source` may not be compiled."""
    if (why := refusal(source, headers)) is not None:
        raise RefusedSource(why)


def build_env(*paths: str) -> dict[str, str]:
    """The compiler's environment: the PATH it needs (with `paths` in front), a C locale, and nothing
    else of the user's (no credentials, no include or library paths)."""
    keep = [p for p in (*paths, os.environ.get("PATH", "")) if p]
    return {"PATH": os.pathsep.join(keep), "LANG": "C", "LC_ALL": "C"}


def own_diagnostics(log: str, filename: str) -> str:
    """The compiler's output cut to what is about the candidate's own file: its diagnostics (with the
    source lines they quote), ptxas's and nvcc's own lines and the summary; a diagnostic about any
    other file, which would quote that file, is left out and counted."""
    blocks: list[list[str]] = []
    for line in (log or "").splitlines():
        if blocks and (line[:1] in (" ", "\t") or not line.strip()):
            blocks[-1].append(line)
        else:
            blocks.append([line])
    keep, dropped = [], 0
    own = re.compile(rf"^({re.escape(filename)}[(:]|ptxas\b|nvcc\b|\d+ errors? detected in the compilation of "
                     rf"\"{re.escape(filename)}\"|Compilation terminated|Remark: )")
    for block in blocks:
        if own.match(block[0]):
            keep.extend(block)
        else:
            dropped += 1
    text = "\n".join(keep).strip()
    if dropped:
        text += f"\n({dropped} compiler message(s) about other files left out)"
    return text
