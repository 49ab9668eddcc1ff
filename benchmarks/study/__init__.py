"""The pre-registered studies' reports (docs/study/): statistics, figures and verdicts.

Modules:

library_report    the pre-registered library comparison's report
plots             the study report's figures: learning curves and the exchange funnel
report            the pre-registered study's report: table, verdicts, plots
stats             paired contrasts with bootstrap intervals, verdicts, power
"""
