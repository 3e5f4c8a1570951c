"""The arguments that ``jaxwarp train`` and ``jaxwarp sweep`` share, declared
once (`add_run_arguments`). A module of its own: `jaxwarp.cli` imports
`jaxwarp.cli_sweep`, and both import this one, which imports neither.
"""

from __future__ import annotations

import argparse


def add_run_arguments(p: argparse.ArgumentParser, overrides: str, resume: str,
                      sweep: bool = False) -> None:
    """Adds the ``key=value`` words, ``--env``, ``--config``, ``--seeds``,
    ``--out``, ``--resume`` and ``--no-progress`` to `p`, the parser of
    ``jaxwarp train`` (or of ``jaxwarp sweep``, `sweep`); `overrides` and
    `resume` are the help of the words and of ``--resume``."""
    from jaxwarp.train.config import MAX_SEEDS, shipped_configs

    p.add_argument("overrides", nargs="*", metavar="key=value", help=overrides)
    p.add_argument("--env", help="env name (same as env=NAME)")
    p.add_argument("--config", help="YAML file, or a shipped config name "
                   f"({', '.join(shipped_configs())})")
    p.add_argument("--seeds", type=int, default=1, help=(
        f"seeds of every setting: seed, seed+1, ...; at most {MAX_SEEDS} runs (settings x "
        "seeds)" if sweep else
        f"seeds trained together (vmap): seed, seed+1, ...; at most {MAX_SEEDS}"))
    p.add_argument("--out", help="output folder (default runs/"
                   f"{'sweep-' if sweep else ''}<env>-<time>)")
    p.add_argument("--resume", metavar="DIR", help=resume)
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar: one line per chunk of updates instead (also when "
                   "stdout is not a terminal)")
