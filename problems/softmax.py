"""Row softmax: each row of a [batch_size, dim] float32 matrix mapped to probabilities over its last
dimension (256 MB in, 256 MB out at the sizes below)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of a 2-D input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 4096
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
