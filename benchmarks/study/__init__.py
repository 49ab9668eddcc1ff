"""The pre-registered studies' reports (docs/study/): statistics, figures and verdicts.

Modules:

curves            the study's curves from the cells' metrics: learning curves, exchange funnel
controls_report   the gap study's peer-control report (issue 39): its command line
gap_report        the gap study's report: its command line, composing gap/
hypotheses        the pre-registered hypotheses: labels, paired contrasts, verdicts, the table
library_report    the pre-registered library comparison's report
multiplicity      the t-test's p-value, Holm's adjustment, Welch's interval
probe             the exchange funnel of a built pair's first steps, before a study runs
plots             the study report's figures: learning curves and the exchange funnel
report            the pre-registered study's report: its command line, analysis, files, plots
report_markdown   the pre-registered study report's README.md, from its results
stats             paired contrasts with bootstrap intervals, verdicts, power
stored_report     the stored-peer study's report: the peer-control analysis on its builds
controls/         the peer-control report: contrasts with Holm, doses, moved groups, timing
gap/              the gap study's report: dose-response, contrasts, verdicts, the paper
"""
