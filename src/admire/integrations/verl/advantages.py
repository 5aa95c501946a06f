"""ADMIRE's advantage estimators as verl advantage estimators (``algorithm.adv_estimator=admire_grpo_step``).

Every estimator of :data:`admire.rl.advantages.ADVANTAGE_ESTIMATORS` (``grpo_step``, ``grpo_traj``,
``rloo_step``, ``dapo_step`` and any registered when :func:`register_estimators` runs) becomes a verl estimator
named ``admire_<name>``, with the signature verl's ``compute_advantage`` calls::

    fn(token_level_rewards, response_mask, config, index=None, **kwargs) -> (advantages, returns)

The maths stays in :mod:`admire.rl.advantages`: this module only regroups a batch's rows into the
``GroupSample``s of each group and calls ``compute_advantages``, so the verl path and the CPU trainer give the
same numbers on the same steps. How rows are regrouped:

* ``index`` (verl's ``uid``) is the group: the rollouts of one task instance;
* ``traj_index`` (kwarg, the ``admire_traj_id`` of each row) splits a group into trajectories, in the order
  they first appear; a trajectory's steps are its rows in row order. Without it each row is its own one-step
  trajectory, which is exact for ``grpo_step`` and ``dapo_step`` (they pool the group's steps, so which step
  belongs to which trajectory does not matter) but not for ``grpo_traj`` (one return per trajectory) or
  ``rloo_step`` (leaves out the whole trajectory). verl's stock ``compute_advantage`` passes only ``index``;
  the stepwise trainer (:mod:`admire.integrations.verl.trainer`) passes ``traj_index``, ``outcome``, ``excluded``;
* ``outcome`` (kwarg, per row, the trajectory's O(τ)) is what ``failed_group_baseline=zero`` needs to tell a
  failed group; with that option and no ``outcome`` the estimator refuses rather than treat every group as
  failed;
* ``excluded`` (kwarg, per row, bool) marks the steps of crashed episodes: no advantage (0) and no part in the
  group's baseline, as on the CPU path. (Their ``response_mask`` is all 0 too, so even verl's stock path trains
  nothing on them; but without the flag their reward of 0 would sit in the group's baseline.)

A row's step reward is the sum of its ``token_level_rewards`` (:mod:`admire.integrations.verl.samples` puts
it on the last response token); its scalar advantage is broadcast over its ``response_mask``, and the returns
equal the advantages, as in verl's own GRPO.

Options come from ``config`` (verl's ``algorithm`` section: a DictConfig, verl's ``AlgoConfig`` or a dict):
``norm_adv_by_std_in_grpo``, ``std_floor``, ``failed_group_baseline``; an absent one keeps the estimator's own
default (normalised, floor 0.0, mean baseline — the paper).

The std convention is ADMIRE's, not verl's: A = (R − mean)/(max(std, std_floor) + 1e-6) with the population
std (ddof=0) of the group's pooled steps, and an all-tie group gets exactly 0. verl's built-in ``grpo`` uses
``torch.std`` (ddof=1, unbiased) and A = (R − mean)/(std + 1e-6) per sequence, so ``admire_grpo_step`` and
``grpo`` differ on the same batch (a two-row group: ±1 here, ±0.7071 there). An ``AdvantageResult``'s ``keep``
has no place in verl's estimator signature: with ``algorithm.filter_groups`` the ``admire_step`` trainer asks
:func:`row_results` which rows' groups were kept and takes the others out of the loss, as the CPU trainer
makes no sample of them. The clip range and the loss aggregation are the actor's config keys on both trainers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from admire.extras import require

require("verl", "torch", extra="verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from admire.rl.advantages import ADVANTAGE_ESTIMATORS, CONFIG_KEYS, GroupSample, compute_advantages  # noqa: E402

PREFIX = "admire_"
CONFIG_OPTIONS: dict[str, str] = CONFIG_KEYS
"""verl ``algorithm.<key>`` → the option of ``admire.rl.advantages.compute_advantages`` it sets (the CPU
trainer's keys)."""

VerlEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
_ESTIMATORS: dict[str, VerlEstimator] = {}
"""One function per ADMIRE name, made once: verl refuses a *different* function under a taken name, so
registering again must hand it the same object."""


def verl_name(name: str) -> str:
    """The name verl knows ADMIRE's estimator ``name`` by."""
    return PREFIX + name


def verl_estimator(name: str) -> VerlEstimator:
    """The verl estimator running ADMIRE's ``name`` (the same object on every call)."""
    if name not in _ESTIMATORS:
        _ESTIMATORS[name] = _make(name)
    return _ESTIMATORS[name]


def register_estimators(names: Sequence[str] | None = None) -> list[str]:
    """Register ``admire_<name>`` in verl for ``names`` (default: every ADMIRE estimator known now).

    Idempotent: a name already registered with this module's function is left as it is. Returns the verl names.
    """
    from verl.trainer.ppo.core_algos import register_adv_est

    registered = []
    for name in ADVANTAGE_ESTIMATORS.names() if names is None else names:
        register_adv_est(verl_name(name))(verl_estimator(name))
        registered.append(verl_name(name))
    return registered


def options_from_config(config: Any) -> dict[str, Any]:
    """The ``compute_advantages`` options set in verl's ``algorithm`` config (absent or null keys left out)."""
    options = {}
    for key, option in CONFIG_OPTIONS.items():
        value = _get(config, key)
        if value is not None:
            options[option] = value
    return options


def row_advantages(name: str, rewards: np.ndarray, index: Sequence[Any], *, traj_index: Sequence[Any] | None = None,
                   outcome: Sequence[float] | None = None, excluded: Sequence[bool] | None = None,
                   options: dict[str, Any] | None = None) -> np.ndarray:
    """One scalar advantage per row (float64): rows regrouped into groups and trajectories, each group run
    through ``compute_advantages(name, …)``; excluded rows get 0."""
    return row_results(name, rewards, index, traj_index=traj_index, outcome=outcome, excluded=excluded,
                       options=options)[0]


def row_results(name: str, rewards: np.ndarray, index: Sequence[Any], *, traj_index: Sequence[Any] | None = None,
                outcome: Sequence[float] | None = None, excluded: Sequence[bool] | None = None,
                options: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``row_advantages`` and, per row, whether the estimator kept its group (``AdvantageResult.keep``): what
    ``algorithm.filter_groups`` drops from the loss."""
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    n = rewards.size
    groups = _column("index (uid)", index, n)
    trajs = None if traj_index is None else _column("traj_index", traj_index, n)
    outcomes = None if outcome is None else np.asarray(_column("outcome", outcome, n), dtype=np.float64)
    flags = None if excluded is None else np.asarray(_column("excluded", excluded, n), dtype=bool)
    options = dict(options or {})
    if options.get("failed_baseline") == "zero" and outcomes is None:
        raise ValueError(f"admire_{name} with failed_group_baseline=zero needs the outcome of each row "
                         "(kwarg outcome): without it every group would count as failed")

    rows_of: dict[Any, dict[Any, list[int]]] = {}
    group_of: dict[Any, Any] = {}
    for i in range(n):
        traj = i if trajs is None else trajs[i]
        if group_of.setdefault(traj, groups[i]) != groups[i]:
            raise ValueError(f"trajectory {traj!r} has rows in groups {group_of[traj]!r} and {groups[i]!r}: "
                             "a trajectory belongs to one group")
        rows_of.setdefault(groups[i], {}).setdefault(traj, []).append(i)

    advantages = np.zeros(n, dtype=np.float64)
    kept = np.ones(n, dtype=bool)
    for trajectories in rows_of.values():
        members = list(trajectories.items())
        samples = [_sample(traj, rows, rewards, outcomes, flags) for traj, rows in members]
        result = compute_advantages(name, samples, **options)
        if not result.keep:
            kept[[row for _, rows in members for row in rows]] = False
        for (traj, rows), values in zip(members, result.advantages, strict=True):
            if values is None:
                continue
            if len(values) != len(rows):
                raise ValueError(f"estimator {name!r} gave {len(values)} advantages for the {len(rows)} steps "
                                 f"of trajectory {traj!r}: it must return one per step")
            advantages[rows] = values
    return advantages, kept


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def stepwise_advantages(
    name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
    index: Sequence[Any] | None = None, **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """What the verl estimator ``admire_<name>`` returns (advantages broadcast over each row's response mask, and
    the returns, equal to them), plus per row whether the estimator kept its group (:func:`row_results`): the
    ``admire_step`` trainer reads both from one pass over the batch's groups."""
    if index is None:
        raise ValueError(f"{verl_name(name)} needs the group of each row: put 'uid' in the batch's non_tensor_batch")
    scalars, kept = row_results(name, token_level_rewards.detach().to(torch.float64).sum(dim=-1).cpu().numpy(),
                                index, traj_index=kwargs.get("traj_index"), outcome=kwargs.get("outcome"),
                                excluded=kwargs.get("excluded"), options=options_from_config(config))
    per_row = torch.as_tensor(scalars, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
    advantages = per_row.unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    return advantages, advantages.clone(), kept


def _make(name: str) -> VerlEstimator:
    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
                  index: Sequence[Any] | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns, _ = stepwise_advantages(name, token_level_rewards, response_mask, config, index, **kwargs)
        return advantages, returns

    estimator.__name__ = estimator.__qualname__ = verl_name(name)
    estimator.__doc__ = (f"verl estimator running admire.rl.advantages' {name!r} on a stepwise batch "
                         f"(see admire.integrations.verl.advantages).")
    return estimator


def _get(config: Any, key: str) -> Any:
    """``config[key]`` for a dict, a DictConfig or a dataclass such as verl's ``AlgoConfig``; None if absent."""
    if config is None:
        return None
    getter = getattr(config, "get", None)
    if callable(getter):
        return getter(key, None)
    return getattr(config, key, None)


def _column(what: str, values: Any, n: int) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    column = np.asarray(values)
    if column.shape != (n,):
        raise ValueError(f"{what} has shape {column.shape} but the batch has {n} rows: give one value per row")
    return column


def _sample(traj: Any, rows: list[int], rewards: np.ndarray, outcomes: np.ndarray | None,
            flags: np.ndarray | None) -> GroupSample:
    outcome = 0.0 if outcomes is None else _one(f"outcomes of trajectory {traj!r}", outcomes[rows])
    excluded = False if flags is None else bool(_one(f"excluded flags of trajectory {traj!r}", flags[rows]))
    if excluded:
        return GroupSample(rewards=(), outcome=float(outcome), excluded=True)
    return GroupSample(rewards=tuple(rewards[rows].tolist()), outcome=float(outcome))


def _one(what: str, values: np.ndarray) -> Any:
    if not (values == values[0]).all():
        raise ValueError(f"the {what} differ across its rows ({values.tolist()}): one episode has one value")
    return values[0]


# --------------------------------------------------------------------------------------------------
# The estimators of admire.rl.advantages' built-ins, as module-level functions (what verl's registry holds)
# --------------------------------------------------------------------------------------------------

admire_grpo_step = verl_estimator("grpo_step")
admire_grpo_traj = verl_estimator("grpo_traj")
admire_rloo_step = verl_estimator("rloo_step")
admire_dapo_step = verl_estimator("dapo_step")
