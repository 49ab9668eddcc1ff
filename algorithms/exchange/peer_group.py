"""`PeerGroup`: one source group on its way to a receiver, as GRAFT's hooks see it.

`GraftExchange` builds one per planned (source, prompt) after the gate, passes it to
`peer_group` (before scoring and advantages), scores it under the receiver (`scored`,
`scores`), passes the receiver's list to `rank_groups` (before weighting), then weighs it
and turns it into the loop's `TransferredGroup`. Hooks return a changed copy
(`dataclasses.replace`), never edit one in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graft_env.types import AgentRollouts, ScoredText


@dataclass(frozen=True)
class PeerGroup:
    """The n responses of `source` to prompt `prompt_index`, headed for `receiver`.

    `texts`, `logprobs` (the log-probs they were generated with: l_S of §4),
    `finish_reasons` and `rewards` are the source's unless a `peer_group` hook replaced
    them; the transferred advantages are computed from `rewards` after that hook (Eq.1 over
    the group; the source's own advantages when the rewards are the source's, §3).
    `scored` (the receiver's tokenisation and log-probs of each text) and `scores`
    (s = exp(l_R - l_S) per response, §4) are filled once the receiver has scored it.
    """

    source: str
    receiver: str
    prompt_index: int
    texts: tuple[str, ...]
    logprobs: tuple[np.ndarray, ...]
    finish_reasons: tuple[str, ...]
    rewards: np.ndarray
    scored: tuple[ScoredText, ...] = ()
    scores: np.ndarray | None = None

    @classmethod
    def of(cls, source: AgentRollouts, receiver: str, p: int) -> PeerGroup:
        """The source's group of prompt `p`, as generated."""
        return cls(
            source=source.agent,
            receiver=receiver,
            prompt_index=p,
            texts=tuple(source.texts[p]),
            logprobs=tuple(np.asarray(lp) for lp in source.logprobs[p]),
            finish_reasons=tuple(source.finish_reasons[p]),
            rewards=np.asarray(source.rewards[p], dtype=np.float64).copy(),
        )

    @property
    def key(self) -> tuple[str, int]:
        """(source, prompt): what identifies the group among a receiver's."""
        return self.source, self.prompt_index

    def check(self, n: int) -> None:
        """Raise ValueError unless every per-response field has n entries."""
        sizes = {
            "texts": len(self.texts),
            "logprobs": len(self.logprobs),
            "finish_reasons": len(self.finish_reasons),
            "rewards": int(np.asarray(self.rewards).size),
        }
        wrong = {name: size for name, size in sizes.items() if size != n}
        if wrong:
            raise ValueError(
                f"peer group {self.source}->{self.receiver} prompt {self.prompt_index}: "
                f"{wrong} entries, expected n={n} each"
            )
