"""The step estimate as `graft plan` prints it: the assumption lines, the per-phase table
with the totals and the target, and its uncertainty (the range at A3's bounds)."""

from __future__ import annotations

from algorithms.training.step_time.anchors import (
    HBM_EFFICIENCY,
    MEASURED,
    MEASURED_GPU,
    MFU_BOUNDS,
    VERIFY_ITEMS_PER_S,
    VERIFY_WORKERS,
    VLLM_COMPUTE_EFFICIENCY,
    VLLM_STEP_OVERHEAD_S,
    Gpu,
    Measured,
    train_flops_per_s,
)
from algorithms.training.step_time.totals import (
    PAPER_STACK_S,
    ROLLOUT_ROWS,
    SYNC_ROW,
    TARGET_FACTOR,
    TARGET_S,
    Phase,
    StepEstimate,
)
from algorithms.training.step_time.workload import StepWorkload


def assumption_lines(
    gpu: Gpu, work: StepWorkload, measured: Measured = MEASURED, together: bool = True
) -> list[str]:
    mix = work.mix
    rate = train_flops_per_s(gpu, measured)
    return [
        f"step estimate on {gpu.name} ({gpu.bf16_tflops:.0f} TFLOP/s bf16, {gpu.hbm_tb_s} TB/s "
        f"HBM, NVLink {gpu.nvlink_gb_s:.0f} GB/s): assumptions A1-A11 in "
        "algorithms/training/step_estimate.py",
        f"  A1 {work.prompts} prompts x {work.n}, prompts {mix.prompt_tokens} tokens, responses "
        f"<= {mix.cap} ({mix.cut_share:.0%} cut, mean {mix.mean_response:.0f}), "
        f"{work.num_minibatches} minibatches, {work.peer_rows} peer rows scored per receiver; "
        f"A2 padding {work.padding}x",
        f"  A3 training at the H200's measured {measured.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({measured.flops_per_s / 1e12 / MEASURED_GPU.bf16_tflops:.1%} MFU, 740M Llama, "
        f"gradient checkpointing) -> {rate / 1e12:.0f} TFLOP/s here",
        f"  A4 eager decode: {measured.layer_overhead_s * 1e3:.2f} ms per layer per step "
        f"(measured {measured.generate_s / measured.decode_steps * 1e3:.1f} ms steps) + "
        f"memory at {HBM_EFFICIENCY:.0%} of HBM",
        f"  A5 vLLM (not measured): decode at {VLLM_COMPUTE_EFFICIENCY:.0%} of peak FLOP/s or "
        f"{HBM_EFFICIENCY:.0%} of HBM, {VLLM_STEP_OVERHEAD_S * 1e3:.0f} ms per step, continuous "
        "batching over vllm_max_num_seqs slots, KV from the engine's preallocated share; A8 "
        "FSDP2 collectives not overlapped; A9 fp32 gather, bucketed sync, sleep level 2",
        f"  A10 verify {VERIFY_ITEMS_PER_S:.0f} items/s x {VERIFY_WORKERS} workers; A11 agents "
        f"{'at once (Ray actors)' if together else 'one after the other (local backend)'} in "
        "rollout, update, sync; checkpoints and evaluation not counted",
    ]


def format_estimate(estimate: StepEstimate) -> list[str]:
    """The per-phase table (the step column: max over agents where they run at once, else
    the sum), the totals with either rollout backend, and the target."""
    names = [a.name for a in estimate.agents]
    width = max(12, *(len(n) + 2 for n in names))
    lines = [f"  {'seconds':<30}" + "".join(f"{n:>{width}}" for n in names) + f"{'step':>9}  from"]
    rows: list[tuple[str, Phase]] = []
    for phase in estimate.phases:
        rows.append(("  ", phase))
        if phase.name == "rollout":
            rows += [("    ", estimate.alternatives[ROLLOUT_ROWS[b]]) for b in ROLLOUT_ROWS]
        if phase.name == "weight sync":
            rows.append(("    ", estimate.alternatives[SYNC_ROW]))
    for indent, phase in rows:
        cells = "".join(f"{value:>{width}.1f}" for value in phase.per_agent)
        cells += " " * width * (len(names) - len(phase.per_agent))
        lines.append(f"{indent + phase.name:<32}{cells}{phase.seconds:>9.1f}  {phase.source}")
    low, high = PAPER_STACK_S
    own = "/".join(a.rollout_backend for a in estimate.agents)
    lines.append(f"  total ({own}): {estimate.total:.0f} s = {estimate.total / 60:.1f} min")
    for backend in ROLLOUT_ROWS:
        seconds = estimate.total_with(backend)
        verdict = "meets" if estimate.meets_target(seconds) else "misses"
        lines.append(
            f"  every agent on {backend}: {seconds:.0f} s = {seconds / 60:.1f} min, "
            f"{seconds / high:.2f}-{seconds / low:.2f} x the paper stack's {low / 60:.1f}-"
            f"{high / 60:.0f} min: {verdict} the target (<= {TARGET_FACTOR} x {high / 60:.0f} "
            f"min = {TARGET_S / 60:.0f} min)"
        )
    return lines


MEASURED_RATE_PHASES = ("scoring", "update")
"""The phases that rest on A3's measured training rate alone (eager rollout's prefill does
too, a small part of its time)."""


def format_range(estimate: StepEstimate, fast: StepEstimate, slow: StepEstimate) -> list[str]:
    """The estimate's uncertainty: how much of the step rests on A3's measured rate, the step
    at its stated bounds (`anchors.MFU_BOUNDS`; `fast` and `slow` from `estimate_bounds`),
    and the vLLM rollout, which no measurement supports."""
    low, high = MFU_BOUNDS
    rate = {p.name: p.seconds for p in estimate.phases}
    share = sum(rate[name] for name in MEASURED_RATE_PHASES) / estimate.total
    spans = ", ".join(
        f"{name} {f.seconds:.0f}-{s.seconds:.0f} s"
        for name in MEASURED_RATE_PHASES
        for f, s in [(_phase(fast, name), _phase(slow, name))]
    )
    lines = [
        f"  uncertainty: {share:.0%} of the step is {' + '.join(MEASURED_RATE_PHASES)} at A3's "
        f"one measured rate ({MEASURED.mfu:.1%} MFU: a 740M Llama, 373-token vocabulary, "
        f"136-token rows); at A3's bounds, {high:.0%} to {low:.0%} MFU (public verl runs: "
        f"2-40 %): {spans}; step {fast.total:.0f}-{slow.total:.0f} s = "
        f"{fast.total / 60:.1f}-{slow.total / 60:.1f} min"
    ]
    vllm = [a.name for a in estimate.agents if a.rollout_backend == "vllm"]
    if vllm:
        rollout = _phase(estimate, "rollout").seconds
        lines.append(
            f"  not measured: the vLLM rollout (A5; {', '.join(vllm)}), {rollout:.0f} s of the "
            "step, and the weight sync (A9): held fixed in that range"
        )
    for backend in ROLLOUT_ROWS:
        ends = [e.total_with(backend) for e in (fast, slow)]
        verdicts = ["meets" if e <= TARGET_S else "misses" for e in ends]
        lines.append(
            f"  every agent on {backend} at {high:.0%} / {low:.0%} MFU: {ends[0]:.0f} / "
            f"{ends[1]:.0f} s: {verdicts[0]} / {verdicts[1]} the target"
        )
    return lines


def _phase(estimate: StepEstimate, name: str) -> Phase:
    return next(p for p in estimate.phases if p.name == name)
