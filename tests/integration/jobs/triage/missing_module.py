"""Library not found: a module the job needs is not installed in the image."""
import torch  # noqa: F401

import dlrr_no_such_module  # noqa: F401
