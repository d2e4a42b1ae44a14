"""A Triton candidate is device code only: the static rule, read before anything imports the file (no
Triton needed). Honest kernels pass; each hostile file is refused in one line that names the line and
what it holds."""

from __future__ import annotations

import pytest

from autodiscovery.toolkit.triton_rule import RefusedTriton, check

SOFTMAX = '''\
"""Row softmax, one program a row."""
import math

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def softmax_rows(x, out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    v = tl.load(x + row * n_cols + offs, mask=mask, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.math.exp2(v * LOG2E)
    tl.store(out + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit(do_not_specialize=("n_cols",))
def scale(x, n, factor, BLOCK: tl.constexpr = 1024):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for _ in range(2):
        if factor > 0:
            tl.store(x + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)
    assert BLOCK >= 16
    return
'''


def test_honest_kernels_pass_and_are_named():
    assert check(SOFTMAX) == ["softmax_rows", "scale"]
    libdevice = ("from triton.language.extra.cuda import libdevice\nimport triton\n\n@triton.jit\n"
                 "def k(x):\n    libdevice.tanh(x)\n")
    assert check(libdevice) == ["k"]


def refused(source: str) -> str:
    with pytest.raises(RefusedTriton) as exc:
        check(source, "kernels/k.py")
    said = str(exc.value)
    assert "\n" not in said and said.startswith("kernels/k.py: line ")
    return said


KERNEL = "\n\n@triton.jit\ndef k(x):\n    tl.store(x, 1.0)\n"
HEAD = "import triton\nimport triton.language as tl\n"


@pytest.mark.parametrize("source, said", [
    ("import os\n" + HEAD + KERNEL, "line 1: import os"),
    ("import torch\n" + HEAD + KERNEL, "line 1: import torch"),
    ("from os import system\n" + HEAD + KERNEL, "line 1: from os import ..."),
    ("from triton import runtime\n" + HEAD + KERNEL, "line 1: from triton import runtime"),
    ("import subprocess as sp\n" + HEAD + KERNEL, "line 1: import subprocess"),
    (HEAD + "open('/etc/passwd').read()\n" + KERNEL, "line 3: a call to read at module level"),
    (HEAD + "__import__('os').system('id')\n" + KERNEL, "line 3: a call to system at module level"),
    (HEAD + "X = ().__class__.__bases__[0].__subclasses__()\n" + KERNEL, "line 3: a assign statement at module level"),
    (HEAD + "class K:\n    pass\n" + KERNEL, "line 3: a class at module level"),
    (HEAD + "for i in range(3):\n    pass\n" + KERNEL, "line 3: a for statement at module level"),
    (HEAD + "\ndef helper(x):\n    return x\n" + KERNEL, "line 4: def helper is not decorated @triton.jit"),
    (HEAD + "\n@triton.jit\n@staticmethod\ndef k(x):\n    pass\n",
     "@staticmethod on k: a kernel is decorated @triton.jit and nothing else"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    open('/tmp/x', 'w')\n", "line 6: k names 'open', which is not device code"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    eval('1')\n", "k names 'eval'"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    g = globals()\n", "k names 'globals'"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    f = getattr(tl, 'load')\n", "k names 'getattr'"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    tl.load.__globals__\n", "attribute '__globals__' in k"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    triton.runtime.driver.active\n", "triton.runtime.driver.active in k: not a device function"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    tl.core.os.system('id')\n", "triton.language.core.os.system in k"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    m = tl\n    m.core.os.system('id')\n", "k uses the module 'tl' as a value"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    import os\n", "line 6: an import in k"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    with x:\n        pass\n", "a with block in k"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    def inner():\n        pass\n", "a nested function in k"),
    (HEAD + "\n@triton.jit\ndef k(x):\n    y = [i for i in range(3)]\n", "a listcomp expression in k"),
    (HEAD + "\n@triton.jit\ndef k(x, f=print):\n    pass\n", "a default of k's parameters that is not a literal"),
    (HEAD + "\n@triton.jit\ndef k(x: 'os.system'):\n    pass\n", "parameter x of k annotated other than tl.constexpr"),
    (HEAD + "\n@triton.jit(launch_metadata=print)\ndef k(x):\n    pass\n", "takes literal keyword arguments only"),
    ("import math\n", "no @triton.jit function"),
], ids=lambda v: v if len(v) < 40 else None)
def test_a_file_that_could_reach_the_host_is_refused(source, said):
    if said == "no @triton.jit function":
        with pytest.raises(RefusedTriton, match="no @triton.jit function"):
            check(source, "kernels/k.py")
        return
    assert said in refused(source)


def test_a_file_that_is_not_python_is_refused_with_its_line():
    with pytest.raises(RefusedTriton, match=r"kernels/k.py: line 2: not valid Python"):
        check("import triton\ndef (:\n", "kernels/k.py")


def test_the_triton_the_results_were_measured_with_is_the_extras_pin():
    """A Triton of another version builds as it is, and `check` says which it was and which the project
    measured with: that one is what `pip install -e '.[triton]'` installs."""
    import tomllib
    from pathlib import Path

    from harnesses.reference import triton_compile

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["triton"] == [f"triton=={triton_compile.MEASURED}"]


def test_a_kernel_wrapped_by_a_decorator_of_its_own_is_python_refused_at_the_decorator():
    """Without @triton.jit in it, a file whose manifest is a docstring (or that imports triton) is still
    Python: read as a Triton candidate, and refused where the decorator that would run on the host is."""
    from pathlib import Path

    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.toolkit.manifest import is_triton

    shipped = (Path(__file__).parents[1] / "seeds" / "softmax" / "triton.py").read_text()
    wrapped = shipped.replace("@triton.jit\ndef softmax_rows", "def traced(f):\n    return f\n\n\n@traced\ndef softmax_rows")
    assert "@triton.jit" not in wrapped and is_triton(wrapped) and is_triton(shipped)
    assert not is_triton('/* @manifest\nkernel: k\n*/\n// import triton\nextern "C" __global__ void k() {}\n')
    line = wrapped.splitlines().index("@traced") + 1
    with pytest.raises(RefusedTriton, match=rf"line {line}: @traced on softmax_rows: a kernel is decorated "
                                            r"@triton.jit and nothing else"):
        check(wrapped, "kernel.py")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wrapped.py"
        path.write_text(wrapped)
        res = CliRunner().invoke(app, ["check", str(path), "--campaign", "softmax"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and f"line {line}: @traced on softmax_rows" in said and "block" not in said, res.output
