"""Built-in environments, one module per env.

Every module ``<name>.py`` here is one env, found by discovery
(`jaxwarp.registry`, no list to keep): it exports ``SPEC`` (its
`jaxwarp.authoring.EnvSpec`, ``SPEC.name == "<name>"``), ``ENV`` (its env
class) and optionally ``CONFIGS`` (named params), and holds the params, the
state and the pure-JAX reference. Its kernel is ``cuda/envs/<name>.h`` and
its doc ``docs/envs/<name>.md``. Modules named ``_*.py`` hold what several
envs share (``_classic.py``: the four classic-control envs; ``_mpe.py``: the
two MPE envs) and are not envs.
"""
