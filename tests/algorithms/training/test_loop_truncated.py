"""A peer response its source did not end with EOS (cut at max_new_tokens) reaches the
receiver's batch without the receiver's EOS; an ended one keeps it (issue 14, item 2).

The seed and cap come from the pair's own samples (`cut_cap`): at that cap the step's
transferred responses are the uncapped ones, the longest cut by their EOS, so some are cut
and some end on any build of the pair.
"""

from __future__ import annotations

from collections import Counter

from cut_cap import seed_and_cap
from run_configs import small_config

from algorithms.training.loop import Trainer
from algorithms.training.step import StepRecord


def test_a_cut_peer_response_is_trained_without_the_receivers_eos(tmp_path, fresh_policies):
    # No balancing and no compatibility weight: every candidate group moves whole, so the
    # cut responses of the step reach the batch whatever their compatibility.
    def step(seed: int, cap: int) -> StepRecord:
        config = small_config(
            tmp_path / f"seed{seed}-cap{cap}",
            "graft-no-balance",
            steps=1,
            seed=seed,
            sampling={"max_new_tokens": cap},
            options={"compat": False},
        )
        trainer = Trainer(config, policies=fresh_policies("tiny-a", "tiny-b"))
        trainer.open()
        return trainer.run_step()

    seed, cap = seed_and_cap(step, ("tiny-a", "tiny-b"))
    record = step(seed, cap)
    policies = fresh_policies("tiny-a", "tiny-b")  # for their EOS ids and decoding only
    endings = Counter()
    for receiver, groups in record.transfers.items():
        eos = policies[receiver].eos_id
        trained = [s.response_token_ids for s in record.batches[receiver].sequences if s.is_peer]
        for group in groups:
            source = record.rollouts[group.source]
            for j, i in enumerate(group.response_indices):
                ended = source.finish_reasons[group.prompt_index][i] == "stop"
                source_ids = source.token_ids[group.prompt_index][i]
                assert (source_ids[-1] == policies[group.source].eos_id) == ended
                ids = group.scored[j].token_ids
                assert ids in trained  # compat off: every transferred response is trained on
                assert ids.count(eos) == ended and (ids[-1] == eos) == ended
                assert policies[receiver].decode_response(ids) == group.texts[j]
                endings[ended] += 1
    assert endings[False] >= 1 and endings[True] >= 1, (seed, cap, endings)
