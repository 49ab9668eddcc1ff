"""The one configuration dataclass every registry entry is a preset of.

GRPO, GRAFT, its ablations and the baselines differ only in these options, so a
variant is `dataclasses.replace(base, ...)`, never a copied class (DESIGN §2). Each
field carries its help text in `metadata["help"]` (TRL style), so `describe()` and
the CLI can print it. `validate()` checks every value and the combinations that
would silently mean nothing; `algorithms.make` calls it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from algorithms.core.advantages import ADVANTAGE_SCALES
from algorithms.core.ordering import ORDER_MODES
from algorithms.core.selection import CANDIDATE_RULES
from algorithms.core.weights import LOGLIK_MODES

RATIO_MODES = ("token", "sequence")
SELECTION_MODES = ("gate", "random_prompts")
ADMISSION_MODES = ("compat", "random")
ADMISSION_MATCHES = ("direction", "group")
PEER_OBJECTIVES = ("ppo", "luffy", "nll")


def _option(default: Any, help_text: str) -> Any:
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class AlgorithmConfig:
    """Options of one learning rule. Defaults are GRPO as used in the paper (GRAFT-SPEC §6)."""

    # --- rollouts and advantages (SPEC §1, §6) ---
    n: int = _option(8, "Group size: responses sampled per prompt (paper: 8; GRPO also 16, 32).")
    adv_eps: float = _option(1e-6, "Added to the group std before dividing (Eq.1).")
    adv_scale: str = _option(
        "std", "'std': divide by the group std (Eq.1); 'none': Dr.GRPO, only subtract the mean."
    )
    adv_ddof: int = _option(
        1,
        "Delta degrees of freedom of the group std: 1 sample std (verl's torch.std, which the "
        "paper trained with), 0 population std (advantages sqrt(n/(n-1)) larger).",
    )
    dynamic_sampling: bool = _option(
        False, "Drop own groups with k in {0, n} from the batch (DAPO dynamic sampling; counted)."
    )

    # --- update (SPEC §5) ---
    eps_low: float = _option(0.2, "Lower clip radius: ratios below 1 - eps_low are clipped.")
    eps_high: float = _option(0.28, "Upper clip radius (clip-higher): above 1 + eps_high.")
    peer_eps_low: float | None = _option(
        None, "Lower clip radius on transferred responses; None uses eps_low (HACPO sets its own)."
    )
    peer_eps_high: float | None = _option(
        None, "Upper clip radius on transferred responses; None uses eps_high."
    )
    clip_own: bool = _option(
        True,
        "Clip the ratio on the receiver's own responses. With peer_clip=False as well, the "
        "clip is removed everywhere (graft-no-clip keeps it on own responses: project choice).",
    )
    peer_clip: bool = _option(True, "Clip the ratio on transferred responses (graft-no-clip: off).")
    ratio: str = _option(
        "token", "'token': per-token ratio (Eq.9); 'sequence': exp(mean_t log ratio) (GSPO form)."
    )
    num_minibatches: int = _option(4, "Minibatches per optimisation epoch (paper: 4 x 32 prompts).")
    order: str = _option(
        "peer_last", "Minibatch order of prompt groups: 'peer_last' (§4.2), 'peer_first', 'random'."
    )
    constant_norm: int = _option(
        0,
        "Normaliser of each minibatch's summed token loss: 0 is Eq.10's token mean (its "
        "retained tokens); L > 0 divides by L x its retained responses instead, Dr.GRPO's "
        "constant (its MAX_TOKENS; verl's seq-mean-token-sum-norm). dr-grpo: 4096, the "
        "paper's response budget; set it to the run's sampling.max_new_tokens.",
    )
    kl_coef: float = _option(
        0.0,
        "Weight of a k3 KL penalty to a frozen copy of the initial policy (verl's low_var_kl "
        "kl_loss, clamped to [-10, 10]), over the policy loss's tokens and normaliser; 0: no "
        "reference model and no extra forward. grpo-kl: 0.001, verl's kl_loss_coef default.",
    )

    # --- exchange (SPEC §2-§4, §7-§9) ---
    exchange: str = _option(
        "none", "Exchange strategy name (algorithms.exchange.available_strategies()); GRPO: 'none'."
    )
    selection: str = _option(
        "gate", "'gate': Eq.4 candidates; 'random_prompts': same count, uniform among all-fail."
    )
    candidates: str = _option(
        "informative",
        "Gate candidates C_{S->R}: 'informative' (Eq.4: k_R = 0 and 1 <= k_S < n); "
        "'any_success' (SGT's eligibility: k_R = 0 and k_S >= 1, all-pass source groups "
        "included; they carry zero advantage: the paper's no-balance row, App. G).",
    )
    balance: bool = _option(
        True, "Balanced exchange with ties (Alg.1); False transfers every candidate."
    )
    compat: bool = _option(True, "Weight transferred responses by w = 1[s > delta] min(s, 1).")
    delta: float = _option(0.8, "Compatibility floor: responses with s <= delta are removed.")
    compat_norm: str = _option(
        "token", "Length normalisation of log-likelihoods in s: 'token' (paper) or 'char'."
    )
    admission: str = _option(
        "compat",
        "'compat': floor decides; 'random': as many responses as the floor admits per "
        "direction and step (see admission_match) admitted at random, w = min(s, 1).",
    )
    admission_match: str = _option(
        "direction",
        "admission='random': match the floor's admitted count per 'direction' and step "
        "(App. F, Table 7: the paper's form) or per transferred 'group', a finer control: "
        "it matches the floor group by group, so it isolates which responses are admitted "
        "from how many each prompt gets.",
    )
    success_only: bool = _option(
        False, "Remove failed source responses from transferred groups (weight 0; counted)."
    )
    pooled: bool = _option(
        False, "Keep the receiver's group and pool it with the source group; advantages over 2n."
    )
    stored: bool = _option(
        False, "Peer data comes from a stored trajectory log (SPEC §9): one-way, no balancing."
    )

    # --- peer objective and baselines ---
    peer_objective: str = _option(
        "ppo",
        "'ppo': clipped surrogate (Eq.10); 'luffy': f(pi) = pi/(pi+gamma) shaping, no clip; "
        "'nll': auxiliary NLL on peer responses only (SGT).",
    )
    luffy_gamma: float = _option(0.1, "gamma of LUFFY's shaping f(x) = x / (x + gamma).")
    sgt_coef: float = _option(0.1, "Coefficient of the SGT auxiliary NLL term.")
    capability_window: int = _option(
        5, "HACPO: steps in the rolling window of each agent's success rate (capability)."
    )
    capability_ratio_min: float = _option(0.1, "HACPO: lower bound of capability ratios.")
    capability_ratio_max: float = _option(10.0, "HACPO: upper bound of capability ratios.")

    def require_one_of(self, name: str, allowed: Sequence[str]) -> None:
        """Raise the one-line ValueError unless field `name` is one of `allowed`."""
        if getattr(self, name) not in allowed:
            _fail(name, getattr(self, name), f"one of {list(allowed)}")

    def validate(self) -> AlgorithmConfig:
        """Raise ValueError naming the first bad field and what it accepts; return self.
        (`exchange` names a registered strategy: `registry.configure` checks that, as the
        strategies import this module.)"""
        self._check_types()
        choices = {
            "adv_scale": ADVANTAGE_SCALES,
            "ratio": RATIO_MODES,
            "order": ORDER_MODES,
            "selection": SELECTION_MODES,
            "compat_norm": LOGLIK_MODES,
            "admission": ADMISSION_MODES,
            "admission_match": ADMISSION_MATCHES,
            "candidates": CANDIDATE_RULES,
            "peer_objective": PEER_OBJECTIVES,
        }
        for name, allowed in choices.items():
            self.require_one_of(name, allowed)
        bounds = {
            "n": (self.n >= 2, ">= 2 (a group of one has no variance)"),
            "adv_eps": (self.adv_eps >= 0, ">= 0"),
            "adv_ddof": (0 <= self.adv_ddof < self.n, f"in [0, n={self.n})"),
            "eps_low": (0 <= self.eps_low < 1, "in [0, 1)"),
            "eps_high": (self.eps_high >= 0, ">= 0"),
            "num_minibatches": (self.num_minibatches >= 1, ">= 1"),
            "constant_norm": (self.constant_norm >= 0, ">= 0 (0: token mean)"),
            "kl_coef": (self.kl_coef >= 0, ">= 0 (0: no KL term)"),
            "delta": (0 <= self.delta < 1, "in [0, 1)"),
            "luffy_gamma": (self.luffy_gamma > 0, "> 0"),
            "sgt_coef": (self.sgt_coef >= 0, ">= 0"),
            "capability_window": (self.capability_window >= 1, ">= 1"),
            "capability_ratio_min": (self.capability_ratio_min > 0, "> 0"),
            "capability_ratio_max": (
                self.capability_ratio_max >= self.capability_ratio_min,
                f">= capability_ratio_min={self.capability_ratio_min}",
            ),
        }
        if self.peer_eps_low is not None:
            bounds["peer_eps_low"] = (0 <= self.peer_eps_low < 1, "in [0, 1) or None")
        if self.peer_eps_high is not None:
            bounds["peer_eps_high"] = (self.peer_eps_high >= 0, ">= 0 or None")
        for name, (ok, requirement) in bounds.items():
            if not ok:
                _fail(name, getattr(self, name), requirement)
        self._check_combinations()
        return self

    def _check_types(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            default = spec.default
            if value is None and spec.name in ("peer_eps_low", "peer_eps_high"):
                continue
            if isinstance(default, bool) or isinstance(value, bool):
                ok = isinstance(value, bool) and isinstance(default, bool)
            elif isinstance(default, int):
                ok = isinstance(value, int)
            elif isinstance(default, float) or default is None:
                ok = isinstance(value, int | float) and math.isfinite(value)
            else:
                ok = isinstance(value, type(default))
            if not ok:
                expected = "a finite number" if default is None else type(default).__name__
                _fail(spec.name, value, f"of type {expected}")

    def _check_combinations(self) -> None:
        """Reject option sets that would silently do something other than they say."""
        if (self.exchange == "sgt") != (self.peer_objective == "nll"):
            _fail(
                "peer_objective",
                self.peer_objective,
                "'nll' exactly when exchange='sgt' (SGT trains on peers only through the NLL)",
            )
        if self.peer_objective == "luffy" and self.peer_clip:
            _fail("peer_clip", True, "False with peer_objective='luffy' (LUFFY never clips peers)")
        if self.peer_objective == "luffy" and self.ratio == "sequence":
            _fail("ratio", self.ratio, "'token' with peer_objective='luffy'")
        if self.admission_match != "direction" and self.admission != "random":
            _fail(
                "admission_match",
                self.admission_match,
                "'direction' unless admission='random' (only random admission matches a count)",
            )
        if self.admission == "random" and not self.compat:
            _fail("admission", self.admission, "'compat' when compat=False (no scores to admit)")
        if self.dynamic_sampling and self.exchange != "none":
            _fail(
                "dynamic_sampling",
                True,
                "False unless exchange='none': it would drop the all-fail groups an exchange fills",
            )
        if self.stored and self.balance:
            _fail("balance", True, "False with stored=True (a stored log is one-way, SPEC §9)")
        if self.candidates == "any_success" and self.balance:
            _fail(
                "candidates",
                self.candidates,
                "'informative' with balance=True (balancing keeps the highest k_S first, so "
                "zero-advantage all-pass groups would displace informative ones)",
            )
        if self.pooled and self.candidates == "any_success":
            _fail(
                "pooled",
                True,
                "False with candidates='any_success' (an all-pass source group pooled with the "
                "receiver's all-fail group gets non-zero advantages, not the zero it carries)",
            )
        gate_only = {
            "selection": "gate",
            "admission": "compat",
            "success_only": False,
            "candidates": "informative",
            "pooled": False,
            "stored": False,
        }
        if self.exchange != "graft":
            for name, default in gate_only.items():
                if getattr(self, name) != default:
                    _fail(name, getattr(self, name), f"{default!r} unless exchange='graft'")

    def describe(self) -> dict[str, str]:
        """Field name -> help text, for documentation and CLI help."""
        return {spec.name: spec.metadata["help"] for spec in dataclasses.fields(self)}


def _fail(name: str, value: object, requirement: str) -> None:
    raise ValueError(f"AlgorithmConfig.{name} = {value!r} is invalid: it must be {requirement}")
