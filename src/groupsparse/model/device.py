"""The job's device, from its spec's `device` setting: the one place a device name becomes a torch device."""

from __future__ import annotations

import torch

from ..config.errors import ConfigError
from ..config.specs import DTYPES

# The spec's `dtype` names (config.specs.DTYPES, the schema's enum) as torch types.
TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}


def torch_device(name: str) -> torch.device:
    """torch.device(name), or ConfigError (one line naming the setting) where it cannot run here."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device: {name!r}, but torch sees no CUDA device on this machine; set `device: cpu` in the "
            "config (or run the job where a GPU is visible)"
        )
    return device
