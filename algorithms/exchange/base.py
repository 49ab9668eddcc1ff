"""The exchange-strategy protocol and its registry (DESIGN §3).

A strategy decides what each receiver gets from its peers in one step. It is built
from the `AlgorithmConfig` and called once per step:

    strategy(rollouts, receivers, scorer, rng) -> ExchangeResult(transfers, stats)

`transfers` has every receiver as a key (an empty list when nothing moves); `stats`
(`ExchangeStats`) is what happened, for the loop to log. Inputs are each agent's
`AgentRollouts` with rewards and advantages filled; the scorer re-scores peer texts
under a receiver's own tokenizer and behaviour policy. The base class checks the
inputs (`check_exchange_inputs`), then calls the subclass's `select`, then checks that
every receiver got an entry. A strategy that keeps state across steps (HACPO's
capability window) returns it from `state_dict()` and takes it back in
`load_state_dict()`, so checkpoints resume it exactly; nothing else outlives a call.

A strategy declares the options it reads beyond the shared ones as a frozen dataclass
of typed fields with help (`options`, e.g. `GraftOptions`); `register_strategy` merges them
into `AlgorithmConfig` (`algorithms.config.add_strategy`), and `check_options` holds
its rules: the shared ones here (its peer objectives, dynamic sampling only where nothing
moves, other strategies' options left at their defaults), its own in an override.

Four hooks say how the receiver's *own* groups combine with what it received and
whether groups move; their defaults are GRAFT's replacement semantics:
- `replaces_own_groups`: True if a prompt that received data drops the
  receiver's own group (GRAFT); False keeps both (pooled, SGT, HACPO).
- `own_advantages(...)`: the advantages of the receiver's own responses, for
  strategies that re-normalise them over a pooled group.
- `units_by_prompt`: True if every row of one prompt (own group and all it
  received) forms one minibatch unit (GRAFT, pooled, SGT); False makes the own
  group and each transferred group separate units (HACPO's self-first order).
- `moves_groups`: False if nothing moves ("none"), so agents may answer different prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms.config import OBJECTIVE_OPTIONS, AlgorithmConfig, add_strategy, strategy_options
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import require
from graft_env.suggest import did_you_mean
from graft_env.types import AgentRollouts, ScoredText, Scorer, TransferredGroup

_STRATEGIES: dict[str, type[ExchangeStrategy]] = {}
_SHARED = frozenset(f.name for f in dataclasses.fields(AlgorithmConfig))


@dataclass(frozen=True)
class ExchangeResult:
    """One step's exchange: the groups each receiver gets and what the strategy did."""

    transfers: dict[str, list[TransferredGroup]]
    stats: ExchangeStats


class ExchangeStrategy:
    """Base class of all strategies: subclass it, implement `select`, register it."""

    name = "unregistered"
    options: ClassVar[type | None] = None
    """The dataclass of the options this strategy reads beyond the shared ones (None: none)."""
    peer_objectives: ClassVar[tuple[str, ...]] = ("ppo", "luffy")
    """The `peer_objective` values this strategy trains peers with."""

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = config

    def check_options(self, where: str) -> None:
        """Raise `OptionError` at `where` for options that would silently mean nothing with
        this strategy; an override adds its own rules (calling this one)."""
        cfg = self.config
        if cfg.peer_objective not in self.peer_objectives:
            allowed = " or ".join(repr(p) for p in self.peer_objectives)
            raise require(
                where,
                "peer_objective",
                cfg.peer_objective,
                f"{allowed} with exchange={self.name!r}",
            )
        if cfg.dynamic_sampling and self.moves_groups:
            raise require(
                where,
                "dynamic_sampling",
                True,
                f"False with exchange={self.name!r}: it would drop the all-fail groups an "
                "exchange fills",
            )
        read = self.options_in_use()
        for options in strategy_options().values():
            for spec in dataclasses.fields(options):
                value = getattr(cfg, spec.name)
                if spec.name not in read and value != spec.default:
                    raise require(
                        where, spec.name, value, f"{spec.default!r} {_readers(spec.name)}"
                    )

    @classmethod
    def option_classes(cls) -> tuple[type, ...]:
        """The options dataclasses this strategy reads: its own `options` and those of every
        strategy class it subclasses (a GRAFT variant reads, and may set, GRAFT's options)."""
        found: list[type] = []
        for klass in cls.__mro__:
            options = klass.__dict__.get("options")
            if options is not None and options not in found:
                found.append(options)
        return tuple(found)

    @classmethod
    def option_names(cls) -> frozenset[str]:
        """Names of the strategy options this strategy reads (`option_classes`' fields)."""
        return frozenset(f.name for o in cls.option_classes() for f in dataclasses.fields(o))

    def options_in_use(self) -> frozenset[str]:
        """The strategy options a run of this config reads: its classes' (`option_names`) and
        those the loss reads for its `peer_objective` (`OBJECTIVE_OPTIONS`)."""
        return self.option_names() | set(OBJECTIVE_OPTIONS.get(self.config.peer_objective, ()))

    @property
    def replaces_own_groups(self) -> bool:
        """Whether a prompt that received peer data drops the receiver's own group."""
        return True

    @property
    def moves_groups(self) -> bool:
        """Whether groups move between agents (then all agents must have answered the same
        prompts); "none" moves nothing, so each agent may have its own batch (dynamic
        sampling refills each agent's batch on its own)."""
        return True

    @property
    def units_by_prompt(self) -> bool:
        """Whether a prompt's own and transferred rows share one minibatch unit."""
        return True

    def __call__(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        """`select` on checked inputs; every receiver is a key of the transfers."""
        check_exchange_inputs(rollouts, receivers, self.config.n, self.moves_groups)
        result = self.select(rollouts, receivers, scorer, rng)
        missing = [r for r in receivers if r not in result.transfers]
        if missing:
            raise ValueError(f"strategy {self.name!r} returned nothing for {missing}")
        return result

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        """The transfers for every receiver and their `ExchangeStats`; the inputs are
        already checked (`check_exchange_inputs`)."""
        raise NotImplementedError(f"exchange strategy {self.name!r} does not implement select")

    def own_advantages(
        self,
        receiver: str,
        rollouts: Mapping[str, AgentRollouts],
        transfers: Sequence[TransferredGroup],
    ) -> np.ndarray:
        """Advantages [P, n] of the receiver's own responses; default: its own group's."""
        return filled_advantages(rollouts[receiver])

    def state_dict(self) -> dict[str, Any]:
        """What the strategy carries from one step to the next, as JSON-ready data.

        The loop saves it in the checkpoint's state.json (digested by its manifest), so a
        resumed run continues with the same state. Stateless strategies keep nothing: {}.
        """
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned; a stateless strategy accepts only {}."""
        if state:
            raise ValueError(
                f"exchange strategy {self.name!r} keeps no state, but got {sorted(state)}"
            )


def register_strategy(name: str) -> Callable[[type[ExchangeStrategy]], type[ExchangeStrategy]]:
    """Class decorator: make `name` usable as `AlgorithmConfig.exchange`, with the strategy's
    `options` merged into `AlgorithmConfig`."""

    def add(cls: type[ExchangeStrategy]) -> type[ExchangeStrategy]:
        if not (isinstance(cls, type) and issubclass(cls, ExchangeStrategy)):
            raise TypeError(f"strategy {name!r} must subclass ExchangeStrategy, got {cls!r}")
        if name in _STRATEGIES:
            raise ValueError(f"exchange strategy {name!r} is already registered")
        own = cls.__dict__.get("options")
        inherited = {klass.__dict__.get("options") for klass in cls.__mro__[1:]}
        add_strategy(
            name,
            None if own in inherited else own,  # a base's options are declared by the base
            lambda config, where: cls(config).check_options(where),
        )
        cls.name = name
        _STRATEGIES[name] = cls
        return cls

    return add


def strategy_classes() -> dict[str, type[ExchangeStrategy]]:
    """Registered strategy name -> its class, in registration order."""
    return dict(_STRATEGIES)


def rebuild_config(values: Mapping[str, Any]) -> AlgorithmConfig:
    """The config pickled as `values` (`AlgorithmConfig.__reduce__`): unpickling imports this
    module, and with it algorithms.exchange's built-in strategies."""
    return AlgorithmConfig(**values)


def _readers(option: str) -> str:
    """'unless exchange=...' naming every registered strategy that reads `option`."""
    names = [name for name, cls in _STRATEGIES.items() if option in cls.option_names()]
    objectives = [repr(o) for o, read in OBJECTIVE_OPTIONS.items() if option in read]
    also = f" or peer_objective={' or '.join(objectives)}" if objectives else ""
    if len(names) == 1:
        return f"unless exchange={names[0]!r}{also}"
    return "unless exchange is one of " + ", ".join(repr(name) for name in names) + also


def options_read(config: AlgorithmConfig) -> dict[str, Any]:
    """The options a run of `config` reads: every shared AlgorithmConfig option and those of
    the strategy `config.exchange` names (its own and inherited, and what the loss reads for
    its peer objective: `options_in_use`), by name. Options of other strategies are left out:
    they are held at their defaults (`check_options`), so adding a strategy or an option
    elsewhere does not change this (compare cells hash it)."""
    read = make_strategy(config).options_in_use()
    return {
        spec.name: getattr(config, spec.name)
        for spec in dataclasses.fields(config)
        if spec.name in read or spec.name in _SHARED
    }


def available_strategies() -> list[str]:
    """Names of all registered strategies, sorted."""
    return sorted(_STRATEGIES)


def make_strategy(config: AlgorithmConfig) -> ExchangeStrategy:
    """Build the strategy named by `config.exchange`."""
    if config.exchange not in _STRATEGIES:
        raise ValueError(
            f"unknown exchange strategy {config.exchange!r}"
            f"{did_you_mean(config.exchange, _STRATEGIES)}; registered: {available_strategies()}"
        )
    return _STRATEGIES[config.exchange](config)


# --- helpers shared by strategies -------------------------------------------------------


def filled_advantages(rollouts: AgentRollouts) -> np.ndarray:
    """The agent's advantages, which `Algorithm.compute_advantages` must have filled."""
    if rollouts.advantages is None:
        raise ValueError(
            f"agent {rollouts.agent!r} has no advantages: call Algorithm.compute_advantages first"
        )
    advantages = np.asarray(rollouts.advantages, dtype=np.float64)
    if advantages.shape != rollouts.rewards.shape:
        raise ValueError(
            f"agent {rollouts.agent!r}: advantages have shape {advantages.shape}, "
            f"rewards {rollouts.rewards.shape}"
        )
    return advantages


def check_exchange_inputs(
    rollouts: Mapping[str, AgentRollouts],
    receivers: Sequence[str],
    n: int,
    same_prompts: bool = True,
) -> None:
    """All agents answered `n` responses per prompt, the same prompts unless
    `same_prompts` is False; receivers are agents."""
    if not rollouts:
        raise ValueError("rollouts is empty: the exchange needs at least one agent")
    missing = [r for r in receivers if r not in rollouts]
    if missing:
        raise ValueError(f"receivers {missing} have no rollouts; agents: {list(rollouts)}")
    first = next(iter(rollouts.values()))
    for name, agent in rollouts.items():
        if agent.agent != name:
            raise ValueError(f"rollouts[{name!r}] holds agent {agent.agent!r}")
        if agent.n != n:
            raise ValueError(f"agent {name!r} has groups of {agent.n}, the config says n={n}")
        if same_prompts and agent.prompt_ids != first.prompt_ids:
            raise ValueError(
                f"agents {first.agent!r} and {name!r} answered different prompt batches; "
                "an exchange needs the same prompts in the same order"
            )
        for field in ("texts", "token_ids", "logprobs", "finish_reasons"):
            for p, group in enumerate(getattr(agent, field)):
                if len(group) != n:
                    raise ValueError(
                        f"agent {name!r}: {field}[{p}] has {len(group)} responses, expected n={n}"
                    )


def score_texts(
    scorer: Scorer,
    receiver: str,
    prompt_indices: Sequence[int],
    texts: Sequence[str],
    finish_reasons: Sequence[str],
) -> list[ScoredText]:
    """Call the scorer once for all of a receiver's peer texts and check what comes back.

    `finish_reasons[j]` is how the source's response ended: the receiver appends its
    EOS only after a response the source ended with EOS ("stop").
    """
    if not texts:
        return []
    scored = scorer(receiver, list(prompt_indices), list(texts), list(finish_reasons))
    if len(scored) != len(texts):
        raise ValueError(
            f"scorer returned {len(scored)} results for {len(texts)} texts (receiver {receiver!r})"
        )
    for j, item in enumerate(scored):
        if len(item.token_ids) == 0 or len(item.token_ids) != len(item.logprobs):
            raise ValueError(
                f"scorer result {j} for receiver {receiver!r} (prompt {prompt_indices[j]}) has "
                f"{len(item.token_ids)} token ids and {len(item.logprobs)} log-probs; "
                "need the same non-zero number"
            )
    return scored
