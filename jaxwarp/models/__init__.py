"""The models: Flax actor-critics, the recurrent contract, their GPU kernels.

`mlp` (feed-forward models, `MLPActorCritic` on the fused layers of
`mlp_kernel`), `recurrent` (`GRUActorCritic`, `CentralGRUCritic`, the
contract), `registry` (``model: <name>`` in a config, `register_model`,
entry points) and `layers` (what they share). The models know nothing of the
trainer: the algorithm (`jaxwarp.train`) imports them, never the reverse.
"""

from jaxwarp.models.layers import ACTIVATIONS, orthogonal
from jaxwarp.models.mlp import CentralCritic, MLPActorCritic, UniformPolicy
from jaxwarp.models.recurrent import CentralGRUCritic, GRUActorCritic, is_recurrent
from jaxwarp.models.registry import (MODEL_GROUP, MODELS, load_model_plugins, make_model,
                                     register_model)

__all__ = ["ACTIVATIONS", "MODEL_GROUP", "MODELS", "CentralCritic", "CentralGRUCritic",
           "GRUActorCritic", "MLPActorCritic", "UniformPolicy", "is_recurrent",
           "load_model_plugins", "make_model", "orthogonal", "register_model"]
