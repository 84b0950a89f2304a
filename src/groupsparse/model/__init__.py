"""The paper's transformer and its fast training kernels."""
