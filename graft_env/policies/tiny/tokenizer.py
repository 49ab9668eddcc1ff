"""Small byte-level BPE tokenizers for the built-in tiny models.

Why this shape: byte-level BPE over the full 256-byte alphabet encodes any string
and decodes it back exactly, so a peer's response text round-trips through this
tokenizer unchanged; digits are split one per token before BPE so arithmetic is
learnable digit by digit; the merges are trained on a model's own corpus, so two
models trained on different skill mixes (and vocabulary sizes) tokenise the same
text differently, as heterogeneous real models do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TokenizerSpec:
    """Vocabulary size, special tokens and optional chat template of one tokenizer."""

    vocab_size: int
    eos_token: str
    pad_token: str
    extra_special_tokens: tuple[str, ...] = ()
    chat_template: str | None = None

    def __post_init__(self) -> None:
        minimum = 256 + 3 + len(self.extra_special_tokens)
        if self.vocab_size < minimum:
            raise ValueError(
                f"TokenizerSpec.vocab_size must be >= {minimum} (256 bytes + specials), "
                f"got {self.vocab_size}"
            )


PLAIN_STYLE = TokenizerSpec(vocab_size=400, eos_token="<|endoftext|>", pad_token="<|pad|>")
CHATML_STYLE = TokenizerSpec(
    vocab_size=600,
    eos_token="<|im_end|>",
    pad_token="<pad>",
    extra_special_tokens=("<|im_start|>",),
    chat_template=CHATML_TEMPLATE,
)


def train_tokenizer(corpus: Iterable[str], spec: TokenizerSpec) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` and wrap it as a transformers tokenizer.

    Deterministic for a fixed corpus order.
    """
    specials = [spec.eos_token, spec.pad_token, *spec.extra_special_tokens]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        additional_special_tokens=list(spec.extra_special_tokens),
        chat_template=spec.chat_template,
        clean_up_tokenization_spaces=False,
    )
