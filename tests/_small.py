"""Small env configurations that several test files share (few agents, short
episodes: quick to build and step on every backend). A module rather than
conftest fixtures because the tests' subprocess workers (tests/_workers.py)
and parametrisations at import time read them too."""

from __future__ import annotations

from typing import Any

# Tag with k-nearest observations: 2 taggers, 6 runners, 4 agents observed
# (each file adds the episode length its checks need).
SMALL_TAG: dict[str, Any] = dict(num_taggers=2, num_runners=6, num_other_agents_observed=4)
