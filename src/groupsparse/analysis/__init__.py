"""Analysis of the aggregated tables (torch-free): one statistics module (:mod:`.stats`),
summaries (:mod:`.summary`), scaling laws (:mod:`.scaling_laws`), ablations (:mod:`.ablations`)
and the claims table (:mod:`.claims`)."""
