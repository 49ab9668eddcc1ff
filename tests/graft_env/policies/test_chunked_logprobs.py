"""Log-probs and entropy a chunk of positions at a time (`policies.logprobs`): the same
values and gradients as the one-pass forward, and never the logits of every position."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from graft_env.policies.forward import response_logprobs
from graft_env.policies.logprobs import split_head

VOCAB = 97
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
HEADS = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
CONFIGS = {
    "gpt2": (transformers.GPT2Config, {"n_embd": 32, "n_layer": 2, "n_head": 4}),
    "llama": (transformers.LlamaConfig, {**SMALL, **HEADS}),
    "gpt_neox": (transformers.GPTNeoXConfig, {**SMALL, "num_attention_heads": 4}),
    "qwen3_tied": (transformers.Qwen3Config, {**SMALL, **HEADS, "tie_word_embeddings": True}),
    "smollm3": (transformers.SmolLM3Config, {**SMALL, **HEADS}),
    "gemma3_softcap": (
        transformers.Gemma3TextConfig,
        {**SMALL, **HEADS, "final_logit_softcapping": 3.0},
    ),
}
PROMPTS = [[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7], [5, 6, 7], [8, 9]]
RESPONSES = [[10, 11, 12], [13, 14], [15], [16, 17, 18, 19, 20], [21, 22]]


def _model(name: str) -> torch.nn.Module:
    config_class, fields = CONFIGS[name]
    torch.manual_seed(0)
    config = config_class(
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0, **fields
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _run(model, chunk: int, share: bool, grad: bool) -> tuple[torch.Tensor, float, list]:
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        result = response_logprobs(
            model,
            PROMPTS,
            RESPONSES,
            pad_id=0,
            temperature=0.7,
            share_prompts=share,
            logits_chunk_tokens=chunk,
        )
    grads = []
    if grad:
        weights = torch.linspace(-1, 1, result.logprobs.numel()).reshape(result.logprobs.shape)
        (result.logprobs * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return result.logprobs.detach(), result.entropy_sum, grads


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_split_head_gives_the_models_own_logits(name):
    model = _model(name)
    body, head = split_head(model)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(head(body(input_ids=ids).last_hidden_state), model(input_ids=ids).logits)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("share", [False, True])
def test_chunks_give_the_one_pass_logprobs_entropy_and_gradients(name, share):
    model = _model(name)
    whole, whole_entropy, whole_grads = _run(model, 10**6, share, grad=True)
    for chunk in (1, 4):
        logprobs, entropy, grads = _run(model, chunk, share, grad=True)
        torch.testing.assert_close(logprobs, whole, atol=1e-6, rtol=0)
        assert entropy == pytest.approx(whole_entropy, rel=1e-6)
        assert len(grads) == len(whole_grads)
        for a, b in zip(grads, whole_grads, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_chunks_under_bfloat16_autocast_match_the_one_pass():
    model = _model("llama")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        whole, _, whole_grads = _run(model, 10**6, True, grad=True)
        chunked, _, grads = _run(model, 3, True, grad=True)
    torch.testing.assert_close(chunked, whole, atol=2e-2, rtol=0)
    for a, b in zip(grads, whole_grads, strict=True):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


class _LargestVocabTensor(TorchDispatchMode):
    """The most vocabulary-wide rows (last dim == VOCAB) any one op output held, the
    output embedding's transpose [hidden, VOCAB] aside."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.ndim and tensor.shape[-1] == VOCAB:
                if tuple(tensor.shape) == (SMALL["hidden_size"], VOCAB):
                    continue
                self.rows = max(self.rows, tensor.numel() // VOCAB)
        return out


@pytest.mark.parametrize("share", [False, True])
def test_no_op_holds_the_logits_of_more_positions_than_a_chunk(share):
    """Forward and backward: every vocabulary-wide tensor has at most `chunk` rows; the
    one pass holds all rows x (R + 1) of them."""
    model = _model("qwen3_tied")
    positions = len(PROMPTS) * (max(len(r) for r in RESPONSES) + 1)
    for chunk, bound in ((10**6, positions), (3, 3)):
        with _LargestVocabTensor() as seen:
            _run(model, chunk, share, grad=True)
        assert seen.rows <= bound
        assert chunk > positions or seen.rows == bound


def _vocab_rows_saved_for_backward(model, chunk: int) -> int:
    """Vocabulary-wide rows autograd keeps alive for backward over one forward: what the
    logits cost in memory between the forward and the backward, whatever one op holds."""
    rows = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal rows
        if tensor.ndim and tensor.shape[-1] == VOCAB and tensor.shape != (VOCAB, 32):
            rows += tensor.numel() // VOCAB
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        response_logprobs(
            model, PROMPTS, RESPONSES, pad_id=0, temperature=0.7, logits_chunk_tokens=chunk
        )
    return rows


def test_the_logits_kept_for_backward_do_not_grow_with_the_positions():
    """Chunks are recomputed in backward: between forward and backward no vocabulary-wide
    tensor is kept (the one pass keeps several copies of every position's logits)."""
    model = _model("qwen3_tied")
    assert _vocab_rows_saved_for_backward(model, None) >= len(PROMPTS) * 2
    assert _vocab_rows_saved_for_backward(model, 3) == 0


def test_a_head_that_rescales_logits_is_refused():
    config = transformers.CohereConfig(vocab_size=VOCAB, **SMALL, **HEADS, logit_scale=0.5)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(TypeError, match=r"logit_scale=0\.5 rescales logits"):
        split_head(model)
