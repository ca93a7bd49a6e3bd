"""Every consolidation method names its outputs after ``--name`` when given (else the method's own names),
with the replicate's suffix, and those names are what the method checks before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from aclarena.consolidate import merges, mle, mmopd, sdft
from aclarena.consolidate.methods import Job
from aclarena.consolidate.options import options_for
from aclarena.consolidate.sources import Lineage
from aclarena.errors import AclarenaError
from aclarena.store import Manifest
from aclarena.store.manifest import CheckpointSpec


def _job(replicate: int = 0, method: str = "mle", **options) -> Job:
    lin = Lineage(replicate=replicate, seed=replicate, base="base", stages={"math": "seq-math", "if": "seq-if"},
                  phases=["seq-math", "seq-if"], end="seq-if")
    manifest = Manifest(checkpoints={"base": CheckpointSpec(name="base", path="checkpoints/base", kind="base"),
                                     "taken": CheckpointSpec(name="taken", path="checkpoints/taken", kind="consolidated")})
    return Job(run_dir=Path("run"), manifest=manifest, lineage=lin, options=options_for(method, options), seed=0)


@pytest.mark.parametrize(("module", "options", "default", "named"), [
    (sdft, {"method": "sdft"}, ["sdft"], ["mine"]),
    (sdft, {"method": "sdft", "start": "end"}, ["sdft-from-end"], ["mine"]),
    (mmopd, {"method": "mmopd"}, ["mmopd"], ["mine"]),
    (mmopd, {"method": "mmopd", "teachers": "stage"}, ["mmopd-stage-teachers"], ["mine"]),
    (mle, {"method": "mle"}, ["mle-math", "mle-if"], ["mine-math", "mine-if"]),
    (merges, {"method": "merge-uniform", "sources": "stages"}, ["merge-uniform"], ["mine"]),
])
def test_output_names_follow_name(module, options, default, named):
    assert module.output_names(_job(**options)) == default
    assert module.output_names(_job(**options, name="mine")) == named
    assert module.output_names(_job(2, **options, name="mine")) == [n + "-s2" for n in named]


def test_mle_refuses_a_name_whose_routes_record_is_another_checkpoints():
    with pytest.raises(AclarenaError, match="another --name"):
        mle.run(_job(name="taken"))
