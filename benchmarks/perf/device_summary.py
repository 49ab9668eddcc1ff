"""The table `device_check` prints at the end: one row per precision and model."""

from __future__ import annotations

from benchmarks.perf.device_checks import PRECISIONS


def _cell(entry: dict, check: str, *keys: str, fmt: str = "{:.3g}") -> str:
    """One summary cell: "-" if the check did not run, "ERR" if it failed."""
    value = entry.get(check)
    if value is None:
        return "-"
    if "error" in value:
        return "ERR"
    for key in keys:
        value = value.get(key)
    if value is None:
        return "-"
    return str(value) if isinstance(value, bool) else fmt.format(value)


def summary(results: dict) -> None:
    print(
        f"\n{'precision':<10}{'model':<13}{'gen~score':>10}{'gen~train':>10}{'same':>6}"
        f"{'loss before -> after':>22}{'ckpt diff':>10}{'gen tok/s':>10}{'upd tok/s':>10}"
        f"{'gen GiB':>8}{'upd GiB':>8}"
    )
    for precision in PRECISIONS:
        for name, entry in results.get(precision, {}).get("models", {}).items():
            loss = (
                f"{_cell(entry, 'update', 'loss_before', fmt='{:.4f}')} -> "
                f"{_cell(entry, 'update', 'loss_after', fmt='{:.4f}')}"
            )
            print(
                f"{precision:<10}{name:<13}"
                f"{_cell(entry, 'sampling', 'generation_vs_score', 'max'):>10}"
                f"{_cell(entry, 'sampling', 'generation_vs_train_forward', 'max'):>10}"
                f"{_cell(entry, 'sampling', 'deterministic'):>6}{loss:>22}"
                f"{_cell(entry, 'save_load', 'max_abs_diff'):>10}"
                f"{_cell(entry, 'sampling', 'generation_tokens_per_s', fmt='{:.0f}'):>10}"
                f"{_cell(entry, 'update', 'update_tokens_per_s', fmt='{:.0f}'):>10}"
                f"{_cell(entry, 'sampling', 'generate_peak_gib', fmt='{:.2f}'):>8}"
                f"{_cell(entry, 'update', 'update_peak_gib', fmt='{:.2f}'):>8}"
            )
            if "gradient_checkpointing" in entry:
                print(
                    f"{'':<23}with gradient checkpointing: update "
                    f"{_cell(entry, 'gradient_checkpointing', 'update_s')} s, "
                    f"{_cell(entry, 'gradient_checkpointing', 'update_peak_gib', fmt='{:.2f}')}"
                    f" GiB peak (plain: {_cell(entry, 'update', 'update_s')} s)"
                )
        for pair, row in results.get(precision, {}).get("peer", {}).items():
            value = row.get("target_mean_token_logp")
            print(
                f"{precision:<10}peer {pair}: mean token log-lik "
                f"{'ERR' if value is None else f'{value:.3f}'}"
            )
    for warning in results["warnings"]:
        print(f"WARN {warning}")
