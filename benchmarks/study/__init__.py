"""The pre-registered studies' reports (docs/study/): statistics, figures and verdicts.

Modules:

controls_report   the gap study's peer-control report (issue 39): its command line
gap_report        the gap study's report: its command line, composing gap/
library_report    the pre-registered library comparison's report
multiplicity      the t-test's p-value, Holm's adjustment, Welch's interval
probe             the exchange funnel of a built pair's first steps, before a study runs
plots             the study report's figures: learning curves and the exchange funnel
report            the pre-registered study's report: table, verdicts, plots
report_markdown   the pre-registered study report's README.md, from its results
stats             paired contrasts with bootstrap intervals, verdicts, power
controls/         the peer-control report: contrasts with Holm, doses, moved groups, timing
gap/              the gap study's report: dose-response, contrasts, verdicts, the paper
"""
