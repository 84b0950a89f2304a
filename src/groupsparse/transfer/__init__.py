"""Transfer of pretrained transformers to downstream tasks, against baselines (docs/STUDY.md section 4).

This package's top level is torch-free (the Snakefile imports ``spec`` at parse time);
``tasks``, ``methods`` and ``runner`` import torch and scikit-learn.
"""

from .spec import DEFAULT_SIZES, DOWNSTREAM, METHODS, PRETRAINED_METHODS, TransferSpec, check_grid

__all__ = ["DEFAULT_SIZES", "DOWNSTREAM", "METHODS", "PRETRAINED_METHODS", "TransferSpec", "check_grid"]
