"""The policy-gradient surrogate of Eq.10, its per-row variants, and the KL term (GRAFT-SPEC §5-§7).

One function covers GRPO, GRAFT and the loss-side ablations, because they differ
only per row: the weight w (0 removes a row), whether the clip applies, a
sequence-level ratio (GSPO form), or LUFFY shaping; and per minibatch in the
normaliser (token mean, or Dr.GRPO's constant). Padding and removed rows are
masked *before* any exponential so that whatever values they hold can produce
neither a NaN nor a gradient. `reference_kl` is the optional penalty of §6 (KL to
a reference model), in verl's form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SurrogateOutput:
    """The loss and the counts the loop logs (clipped fractions are per own/peer token)."""

    loss: torch.Tensor  # scalar to minimise: -J of Eq.10, plus nll_coef * nll_loss
    pg_tokens: torch.Tensor  # unweighted count of retained tokens
    normaliser: torch.Tensor  # J's denominator: pg_tokens, or retained rows x constant_norm
    clipped_own: torch.Tensor  # own tokens where the clip is active
    clipped_peer: torch.Tensor  # peer tokens where the clip is active
    own_tokens: torch.Tensor
    peer_tokens: torch.Tensor
    nll_loss: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    nll_tokens: torch.Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.int64))


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
    count = kept.sum()
    return -torch.where(kept, new_logp, 0.0).sum() / count.clamp(min=1)


def clipped_surrogate(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip: torch.Tensor | None = None,
    seq_ratio: torch.Tensor | None = None,
    is_peer: torch.Tensor | None = None,
    luffy: torch.Tensor | None = None,
    luffy_gamma: float = 0.1,
    nll: torch.Tensor | None = None,
    nll_coef: float = 0.1,
    constant_norm: int = 0,
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

    Per-row options ([B] bool tensors):
    - clip=False: term ρ·a without clipping (graft-no-clip / graft-naive peer rows).
    - seq_ratio=True: ρ = exp(mean_t(new - old)) for the whole row, clipped at
      sequence level and applied to each token, keeping token-mean aggregation
      (GSPO form) [project choice].
    - luffy=True: term f(π)·a, π = exp(new), f(x) = x / (x + luffy_gamma): the
      behaviour probability is treated as 1 and nothing is clipped (LUFFY).
    - is_peer: only splits the token and clip counts into own and peer.
    - nll=True: the row also enters a mean token NLL, added as nll_coef · NLL (SGT);
      give such a row weight 0 to keep it out of the policy-gradient term.

    A clip is "active" on a token of a clipped row when (a > 0 and ρ > 1+ε_high) or
    (a < 0 and ρ < 1-ε_low); there the gradient is zero. With no retained row the
    policy-gradient loss is 0 with a zero gradient.
    """
    token_mask = _token_mask(new_logp, old_logp, mask)
    advantage = _row_values(advantages, "advantages", new_logp)
    weight = _row_values(weights, "weights", new_logp)
    # Retention is read from the weights as given, before the cast to new_logp's dtype:
    # a tiny admitted weight (w = min(s, 1) with s near 0) may round to 0 in bf16, but
    # its tokens still belong in the denominator.
    retained = weights.detach() > 0
    if (weights.detach() < 0).any():
        raise ValueError(f"weights must be >= 0, got {weights.tolist()}")
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    if not luffy_gamma > 0.0:
        raise ValueError(f"luffy_gamma must be > 0, got {luffy_gamma}")
    if constant_norm < 0:
        raise ValueError(f"constant_norm must be >= 0 (0: token mean), got {constant_norm}")
    clip_row = _row_flags(clip, "clip", new_logp, default=True)
    seq_row = _row_flags(seq_ratio, "seq_ratio", new_logp, default=False)
    peer_row = _row_flags(is_peer, "is_peer", new_logp, default=False)
    luffy_row = _row_flags(luffy, "luffy", new_logp, default=False)
    nll_row = _row_flags(nll, "nll", new_logp, default=False)
    if (luffy_row & seq_row).any():
        raise ValueError("a row cannot use both luffy and seq_ratio: they define different terms")

    kept = token_mask & retained[:, None]
    log_ratio = torch.where(kept, new_logp - old_logp.detach(), 0.0)
    seq_log_ratio = log_ratio.sum(dim=1) / kept.sum(dim=1).clamp(min=1)
    log_ratio = torch.where(seq_row[:, None], seq_log_ratio[:, None], log_ratio)
    ratio = torch.exp(log_ratio)

    a = advantage[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a
    term = torch.where(clip_row[:, None], torch.minimum(unclipped, clipped), unclipped)
    prob = torch.exp(torch.where(kept, new_logp, 0.0))
    term = torch.where(luffy_row[:, None], prob / (prob + luffy_gamma) * a, term)

    pg_tokens = kept.sum()
    normaliser = retained.sum() * constant_norm if constant_norm else pg_tokens
    objective = torch.where(kept, term * weight[:, None], 0.0).sum() / normaliser.clamp(min=1)

    clip_applies = (clip_row & ~luffy_row)[:, None]
    clip_active = (
        kept
        & clip_applies
        & (((a > 0) & (ratio > 1.0 + eps_high)) | ((a < 0) & (ratio < 1.0 - eps_low)))
    ).detach()
    own, peer = ~peer_row[:, None], peer_row[:, None]

    nll_mask = token_mask & nll_row[:, None]
    nll_loss = token_nll(new_logp, nll_mask.to(mask.dtype))
    return SurrogateOutput(
        loss=-objective + nll_coef * nll_loss,
        pg_tokens=pg_tokens,
        normaliser=normaliser,
        clipped_own=(clip_active & own).sum(),
        clipped_peer=(clip_active & peer).sum(),
        own_tokens=(kept & own).sum(),
        peer_tokens=(kept & peer).sum(),
        nll_loss=nll_loss,
        nll_tokens=nll_mask.sum(),
    )


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
    kl = (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0)
    return torch.where(kept, kl, 0.0)
