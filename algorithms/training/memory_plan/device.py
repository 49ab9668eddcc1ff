"""One device's plan: the policies sharing it, their peak against its usable memory, the
one-line refusal naming the option to change, and the table `graft plan` prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from algorithms.training.memory_plan.reserves import RESERVE_BYTES
from algorithms.training.memory_plan.terms import GIB, PHASES, PolicyPlan, Workload
from graft_env.policies.options import HFPolicyOptions


@dataclass(frozen=True)
class DevicePlan:
    """The policies sharing one device: their persistent state plus the largest phase."""

    device: str
    capacity: float
    agents: tuple[tuple[int, str, PolicyPlan], ...]  # (agent index, name, plan)

    @property
    def usable(self) -> float:
        return self.capacity - RESERVE_BYTES

    @property
    def peak(self) -> float:
        held = sum(plan.persistent_bytes for _, _, plan in self.agents)
        return held + max(plan.transient(plan.peak_phase()) for _, _, plan in self.agents)

    def refusal(self) -> str | None:
        """None when the peak fits; else one line naming the option to change."""
        if self.peak <= self.usable:
            return None
        index, name, plan = max(self.agents, key=lambda a: a[2].transient(a[2].peak_phase()))
        phase = plan.peak_phase()
        where = (
            f"{name} needs {self.peak / GIB:.1f} GiB on {self.device} ({self.usable / GIB:.1f} "
            f"GiB usable) in {phase}"
        )
        tunable = [term for term in plan.phases[phase] if term.knob]
        largest = max(tunable, key=lambda term: term.bytes)
        if self.peak - largest.bytes >= self.usable:
            return (
                f"agents.{index}.model: {where}; its state without {largest.name} does not fit "
                "either: a larger device, or one policy per device"
            )
        return (
            f"agents.{index}.options.{largest.knob}: {where}, {largest.name} "
            f"{largest.bytes / GIB:.1f} GiB; lower {largest.knob}"
        )


def format_plan(
    device: DevicePlan, sharded_over: int | None = None, vllm_agents: Sequence[str] = ()
) -> list[str]:
    """The table of one device: a row per term, a column per phase, in GiB. `sharded_over`:
    the run's FSDP2 ranks per agent when it has more than one, so the verdict says it is for
    one unsharded process, not the run's layout; `vllm_agents`: the device's one-process
    agents that sample with vLLM, whose generate column is transformers' and whose verdict is
    their lifecycle table's (`memory_plan.process`)."""
    lines = [
        f"{device.device}: {device.capacity / GIB:.1f} GiB, usable {device.usable / GIB:.1f} "
        f"(less {RESERVE_BYTES / GIB:.0f} GiB for the CUDA context and allocator)"
    ]
    for _, name, plan in device.agents:
        arch = plan.architecture
        lines.append(
            f"  {name}: {arch.model_type}, {arch.params / 1e9:.2f} B parameters, "
            f"vocabulary {arch.vocab_size:,}, {arch.num_layers} layers"
        )
        lines.append(f"    {'GiB':<34}" + "".join(f"{phase:>10}" for phase in PHASES))
        rows = [(term.name, {phase: term.bytes for phase in PHASES}) for term in plan.persistent]
        names = dict.fromkeys(term.name for phase in PHASES for term in plan.phases[phase])
        for term_name in names:
            cells = {
                phase: sum(t.bytes for t in plan.phases[phase] if t.name == term_name)
                for phase in PHASES
                if any(t.name == term_name for t in plan.phases[phase])
            }
            rows.append((term_name, cells))
        rows.append(("total", {p: plan.persistent_bytes + plan.transient(p) for p in PHASES}))
        for row_name, cells in rows:
            values = "".join(
                f"{cells[p] / GIB:>10.2f}" if p in cells else f"{'-':>10}" for p in PHASES
            )
            lines.append(f"    {row_name:<34}{values}")
        lines.append(
            f"    (without gradient checkpointing the update's activations would be "
            f"{plan.activations_without_checkpointing / GIB:.2f} GiB)"
        )
    verdict = "fits" if device.refusal() is None else "DOES NOT FIT"
    if sharded_over is not None and sharded_over > 1:
        verdict += (
            f" unsharded on one GPU; this run shards each agent over {sharded_over} GPUs "
            "(per-GPU FSDP2 table below)"
        )
    if vllm_agents:
        verdict = (
            f"{verdict} sampling with transformers; {', '.join(vllm_agents)} sample with vLLM: "
            "judged per phase beside the engine (table below)"
        )
    lines.append(f"  peak {device.peak / GIB:.1f} of {device.usable / GIB:.1f} GiB: {verdict}")
    return lines


def assumption_lines(work: Workload, options: Sequence[tuple[str, HFPolicyOptions]]) -> list[str]:
    lines = [
        f"assumes: prompts of <= {work.prompt_tokens} tokens, responses of <= "
        f"{work.response_tokens} (sampling.max_new_tokens), {work.minibatch_rows} rows per "
        "update minibatch, every row of a micro-batch as long as the longest (padding)",
    ]
    for name, opts in options:
        budget = opts.max_tokens_per_micro_batch
        batches = (
            f"update and scoring micro-batches of <= {budget} tokens"
            if budget
            else f"update micro-batches of {opts.micro_batch_size or 'all'} rows, scoring "
            f"{opts.score_batch_size} rows"
        )
        lines.append(
            f"  {name}: {opts.dtype} weights, autocast {opts.autocast}, gradient checkpointing "
            f"{'on' if opts.gradient_checkpointing else 'off'}, {batches}, generation "
            f"{opts.generation_batch_size} rows, "
            + (
                "logits of a whole micro-batch at once (logits_chunk_tokens null)"
                if opts.logits_chunk_tokens is None
                else f"logits chunks of {opts.logits_chunk_tokens} positions"
            )
        )
    return lines
