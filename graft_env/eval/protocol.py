"""The sampling defaults of the evaluation protocol, GRAFT-SPEC §10 (the paper's §5.1): 8
samples per problem at temperature 0.6, top-p 0.95, at most 4,096 new tokens. Defined once
here; `evaluate`'s arguments and `algorithms.training.eval_settings.EvalSettings` (the
`eval:` sections of run configs and grids, and `graft eval`'s options) take them from `PROTOCOL`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProtocolDefaults:
    k: int = 8  # samples per problem
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 4096  # response cap (less where the model's positions leave less)
    seed: int = 0  # the first repeat's
    repeats: int = 1  # whole-protocol repeats (mean ± std over them)
    batch_size: int = 32  # problems per generate call


PROTOCOL = ProtocolDefaults()
