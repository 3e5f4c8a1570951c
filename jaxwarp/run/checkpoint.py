"""A run folder's saved state: config.yaml and the Orbax checkpoints.

``out/config.yaml`` holds ``{"config": TrainConfig.to_dict(), "seeds": S}``
and the settings of the steps after training (``after_training:``, e.g. the
CLI's ``eval_episodes``), written once training starts (again when a resume
extends the run or changes those settings); ``out/checkpoints/<update>/`` the runner state
(leading ``[seeds]`` axis) after that many updates, as Orbax global arrays,
so a run restores onto any device count (docs/sharding.md). `loop`
writes both; `loop` (``--resume``) and `evaluate` read them back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp.errors import CheckpointError, CheckpointWarning
from jaxwarp.storage import atomic_write, read_at_most
from jaxwarp.train.config import (
    CONFIG_FILE_LIMIT,
    ConfigError,
    TrainConfig,
    config_from_dict,
    yaml_error,
)
from jaxwarp.train.sweep import Sweep

CONFIG_FILE = "config.yaml"
CHECKPOINTS = "checkpoints"
CORRUPT = "checkpoints_corrupt"


def write_config(out: Path, config: TrainConfig, seeds: int,
                 after_training: Mapping[str, Any] | None = None, sweep: Sweep | None = None
                 ) -> None:
    """out/config.yaml: the run's config and seed count (`read_saved_config`)
    and, when given, the settings of the steps after training
    (`read_after_training`) and the sweep (`read_saved_sweep`). Written beside
    and renamed over the old one, so that a run killed meanwhile keeps a
    readable config.yaml."""
    record: dict[str, Any] = {"config": config.to_dict(), "seeds": seeds}
    if after_training:
        record["after_training"] = dict(after_training)
    if sweep is not None:
        record["sweep"] = sweep.to_dict()
    atomic_write(out / CONFIG_FILE, yaml.safe_dump(record, sort_keys=False))


def read_after_training(out: Path) -> dict[str, Any]:
    """The ``after_training:`` settings of out/config.yaml ({} when none or unreadable)."""
    try:
        meta = yaml.safe_load(_read_config_text(out))
        found = meta.get("after_training")
        return dict(found) if isinstance(found, Mapping) else {}
    except Exception:  # noqa: BLE001 - a resume reports an unreadable config.yaml itself
        return {}


def read_saved_sweep(out: Path) -> Sweep | None:
    """The sweep of the run saved in out (None for a plain run); ConfigError
    when config.yaml's ``sweep:`` is not one."""
    try:
        meta = yaml.safe_load(_read_config_text(out))
    except Exception:  # noqa: BLE001 - read_saved_config reports an unreadable file
        return None
    found = meta.get("sweep") if isinstance(meta, Mapping) else None
    if found is None:
        return None
    try:
        return Sweep.from_dict(found)
    except (ConfigError, TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE}: 'sweep:' is not a sweep ({e})"
                          ) from None


def _read_config_text(out: Path) -> str:
    """out/config.yaml's text; ConfigError past CONFIG_FILE_LIMIT bytes (a run
    writes a few KB; parsing hundreds of MB of YAML would take minutes)."""
    data = read_at_most(out / CONFIG_FILE, CONFIG_FILE_LIMIT)
    if len(data) > CONFIG_FILE_LIMIT:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is over {CONFIG_FILE_LIMIT:,} bytes; "
                          "not a jaxwarp run config (a run writes a few KB)")
    return data.decode()


def read_saved_config(out: Path) -> tuple[TrainConfig, int]:
    """(config, seeds) of the run saved in out; ConfigError if config.yaml is corrupt."""
    try:
        meta = yaml.safe_load(_read_config_text(out))
    except yaml.YAMLError as e:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is not valid YAML "
                          f"({yaml_error(e)})") from None
    except RecursionError:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is nested too deeply to be a "
                          "jaxwarp run config") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--resume {out}: cannot read {CONFIG_FILE} ({e})") from None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("config"), Mapping) \
            or isinstance(meta.get("seeds"), bool) or not isinstance(meta.get("seeds"), int) \
            or meta["seeds"] < 1:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE} is not a jaxwarp run config "
                          "(expected 'config:' mapping and 'seeds:' integer >= 1)")
    try:
        return config_from_dict(meta["config"]), meta["seeds"]
    except ConfigError as e:
        raise ConfigError(f"--resume {out}: {CONFIG_FILE}: {e}") from None


def saved_distributed(out: Path) -> bool:
    """The ``distributed`` setting of the run saved in out (False when unreadable:
    the resume reports the problem itself, under the lock)."""
    try:
        meta = yaml.safe_load((out / CONFIG_FILE).read_text())
        return meta["config"].get("distributed") is True
    except Exception:  # noqa: BLE001
        return False


def checkpointer(out: Path) -> Any:
    """The Orbax CheckpointManager of out/checkpoints (keeps the newest 2)."""
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        (out / CHECKPOINTS).absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))


def save_checkpoint(mngr: Any, update: int, state: Any, force: bool = False) -> None:
    """Saves the runner state after `update` updates (asynchronously: Orbax
    writes a temporary folder and renames it when complete)."""
    import orbax.checkpoint as ocp

    mngr.save(update, args=ocp.args.StandardSave(state), force=force)


def checkpoint_steps(out: Path) -> list[int]:
    """Updates of the checkpoints in out/checkpoints, newest first."""
    ck = out / CHECKPOINTS
    if not ck.is_dir():
        return []
    return sorted((int(q.name) for q in ck.iterdir() if q.is_dir() and q.name.isdigit()),
                  reverse=True)


def abstract_state(trainer: Any, init: Any, keys: Any, members: Any = None) -> Any:
    """The runner state's shapes and dtypes with the shardings to restore onto:
    a sweep's member mesh (`members`: every leaf split along its runs), the
    trainer's mesh (env state split along envs, the rest replicated), or the
    default device. Orbax reads the global arrays, so a checkpoint saved from
    another device count restores onto this one.

    init: the vmapped `Trainer.init`; keys: its input (one key per seed)."""
    abstract = jax.eval_shape(init, keys)
    if members is not None:
        split = NamedSharding(members, P(*members.axis_names))
        shardings = jax.tree.map(lambda _: split, abstract)
    elif trainer.mesh is None:
        # One device (where init puts the state). Explicit, because Orbax would
        # otherwise restore onto the sharding saved in the checkpoint, e.g. the
        # mesh of a run saved with devices=2.
        one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: one, abstract)
    else:
        shardings = trainer.state_shardings(abstract, seed_axis=True)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = f"{type(e).__name__}: {' '.join(str(e).split())}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextlib.contextmanager
def _quiet_closed_loop_callbacks():
    """An Orbax restore that fails on one array returns while TensorStore still
    reads the others; when those reads finish they call into Orbax's closed
    event loop and Python prints a 'RuntimeError: Event loop is closed'
    traceback for each. Drop exactly those while checkpoints are probed."""
    previous = sys.unraisablehook

    def hook(u):
        if not (isinstance(u.exc_value, RuntimeError)
                and str(u.exc_value) == "Event loop is closed"):
            previous(u)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


# What Orbax logs (absl's logger, WARNING) that a run expects and handles:
# the unfinished temporary folder of a save that a kill or a full disk
# interrupted (removed and written again), a save waiting for the previous one.
_EXPECTED_WARNINGS = ("orbax-checkpoint-tmp", "Waiting for previous save to complete")


class _OrbaxLogFilter:
    """A `logging` filter on absl's and asyncio's loggers that drops what Orbax
    logs about a fault the run reports itself in one line: its save threads
    log every failed write (full disk, read-only folder) as ERROR with a
    traceback, and asyncio each of its failed write futures, before the same
    error reaches `wait_until_finished` (where the runner turns it into a
    StorageError); and the expected warnings (`_EXPECTED_WARNINGS`). Anything
    else passes."""

    def filter(self, record: Any) -> bool:
        if "orbax" not in record.pathname and record.name != "asyncio":
            return True
        from jaxwarp.errors import storage_fault

        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += " " + str(record.exc_info[1])
        if storage_fault(RuntimeError(text)) is not None:
            return False
        return not (record.levelno == logging.WARNING and "orbax" in record.pathname
                    and any(w in text for w in _EXPECTED_WARNINGS))


_LOG_FILTER = _OrbaxLogFilter()


@contextlib.contextmanager
def quiet_orbax():
    """While a run saves and restores checkpoints: the 'Event loop is closed'
    tracebacks of Orbax's cancelled reads and writes are dropped. The log
    filter (`_OrbaxLogFilter`) stays installed after it: asyncio logs failed
    futures when they are collected, which may be later."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if _LOG_FILTER not in logger.filters:
            logger.addFilter(_LOG_FILTER)
    with _quiet_closed_loop_callbacks():
        yield


def _try_restore(ckptr: Any, path: Path, abstract: Any) -> Any:
    """The state saved in `path`; raises if it is unreadable or its params are not finite."""
    for meta in ("_CHECKPOINT_METADATA", "default/_METADATA"):
        # Orbax logs an emptied _CHECKPOINT_METADATA and reads on: not intact.
        if (path / meta).exists() and not isinstance(
                json.loads((path / meta).read_text()), dict):
            raise ValueError(f"{meta} is not a JSON object")
    rs = ckptr.restore(path / "default", abstract)
    if not all(_finite(x) for x in jax.tree.leaves(rs.learner.params)):
        raise ValueError("non-finite parameters")
    return rs


def _finite(x: Any) -> bool:
    """All of `x` finite, as far as this process holds it: a sweep's runs split
    over several processes are checked by each on its own devices' (the
    processes then agree on the checkpoint restored: `resume.restore_or_init`)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return all(np.isfinite(np.asarray(s.data)).all() for s in x.addressable_shards)
    return bool(np.isfinite(np.asarray(x)).all())


def _newest_intact(out: Path, steps: list[int], abstract: Any
                   ) -> tuple[tuple[int, Any] | None, list[tuple[int, str]]]:
    """((update, state) of the first of `steps` that restores, or None;
    [(update, why)] of those before it that did not)."""
    import orbax.checkpoint as ocp

    skipped: list[tuple[int, str]] = []
    with _quiet_closed_loop_callbacks(), ocp.StandardCheckpointer() as ckptr:
        for step in steps:
            try:
                rs = _try_restore(ckptr, (out / CHECKPOINTS / str(step)).absolute(), abstract)
            except Exception as e:  # noqa: BLE001  (Orbax/TensorStore raise many kinds)
                skipped.append((step, _one_line(e)))
                time.sleep(0.2)  # let the reads of the other arrays finish (see above)
                continue
            return (step, rs), skipped
    return None, skipped


def restore_intact(out: Path, abstract: Any, primary: bool = True, stacklevel: int = 3,
                   read_only: bool = False) -> tuple[int, Any] | None:
    """(update, state) of the newest checkpoint that restores with finite
    parameters, or None when there is no checkpoint. Unreadable newer ones are
    moved to checkpoints_corrupt/ with a CheckpointWarning each (so that the
    resumed run can save those steps again; by process 0 alone, `primary`);
    CheckpointError if none restores.

    abstract: the state's shapes and shardings (`abstract_state`).
    stacklevel: of the warnings, counted from this function (3: its caller's caller).
    read_only: a reader beside a live run (eval, render): nothing is moved (a
    checkpoint being written or rotated away looks unreadable for a moment),
    and the read is tried again while the folder's checkpoints change under it.
    """
    steps = checkpoint_steps(out)
    if not steps:
        return None
    found, skipped = _newest_intact(out, steps, abstract)
    for _ in range(3 if read_only else 0):
        if found is not None or checkpoint_steps(out) == steps:
            break
        time.sleep(0.5)  # the run is saving or rotating: read the new list
        steps = checkpoint_steps(out)
        found, skipped = _newest_intact(out, steps, abstract)
    if found is None and read_only:
        tried = "; ".join(f"update {s}: {why}" for s, why in skipped)
        raise CheckpointError(f"{out}: no checkpoint could be read ({tried})")
    if read_only:
        return found
    if found is None:
        tried = "; ".join(f"update {s}: {why}" for s, why in skipped)
        raise CheckpointError(f"--resume {out}: no intact checkpoint ({tried}); start a new "
                              "run with another --out")
    step = found[0]
    for bad, why in skipped if primary else ():  # process 0 moves the files
        dest = out / CORRUPT / str(bad)
        k = 1
        while dest.exists():
            dest, k = out / CORRUPT / f"{bad}.{k}", k + 1
        dest.parent.mkdir(exist_ok=True)
        shutil.move(str(out / CHECKPOINTS / str(bad)), str(dest))
        warnings.warn(f"checkpoint at update {bad} is unreadable ({why}); moved to {dest}, "
                      f"resuming from update {step}", CheckpointWarning, stacklevel=stacklevel)
    return found
