"""PPO in PyTorch on jaxwarp's CartPole through the torch adapter (CleanRL-style).

The policy, the rollout buffer and the update are plain PyTorch (after
CleanRL's ppo.py); the env batch is `jaxwarp.adapters.torch.TorchVectorEnv`:
torch tensors in and out, one jitted call per step, the state on the env's
device. jaxwarp resets a finished env inside the step that ends it (no
final observation), which is the same-step autoreset CleanRL's GAE was
written for: ``dones[t]`` marks obs[t] as the first of a new episode, and
truncation is treated as termination.

    pip install torch
    python examples/torch_ppo_cartpole.py                  # backend=cpu
    python examples/torch_ppo_cartpole.py --backend jax --total-timesteps 200000

Prints the mean return of the episodes finished in each window of updates;
docs/adapters.md has the figures it reaches.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from jaxwarp.adapters.torch import TorchVectorEnv


@dataclasses.dataclass(frozen=True)
class Config:
    seed: int = 1  # torch and env seed
    backend: str = "cpu"  # jaxwarp backend: cpu | cuda | jax
    total_timesteps: int = 500_000  # env steps over the whole run
    num_envs: int = 8  # envs stepped together
    num_steps: int = 128  # steps per env per rollout
    learning_rate: float = 2.5e-4  # Adam step size, annealed linearly to 0
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    num_minibatches: int = 4  # minibatches per epoch
    update_epochs: int = 4  # epochs over each rollout
    clip_coef: float = 0.2  # PPO ratio clip
    ent_coef: float = 0.01  # entropy bonus
    vf_coef: float = 0.5  # value loss weight
    max_grad_norm: float = 0.5  # gradient clip
    log_every: int = 20  # updates between progress lines
    torch_threads: int = 1  # torch intra-op threads (a 64-unit MLP gains nothing from more)


def parse_config() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Config):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default),
                            default=f.default)
    return Config(**vars(parser.parse_args()))


def layer(in_dim: int, out_dim: int, std: float = np.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(),
                                    layer(64, 1, std=1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(),
                                   layer(64, num_actions, std=0.01))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(obs)


def train(cfg: Config) -> list[float]:
    """Runs PPO; returns the mean return of the episodes that finished in
    each update's rollout (nan where none did)."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    envs = TorchVectorEnv.make("cartpole", cfg.num_envs, backend=cfg.backend)
    dev = envs.device
    agent = Agent(envs.obs_shape[0], envs.nvec[0]).to(dev)
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
    T, E = cfg.num_steps, cfg.num_envs
    batch = T * E
    minibatch = batch // cfg.num_minibatches
    num_updates = cfg.total_timesteps // batch

    obs = torch.zeros((T, E, envs.obs_shape[0]), device=dev)
    actions = torch.zeros((T, E), dtype=torch.long, device=dev)
    logprobs, rewards, dones, values = (torch.zeros((T, E), device=dev) for _ in range(4))

    next_obs, _ = envs.reset(seed=cfg.seed)
    next_done = torch.zeros(E, device=dev)
    history: list[float] = []
    start = time.time()
    for update in range(1, num_updates + 1):
        for g in optimizer.param_groups:
            g["lr"] = (1.0 - (update - 1.0) / num_updates) * cfg.learning_rate
        finished: list[torch.Tensor] = []
        for t in range(T):
            obs[t] = next_obs
            dones[t] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            actions[t], logprobs[t], values[t] = action, logprob, value
            next_obs, reward, terminated, truncated, info = envs.step(action)
            done = terminated | truncated
            rewards[t] = reward
            next_done = done.float()
            if done.any():
                finished.append(info["episode_return"][done].clone())
        history.append(torch.cat(finished).mean().item() if finished else float("nan"))

        with torch.no_grad():  # GAE, as CleanRL computes it
            next_value = agent.value(next_obs)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(E, device=dev)
            for t in reversed(range(T)):
                nonterminal = 1.0 - (next_done if t == T - 1 else dones[t + 1])
                nv = next_value if t == T - 1 else values[t + 1]
                delta = rewards[t] + cfg.gamma * nv * nonterminal - values[t]
                last = delta + cfg.gamma * cfg.gae_lambda * nonterminal * last
                advantages[t] = last
            returns = advantages + values

        b_obs, b_act = obs.reshape(batch, -1), actions.reshape(batch)
        b_logp, b_adv = logprobs.reshape(batch), advantages.reshape(batch)
        b_ret, b_val = returns.reshape(batch), values.reshape(batch)
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(batch, device=dev)
            for i in range(0, batch, minibatch):
                mb = perm[i:i + minibatch]
                _, newlogp, entropy, newvalue = agent.act(b_obs[mb], b_act[mb])
                ratio = (newlogp - b_logp[mb]).exp()
                adv = b_adv[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef,
                                                                     1 + cfg.clip_coef)).mean()
                v_clipped = b_val[mb] + (newvalue - b_val[mb]).clamp(-cfg.clip_coef,
                                                                     cfg.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_ret[mb]) ** 2,
                                         (v_clipped - b_ret[mb]) ** 2).mean()
                loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                optimizer.step()

        if update % cfg.log_every == 0 or update == num_updates:
            window = np.array(history[-cfg.log_every:])
            print(f"update {update:4d}/{num_updates}  steps {update * batch:7d}  "
                  f"mean return {np.nanmean(window):6.1f}  ({time.time() - start:5.1f} s)",
                  flush=True)
    envs.close()
    return history


if __name__ == "__main__":
    train(parse_config())
