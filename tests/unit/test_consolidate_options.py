"""One validated, frozen options class per consolidation method (issue 48): an option a method does not take is
one line naming the method's own (before, `merge-ties --lora-r 4` silently ignored the rank), values are checked
when the options are made, and another method's options are refused."""

from __future__ import annotations

import dataclasses

import pytest

from aclarena.consolidate.methods import METHODS
from aclarena.consolidate.options import (
    OPTIONS,
    MergeTiesOptions,
    MLEOptions,
    MMOPDOptions,
    SDFTOptions,
    check_options,
    options_for,
)
from aclarena.errors import AclarenaError


def test_every_method_has_its_own_options_class():
    assert set(OPTIONS) == set(METHODS)
    assert all(name == cls.METHOD for name, cls in OPTIONS.items())
    assert len(set(OPTIONS.values())) == len(OPTIONS)


@pytest.mark.parametrize(("method", "option"), [("merge-ties", "lora_r"), ("merge-uniform", "density"),
                                                ("sdft", "teachers"), ("mmopd", "start"), ("merge-ta", "steps"),
                                                ("mle", "lambdas")])
def test_an_option_the_method_does_not_take_is_one_line(method, option):
    with pytest.raises(AclarenaError) as e:
        options_for(method, {option: 1})
    msg = str(e.value)
    assert msg.startswith(f"{method} takes no --{option.replace('_', '-')} (its options: --name") and "\n" not in msg


def test_values_are_checked_when_made_and_the_options_are_frozen():
    with pytest.raises(AclarenaError, match="did you mean 'reverse'"):
        MMOPDOptions(divergence="revers")
    with pytest.raises(AclarenaError, match="--start must be base or end"):
        SDFTOptions(start="")
    with pytest.raises(AclarenaError, match="--steps must be positive, got 0"):
        SDFTOptions(steps=0)
    with pytest.raises(AclarenaError, match="--density must be a finite number"):
        MergeTiesOptions(density=float("nan"))
    with pytest.raises(AclarenaError, match="fallback policy"):
        MLEOptions(fallback="nothing")
    with pytest.raises(dataclasses.FrozenInstanceError):
        MergeTiesOptions().density = 0.5  # type: ignore[misc]
    assert options_for("merge-ties", density=0.3) == MergeTiesOptions(density=0.3)


def test_another_methods_options_are_refused():
    assert check_options("sdft", None) == SDFTOptions()
    with pytest.raises(AclarenaError, match="merge-ties's options are a MergeTiesOptions, got a SDFTOptions"):
        check_options("merge-ties", SDFTOptions())
    with pytest.raises(AclarenaError, match="did you mean 'merge-ties'"):
        options_for("merge-tiess")
