"""One validated, frozen options class per analysis (issue 48): the values are checked when the options are
made (one line naming the flag), the options cannot change afterwards, and an analysis takes either the class
or its fields as keywords, not both."""

from __future__ import annotations

import dataclasses

import pytest

from aclarena.analysis.tokens import TokensOptions, tokens
from aclarena.diagnostics.token_drift import HighEntropy
from aclarena.errors import AclarenaError


@pytest.mark.parametrize(("fields", "needle"), [({"high": "q=2"}, "--high:"), ({"eps": 0}, "--eps must be > 0"),
                                                ({"batch_size": 0}, "--batch-size must be at least 1"),
                                                ({"topk": 0}, "--topk must be at least 1"),
                                                ({"chunk_size": 0}, "--chunk-size must be at least 1")])
def test_tokens_options_are_checked_when_made(fields, needle):
    with pytest.raises(AclarenaError, match=needle) as e:
        TokensOptions(**fields)
    assert "\n" not in str(e.value)


def test_tokens_options_are_frozen_and_parsed_once():
    o = TokensOptions(high="nats=1.5", against=["seq-search", "seq-ecom"])
    assert o.high_entropy == HighEntropy.parse("nats=1.5") and o.against == ("seq-search", "seq-ecom")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.eps = 0.1  # type: ignore[misc]


def test_an_analysis_takes_the_options_or_keywords_not_both(tmp_path):
    with pytest.raises(AclarenaError, match="either as a TokensOptions or as keywords"):
        tokens(tmp_path, "seq-math", TokensOptions(), eps=0.1)
    with pytest.raises(AclarenaError, match="--eps must be > 0"):  # keywords are checked as the class checks them
        tokens(tmp_path, "seq-math", eps=-1)


@pytest.mark.parametrize(("fields", "needle"), [({"n": 0}, "-n must be a positive number"),
                                                ({"seeds": ()}, "--seeds must be distinct"),
                                                ({"top_p": 1.5}, "--top-p must be in"),
                                                ({"engine": "vlm"}, "did you mean 'vllm'"),
                                                ({"dtype": "int8"}, "dtype 'int8' is not supported"),
                                                ({"device": "gpu"}, "device 'gpu' is not known")])
def test_eval_options_are_checked_when_made(fields, needle):
    from aclarena.analysis.eval import EvalOptions

    with pytest.raises(AclarenaError, match=needle) as e:
        EvalOptions(**fields)
    assert "\n" not in str(e.value)


def test_eval_takes_the_options_or_keywords_not_both(tmp_path):
    from aclarena.analysis.eval import EvalOptions, evaluate

    assert EvalOptions(checkpoints=["a", "b"], seeds=[0, 1]).checkpoints == ("a", "b")
    with pytest.raises(AclarenaError, match="either as an EvalOptions or as keywords"):
        evaluate(tmp_path, EvalOptions(), n=5)


@pytest.mark.parametrize(("cls", "fields", "needle"), [
    ("aclarena.analysis.signatures:SignaturesOptions", {"level": 1.0}, "--level must be in"),
    ("aclarena.analysis.signatures:SignaturesOptions", {"n_boot": 10}, "--n-boot must be an integer >= 100"),
    ("aclarena.analysis.vectors:VectorsOptions", {"save_every": -1}, "--save-every must be >= 0"),
    ("aclarena.analysis.displacement:DisplacementOptions", {"tolerances": "x"}, "--tolerances"),
    ("aclarena.analysis.repair:RepairOptions", {"method": "svd-restore", "name": "fix", "percents": 0},
     "percent"),
    ("aclarena.analysis.repair:RepairOptions", {"method": "dg-hard", "name": "fix", "percents": 10},
     "--rank-percent is svd-restore's setting"),
    ("aclarena.analysis.repair:RepairOptions", {"method": "svd-restor", "name": "fix"}, "did you mean"),
])
def test_the_other_analyses_options_are_checked_when_made(cls, fields, needle):
    import importlib

    module, name = cls.split(":")
    with pytest.raises(AclarenaError, match=needle) as e:
        getattr(importlib.import_module(module), name)(**fields)
    assert "\n" not in str(e.value)


def test_repair_options_name_each_output():
    from aclarena.analysis.repair import RepairOptions

    names = [n for n, _ in RepairOptions(method="svd-restore", name="fix", percents="10,25").specs()]
    assert names == ["fix-r10", "fix-r25"]
    assert [n for n, _ in RepairOptions(method="dg-hard", name="fix", modules="q_proj, v_proj").specs()] == ["fix"]
