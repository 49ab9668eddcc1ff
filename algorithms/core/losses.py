"""The policy-gradient surrogate of Eq.10, its per-row variants, and the KL term (GRAFT-SPEC §5-§7).

`clipped_surrogate` is Eq.10 in one screen, built from pure terms below: the
(token or sequence) log ratio, the clipped PPO term, the LUFFY term and the
token-mean aggregation. GRPO, GRAFT and the loss-side ablations differ only per
row, and enter as data rather than as separate passes: the weight w (0 removes a
row), the clip bounds ([B, 1] tensors, so peer rows can have their own range and
an unclipped row has (-inf, inf)), the sequence ratio (GSPO form) and LUFFY
shaping; per minibatch they differ in the normaliser (token count, or Dr.GRPO's
constant). The rollout correction's importance weights, when given, multiply each
token's term (`token_weights`). Padding and removed rows are masked *before* any exponential so that
whatever values they hold can produce neither a NaN nor a gradient. `token_nll` is
SGT's auxiliary term and `reference_kl` the optional penalty of §6 (KL to a
reference model), in verl's form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SurrogateOutput:
    """The loss and the counts the loop logs (clipped fractions are per own/peer token)."""

    loss: torch.Tensor  # scalar to minimise: -J of Eq.10
    pg_tokens: torch.Tensor  # unweighted count of retained tokens
    normaliser: torch.Tensor  # J's denominator: pg_tokens, or retained rows x constant_norm
    clipped_own: torch.Tensor  # own tokens where the clip is active
    clipped_peer: torch.Tensor  # peer tokens where the clip is active
    own_tokens: torch.Tensor
    peer_tokens: torch.Tensor


def log_ratio(
    new_logp: torch.Tensor, old_logp: torch.Tensor, kept: torch.Tensor, seq_rows: torch.Tensor
) -> torch.Tensor:
    """log ρ per token [B, T] (0 off `kept`), except that a row in `seq_rows` holds its
    sequence log ratio mean_t log ρ_t (over kept tokens) in every column: GSPO's
    exp(mean_t log ρ_t), applied per token so the aggregation stays the token mean
    [project choice]. old_logp is a constant."""
    token = torch.where(kept, new_logp - old_logp.detach(), 0.0)
    sequence = token.sum(dim=1) / kept.sum(dim=1).clamp(min=1)
    return torch.where(seq_rows[:, None], sequence[:, None], token)


def ppo_clip_term(
    ratio: torch.Tensor, advantage: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """Eq.10's per-token term min(ρ a, clip(ρ, low, high) a); bounds broadcast per row.

    With low = 1 - ε_low and high = 1 + ε_high this is the paper's line; infinite
    bounds give the plain ρ a (an unclipped row) without a second code path."""
    return torch.minimum(ratio * advantage, torch.clamp(ratio, low, high) * advantage)


def clip_active(
    ratio: torch.Tensor, advantage: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """Where `ppo_clip_term` takes the bound, so the gradient is zero:
    (a > 0 and ρ > high) or (a < 0 and ρ < low)."""
    return ((advantage > 0) & (ratio > high)) | ((advantage < 0) & (ratio < low))


def luffy_term(
    new_logp: torch.Tensor, kept: torch.Tensor, advantage: torch.Tensor, gamma: float
) -> torch.Tensor:
    """LUFFY's per-token term f(π) a with π = exp(new_logp), f(x) = x / (x + γ): the
    behaviour probability is taken as 1, so there is no ratio and nothing to clip."""
    prob = torch.exp(torch.where(kept, new_logp, 0.0))
    return prob / (prob + gamma) * advantage


def agg_loss(values: torch.Tensor, kept: torch.Tensor, normaliser: torch.Tensor) -> torch.Tensor:
    """Σ of `values` over `kept` / normaliser (verl's agg_loss, with the mode given as its
    denominator): the kept token count is the token mean, a constant per row Dr.GRPO's.
    An empty sum is 0 with a zero gradient; values off `kept` never reach the result."""
    return torch.where(kept, values, 0.0).sum() / normaliser.clamp(min=1)


def clip_bounds(
    eps_low: float | torch.Tensor,
    eps_high: float | torch.Tensor,
    clip: torch.Tensor,
    like: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ratio bounds [B, 1] in `like`'s dtype: (1 - ε_low, 1 + ε_high) on rows with
    `clip`, (-inf, inf) on the others. Each ε is one float or one per row ([B]); 1 ± ε is
    taken in float64 and rounded once, as a Python float bound would be."""
    low, high = _radius(eps_low, "eps_low", like), _radius(eps_high, "eps_high", like)
    if not (((low >= 0) & (low < 1)).all() and (high >= 0).all()):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    lower = torch.where(clip, 1.0 - low, -torch.inf)[:, None]
    upper = torch.where(clip, 1.0 + high, torch.inf)[:, None]
    return lower.to(like.dtype), upper.to(like.dtype)


def clipped_surrogate(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_low: float | torch.Tensor = 0.2,
    eps_high: float | torch.Tensor = 0.28,
    clip: torch.Tensor | None = None,
    seq_ratio: torch.Tensor | None = None,
    is_peer: torch.Tensor | None = None,
    luffy: torch.Tensor | None = None,
    luffy_gamma: float = 0.1,
    constant_norm: int = 0,
    token_weights: torch.Tensor | None = None,
) -> SurrogateOutput:
    """Token-mean clipped surrogate (Eq.10), returned as a loss to minimise.

    J = (1 / Σ_{j: w_j>0} |o_j|) Σ_j w_j Σ_t min(ρ a, clip(ρ, 1-ε_low, 1+ε_high) a),
    ρ = exp(new - old). Rows with w = 0 are removed from numerator and denominator;
    the denominator is the unweighted token count of retained rows (w > 0 as given,
    judged before `weights` is cast to new_logp's dtype).

    constant_norm = L > 0 replaces that denominator by L x (number of retained rows):
    Dr.GRPO's constant normaliser (each response's token sum divided by a fixed token
    budget L, then averaged over responses), so a token's weight does not depend on
    the lengths of the other responses in the minibatch.

    Per-row options ([B] tensors):
    - eps_low, eps_high: a float for every row, or one radius per row (HACPO's peer range).
    - clip=False: term ρ·a without clipping (graft-no-clip / graft-naive peer rows).
    - seq_ratio=True: one ratio per row (`log_ratio`), clipped at sequence level.
    - luffy=True: `luffy_term` instead of the clipped term (LUFFY).
    - is_peer: only splits the token and clip counts into own and peer.

    token_weights [B, T] (None: all ones) multiplies each token's term by a constant >= 0:
    the rollout correction's importance weight between the sampling engine and the trainer
    (`correction_weights`). The denominator stays the unweighted token count, as verl's
    rollout_is does, so a token of weight 0 still counts in it.

    A clip is "active" on a token of a clipped row when (a > 0 and ρ > 1+ε_high) or
    (a < 0 and ρ < 1-ε_low); there the gradient is zero. With no retained row the
    loss is 0 with a zero gradient.
    """
    kept, retained, a, w = _rows(new_logp, old_logp, mask, advantages, weights)
    clip_row, seq_row, peer_row, luffy_row = _variants(
        new_logp, clip, seq_ratio, is_peer, luffy, luffy_gamma, constant_norm
    )
    low, high = clip_bounds(eps_low, eps_high, clip_row, new_logp)
    ratio = torch.exp(log_ratio(new_logp, old_logp, kept, seq_row))
    term = torch.where(
        luffy_row[:, None],
        luffy_term(new_logp, kept, a, luffy_gamma),
        ppo_clip_term(ratio, a, low, high),
    )
    if token_weights is not None:
        term = term * _token_weights(token_weights, kept, new_logp)
    pg_tokens = kept.sum()
    normaliser = retained.sum() * constant_norm if constant_norm else pg_tokens
    active = (kept & ~luffy_row[:, None] & clip_active(ratio, a, low, high)).detach()
    own, peer = ~peer_row[:, None], peer_row[:, None]
    return SurrogateOutput(
        loss=-agg_loss(term * w, kept, normaliser),
        pg_tokens=pg_tokens,
        normaliser=normaliser,
        clipped_own=(active & own).sum(),
        clipped_peer=(active & peer).sum(),
        own_tokens=(kept & own).sum(),
        peer_tokens=(kept & peer).sum(),
    )


def _rows(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Checked inputs: the kept tokens [B, T] and retained rows [B] (bool), and the
    advantages and weights as constant [B, 1] columns in new_logp's dtype."""
    token_mask = _token_mask(new_logp, old_logp, mask)
    advantage = _row_values(advantages, "advantages", new_logp)
    weight = _row_values(weights, "weights", new_logp)
    # Retention is read from the weights as given, before the cast to new_logp's dtype:
    # a tiny admitted weight (w = min(s, 1) with s near 0) may round to 0 in bf16, but
    # its tokens still belong in the denominator.
    retained = weights.detach() > 0
    if (weights.detach() < 0).any():
        raise ValueError(f"weights must be >= 0, got {weights.tolist()}")
    return token_mask & retained[:, None], retained, advantage[:, None], weight[:, None]


def _variants(
    like: torch.Tensor,
    clip: torch.Tensor | None,
    seq_ratio: torch.Tensor | None,
    is_peer: torch.Tensor | None,
    luffy: torch.Tensor | None,
    luffy_gamma: float,
    constant_norm: int,
) -> tuple[torch.Tensor, ...]:
    """The per-row flags as [B] bool tensors (clip on by default, the rest off), checked."""
    if not luffy_gamma > 0.0:
        raise ValueError(f"luffy_gamma must be > 0, got {luffy_gamma}")
    if constant_norm < 0:
        raise ValueError(f"constant_norm must be >= 0 (0: token mean), got {constant_norm}")
    flags = (
        _row_flags(clip, "clip", like, default=True),
        _row_flags(seq_ratio, "seq_ratio", like, default=False),
        _row_flags(is_peer, "is_peer", like, default=False),
        _row_flags(luffy, "luffy", like, default=False),
    )
    if (flags[3] & flags[1]).any():
        raise ValueError("a row cannot use both luffy and seq_ratio: they define different terms")
    return flags


def _radius(eps: float | torch.Tensor, name: str, like: torch.Tensor) -> torch.Tensor:
    """A clip radius as a constant float64 [B] tensor, from one float or one per row."""
    radius = torch.as_tensor(eps, dtype=torch.float64, device=like.device).detach()
    rows = like.shape[0]
    if radius.ndim == 0:
        return radius.expand(rows)
    if radius.shape != (rows,):
        raise ValueError(
            f"{name} must be a float or have shape ({rows},), got {tuple(radius.shape)}"
        )
    return radius


def _row_flags(
    flags: torch.Tensor | None, name: str, like: torch.Tensor, default: bool
) -> torch.Tensor:
    """A [B] bool tensor of per-row options, `default` everywhere when not given."""
    rows = like.shape[0]
    if flags is None:
        return torch.full((rows,), default, dtype=torch.bool, device=like.device)
    if flags.shape != (rows,):
        raise ValueError(f"{name} must have shape ({rows},), got {tuple(flags.shape)}")
    if flags.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, got {flags.dtype}")
    return flags


def _token_mask(new_logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Check the [B, T] inputs agree and return the mask as bool."""
    if new_logp.ndim != 2:
        raise ValueError(f"new_logp must be [B, T], got shape {tuple(new_logp.shape)}")
    if not new_logp.is_floating_point():
        raise TypeError(f"new_logp must be a float tensor, got {new_logp.dtype}")
    for name, tensor in (("old_logp", old_logp), ("mask", mask)):
        if tensor.shape != new_logp.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)}, new_logp has {tuple(new_logp.shape)}"
            )
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must hold only 0 and 1 (1 on response tokens, 0 on padding)")
    return mask.bool()


def _token_weights(weights: torch.Tensor, kept: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Per-token weights as a constant [B, T] tensor in `like`'s dtype, checked finite and
    >= 0 on the kept tokens (what they hold elsewhere never reaches the loss)."""
    if weights.shape != like.shape:
        raise ValueError(
            f"token_weights has shape {tuple(weights.shape)}, new_logp has {tuple(like.shape)}"
        )
    weights = torch.where(kept, weights.detach().to(like.dtype), 1.0)
    if not (torch.isfinite(weights).all() and (weights >= 0).all()):
        raise ValueError("token_weights must be finite and >= 0 on the response tokens")
    return weights


def _row_values(values: torch.Tensor, name: str, like: torch.Tensor) -> torch.Tensor:
    """A detached, finite [B] tensor in `like`'s dtype: advantages and weights are constants."""
    if values.shape != like.shape[:1]:
        raise ValueError(f"{name} must have shape ({like.shape[0]},), got {tuple(values.shape)}")
    values = values.detach().to(like.dtype)
    if not torch.isfinite(values).all():
        raise ValueError(f"{name} holds a non-finite value: {values.tolist()}")
    return values


def token_nll(new_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood over masked tokens (SGT's auxiliary term); 0 if none."""
    kept = _token_mask(new_logp, new_logp, mask)
    return -agg_loss(new_logp, kept, kept.sum())


def reference_kl(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ || π_ref), [B, T], 0 on padding.

    x = ref - new, kl = exp(x) - x - 1 >= 0 (Schulman's low-variance estimator):
    verl's `kl_penalty(..., "low_var_kl")`, with its clamps (x to [-20, 20], kl to
    [-10, 10]). The reference is a constant; the caller aggregates over tokens.
    """
    kept = _token_mask(new_logp, ref_logp, mask)
    log_ratio = torch.where(kept, ref_logp.detach() - new_logp, 0.0).clamp(-20.0, 20.0)
    # expm1(x) - x: exp(x) - x - 1 cancels below 0 for |x| ~ 1e-11 (same value and gradient)
    kl = (torch.expm1(log_ratio) - log_ratio).clamp(-10.0, 10.0)
    return torch.where(kept, kl, 0.0)
