"""The gap study's peer controls' report in parts (`benchmarks.study.controls_report` composes
them and is the command line; docs/study/GAP-CONTROLS-PREREGISTRATION.md).

Modules:

design            the pre-registered builds, seeds, arms, contrasts and design files
exchange          the groups each arm moved per step, and the per-moved-group contrast (S4)
markdown          report.md from the report's numbers
numbers           the builds' cells read, the contrasts with t, bootstrap and Holm, the doses
timing            the pre-registration check: the design's last commit before every cell
"""
