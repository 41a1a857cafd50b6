"""Start-up messages that say nothing about a run, silenced once for every entry point."""

import os
import sys
import warnings


def quiet_startup():
    """Silence the start-up messages that say nothing about the run (docs/outputs.md, "Logs", lists them).

    GLFW's "DISPLAY environment variable is missing" (MuJoCo probes for a window system; rendering uses
    `MUJOCO_GL`), dm_control's INFO lines on the OpenGL backend it picked, gymnasium's "precision lowered by
    casting to float32" for OGBench's action spaces, and JAX's INFO lines about accelerator backends it
    did not find. Call it before the first environment is built: the drivers call it at import, the dataset tools in
    `main`. A `MUJOCO_GL` backend that cannot start (unknown, or its library missing) ends the process here
    with one `error:` line and exit status 2.
    """
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
    import logging

    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.WARNING)
    try:
        import dm_control._render  # noqa: F401 - (imported by OGBench) logs the OpenGL backend it picked, at INFO
        import dm_control.mjcf  # noqa: F401 - and the MuJoCo version
    except (ImportError, AttributeError, RuntimeError) as e:
        backend = os.environ.get("MUJOCO_GL")
        if backend is None:
            raise
        # An unknown backend, or one whose library is missing: dm_control fails at import, before any run.
        print(
            f"error: MUJOCO_GL={backend} cannot start ({type(e).__name__}: {e}); unset MUJOCO_GL, or install the "
            "library it needs (osmesa: libosmesa6, egl: libegl1).",
            file=sys.stderr,
        )
        sys.exit(2)
    finally:
        absl_logger.setLevel(level)
