"""Calibration of the reference gate's rule on a GPU: `python tests/calibrate_truth.py [OUT.json]`.

Problems whose reductions are long (a LayerNorm and an RMSNorm over rows of 4,194,304 elements, a sum
over rows that long, a matrix-vector product with K = 1,048,576, a softmax over rows of 262,144), each
drawn from every distribution the gate uses. For each, outputs of honest implementations and of ones
that cut precision are judged as the gate judges a candidate's (`gate.compare`): before (against
PyTorch's float32 output) and now (against the module in float64, with PyTorch's own error). The
implementations are written in PyTorch to stand for kernels: float64 sums rounded once (the best a
kernel can do), float32 sums in blocks (as a kernel sums), and cheats: inputs rounded to fp16, sums
kept in bf16 or fp16 (pairwise, each partial sum rounded), every 1000th term skipped, and one that is
right only on the problem's own distribution. Prints a table (markdown) and writes the details.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from harnesses.reference.gate import TOLERANCE_DEFAULT, TRUTH_MULTIPLE, Incorrect, compare
from harnesses.reference.inputs import Problem
from harnesses.reference.probe import finite_dists

ROWS = 4 * 1024 * 1024
PROBLEMS = {
    "LayerNorm, rows of 4,194,304": f'''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__(); self.ln = nn.LayerNorm(({ROWS},))
    def forward(self, x): return self.ln(x)
def get_inputs(): return [torch.rand(16, {ROWS})]
def get_init_inputs(): return []
''',
    "RMSNorm, rows of 4,194,304": f'''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x): return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)
def get_inputs(): return [torch.randn(16, {ROWS})]
def get_init_inputs(): return []
''',
    "sum, rows of 4,194,304": f'''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x): return x.sum(dim=1)
def get_inputs(): return [torch.randn(16, {ROWS})]
def get_init_inputs(): return []
''',
    "matrix-vector, K = 1,048,576": '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, a, v): return torch.matmul(a, v)
def get_inputs(): return [torch.randn(64, 1048576), torch.randn(1048576, 1)]
def get_init_inputs(): return []
''',
    "softmax, rows of 262,144": '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x): return torch.softmax(x, dim=1)
def get_inputs(): return [torch.randn(64, 262144)]
def get_init_inputs(): return []
''',
}


def tree(x, dtype):
    """Sums along the last dimension pairwise, each partial sum rounded to `dtype` (an accumulator of it)."""
    x = x.to(dtype)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], -1)
        x = (x[..., 0::2] + x[..., 1::2]).to(dtype)
    return x[..., 0].float()


def blocked(x):
    """float32 sums as a kernel makes them: 256 blocks a row, each its share in float32, then the 256."""
    return x.float().reshape(*x.shape[:-1], 256, -1).sum(-1).sum(-1)


def skip(x):
    y = x.clone()
    y[..., ::1000] = 0
    return y


def implementations(name: str, model):
    """name -> (honest?, fn(inputs) -> output) for one problem."""
    def sums(total):  # a problem's output from a way of summing along rows
        if name.startswith("LayerNorm"):
            def f(x):
                n = x.shape[-1]
                mean = (total(x) / n)[:, None]
                var = (total((x - mean) ** 2) / n)[:, None]
                return ((x - mean) / torch.sqrt(var + 1e-5) * model.ln.weight + model.ln.bias).float()
        elif name.startswith("RMSNorm"):
            def f(x):
                return (x / torch.sqrt(total(x * x)[:, None] / x.shape[-1] + 1e-5)).float()
        elif name.startswith("sum"):
            def f(x):
                return total(x)
        elif name.startswith("softmax"):
            def f(x):
                e = torch.exp(x - x.max(dim=1, keepdim=True).values)
                return (e / total(e)[:, None]).float()
        else:
            def f(a, v):
                return total(a * v[:, 0]).reshape(-1, 1)
        return f
    exact = sums(lambda x: x.double().sum(-1))
    out = {
        "float64 sums, rounded once": (True, exact),
        "float32 sums in 256 blocks": (True, sums(blocked)),
        "inputs rounded to fp16": (False, lambda *xs: exact(*[x.half().float() for x in xs])),
        "bf16 accumulation": (False, sums(lambda x: tree(x, torch.bfloat16))),
        "fp16 accumulation": (False, sums(lambda x: tree(x, torch.float16))),
        "every 1000th term skipped": (False, sums(lambda x: skip(x).double().sum(-1))),
    }
    if name.startswith("LayerNorm"):  # variance as E[x²] − E[x]² in float32: fine near 0, not at an offset
        def one_pass(x):
            n = x.shape[-1]
            mean = blocked(x) / n
            var = blocked(x * x) / n - mean * mean
            return ((x - mean[:, None]) / torch.sqrt(var[:, None] + 1e-5) * model.ln.weight + model.ln.bias).float()
        out["one-pass variance (right on its own draws)"] = (False, one_pass)
    if name.startswith("softmax"):  # no max subtracted: exp overflows where the inputs are large
        out["no max subtracted (right on its own draws)"] = (False, lambda x: (torch.exp(x) / torch.exp(x).sum(1, keepdim=True)))
    return out


def judge(out, ref, truth, dist):
    """(verdict before, verdict now, the candidate's error against the truth, PyTorch's)."""
    tol = dict(TOLERANCE_DEFAULT)
    try:
        compare(torch, "out", out, ref, tol, dist, {})
        before = "pass"
    except Incorrect:
        before = "FAIL"
    w: dict = {}
    try:
        e = compare(torch, "out", out, ref, tol, dist, w, truth, TRUTH_MULTIPLE)
        now = "pass"
    except Incorrect:
        now, e = "FAIL", None
    err = w.get("out", {})
    return before, now, err.get("rel_truth"), err.get("rel_torch"), e


def main() -> int:
    rows, details = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pname, text in PROBLEMS.items():
            path = Path(tmp) / "problem.py"
            path.write_text(text)
            problem = Problem({"problem": {"path": str(path), "sizes": {}}, "seed": 0})
            model64 = __import__("copy").deepcopy(problem.model).double()
            gen = torch.Generator(device="cuda")
            gen.manual_seed(1)
            impls = implementations(pname, problem.model)
            for dist in finite_dists(problem):
                xs = [i["tensor"] for i in problem.inputs]
                for x, spec in zip(xs, problem.inputs):
                    problem.fill(x, spec, dist, gen)
                with torch.no_grad():
                    ref = problem.model(*xs)
                    truth = model64(*[x.double() for x in xs])
                    for iname, (honest, fn) in impls.items():
                        out = fn(*xs).float().contiguous()
                        before, now, err, torch_err, _ = judge(out, ref, truth, dist)
                        details.append({"problem": pname, "impl": iname, "honest": honest, "dist": dist,
                                        "before": before, "now": now, "err": err, "torch_err": torch_err})
                torch.cuda.empty_cache()
            for iname, (honest, _) in impls.items():
                mine = [d for d in details if d["problem"] == pname and d["impl"] == iname]
                worst = max(mine, key=lambda d: (d["err"] or 0) / max(d["torch_err"] or 0, 1e-30))
                rows.append((pname, iname, "honest" if honest else "cheat",
                             max((d["err"] or float("inf")) for d in mine),
                             max(d["torch_err"] or 0 for d in mine),
                             "all" if all(d["before"] == "pass" for d in mine) else
                             "fails " + ", ".join(d["dist"] for d in mine if d["before"] != "pass"),
                             "all" if all(d["now"] == "pass" for d in mine) else
                             "fails " + ", ".join(d["dist"] for d in mine if d["now"] != "pass"), worst["dist"]))
            del problem, model64
            torch.cuda.empty_cache()
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}; float32 tolerance "
          f"{TOLERANCE_DEFAULT['float32']:g}, multiple {TRUTH_MULTIPLE:g}\n")
    print("| problem | implementation | kind | worst error vs float64 | PyTorch's worst | passes before | passes now |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for p, i, k, err, terr, before, now, _ in rows:
        print(f"| {p} | {i} | {k} | {err:.2g} | {terr:.2g} | {before} | {now} |")
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(details, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
