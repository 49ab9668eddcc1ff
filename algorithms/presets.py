"""Every registry entry (GRAFT-SPEC §6-§7): a base config and the options each variant changes.

`grpo` is the paper's baseline (n = 8/16/32 via `make("grpo", n=...)`); `graft` is
GRPO plus the GRAFT exchange; every other entry is one of them with named options
replaced, never a copy.
"""

from __future__ import annotations

from dataclasses import replace

import algorithms.exchange  # noqa: F401  (the strategies, and the entries their modules register)
from algorithms.config import AlgorithmConfig
from algorithms.registry import register


@register("grpo")
def grpo() -> AlgorithmConfig:
    """DAPO-style token-mean GRPO, clip (0.2, 0.28), no KL, no dynamic sampling (§6)."""
    return AlgorithmConfig()


@register("dr-grpo")
def dr_grpo() -> AlgorithmConfig:
    """Dr.GRPO (arXiv 2503.20783): GRPO without the std division, with a constant normaliser.

    Advantages are r - mean(R) (adv_scale='none'), and each minibatch's summed token
    loss is divided by 4096 x its number of responses (constant_norm) instead of its
    token count, so neither a group's reward spread nor the responses' lengths
    rescale a token's gradient (verl: loss_agg_mode='seq-mean-token-sum-norm').
    [project choice] 4096 is the paper's response budget (App. B), as Dr.GRPO divides by
    its generation budget; runs with a smaller sampling.max_new_tokens should set
    constant_norm to it (a larger constant only shrinks the loss).
    """
    return replace(grpo(), adv_scale="none", constant_norm=4096)


@register("grpo-kl")
def grpo_kl() -> AlgorithmConfig:
    """GRPO plus 0.001 x the k3 KL to a frozen copy of the initial policy (§6's optional KL).

    Per token exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10] (verl's
    low_var_kl), summed over the policy loss's tokens and divided by its normaliser
    (verl's use_kl_loss). 0.001 is verl's kl_loss_coef default; kl_coef sets it. The
    reference is the policy's model as first loaded, also after a resume, and costs
    one no-grad forward per minibatch; entries with kl_coef = 0 build none.
    """
    return replace(grpo(), kl_coef=0.001)


@register("grpo-dynamic")
def grpo_dynamic() -> AlgorithmConfig:
    """GRPO keeping only groups with 0 < k < n (the loop oversamples to refill)."""
    return replace(grpo(), dynamic_sampling=True)


@register("graft")
def graft() -> AlgorithmConfig:
    """GRAFT: gated, balanced whole-group transfer with compatibility weights (§2-§5)."""
    return replace(grpo(), exchange="graft")


_GRAFT_VARIANTS: dict[str, dict[str, object]] = {
    "graft-no-compat": {"compat": False},
    "graft-no-floor": {"delta": 0.0},
    "graft-no-clip": {"peer_clip": False},
    "graft-naive": {"compat": False, "peer_clip": False},
    "graft-random-prompts": {"selection": "random_prompts"},
    "graft-random-admission": {"admission": "random"},
    "graft-peer-first": {"order": "peer_first"},
    "graft-peer-random": {"order": "random"},
    "graft-pooled": {"pooled": True},
    "graft-success-only": {"success_only": True},
    "graft-success-only-no-floor": {"success_only": True, "delta": 0.0},
    "graft-stored": {"stored": True, "balance": False},
}
"""The plain ablations of §7 as option changes on `graft` (a table, so tests can check it).
Entries that embody a project choice are functions below, with the choice in their docstring."""


def _register_graft_variant(name: str, changes: dict[str, object]) -> None:
    register(name)(lambda: replace(graft(), **changes))


for _name, _changes in _GRAFT_VARIANTS.items():
    _register_graft_variant(_name, _changes)


@register("graft-library")
def graft_library() -> AlgorithmConfig:
    """graft-stored with its peer groups looked up by prompt in a trajectory library.

    The same options as graft-stored (one-way, no balancing, every Eq.4 candidate): only
    where the peer groups come from differs, which is the run config's `library:` (a
    library of any runs and imported rollouts, keyed by problem text) instead of its
    `stored_peer:` (one run replayed step by step). See `algorithms.library`.
    """
    return replace(graft(), **_GRAFT_VARIANTS["graft-stored"])


@register("graft-no-balance")
def graft_no_balance() -> AlgorithmConfig:
    """GRAFT without balancing: every candidate moves, none dropped by m or the ties rule.

    [project choice] The candidates are SGT's eligibility (k_R = 0 and k_S >= 1,
    candidates='any_success'), as in the paper's App. G row ("SGT + GRAFT how"), so
    all-pass source groups (k_S = n) move too; they carry zero advantage and change
    only the receiver's token-mean denominator. This departs from GRAFT-SPEC §7's
    text, "every candidate in C_{S->R}" (Eq.4's 1 <= k_S < n): that form is
    make("graft-no-balance", candidates="informative").
    """
    return replace(graft(), balance=False, candidates="any_success")


@register("graft-seq-ratio")
def graft_seq_ratio() -> AlgorithmConfig:
    """GRAFT with the token ratio replaced by the sequence ratio exp(mean_t log rho_t) (GSPO form).

    [project choice] The paper gives no form or clip range. The (0.2, 0.28) band is
    kept, now at sequence level, so the variant differs from `graft` only in the
    ratio. A length-averaged ratio rarely leaves that band (GSPO itself clips at
    about 3e-4 / 4e-4), so clipping acts far less often than with token ratios;
    set eps_low / eps_high to study tighter bands.
    """
    return replace(graft(), ratio="sequence")


@register("luffy")
def luffy() -> AlgorithmConfig:
    """GRAFT's selection with a LUFFY-style update on peer tokens (arXiv 2504.14945).

    "GRAFT's selection" is the gate of Eq.4 with balancing and ties (§2): the same
    prompts move and replace the receiver's groups, with the source's advantages.
    On peer tokens the surrogate is f(pi) a with f(x) = x / (x + luffy_gamma), the
    behaviour probability treated as 1 and no clip (peer_clip=False).
    [project choice] compat=False (w = 1, no floor): LUFFY has no compatibility
    weight or floor - its shaping f is its only control of off-policy traces - so
    keeping GRAFT's weights would mix the two methods' controls.
    """
    return replace(graft(), peer_objective="luffy", compat=False, peer_clip=False)


@register("sgt")
def sgt() -> AlgorithmConfig:
    """GRPO + 0.1 x NLL of one random correct peer response on receiver all-fail prompts."""
    return replace(grpo(), exchange="sgt", peer_objective="nll")


@register("hacpo")
def hacpo() -> AlgorithmConfig:
    """HACPO (arXiv 2603.02604): all peer rollouts, sequence-level IS; see exchange/hacpo.py.

    Own rows use GSPO's sequence clip (3e-4, 4e-4) and peer rows the one-sided
    [0.8, 1] range, as in the authors' configuration; the pooled advantages divide by
    the sample std (ddof=1, every entry's default).
    """
    return replace(
        grpo(),
        exchange="hacpo",
        ratio="sequence",
        eps_low=3e-4,
        eps_high=4e-4,
        peer_eps_low=0.2,
        peer_eps_high=0.0,
    )
