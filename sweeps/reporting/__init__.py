"""Writing pages: a claim's section of the report (report), a search on one page (search_report)
and `grpo reproduce` (reproduce: runs every claim's sweep, gates the verdicts, writes REPORT.md and
its figures). The top wing: it may import the verdicts (sweeps.deciding), the driver
(sweeps.driving) and the ground."""
