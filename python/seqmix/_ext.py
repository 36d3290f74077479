"""Loads the extension seqmix._C (libseqmix, which registers torch.ops.seqmix.*) and checks
that it was built against the torch in this environment: a C++ extension built for another
torch release fails in unpredictable ways (missing symbols, wrong layouts)."""
import torch

try:
    from . import _C
except ImportError as e:
    raise ImportError(
        f"seqmix's C++ extension (seqmix._C) cannot be loaded: {e}. Build it against this "
        "environment's torch (pip install --no-build-isolation <seqmix source>, README "
        "'Using seqmix from Python'); seqmix.reference runs without it.") from e

_built = getattr(_C, "TORCH_VERSION", None)
if _built is not None and _built.split("+")[0] != torch.__version__.split("+")[0]:
    raise ImportError(f"seqmix._C was built against torch {_built}, but this environment has "
                      f"torch {torch.__version__}; rebuild seqmix in this environment "
                      "(pip install --no-build-isolation <seqmix source>)")
