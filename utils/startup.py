"""What every entry point does at start: quiet the messages that say nothing about a run, and report a bad
command line as one `error: <message>` line with exit status 2 (argparse scripts, absl tools, the drivers)."""

import argparse
import os
import sys
import warnings
from typing import Optional


def exit_with_error(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one `error: <message> (see --help)` line and exit status 2 (no usage block)."""

    def error(self, message):
        exit_with_error(f"{message} (see --help)")


def parse_absl_flags(argv):
    """`app.run`'s `flags_parser` for the tools: a bad or unknown flag, or a stray word, is one `error:` line."""
    from absl import flags

    try:
        rest = flags.FLAGS(argv)
    except flags.Error as e:
        exit_with_error(str(e))
    if len(rest) > 1:
        exit_with_error(f"unexpected word(s) on the command line: {' '.join(map(repr, rest[1:]))}.")
    return rest


def quiet_startup(dm_control: bool = True):
    """Silence the start-up messages that say nothing about the run (docs/outputs.md, "Logs", lists them): GLFW's
    missing DISPLAY, gymnasium's float32 casts, JAX's missing accelerators, and with `dm_control` (the OGBench
    tools) dm_control's (`quiet_dm_control`). Call it before the first env is built. The drivers pass
    `dm_control=False`: only a family whose envs use it imports dm_control (envs/ogbench.py). With `dm_control`, a
    `MUJOCO_GL` backend that cannot start ends the process here with one `error:` line and exit status 2.
    """
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
    import logging

    logging.getLogger("jax").setLevel(logging.WARNING)  # e.g. its backend search (no TPU, no GPU) at INFO
    if dm_control:
        try:
            quiet_dm_control()
        except ValueError as e:
            exit_with_error(str(e))


def quiet_dm_control():
    """Import dm_control without its start-up lines (the OpenGL backend it picked, the MuJoCo version, logged at
    INFO); a no-op once it is imported. A family whose envs use dm_control calls it before it builds one.

    Raises:
        ValueError: `MUJOCO_GL` names a backend that cannot start (no backend dm_control knows, or one whose library
            is missing): one line naming `MUJOCO_GL` and the fix.
    """
    if "dm_control.mjcf" in sys.modules:
        return
    import logging

    # dm_control logs through absl; PyOpenGL (its OpenGL backends) through its own loggers: the libraries it tried.
    loggers = [logging.getLogger(name) for name in ("absl", "OpenGL")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        import dm_control._render  # noqa: F401 - (imported by OGBench) logs the OpenGL backend it picked, at INFO
        import dm_control.mjcf  # noqa: F401 - and the MuJoCo version
    except (ImportError, AttributeError, RuntimeError) as e:
        backend = os.environ.get("MUJOCO_GL")
        if backend is None:
            raise
        # An unknown backend, or one whose library is missing: dm_control fails at import, before any env.
        raise ValueError(
            f"MUJOCO_GL={backend} cannot start ({type(e).__name__}: {e}); unset MUJOCO_GL, or install the "
            "library it needs (osmesa: libosmesa6, egl: libegl1)."
        ) from None
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def compilation_cache_dir(flag: Optional[str]) -> Optional[str]:
    """The folder `--compilation_cache_dir=flag` names: the flag, else `$JAX_COMPILATION_CACHE_DIR`, else
    `$XDG_CACHE_HOME/qc/jax_cache` (`~/.cache/qc/jax_cache`); None for 'none' (no cache)."""
    if flag is not None:
        return None if flag.strip().lower() in ("none", "") else os.path.abspath(os.path.expanduser(flag))
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "qc", "jax_cache")


def use_compilation_cache(folder: Optional[str]):
    """Turn JAX's persistent compilation cache on in `folder` (None: off), for every compilation, however short.
    Call it before the first `jit` compiles: JAX decides once per process. Entries are keyed by the computation,
    the JAX/XLA versions and the device, so a stale or foreign entry is never used; a file another process is
    still writing fails to load and is compiled again (a warning, never a wrong result). A folder that cannot
    be made is one warning line, and the run goes on without the cache."""
    import jax

    if folder is None:
        jax.config.update("jax_compilation_cache_dir", None)
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        import logging

        logging.getLogger(__name__).warning("no compilation cache: cannot make %s (%s).", folder, e.strerror or e)
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
