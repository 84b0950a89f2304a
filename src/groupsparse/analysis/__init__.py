"""Analysis of the aggregated tables (torch-free): one statistics module (:mod:`.stats`), the settings
read from the workflow's spec file (:mod:`.settings`), summaries (:mod:`.summary`), scaling laws
(:mod:`.scaling_laws`), the out-of-sample predictions (:mod:`.predict`), the bound's constant and the
population limit (:mod:`.bound`), power against named alternatives (:mod:`.power`), ablations
(:mod:`.ablations`) and the claims table (:mod:`.claims`)."""
