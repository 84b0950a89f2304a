"""Transfer of pretrained transformers to downstream tasks, against baselines (docs/STUDY.md section 4).

This package's top level is torch-free (the Snakefile imports ``spec`` and the method registry
``methods`` at parse time); ``tasks``, ``fitting``, ``baselines``, ``paper_model`` and ``runner``
import torch and scikit-learn.
"""

from .methods import method_names
from .spec import DEFAULT_SIZES, DOWNSTREAM, TransferSpec, check_grid, check_transfer

__all__ = ["DEFAULT_SIZES", "DOWNSTREAM", "TransferSpec", "check_grid", "check_transfer", "method_names"]
