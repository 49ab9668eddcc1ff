"""GRAFT's pure core: advantages, the exchange gate, compatibility weights, losses, ordering.

No models and no I/O live here, so every piece can be property-tested on its own
and shared by every algorithm in the registry. Selection, weights and advantages
work on numpy arrays; the losses work on torch tensors.

Names load on first use (PEP 562): the numpy parts (which `AlgorithmConfig` and the
exchange strategies import) load no torch, so a run config is validated without it.

Modules:

advantages          group-relative advantages (Eq.1; Dr.GRPO's variant)
losses              the Eq.10 surrogate, its per-row variants, and the KL term
ordering            minibatch order within an epoch (peer-last and its variants)
rollout_correction  importance weights between a sampling engine's log-probs and the trainer's
selection           which prompts move (the Eq.4 gate and balancing, §7, §8)
weights             compatibility scores and weights of transferred responses (Eq.6-8)
_checks             input checks shared by the core functions
"""

from __future__ import annotations

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "group_advantages": "advantages",
    "SurrogateOutput": "losses",
    "agg_loss": "losses",
    "clip_active": "losses",
    "clip_bounds": "losses",
    "clipped_surrogate": "losses",
    "log_ratio": "losses",
    "luffy_term": "losses",
    "ppo_clip_term": "losses",
    "reference_kl": "losses",
    "token_nll": "losses",
    "order_minibatches": "ordering",
    "RolloutCorrection": "rollout_correction",
    "correction_weights": "rollout_correction",
    "exchange_candidates": "selection",
    "random_prompt_selection": "selection",
    "select_exchange": "selection",
    "select_exchange_multi": "selection",
    "select_with_ties": "selection",
    "sgt_pairs": "selection",
    "admitted_by_floor": "weights",
    "admitted_weights": "weights",
    "compatibility_scores": "weights",
    "compatibility_weights": "weights",
    "normalised_loglik": "weights",
    "random_admission": "weights",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, {n: f"{__name__}.{m}" for n, m in _EXPORTS.items()})
