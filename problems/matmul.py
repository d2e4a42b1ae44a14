"""Matrix multiplication in half precision, in KernelBench's format: C = A·B, A [M, K] and B [K, N]
float16, C float16, against torch.matmul (cuBLAS's half-precision GEMM, accumulating in float32)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A single matrix multiplication."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 4096
N = 4096
K = 4096


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float16)
    B = torch.randn(K, N, dtype=torch.float16)
    return [A, B]


def get_init_inputs():
    return []
