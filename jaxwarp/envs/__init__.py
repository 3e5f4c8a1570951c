"""Built-in environments."""

from jaxwarp.envs.tag_continuous import (
    TagContinuous,
    TagContinuousParams,
    TagContinuousState,
)

__all__ = ["TagContinuous", "TagContinuousParams", "TagContinuousState"]
