"""`triton.tools.experimental_descriptor`: CUDA TMA descriptors, which the DSL does not have.

Host code may import this module (06-fused-attention does, and takes its TMA path only on CUDA);
creating a descriptor is refused with an error that names the construct.
"""

from __future__ import annotations

__all__ = ["create_1d_tma_descriptor", "create_2d_tma_descriptor", "TmaDescKernelParam"]

_WHY = (
    "TMA descriptors are an NVIDIA Hopper feature; DSL kernels address memory through pointers and "
    "tl.make_block_ptr instead"
)


class TmaDescKernelParam:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"TmaDescKernelParam: {_WHY}")


def create_1d_tma_descriptor(ptr, dim, block_dim, element_size):
    raise NotImplementedError(f"create_1d_tma_descriptor: {_WHY}")


def create_2d_tma_descriptor(ptr, dim1, dim0, block_dim1, block_dim0, element_size):
    raise NotImplementedError(f"create_2d_tma_descriptor: {_WHY}")
