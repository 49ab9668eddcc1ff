"""Trajectory libraries: peer groups from anywhere, keyed by prompt (beyond GRAFT-SPEC §9).

graft-stored replays a partner run step by step on the identical prompt stream. A library
holds every stored group of any number of sources (runs of this project, `build_library`;
files of rollouts from elsewhere, `import_rollouts`) keyed by the content hash of the
problem text, so a receiver on its own data order looks up each all-fail prompt and
applies graft-stored's gate, weights and update to what it finds (`graft-library`, run
config `library:`; `algorithms.library.source`; the command is `graft library`,
`benchmarks.commands.library`).

    from algorithms.library import build_library, read_library
    build_library(["runs/peer-seed0", "runs/peer-seed1"], "runs/lib")
    groups = read_library("runs/lib")

Modules:

build             build a library from the trajectory stores of runs
channel           the live TRL exchange's rendezvous: a shared folder of step records
choice            which stored group a prompt gets when several pass Eq.4
format            the library on disk: one Parquet dataset of stored groups, keyed by prompt
importers         import rollouts generated elsewhere (JSONL, Parquet)
source            graft-library's peer: stored groups looked up by prompt
staleness         how old the used library groups are, and how much of them was admitted
trl_adapter       graft-library inside TRL's `GRPOTrainer`, on the path live peers share
trl_batch         TRL's generation batch with peer rows written in and rows in minibatch order
trl_live          live GRAFT between TRL `GRPOTrainer` runs, one `accelerate launch` each
"""

from graft_env.lazy import lazy_exports

# name -> defining module, imported on first use: the run config's schema imports
# `algorithms.library.choice` without loading pyarrow through the format module
_EXPORTS = {
    "GraftGRPOTrainer": "trl_adapter",  # imports trl on first use
    "LIBRARY_AGENT": "format",
    "LiveGRPOTrainer": "trl_live",  # imports trl on first use
    "ImportSpec": "importers",
    "Library": "format",
    "LibraryError": "format",
    "LibraryGroup": "format",
    "build_library": "build",
    "import_rollouts": "importers",
    "load_library": "format",
    "math_reward": "trl_adapter",
    "prompt_key": "format",
    "read_library": "format",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, {n: f"{__name__}.{m}" for n, m in _EXPORTS.items()})
