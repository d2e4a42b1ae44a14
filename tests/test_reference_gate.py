"""The reference gate's own arithmetic, where PyTorch is installed (on CPU tensors; CI may have no
PyTorch, and then these skip): how an output is compared with the reference's, what an unwritten
element looks like, and that a draw made again from the generator's state is the same draw."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from harnesses.reference import gate, worker  # noqa: E402


def judge(out, ref, dist: str = "normal") -> str:
    try:
        worker.compare(torch, "y", out, ref, worker.TOLERANCE_DEFAULT, dist, {})
    except worker.Incorrect as exc:
        return str(exc)
    return "ok"


def test_an_honest_output_passes_and_cheats_do_not(monkeypatch):
    monkeypatch.setattr(gate, "CHUNK", 1000)  # several chunks, as a large output has
    ref = torch.randn(4096, dtype=torch.float64).float()
    assert judge(ref.clone(), ref) == "ok"
    reordered = (ref.double() * (1 + 1e-7 * torch.randn(4096, dtype=torch.float64))).float()  # another order
    assert judge(reordered, ref) == "ok"
    assert "relative error" in judge(ref.half().float(), ref)  # half precision
    unwritten = ref.clone()
    worker._poison(torch, unwritten[100:200])
    assert judge(unwritten, ref) == "output 'y': 100 of 4096 elements unwritten (normal draw)"
    nan = ref.clone()
    nan[7] = float("nan")
    assert "1 non-finite elements where the reference is finite" in judge(nan, ref)
    one_off = ref.clone()
    one_off[3] += 50 * float(ref.abs().max())
    assert "relative error" in judge(one_off, ref) or "an element off" in judge(one_off, ref)


def test_integer_outputs_must_be_equal_and_infinities_where_the_reference_has_them():
    idx = torch.arange(64)
    other = idx.clone()
    other[5] = 0
    assert judge(other, idx, "ties") == "output 'y': 1 of 64 elements differ from the reference (0 unwritten; ties draw)"
    ref = torch.randn(64)
    ref[0] = float("inf")
    assert judge(ref.clone(), ref) == "ok"
    wrong = ref.clone()
    wrong[0] = 1.0
    assert "where it is inf or nan" in judge(wrong, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_the_poison_is_a_nan_of_every_floating_type(dtype):
    t = torch.zeros(16, dtype=dtype)
    worker._poison(torch, t)
    if dtype.is_floating_point:
        assert bool(torch.isnan(t).all())
    assert bool((worker._bits(torch, t) == worker.POISON[t.element_size()]).all())


@pytest.mark.parametrize("dist", worker.DISTRIBUTIONS)
def test_a_draw_made_again_from_its_state_is_the_same_draw(dist):
    """What the inputs are checked against, and what the reference computes on, is the draw made again
    from the generator's state kept on the host: bit for bit the content the kernel was given."""
    problem = worker.Problem.__new__(worker.Problem)
    problem.torch = torch
    spec = {"kind": "float", "low": -3.0, "high": 3.0, "mean": 0.0, "std": 1.0}
    gen = torch.Generator()
    gen.manual_seed(7)
    state = gen.get_state()
    first = torch.empty(1000, 33)
    problem.fill(first, spec, dist, gen)
    gen.set_state(state)
    again = torch.empty(1000, 33)
    problem.fill(again, spec, dist, gen)
    assert torch.equal(first, again) and not torch.equal(first, torch.zeros_like(first))
    problem.fill(again, spec, dist, gen)  # the next draw is fresh content
    assert not torch.equal(first, again)
