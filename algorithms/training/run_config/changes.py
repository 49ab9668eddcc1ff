"""What may change between a run's saved config and a new one: the settings a resume may
change (`RESUMABLE_CHANGES`), the `dotted.key: theirs -> ours` differences of the rest
(`result_differences`), an inert eval section reduced to what matters, and how a run treats
what its run directory holds (`Start`; `RESTART_FLAG` starts it over)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from algorithms.training.eval_settings import as_recorded

# How a run treats what its run directory holds: "resume" from its newest intact checkpoint,
# "restart" from step 0 with the earlier files set aside (`graft train --restart`), or
# start "fresh" in it, deleted first (`--fresh`: only a directory a graft run created).
Start = Literal["resume", "restart", "fresh"]
RESTART_FLAG = "--restart"

# Settings that do not change what a run computes, so a resume may change them: where the
# run lives (a moved or copied run resumes), how far it goes (step t's prompts and seeds
# depend on t, not on the total, so a finished run extends exactly), how often it
# checkpoints (every checkpoint resumes exactly), how it reports, and where Ray places its
# actors. `threads` does change the last bits; it is left out here because null resolves
# from the environment, and the loop compares the count each checkpoint recorded instead
# (a warning: continuing on another machine is legitimate, but the resume is not exact).
RESUMABLE_CHANGES = frozenset(
    {"run_dir", "steps", "checkpoint_every", "keep_checkpoints", "progress", "tensorboard"}
    | {"wandb", "ray", "threads"}
)


_UNSET = object()


def _differences(theirs: Any, ours: Any, path: str) -> Iterator[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for key in sorted(theirs.keys() | ours.keys(), key=str):
            yield from _differences(theirs.get(key, _UNSET), ours.get(key, _UNSET), f"{path}{key}.")
    elif isinstance(theirs, list) and isinstance(ours, list):
        for i in range(max(len(theirs), len(ours))):
            pair = (v[i] if i < len(v) else _UNSET for v in (theirs, ours))
            yield from _differences(*pair, f"{path}{i}.")
    elif theirs != ours:
        shown = ("(unset)" if v is _UNSET else repr(v) for v in (theirs, ours))
        yield f"{path[:-1]}: {' -> '.join(shown)}"


def without_inert_eval(data: Mapping[str, Any]) -> dict[str, Any]:
    """A `TrainConfig.to_dict()` form whose `eval` section is just `{every: 0}` when no
    evaluation runs: its other settings then change nothing (and their defaults may move,
    as the SPEC §10 token cap did, without making old runs unresumable or stale); else the
    section as `eval_settings.as_recorded` compares it."""
    section = data.get("eval")
    if isinstance(section, Mapping) and not section.get("every"):
        return {**data, "eval": {"every": 0}}
    if isinstance(section, Mapping):
        return {**data, "eval": as_recorded(section)}
    return dict(data)


def result_differences(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """`dotted.key: theirs -> ours` for each setting that changes results and differs
    between two `TrainConfig.to_dict()` forms (`(unset)`: that side lacks it)."""
    a, b = (
        {k: v for k, v in without_inert_eval(d).items() if k not in RESUMABLE_CHANGES}
        for d in (theirs, ours)
    )
    return list(_differences(a, b, ""))
