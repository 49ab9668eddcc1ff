"""GRAFT's pure core: advantages, the exchange gate, compatibility weights, losses, ordering.

No models and no I/O live here, so every piece can be property-tested on its own
and shared by every algorithm in the registry. Selection, weights and advantages
work on numpy arrays; the losses work on torch tensors.
"""

from algorithms.core.advantages import group_advantages
from algorithms.core.losses import (
    SurrogateOutput,
    agg_loss,
    clip_active,
    clip_bounds,
    clipped_surrogate,
    log_ratio,
    luffy_term,
    ppo_clip_term,
    reference_kl,
    token_nll,
)
from algorithms.core.ordering import order_minibatches
from algorithms.core.selection import (
    exchange_candidates,
    random_prompt_selection,
    select_exchange,
    select_exchange_multi,
    select_with_ties,
    sgt_pairs,
)
from algorithms.core.weights import (
    admitted_by_floor,
    admitted_weights,
    compatibility_scores,
    compatibility_weights,
    floor_weights,
    normalised_loglik,
    random_admission,
)

__all__ = [
    "SurrogateOutput",
    "admitted_by_floor",
    "admitted_weights",
    "agg_loss",
    "clip_active",
    "clip_bounds",
    "clipped_surrogate",
    "compatibility_scores",
    "compatibility_weights",
    "exchange_candidates",
    "floor_weights",
    "group_advantages",
    "log_ratio",
    "luffy_term",
    "normalised_loglik",
    "order_minibatches",
    "ppo_clip_term",
    "random_admission",
    "random_prompt_selection",
    "reference_kl",
    "select_exchange",
    "select_exchange_multi",
    "select_with_ties",
    "sgt_pairs",
    "token_nll",
]
