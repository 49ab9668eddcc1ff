"""The memory plan of a run: what each policy holds on its device in each phase of a step,
from the model's transformers config and the run config alone (no torch, no weights).

A policy (`graft_env.policies.hf.HFPolicy`) holds, between steps, its weights and AdamW's two
moments (in the weights' dtype), and the frozen reference of a KL loss. On top of that, per
phase of a step:

- generate: `generation_batch_size` rows decoded together with a KV cache of prompt + response
  tokens (under autocast the rotated keys are float32, as the float32 rotary tables promote
  them; values bfloat16), and the bfloat16 copies autocast caches of every linear weight;
- score (peer responses, no grad): one micro-batch (`max_tokens_per_micro_batch` tokens, else
  `score_batch_size` rows) whose shared-prompt forward keeps a KV cache of all its tokens,
  one layer's activations and the log-prob logits;
- update (with grad): one micro-batch (`max_tokens_per_micro_batch` tokens, else
  `micro_batch_size` rows, else the whole minibatch), the gradients, the layers' saved
  activations (with gradient checkpointing: each layer's input, plus one layer recomputed) and
  the log-prob logits.

The log-prob logits are the peak that grows with the vocabulary: the forward holds the
model's logits (compute dtype) and float32 copies: the upcast, log_softmax and, for the
entropy, its exp and their product (`LOGITS_COPIES`). With `logits_chunk_tokens` they
exist for at most that many positions at a time; without it, for every response position of
the micro-batch (`forward.response_logprobs` before chunking).

Every figure is in bytes; `benchmarks/perf/memory_plan_check.py` compares them with measured
peaks. The device's usable memory is its total less `RESERVE_BYTES` (CUDA context, cuBLAS
workspace, allocator slack).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.training.ray.options import parse_ray_options
from graft_env.policies.options import HFPolicyOptions

if TYPE_CHECKING:
    from algorithms.training.run_config import TrainConfig

GIB = 2**30
RESERVE_BYTES = 2 * GIB
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PHASES = ("generate", "score", "update")
LOGITS_COPIES = {"update": 4.0, "score": 2.5}
"""float32 copies of [positions, V] beside the compute-dtype logits at the peak: the upcast,
log_softmax, and for the update's entropy exp(log p) and p log p; scoring (no entropy) holds
the upcast, the temperature-scaled input of log_softmax and its output for part of the time
(2.5 fits the CPU measurements of `memory_plan_check`, 3 would be the bound)."""

PAPER_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "HuggingFaceTB/SmolLM3-3B-Base": (
        "SmolLM3Config",
        dict(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=4,
            tie_word_embeddings=True,
        ),
    ),
    "Qwen/Qwen3-1.7B-Base": (
        "Qwen3Config",
        dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
    "OctoThinker/OctoThinker-3B-Hybrid-Base": (  # Llama-3.2-3B's shape
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=28,
            num_attention_heads=24,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
}
"""The paper's models (GRAFT-SPEC §11) as transformers config classes and their published
shapes, so a plan needs no download; `benchmarks/perf/scale_check.py` builds them."""
MODEL_TYPES = {"SmolLM3Config": "smollm3", "Qwen3Config": "qwen3", "LlamaConfig": "llama"}


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only (Llama-family) transformer, as its config gives it."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied: bool
    rope_layers: int
    qk_norm: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        """From a transformers config as a dict (config.json, `PretrainedConfig.to_dict()`);
        a multimodal config's `text_config` is its language model."""
        text = config.get("text_config") or config
        model_type = str(text.get("model_type", config.get("model_type", "")))
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        layers = int(text["num_hidden_layers"])
        no_rope = text.get("no_rope_layers")  # SmolLM3: 1 = the layer uses RoPE
        if no_rope is not None:
            rope_layers = sum(int(flag) for flag in no_rope[:layers])
        elif model_type == "smollm3":
            interval = int(text.get("no_rope_layer_interval", 4))
            rope_layers = layers - layers // interval
        else:
            rope_layers = layers
        return cls(
            model_type=model_type,
            vocab_size=int(text["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(text["intermediate_size"]),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))),
            rope_layers=rope_layers,
            qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text", "gemma3"),
            attention_bias=bool(text.get("attention_bias", False)),
            mlp_bias=bool(text.get("mlp_bias", False)),
        )

    @property
    def layer_linear_params(self) -> int:
        q, kv, h = (
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
            self.hidden_size,
        )
        attention = h * (q + 2 * kv) + q * h + (q + 2 * kv + h) * self.attention_bias
        mlp = 3 * h * self.intermediate_size + (2 * self.intermediate_size + h) * self.mlp_bias
        return attention + mlp

    @property
    def linear_params(self) -> int:
        """Parameters of every linear layer, the output head included (tied or not)."""
        return self.num_layers * self.layer_linear_params + self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        norms = self.num_layers * (2 * self.hidden_size + 2 * self.head_dim * self.qk_norm)
        embedding = 0 if self.tied else self.vocab_size * self.hidden_size
        return self.linear_params + embedding + norms + self.hidden_size


class UnknownArchitecture(ValueError):
    """A model the plan cannot size without downloading its config."""


def paper_architecture(model: str) -> Architecture | None:
    """The architecture of one of the paper's models, from `PAPER_MODELS`; None otherwise."""
    if model not in PAPER_MODELS:
        return None
    class_name, fields = PAPER_MODELS[model]
    return Architecture.from_config({"model_type": MODEL_TYPES[class_name], **fields})


def local_architecture(directory: Path) -> Architecture:
    """The architecture in `directory`/config.json (a local model or checkpoint)."""
    path = directory / "config.json"
    try:
        return Architecture.from_config(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{path}: not a decoder config the memory plan reads ({err})") from err


@dataclass(frozen=True)
class Workload:
    """What one step asks of a policy (the assumptions a plan prints)."""

    prompt_tokens: int
    response_tokens: int
    minibatch_rows: int
    reference: bool = False

    @property
    def row_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens


@dataclass(frozen=True)
class Term:
    """One thing in memory: its bytes and the option that bounds it (None: none does)."""

    name: str
    bytes: float
    knob: str | None = None


@dataclass(frozen=True)
class PolicyPlan:
    """One policy's memory per phase; `persistent` is held in every phase."""

    architecture: Architecture
    persistent: tuple[Term, ...]
    phases: Mapping[str, tuple[Term, ...]]
    activations_without_checkpointing: float

    def transient(self, phase: str) -> float:
        return sum(term.bytes for term in self.phases[phase])

    @property
    def persistent_bytes(self) -> float:
        return sum(term.bytes for term in self.persistent)

    def peak_phase(self) -> str:
        return max(PHASES, key=self.transient)


def compute_bytes(options: HFPolicyOptions) -> int:
    return DTYPE_BYTES[options.autocast or options.dtype]


def layer_activation_bytes(arch: Architecture, options: HFPolicyOptions) -> float:
    """Bytes one token leaves saved for backward in one decoder layer (SDPA attention).

    Residual stream and norms in the weights' dtype (two tensors per norm: its input and
    output); under autocast each linear saves its own bfloat16 cast of its input; RoPE
    promotes q and k to the residual dtype; SDPA saves q and the head-repeated k, v and its
    output; the MLP saves gate, act(gate), up and their product.
    """
    r, c = DTYPE_BYTES[options.dtype], compute_bytes(options)
    h, i = arch.hidden_size, arch.intermediate_size
    q = arch.num_heads * arch.head_dim
    kv = arch.num_kv_heads * arch.head_dim
    casts = c * (3 * h + 2 * h + q) if options.autocast else 0  # q,k,v; gate,up; o_proj
    norms = 2 * 2 * h * r + (2 * 2 * (q + kv) * 4 if arch.qk_norm else 0)
    attention = (q + kv) * (c + r) + c * (q + kv) + 3 * q * c  # q,k,v; rotated; sdpa in/out
    mlp = 4 * i * c
    return casts + norms + attention + mlp


def kv_cache_bytes_per_token(arch: Architecture, options: HFPolicyOptions) -> float:
    kv = arch.num_kv_heads * arch.head_dim
    c = compute_bytes(options)
    key = DTYPE_BYTES[options.dtype] if options.autocast else c  # rotated keys promote
    rope, nope = arch.rope_layers, arch.num_layers - arch.rope_layers
    return kv * (rope * (key + c) + nope * 2 * c)


def _micro_batch_tokens(options: HFPolicyOptions, work: Workload, rows: int | None) -> int:
    """Padded tokens of the largest micro-batch: the token budget, or `rows` rows of the
    longest prompt + response."""
    if options.max_tokens_per_micro_batch is not None:
        return options.max_tokens_per_micro_batch
    return (rows or work.minibatch_rows) * work.row_tokens


def _logits_bytes(
    arch: Architecture, options: HFPolicyOptions, tokens: int, phase: str, work: Workload
) -> float:
    positions = tokens * work.response_tokens / work.row_tokens
    chunk = options.logits_chunk_tokens
    held = positions if chunk is None else min(positions, chunk)
    per_position = arch.vocab_size * (compute_bytes(options) + 4 * LOGITS_COPIES[phase])
    return held * per_position


def plan_policy(arch: Architecture, options: HFPolicyOptions, work: Workload) -> PolicyPlan:
    """What `arch` under `options` holds in each phase of a step of `work`."""
    w = DTYPE_BYTES[options.dtype]
    persistent = [
        Term(f"weights ({options.dtype})", arch.params * w),
        Term(f"AdamW moments (2 x {options.dtype})", 2 * arch.params * w),
    ]
    if work.reference:
        persistent.append(Term("KL reference weights", arch.params * w))
    cache = (
        [Term("autocast bf16 weight copies", arch.linear_params * 2)] if options.autocast else []
    )
    kv_token = kv_cache_bytes_per_token(arch, options)
    layer = layer_activation_bytes(arch, options)
    generate_rows = options.generation_batch_size
    budget = "max_tokens_per_micro_batch" if options.max_tokens_per_micro_batch else None
    score_tokens = _micro_batch_tokens(options, work, options.score_batch_size)
    update_tokens = _micro_batch_tokens(options, work, options.micro_batch_size)
    saved = arch.num_layers * layer * update_tokens
    if options.gradient_checkpointing:
        residual = arch.num_layers * arch.hidden_size * w * update_tokens
        activations = residual + layer * update_tokens
        what = "activations (checkpointed)"
    else:
        activations, what = saved, "activations"
    phases = {
        "generate": (
            *cache,
            Term("KV cache", generate_rows * work.row_tokens * kv_token, "generation_batch_size"),
        ),
        "score": (
            *cache,
            Term("KV cache", score_tokens * kv_token, budget or "score_batch_size"),
            Term("one layer's activations", score_tokens * layer, budget or "score_batch_size"),
            Term(
                "log-prob logits",
                _logits_bytes(arch, options, score_tokens, "score", work),
                "logits_chunk_tokens",
            ),
        ),
        "update": (
            *cache,
            Term(f"grads ({options.dtype})", arch.params * w),
            Term(what, activations, budget or "micro_batch_size"),
            Term(
                "log-prob logits",
                _logits_bytes(arch, options, update_tokens, "update", work),
                "logits_chunk_tokens",
            ),
        ),
    }
    return PolicyPlan(arch, tuple(persistent), phases, saved)


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


def format_plan(device: DevicePlan, sharded_over: int | None = None) -> list[str]:
    """The table of one device: a row per term, a column per phase, in GiB. `sharded_over`:
    the run's FSDP2 ranks per agent when it has more than one, so the verdict says it is for
    one unsharded process, not the run's layout."""
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


LOADER_OPTIONS = ("rollout_backend", "cache_dir", "tiny_seed")
"""Agent options that `load_policy` takes itself (not `HFPolicyOptions` fields)."""


def policy_options(options: Mapping[str, Any]) -> HFPolicyOptions:
    """An agent's `HFPolicyOptions`, without the loader's own and the vLLM engine's."""
    fields = {
        key: value
        for key, value in options.items()
        if key not in LOADER_OPTIONS and not key.startswith("vllm_")
    }
    return HFPolicyOptions.from_kwargs(**fields)


def architecture_of(model: str, where: str) -> Architecture:
    """A model's architecture without loading it or downloading anything: the paper's
    table, a local directory (or built-in name), else the Hugging Face cache's config.json."""
    known = paper_architecture(model)
    if known is not None:
        return known
    from graft_env.policies.zoo import model_path  # no torch; builds a missing tiny pair

    path = model_path(model)
    if path.is_dir():
        return local_architecture(path)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json")
    if isinstance(cached, str):
        return local_architecture(Path(cached).parent)
    raise UnknownArchitecture(
        f"{where}: {model!r} is not a local directory, not one of the paper's models "
        f"({sorted(PAPER_MODELS)}) and has no cached config.json: the plan cannot size it"
    )


def agent_device(options: HFPolicyOptions, index: int, backend: str) -> str:
    """The device an agent computes on: its own GPU per Ray actor, else its `device`."""
    if backend == "ray":
        return f"actor {index}: cuda"
    return "cuda:0" if options.device == "cuda" else options.device


def run_workload(config: TrainConfig, prompt_tokens: int) -> Workload:
    """What a step of `config` (a `TrainConfig`) asks of each policy."""
    from algorithms import configure

    algorithm = configure(config.algorithm, **config.algorithm_options)
    rows = config.env.batch_size * algorithm.n // algorithm.num_minibatches
    response = config.sampling.max_new_tokens
    return Workload(prompt_tokens, response, max(rows, 1), reference=algorithm.kl_coef > 0)


def plan_run(config: TrainConfig, work: Workload, capacity: float, gpus: int) -> list[DevicePlan]:
    """Every GPU device's plan for `config` (a `TrainConfig`) on `gpus` devices of
    `capacity` bytes each; CPU agents are not planned. Raises ValueError (one line) when the
    config names a GPU that is not there."""
    devices: dict[str, list[tuple[int, str, PolicyPlan]]] = {}
    ray = config.backend == "ray"
    # the ray: section's own default (0: CPU actors, nothing on a GPU to plan)
    per_agent = int(parse_ray_options(config.ray).num_gpus_per_agent) if ray else 0
    if ray and per_agent == 0:
        return []
    if ray and per_agent * len(config.agents) > gpus:
        raise ValueError(
            f"ray.num_gpus_per_agent: {len(config.agents)} agents x {per_agent} GPUs, "
            f"{gpus} GPU(s) given"
        )
    for index, agent in enumerate(config.agents):
        options = policy_options(agent.options)
        budget = options.max_tokens_per_micro_batch
        if budget is not None and budget < work.row_tokens:
            raise ValueError(
                f"agents.{index}.options.max_tokens_per_micro_batch: {budget} is below one row "
                f"of {work.prompt_tokens} prompt + {work.response_tokens} response tokens "
                "(a longer row is refused when it comes)"
            )
        device = agent_device(options, index, config.backend)
        if device.startswith("cpu"):
            continue
        number = int(device.partition(":")[2] or 0) if not ray else 0
        if number >= gpus:
            raise ValueError(f"agents.{index}.options.device: {device!r}, {gpus} GPU(s) given")
        arch = architecture_of(agent.model, f"agents.{index}.model")
        plan = plan_policy(arch, options, work)
        devices.setdefault(device, []).append((index, agent.name, plan))
    return [DevicePlan(name, capacity, tuple(agents)) for name, agents in devices.items()]


ALLOCATOR_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOCATOR_SETTING = "expandable_segments:True"


def found_gpus() -> tuple[float, int]:
    """(bytes of the smallest GPU, how many) that torch.cuda finds; (0, 0) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return 0.0, 0
    count = torch.cuda.device_count()
    return float(min(torch.cuda.get_device_properties(i).total_memory for i in range(count))), count


def allocator_hint() -> str | None:
    """A line when the CUDA allocator is not told to expand segments (fragmentation)."""
    import os

    if ALLOCATOR_SETTING in os.environ.get(ALLOCATOR_VAR, ""):
        return None
    return (
        f"hint: set {ALLOCATOR_VAR}={ALLOCATOR_SETTING} before launching: variable-length "
        "micro-batches fragment the default allocator's fixed segments"
    )


def check_run(plans: Sequence[DevicePlan]) -> None:
    """Raise ValueError with the first device's one-line refusal, if any does not fit."""
    for plan in plans:
        refusal = plan.refusal()
        if refusal is not None:
            raise ValueError(refusal)
