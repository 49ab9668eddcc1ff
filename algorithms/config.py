"""The options of a learning rule: `AlgorithmConfig`, of which every registry entry is a preset.

GRPO, GRAFT, its ablations and the baselines differ only in these options, so a variant is
`dataclasses.replace(base, ...)`, never a copied class (DESIGN §2). The options every rule
reads are declared here; an exchange strategy declares its own next to its code
(`ExchangeStrategy.options`, a frozen dataclass) and `register_strategy` merges them in
(`add_strategy`), so `AlgorithmConfig(...)` is one flat frozen config of all of them
(`merged_class`) and `dataclasses.asdict` of it lists every option. A strategy subclassing
another reads (and may set) its base's options and declares only its new ones. Each field's type
carries its range (`graft_env.schema`) and `metadata["help"]` its help text (TRL style), so
`describe()` and `graft config show` print them. `validate()` checks every value, the
combinations that would silently mean nothing, and the strategy's own rules
(`ExchangeStrategy.check_options`); `algorithms.make` calls it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, Strict

from algorithms.core.advantages import ADVANTAGE_SCALES
from algorithms.core.ordering import ORDER_MODES
from graft_env.schema import (
    Count,
    Flag,
    Fraction,
    NonNegative,
    OptionError,
    PositiveNumber,
    Text,
    check_fields,
    require,
)
from graft_env.suggest import did_you_mean

RATIO_MODES = ("token", "sequence")
PEER_OBJECTIVES = ("ppo", "luffy", "nll")
WHERE = "AlgorithmConfig"
"""How errors name an option given from Python (`AlgorithmConfig.n: 1 must be >= 2`)."""

GroupSize = Annotated[int, Strict(), Field(ge=2)]
StrategyCheck = Callable[["AlgorithmConfig", str], None]
_STRATEGY_OPTIONS: dict[str, type] = {}
"""Strategy name -> the dataclass of options it declares (`add_strategy`)."""
_STRATEGY_CHECKS: dict[str, StrategyCheck] = {}
"""Strategy name -> its rules on a config (`ExchangeStrategy.check_options`)."""


OBJECTIVE_OPTIONS: dict[str, tuple[str, ...]] = {"nll": ("sgt_coef",)}
"""Strategy options the loss reads for a `peer_objective` (`Algorithm.loss`: 'nll' scales its
term by SGT's `sgt_coef`): every strategy allowing that objective reads them too
(`ExchangeStrategy.options_in_use`), so they may be set and are hashed with it."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Options of one learning rule. Defaults are GRPO as used in the paper (its Eq.2).

    `AlgorithmConfig(...)` builds the merged class: these fields and every registered
    strategy's options (`merged_class`); `isinstance(config, AlgorithmConfig)` holds for it.
    """

    # --- rollouts and advantages (SPEC §1, §6) ---
    n: GroupSize = field(
        default=8,
        metadata={"help": "Group size: responses sampled per prompt (paper: 8; GRPO also 16, 32)."},
    )
    adv_eps: NonNegative = field(
        default=1e-6, metadata={"help": "Added to the group std before dividing (Eq.1)."}
    )
    adv_scale: Literal[ADVANTAGE_SCALES] = field(
        default="std",
        metadata={
            "help": (
                "'std': divide by the group std (Eq.1); 'none': Dr.GRPO, only subtract the mean."
            )
        },
    )
    adv_ddof: Count = field(
        default=1,
        metadata={
            "help": (
                "Delta degrees of freedom of the group std: 1 sample std (verl's torch.std, which "
                "the paper trained with), 0 population std (advantages sqrt(n/(n-1)) larger)."
            )
        },
    )
    dynamic_sampling: Flag = field(
        default=False,
        metadata={
            "help": (
                "Drop own groups with k in {0, n} from the batch (DAPO dynamic sampling; counted)."
            )
        },
    )

    # --- update (SPEC §5) ---
    eps_low: Fraction = field(
        default=0.2, metadata={"help": "Lower clip radius: ratios below 1 - eps_low are clipped."}
    )
    eps_high: NonNegative = field(
        default=0.28, metadata={"help": "Upper clip radius (clip-higher): above 1 + eps_high."}
    )
    peer_eps_low: Fraction | None = field(
        default=None,
        metadata={
            "help": (
                "Lower clip radius on transferred responses; None uses eps_low (HACPO sets its "
                "own)."
            )
        },
    )
    peer_eps_high: NonNegative | None = field(
        default=None,
        metadata={"help": "Upper clip radius on transferred responses; None uses eps_high."},
    )
    clip_own: Flag = field(
        default=True,
        metadata={
            "help": (
                "Clip the ratio on the receiver's own responses. With peer_clip=False as well, the "
                "clip is removed everywhere (graft-no-clip keeps it on own responses: project "
                "choice)."
            )
        },
    )
    peer_clip: Flag = field(
        default=True,
        metadata={"help": "Clip the ratio on transferred responses (graft-no-clip: off)."},
    )
    ratio: Literal[RATIO_MODES] = field(
        default="token",
        metadata={
            "help": (
                "'token': per-token ratio (Eq.9); 'sequence': exp(mean_t log ratio) (GSPO form)."
            )
        },
    )
    num_minibatches: Annotated[int, Strict(), Field(ge=1)] = field(
        default=4, metadata={"help": "Minibatches per optimisation epoch (paper: 4 x 32 prompts)."}
    )
    order: Literal[ORDER_MODES] = field(
        default="peer_last",
        metadata={
            "help": "Minibatch order of prompt groups: 'peer_last' (§4.2), 'peer_first', 'random'."
        },
    )
    constant_norm: Count = field(
        default=0,
        metadata={
            "help": (
                "Normaliser of each minibatch's summed token loss: 0 is Eq.10's token mean (its "
                "retained tokens); L > 0 divides by L x its retained responses instead, Dr.GRPO's "
                "constant (its MAX_TOKENS; verl's seq-mean-token-sum-norm). dr-grpo: 4096, the "
                "paper's response budget; set it to the run's sampling.max_new_tokens."
            )
        },
    )
    kl_coef: NonNegative = field(
        default=0.0,
        metadata={
            "help": (
                "Weight of a k3 KL penalty to a frozen copy of the initial policy (verl's "
                "low_var_kl kl_loss, clamped to [-10, 10]), over the policy loss's tokens and "
                "normaliser; 0: no reference model and no extra forward. grpo-kl: 0.001, verl's "
                "kl_loss_coef default."
            )
        },
    )

    # --- exchange (SPEC §2-§4, §7-§9): each strategy's own options are declared with it ---
    exchange: Text = field(
        default="none",
        metadata={
            "help": (
                "Exchange strategy name (algorithms.exchange.available_strategies()); GRPO: 'none'."
            )
        },
    )

    # --- peer objective ---
    peer_objective: Literal[PEER_OBJECTIVES] = field(
        default="ppo",
        metadata={
            "help": (
                "'ppo': clipped surrogate (Eq.10); 'luffy': f(pi) = pi/(pi+gamma) shaping, no clip;"
                " 'nll': auxiliary NLL on peer responses only (SGT)."
            )
        },
    )
    luffy_gamma: PositiveNumber = field(
        default=0.1, metadata={"help": "gamma of LUFFY's shaping f(x) = x / (x + gamma)."}
    )

    def __new__(cls, *args: Any, **kwargs: Any) -> AlgorithmConfig:
        return object.__new__(merged_class() if cls is AlgorithmConfig else cls)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its options, rebuilt by `algorithms.exchange.base.rebuild_config`, so
        unpickling imports algorithms.exchange (the built-in strategies the merged class needs)
        even in a fresh interpreter. Found in sys.modules: no config exists before that module
        registers a strategy (`merged_class`), and this layer does not import it."""
        rebuild = sys.modules["algorithms.exchange.base"].rebuild_config
        return rebuild, ({f.name: getattr(self, f.name) for f in dataclasses.fields(self)},)

    def validate(self, where: str = WHERE) -> AlgorithmConfig:
        """Raise `OptionError` (a ValueError) naming the first bad option and what it accepts,
        as `<where>.<name>: ...`; return self."""
        check_fields(self, where)
        if self.adv_ddof >= self.n:
            raise require(where, "adv_ddof", self.adv_ddof, f"< n={self.n}")
        if self.peer_objective == "luffy" and self.peer_clip:
            raise require(
                where,
                "peer_clip",
                True,
                "False with peer_objective='luffy' (LUFFY never clips peers)",
            )
        if self.peer_objective == "luffy" and self.ratio == "sequence":
            raise require(where, "ratio", self.ratio, "'token' with peer_objective='luffy'")
        check = _STRATEGY_CHECKS.get(self.exchange)
        if check is None:
            valid = ", ".join(repr(name) for name in sorted(_STRATEGY_CHECKS))
            hint = did_you_mean(self.exchange, _STRATEGY_CHECKS)
            raise OptionError(where, "exchange", f"{self.exchange!r} is not one of {valid}{hint}")
        check(self, where)
        return self

    def describe(self) -> dict[str, str]:
        """Field name -> help text, for documentation and CLI help."""
        return {spec.name: spec.metadata["help"] for spec in dataclasses.fields(self)}


def add_strategy(name: str, options: type | None, check: StrategyCheck) -> None:
    """Make `name` a valid `exchange`, with its `options` dataclass (frozen, every field with
    a default and help, no name declared twice; None: no options of its own) merged into
    `AlgorithmConfig` and `check(config, where)` run by `validate` on configs naming it.
    `algorithms.exchange.register_strategy` calls it."""
    if options is not None:
        _check_options_class(name, options)
        _STRATEGY_OPTIONS[name] = options
    _STRATEGY_CHECKS[name] = check


def _check_options_class(strategy: str, options: type) -> None:
    if not (dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen):
        raise TypeError(f"strategy {strategy!r}: options must be a frozen dataclass")
    declared = {f.name: WHERE for f in dataclasses.fields(AlgorithmConfig)}
    for owner, other in _STRATEGY_OPTIONS.items():
        declared.update({f.name: f"strategy {owner!r}" for f in dataclasses.fields(other)})
    for spec in dataclasses.fields(options):
        if spec.name in declared:
            raise ValueError(
                f"strategy {strategy!r}: option {spec.name!r} is already declared by "
                f"{declared[spec.name]}"
            )
        if spec.default is dataclasses.MISSING or not spec.metadata.get("help"):
            raise ValueError(
                f"strategy {strategy!r}: option {spec.name!r} needs a default and help"
            )


def merged_class() -> type[AlgorithmConfig]:
    """The class of every config: `AlgorithmConfig`'s fields, then each registered strategy's
    options in registration order. The built-in strategies register when
    `algorithms.exchange` is imported (the registry, `algorithms.make` and
    `algorithms.AlgorithmConfig` import it)."""
    if not _STRATEGY_CHECKS:
        raise RuntimeError(
            "no exchange strategy is registered: import algorithms.exchange (algorithms.make "
            "does) before building an AlgorithmConfig"
        )
    return _merge(tuple(_STRATEGY_OPTIONS.values()))


@functools.cache
def _merge(options: tuple[type, ...]) -> type[AlgorithmConfig]:
    merged = dataclasses.make_dataclass(
        "AlgorithmConfig", [], bases=(*reversed(options), AlgorithmConfig), frozen=True
    )
    merged.__module__, merged.__doc__ = __name__, AlgorithmConfig.__doc__
    return merged


def strategy_names() -> list[str]:
    """Names of the registered strategies (valid `exchange` values), in registration order."""
    return list(_STRATEGY_CHECKS)


def strategy_options() -> dict[str, type]:
    """Strategy name -> the options dataclass it declares itself (inherited ones are declared
    by the base strategy), in registration order."""
    return dict(_STRATEGY_OPTIONS)


def option_fields() -> tuple[dataclasses.Field, ...]:
    """Every option's field: AlgorithmConfig's and each registered strategy's."""
    return dataclasses.fields(merged_class())
