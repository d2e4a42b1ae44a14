"""The row sum of a matrix, in KernelBench's format: the problem of the reference harness's hostile suite
(tests/test_reference_hostile.py). Small enough to evaluate in seconds, large enough (32 MiB read) that
an honest kernel is memory-bound and its time is well above the launch overhead."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """out[i] = sum_j x[i, j]: x [batch_size, dim] float32 -> out [batch_size] float32."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


batch_size = 2048
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
