"""The built-in tiny pair and testbed pair: small heterogeneous models built and cached here.

    from graft_env.policies.tiny import build_tiny_pair, PAIRS
    paths = build_tiny_pair(None, 0, config=PAIRS["testbed-pair"])  # name -> model dir

`python -m graft_env.policies.tiny.build --pair testbed-pair` builds one from the shell.

Modules:

build             `build_tiny_pair`: tokenizers, models, warm start, report, the cache
build_files       a finished build as files that travel, checked against named weights SHA-256
config            what a build depends on (members, targets), the built-in pairs, the cache key
models            the tiny architectures (GPT-NeoX, Llama; ~1M parameters)
pools             the problem pools: SFT data, warm-start checks, report prompts, mix weights
report            per-skill pass@1, all-fail rates and complementarity of a pair
sft               supervised warm start on worked solutions, through the RL forward
tokenizer         small byte-level BPE tokenizers and the two prompt styles
"""

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "build_tiny_pair": "graft_env.policies.tiny.build",
    "PAIRS": "graft_env.policies.tiny.config",
    "TESTBED": "graft_env.policies.tiny.config",
    "TinyPairConfig": "graft_env.policies.tiny.config",
    "cache_key": "graft_env.policies.tiny.config",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
