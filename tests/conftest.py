"""Shared pytest setup: CPU only, no GPU preallocation, repository root importable, and one compilation cache per
test session (`JAX_COMPILATION_CACHE_DIR`, inherited by every driver a test starts: runs of the same shapes
compile once per session, and no test reads what another session or the user's own runs left)."""

import atexit
import os
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="qc_jax_cache_")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.startup import use_compilation_cache  # noqa: E402 - after the path

use_compilation_cache(os.environ["JAX_COMPILATION_CACHE_DIR"])
