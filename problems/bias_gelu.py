"""Bias add followed by the exact (erf) GELU, a fused elementwise op on a [batch_size, features]
float32 matrix with a learned bias per feature (256 MB in, 256 MB out at the sizes below)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """gelu(x + bias), the bias broadcast along the rows."""

    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x + self.bias)


batch_size = 8192
features = 8192


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]
