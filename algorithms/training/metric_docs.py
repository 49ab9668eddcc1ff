"""What each metric of metrics.jsonl means: the source of the docs site's metrics page.

`SECTIONS` holds one line of meaning per name the training loop logs, grouped as the page
shows them; a part in angle brackets stands for what varies (an agent, a direction, an
eval set, a statistic). `documented_name` maps a logged name to its entry, so a test can
check real runs' rows against this table both ways; `metrics_page` is the page's markdown
(filled in by docs/hooks.py).
"""

from __future__ import annotations

import re

STATS = ("count", "mean", "min", "p10", "p50", "p90", "max")  # `exchange.stats.distribution`
DIRECTION = "exchange/<source>-><receiver>"

SECTIONS: dict[str, dict[str, str]] = {
    "Every row": {
        "step": "the step this row is about (0-based)",
        "agent": "the agent (the run config's `agents.N.name`) the row is about",
    },
    "Rollouts and rewards": {
        "reward_mean": "mean reward of the agent's kept rollouts (1 correct, 0 not)",
        "solved_share": "share of prompts with at least one correct response",
        "all_fail_share": "share of prompts where every response failed (where peers can help)",
        "all_pass_share": "share of prompts where every response was correct",
        "response_tokens_mean": "mean response length in tokens",
        "response_tokens_max": "longest response in tokens",
        "rollouts_generated": "responses sampled this step, dynamic-sampling refills included",
        "verifier/ok": "responses the verifier checked to the end",
        "verifier/no_answer": "responses without a balanced `\\boxed{}` answer (reward 0)",
        "verifier/parse_error": "responses whose boxed answer did not parse (reward 0)",
        "verifier/timeout": "responses whose check ran out of time (reward 0)",
        "verifier/error": "responses whose check failed otherwise, e.g. a worker crash (reward 0)",
    },
    "Update": {
        "loss": "mean over minibatches of the loss that was minimised",
        "grad_norm": "mean over minibatches of the gradient norm before clipping",
        "grad_norm_max": "largest minibatch gradient norm before clipping",
        "entropy": "token-mean entropy of the policy over the trained response tokens",
        "lr": "the optimiser's learning rate",
        "tokens": "response tokens trained on, own and peer",
        "sequences": "responses trained on, own and peer",
        "minibatches": "optimiser steps taken (one per minibatch)",
        "padding_share": "share of the forwards' positions that were padding",
        "update_skipped": "1 when the batch held nothing to train on and no update ran",
        "clipped_share_own": "share of the agent's own tokens whose ratio was clipped",
        "clipped_share_peer": "share of transferred peer tokens whose ratio was clipped",
        "loss_fn/loss": "the loss as the loss function reported it, mean over minibatches",
        "loss_fn/pg_tokens": "tokens in the policy-gradient term, mean per minibatch",
        "loss_fn/own_tokens": "own tokens, mean per minibatch",
        "loss_fn/peer_tokens": "transferred peer tokens, mean per minibatch",
        "loss_fn/clipped_own": "own tokens whose ratio was clipped, mean per minibatch",
        "loss_fn/clipped_peer": "peer tokens whose ratio was clipped, mean per minibatch",
        "loss_fn/nll": "the NLL term on peer responses (SGT), mean per minibatch",
        "loss_fn/nll_tokens": "tokens in the NLL term, mean per minibatch",
        "loss_fn/kl": "KL to the reference model (when kl_coef > 0), mean per minibatch",
    },
    "Batch": {
        "batch/own_groups": "prompts whose own group was trained on",
        "batch/replaced_groups": "own groups replaced by a peer's (replacing strategies)",
        "batch/dynamic_dropped_groups": "own groups dropped by dynamic sampling (all pass or fail)",
        "batch/peer_sequences": "peer responses trained on (w > 0)",
        "batch/removed_peer_responses": "transferred peer responses left out (w = 0)",
        "batch/fully_removed_groups": "transferred groups with no response left",
    },
    "Exchange": {
        f"{DIRECTION}/candidates": "prompts this direction proposed before balancing",
        f"{DIRECTION}/gate_candidates": "prompts that passed the gate (Eq.4), gated strategies",
        f"{DIRECTION}/prompts": "prompts whose peer group was transferred",
        f"{DIRECTION}/transferred": "peer responses transferred, removed ones included",
        f"{DIRECTION}/admitted": "transferred responses with weight w > 0",
        f"{DIRECTION}/removed_by_weight": "responses with w = 0 from the floor or random admission",
        f"{DIRECTION}/removed_failures": "failed responses dropped by success-only variants",
        f"{DIRECTION}/mean_s": "mean compatibility score s of the transferred responses",
        f"{DIRECTION}/mean_w_admitted": "mean weight w of the admitted responses",
        "exchange/s/<stat>": f"compatibility scores s received this step ({', '.join(STATS)})",
        "exchange/w/<stat>": f"weights w received this step ({', '.join(STATS)})",
        "hacpo/capability/<agent>": "`hacpo`: the agent's mean success rate over its recent steps",
        f"{DIRECTION}/graft-shuffled/rewards_moved": (
            "`graft-shuffled`: transferred responses whose reward the shuffle moved"
        ),
        f"{DIRECTION}/graft-twin/gated_prompts": "`graft-twin`: prompts the gate planned",
        f"{DIRECTION}/graft-twin/filled_prompts": "`graft-twin`: prompts the twin filled",
        f"{DIRECTION}/graft-twin/rounds": "`graft-twin`: resampling rounds",
        f"{DIRECTION}/graft-twin/resampled_responses": "`graft-twin`: responses resampled",
    },
    "Time (seconds)": {
        "time/rollout": "sampling every agent's responses",
        "time/verify": "checking the responses' answers",
        "time/refill": "dynamic sampling's extra rounds",
        "time/rescoring": "the trainer's log-probs of the engine's responses (rollout correction)",
        "time/library": "looking up the library's groups",
        "time/exchange": "choosing and weighting transfers, building the batches (not scoring)",
        "time/scoring": "the receivers' log-probs of peer responses (the score s)",
        "time/update": "every agent's optimiser steps",
        "time/eval": "the periodic evaluation at this step",
        "time/eval_start": "the evaluation before the first update (step 0's row)",
    },
    "Periodic evaluation (when `eval.every` is set)": {
        "eval/<set>/pass@1": "mean pass@1 on the set, averaged over repeats",
        "eval/<set>/pass@1_std": "standard deviation of pass@1 over repeats",
        "eval/<set>/pass@k": "share of problems solved by at least one of k samples",
        "eval/<set>/all_fail": "share of problems where every sample failed",
        "eval/<set>/n_problems": "problems evaluated",
        "eval/<set>/n_skipped": "problems skipped: the prompt left no room for a response",
        "eval/average/pass@1": "pass@1 averaged over the sets",
        "eval/average/pass@1_std": "its standard deviation over repeats",
        "eval_start/<eval metric>": "each eval/... metric, measured before the first update "
        "(step 0's row of a run that starts at step 0)",
    },
    "Rollout correction (when `rollout_correction` is set)": {
        "rollout_correction/ratio_mean": "mean trainer/engine probability ratio per unit",
        "rollout_correction/weight_mean": "mean correction weight per unit",
        "rollout_correction/above_cap_share": "share of units whose ratio is above the cap",
        "rollout_correction/below_floor_share": "share of units whose ratio is below 1/cap",
        "rollout_correction/logp_diff_mean": "mean absolute trainer - engine log-prob per token",
        "rollout_correction/logp_diff_max": "largest absolute trainer - engine log-prob",
        "rollout_correction/kl_k3": "k3 estimate of KL(engine, trainer) per token",
        "rollout_correction/tokens": "tokens compared",
        "rollout_correction/responses": "responses compared",
        "rollout_correction/retokenised": "responses left uncorrected: retokenising changed them",
    },
    "Stored peer and library": {
        "stored_peer/reward_changed_on_reverify": "stored rewards that re-checking changed",
        "library/all_fail_prompts": "the receiver's all-fail prompts this step",
        "library/found_prompts": "of those, prompts the library holds a group for",
        "library/groups_verified": "library groups re-checked this step",
        "library/rescuable_prompts": "prompts with a usable library group",
        "library/reward_changed_on_reverify": "library responses whose reward re-checking changed",
        "library/used_groups": "library groups transferred",
        "library/rescued_prompts": "prompts whose library group had an admitted response",
        "library/age_steps/<stat>": f"age of the used groups in source steps ({', '.join(STATS)})",
        "library/age_hours/<stat>": f"age of the used groups in hours ({', '.join(STATS)})",
        "library/age_steps_<bucket>/transferred": "responses transferred, by age bucket in steps",
        "library/age_steps_<bucket>/admitted": "responses admitted, by age bucket in steps",
        "library/age_steps_<bucket>/admitted_share": "admitted share, by age bucket in steps",
        "library/age_hours_<bucket>/transferred": "responses transferred, by age bucket in hours",
        "library/age_hours_<bucket>/admitted": "responses admitted, by age bucket in hours",
        "library/age_hours_<bucket>/admitted_share": "admitted share, by age bucket in hours",
    },
}
METRICS: dict[str, str] = {name: text for part in SECTIONS.values() for name, text in part.items()}

# Logged name -> documented name: each rule puts a placeholder where the name varies.
_RULES = (
    (re.compile(r"^exchange/[^/]+->[^/]+/"), f"{DIRECTION}/"),
    (re.compile(r"^hacpo/capability/.+$"), "hacpo/capability/<agent>"),
    (re.compile(r"^eval_start/.+$"), "eval_start/<eval metric>"),
    (re.compile(r"^eval/(?!average/).+/(?=[^/]+$)"), "eval/<set>/"),
    (re.compile(r"^library/(age_steps|age_hours)_[^/]+/"), r"library/\1_<bucket>/"),
    (
        re.compile(rf"^(exchange/[sw]|library/age_steps|library/age_hours)/({'|'.join(STATS)})$"),
        r"\1/<stat>",
    ),
)


def documented_name(name: str) -> str | None:
    """The `METRICS` entry a logged metric name falls under, or None if none does."""
    for pattern, placeholder in _RULES:
        name = pattern.sub(placeholder, name)
    return name if name in METRICS else None


def metrics_page() -> str:
    """Every entry of `SECTIONS` as markdown: a table per section."""
    out = []
    for title, entries in SECTIONS.items():
        out += [f"## {title}", "", "| metric | meaning |", "|---|---|"]
        out += [f"| `{name}` | {text} |" for name, text in entries.items()]
        out.append("")
    return "\n".join(out)
