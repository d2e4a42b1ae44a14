"""Sum over the middle dimension of a [batch_size, dim1, dim2] float32 tensor, the reduced dimension
kept as size 1 (256 MB in, 256 KB out at the sizes below)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """torch.sum over the dimension given to the constructor, with keepdim=True."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
dim1 = 1024
dim2 = 1024
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
