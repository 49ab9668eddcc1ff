"""The gap study's report in parts (`benchmarks.study.gap_report` composes them and is the
command line; docs/study/GAP-PREREGISTRATION.md, sections 2-6).

Modules:

cells             the grids' gap models and cells on disk, and the `Study` read from them
contrasts         gap scores, section 4's contrasts on their seeds, section 5's verdicts
descriptive       doses, scores, the exchange funnel, first steps, curves, the builds' provenance
design            the pre-registered doses, arms, roles and section 4's contrasts
figures           the dose-response figure
markdown          report.md from the report's numbers
paper             section 6: agreement with the paper's claims from the verdicts
slope             H2: the slope over the measured gate candidates, its per-dose bootstrap
"""
