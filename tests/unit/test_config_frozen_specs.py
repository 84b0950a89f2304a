"""The pretraining spec JSON of the shipped studies is frozen: long runs in progress find their
checkpoints by the content hash of that JSON (results/<study>/specs/<run>.pretrain.<hash>.json), so a
refactor of the settings must leave every byte of it as it was. The hashes were recorded at d2e0e94
for every shipped config that parses here (configs/cifar10.yaml needs its data), and agree with
the spec files of the theorem run in progress."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from groupsparse.study import preflight

from conftest import REPO

RECORDED = json.loads((REPO / "tests/unit/data/pretrain_spec_sha256.json").read_text())
SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())


@pytest.mark.parametrize("configfile", sorted(RECORDED))
def test_the_pretrain_spec_json_of_every_run_is_what_d2e0e94_wrote(configfile, tmp_path):
    config = yaml.safe_load((REPO / configfile).read_text())
    runs = preflight.check_study(config, SCHEMA, config_files=[str(REPO / configfile)], results=str(tmp_path))
    now = {name: hashlib.sha256(run.spec_json.encode()).hexdigest() for name, run in runs.items()}
    # a config may gain runs (configs/theorem.yaml's second batch check); none recorded may vanish
    missing = sorted(set(RECORDED[configfile]) - set(now))
    assert missing == [], f"runs gone: {missing[:5]}"
    changed = sorted(name for name in RECORDED[configfile] if now[name] != RECORDED[configfile][name])
    assert changed == [], f"the pretraining spec JSON changed for {changed[:5]}"
