"""The curriculum config parser, the plan of phases and their names (no model is loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aclarena.errors import ConfigError
from aclarena.train.config import key_lines, load_config, parse_config, parse_overrides
from aclarena.train.plan import phase_seed, plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GOOD = """\
[run]
name = "t"
seed = 3

[defaults.sft]
learning_rate = 1e-3
max_steps = 7

[defaults.rl]
learning_rate = 5e-5

[[stages]]
domain = "math"
phases = ["sft", "rl"]
[stages.sft]
n = 10
[stages.rl]
n = 4
trl = { max_steps = 2, learning_rate = 2e-5 }

[[stages]]
domain = "search"
phases = ["sft"]
[stages.sft]
n = 6
[stages.sft.trl]
learning_rate = 3e-4

[oracles]
domains = ["math", "search"]
"""


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_good_config_and_precedence():
    cfg = parse_config(GOOD, "good.toml")
    assert cfg.name == "t" and cfg.seed == 3
    math, search = cfg.stages
    assert [p.kind for p in math.phases] == ["sft", "rl"]
    # defaults < phase table
    assert math.phases[0].trl == {"learning_rate": 1e-3, "max_steps": 7}
    assert math.phases[1].trl == {"learning_rate": 2e-5, "max_steps": 2}
    assert search.phases[0].trl == {"learning_rate": 3e-4, "max_steps": 7}
    assert cfg.base.is_mini and cfg.base.preset == "mini"
    # command line > phase table > defaults
    cli = parse_config(GOOD, "good.toml", overrides=["rl.learning_rate=9e-6", "max_steps=1", "sft.packing=true"])
    assert cli.stages[0].phases[1].trl["learning_rate"] == 9e-6
    assert cli.stages[0].phases[1].trl["max_steps"] == 1
    assert cli.stages[1].phases[0].trl == {"learning_rate": 3e-4, "max_steps": 1, "packing": True}
    assert cli.base.trl["max_steps"] == 1  # an unprefixed field that SFTConfig has reaches the base pretraining too


@pytest.mark.parametrize(
    ("old", "new", "needle", "expect"),
    [
        ('domain = "search"', 'domain = "serch"', 'domain = "serch"', ["unknown domain 'serch'", "did you mean 'search'"]),
        ('phases = ["sft"]', 'phases = ["sfft"]', 'phases = ["sfft"]', ["unknown phase 'sfft'", "did you mean 'sft'"]),
        ("learning_rate = 3e-4", "lerning_rate = 3e-4", "lerning_rate = 3e-4",
         ["unknown trl field 'lerning_rate'", "did you mean 'learning_rate'", "SFTConfig"]),
        ("trl = { max_steps = 2, learning_rate = 2e-5 }", "trl = { max_step = 2 }", "max_step = 2",
         ["unknown trl field 'max_step'", "did you mean 'max_steps'", "GRPOConfig"]),
        ("max_steps = 7", "max_steps = \"seven\"", 'max_steps = "seven"', ["must be a int", "'seven'"]),
        ("max_steps = 7", "output_dir = \"x\"", 'output_dir = "x"', ["set by aclarena"]),
        ('phases = ["sft"]', 'phase = ["sft"]', 'phase = ["sft"]', ["unknown key 'phase'", "did you mean 'phases'"]),
        ("n = 6", "n = -1", "n = -1", ["`n`"]),
        ('domains = ["math", "search"]', 'domains = ["math", "ecom"]', 'domains = ["math", "ecom"]',
         ["oracle domain 'ecom' has no stage"]),
        ('seed = 3', 'seed = -3', 'seed = -3', ["`seed` must be an integer >= 0"]),
        ("[defaults.rl]", "[defaults.rll]", "[defaults.rll]", ["unknown table [defaults.rll]", "did you mean 'rl'"]),
        ("n = 6", 'n = 6\ndata = "rejection"\nfallback = "experts"', 'fallback = "experts"',
         ["unknown fallback 'experts'", "did you mean 'expert'"]),
        ("n = 6", 'n = 6\ndata = "rejection"\nmax_per_task = -2', "max_per_task = -2", ["`max_per_task`", ">= 0"]),
        ("n = 6", 'n = 6\nfallback = "expert"', 'fallback = "expert"', ['applies to rejection-sampling SFT']),
        ("n = 6", "n = 6\nmax_per_task = 2", "max_per_task = 2", ['applies to rejection-sampling SFT']),
    ],
)
def test_bad_config_names_the_line(old, new, needle, expect):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    with pytest.raises(ConfigError) as e:
        parse_config(text, "bad.toml")
    msg = str(e.value)
    assert f"bad.toml, line {line_of(text, needle)}:" in msg, msg
    for part in expect:
        assert part in msg, msg
    assert "\n" not in msg


def test_unknown_parent_names_the_line():
    text = GOOD.replace('domain = "search"\n', 'domain = "search"\nparent = "seq-mat"\n')
    with pytest.raises(ConfigError) as e:
        parse_config(text, "p.toml")
    msg = str(e.value)
    assert f"p.toml, line {line_of(text, 'parent = ')}:" in msg
    assert "did you mean 'seq-math'" in msg and "seq-math-sft" in msg


def test_other_bad_configs():
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[run\nname = 1", "x.toml")
    with pytest.raises(ConfigError, match="no stage"):
        parse_config("[run]\nname = \"x\"\n", "x.toml")
    dup = GOOD.replace('domain = "search"', 'domain = "math"')
    with pytest.raises(ConfigError, match="two stages"):
        parse_config(dup, "x.toml")
    with pytest.raises(ConfigError, match="x.toml, line 1: stages must be an array"):
        parse_config("stages = 3\n[run]\nname = \"x\"\n", "x.toml")
    with pytest.raises(ConfigError, match="line 3: unknown key 'stages' in \\[run\\]"):
        parse_config("[run]\nname = \"x\"\nstages = 3\n", "x.toml")
    both = GOOD.replace("[oracles]", "[stages.rl]\nn = 2\n\n[oracles]")
    with pytest.raises(ConfigError, match="settings for phase 'rl'"):
        parse_config(both, "x.toml")
    rev = GOOD.replace('phases = ["sft", "rl"]', 'phases = ["rl", "sft"]')
    with pytest.raises(ConfigError, match="SFT before RL"):
        parse_config(rev, "x.toml")
    file_no_path = GOOD.replace("[stages.sft]\nn = 6", '[stages.sft]\ndata = "file"')
    with pytest.raises(ConfigError, match='needs path'):
        parse_config(file_no_path, "x.toml")
    with pytest.raises(ConfigError, match="not found"):
        load_config("/nonexistent/curriculum.toml")


def test_overrides():
    o = parse_overrides(["rl.max_steps=3", "learning_rate=1e-4", "report_to=[\"tensorboard\"]", "sft.packing=true"])
    assert o["rl"] == {"max_steps": 3, "learning_rate": 1e-4, "report_to": ["tensorboard"]}
    assert o["sft"] == {"learning_rate": 1e-4, "report_to": ["tensorboard"], "packing": True}
    assert parse_overrides(["num_generations=2"]) == {"rl": {"num_generations": 2}}  # GRPO only
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        parse_overrides(["lerning_rate=1"])
    with pytest.raises(ConfigError, match="unknown scope 'rll'"):
        parse_overrides(["rll.max_steps=1"])
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        parse_overrides(["max_steps"])
    with pytest.raises(ConfigError, match="--trl rl.bogus"):
        parse_config(GOOD, "g.toml", overrides=["rl.bogus=1"])


def test_key_lines_arrays_of_tables_and_inline():
    lines = key_lines(GOOD)
    assert lines[("stages", 0, "rl", "trl", "max_steps")] == line_of(GOOD, "trl = { max_steps")
    assert lines[("stages", 1, "sft", "trl", "learning_rate")] == line_of(GOOD, "learning_rate = 3e-4")
    assert lines[("stages", 1, "domain")] == line_of(GOOD, 'domain = "search"')
    assert lines[("defaults", "sft", "max_steps")] == line_of(GOOD, "max_steps = 7")


def test_plan_names_parents_seeds_and_reused_oracle():
    cfg = parse_config(GOOD, "good.toml")
    jobs = plan(cfg)
    names = [j.name for j in jobs]
    assert names == ["base", "seq-math-sft", "seq-math", "seq-search", "oracle-math-sft", "oracle-math",
                     "oracle-search"]
    by = {j.name: j for j in jobs}
    assert by["seq-math"].parent == "seq-math-sft" and by["seq-search"].parent == "seq-math"
    assert by["oracle-search"].parent == "base" and by["oracle-math"].parent == "oracle-math-sft"
    # the first stage starts from the base: its oracle is the same computation, registered, not retrained
    assert by["oracle-math-sft"].same_as == "seq-math-sft" and by["oracle-math"].same_as == "seq-math"
    assert by["oracle-search"].same_as is None
    assert by["oracle-search"].seed == by["seq-search"].seed == phase_seed(3, "search", "sft")
    assert by["oracle-search"].fingerprint != by["seq-search"].fingerprint  # different parents
    assert by["seq-math"].phase == "rl" and by["seq-math-sft"].phase == "sft"
    assert {j.kind for j in jobs} == {"base", "stage", "oracle"}


def test_plan_several_seeds_share_the_base():
    cfg = parse_config(GOOD, "good.toml")
    jobs = plan(cfg, seeds=2)
    names = [j.name for j in jobs]
    assert names.count("base") == 1
    assert "seq-math-s1" in names and "seq-math-sft-s1" in names and "oracle-search-s1" in names
    by = {j.name: j for j in jobs}
    assert by["seq-math-sft-s1"].parent == "base" and by["seq-search-s1"].parent == "seq-math-s1"
    assert by["seq-math-s1"].run_seed == 4 and by["seq-math"].run_seed == 3
    assert by["seq-math-s1"].seed != by["seq-math"].seed
    assert by["oracle-math-s1"].same_as == "seq-math-s1"


def test_fingerprints_follow_the_recipe_and_the_parents():
    a = {j.name: j.fingerprint for j in plan(parse_config(GOOD, "g.toml"))}
    changed = GOOD.replace("[stages.sft]\nn = 10", "[stages.sft]\nn = 11")
    b = {j.name: j.fingerprint for j in plan(parse_config(changed, "g.toml"))}
    assert a["base"] == b["base"]
    assert a["seq-math-sft"] != b["seq-math-sft"]
    assert a["seq-search"] != b["seq-search"]  # its parent changed
    assert a["oracle-search"] == b["oracle-search"]  # from the base, untouched


def test_branching_parent_and_other_orders():
    text = GOOD.replace('domain = "search"\n', 'domain = "search"\nparent = "base"\n')
    by = {j.name: j for j in plan(parse_config(text, "g.toml"))}
    assert by["seq-search"].parent == "base"
    assert by["oracle-search"].same_as == "seq-search"


@pytest.mark.parametrize("name", ["tiny.toml", "mini.toml", "mini-fast.toml", "paper.toml"])
def test_example_configs_load(name):
    cfg = load_config(EXAMPLES / name)
    assert [s.domain for s in cfg.stages] == ["math", "search", "ecom", "if"]
    assert set(cfg.oracles) == {"math", "search", "ecom", "if"}
    jobs = plan(cfg)
    assert jobs[0].name == "base"
    assert {"seq-math", "seq-search", "seq-ecom", "seq-if", "oracle-ecom"} <= {j.name for j in jobs}
    if name == "paper.toml":
        assert cfg.base.model == "Qwen/Qwen3-8B-Base"
        assert all(p.data == "file" for s in cfg.stages for p in s.phases)


@pytest.mark.parametrize("name", ["quick", "mini", "tiny"])
def test_shipped_presets_are_the_examples(name):
    from aclarena.train.presets import preset_path

    assert preset_path(name).read_text() == (EXAMPLES / f"{name}.toml").read_text()
    with pytest.raises(Exception, match="did you mean 'mini'"):
        preset_path("mimi")


def test_replicate_groups_and_eval_over_training_seeds():
    from aclarena.analysis.eval import over_training_seeds
    from aclarena.train.naming import replicate_groups

    names = ["base", "seq-math", "seq-math-s1", "seq-math-s2", "seq-x-s1", "oracle-if", "oracle-if-s1"]
    assert replicate_groups(names) == {"seq-math": ["seq-math", "seq-math-s1", "seq-math-s2"],
                                       "oracle-if": ["oracle-if", "oracle-if-s1"]}
    rows = [{"checkpoint": c, "suite": "math/id", "status": "ok", "mean": m}
            for c, m in [("seq-math", 0.2), ("seq-math-s1", 0.4), ("seq-math-s2", 0.6), ("base", 0.0)]]
    rows.append({"checkpoint": "oracle-if", "suite": "math/id", "status": "ok", "mean": 0.5})
    rows.append({"checkpoint": "oracle-if-s1", "suite": "math/id", "status": "error", "mean": None})
    out = over_training_seeds(rows, names)
    assert len(out) == 1  # oracle-if has one usable cell only
    assert out[0]["checkpoint"] == "seq-math" and out[0]["n_curricula"] == 3
    assert out[0]["mean"] == pytest.approx(0.4) and out[0]["std"] == pytest.approx(0.2)


def test_base_only_config_and_rebuild():
    cfg = load_config(EXAMPLES / "mini-base.toml")
    assert cfg.base.builds and cfg.base.rebuild and cfg.stages == ()
    # [base]'s defaults are the shipped base's sizes and data: `rebuild = true` alone pretrains it
    from dataclasses import fields

    default = type(cfg.base)(preset="mini", rebuild=True, trl=cfg.base.trl)
    assert [(f.name, getattr(cfg.base, f.name)) for f in fields(cfg.base)] == \
        [(f.name, getattr(default, f.name)) for f in fields(default)]
    assert [j.name for j in plan(cfg)] == ["base"]
    # a curriculum that starts from the shipped base must have stages
    with pytest.raises(ConfigError, match="no stage"):
        parse_config('[base]\npreset = "mini"\n', "x.toml")
    with pytest.raises(ConfigError, match="x.toml, line 2: .*rebuild.*needs preset = \"mini\""):
        parse_config('[base]\nrebuild = true\npreset = "tiny"\n', "x.toml")
    with pytest.raises(ConfigError, match="rebuild"):
        parse_config('[base]\nrebuild = "yes"\n' + GOOD.split("[base]")[0], "x.toml")
    # without rebuild, the mini preset is the shipped base (its sizes are not this config's)
    shipped_cfg = load_config(EXAMPLES / "mini.toml")
    assert shipped_cfg.base.is_mini and not shipped_cfg.base.builds


def test_rejection_sampling_fields_and_fingerprints():
    """Rejection-sampling SFT settings reach the phase and its fingerprint; phases without them keep theirs."""
    base = GOOD.replace("n = 6\n", 'n = 6\ndata = "rejection"\nk = 3\n', 1)
    rs = GOOD.replace("n = 6\n", 'n = 6\ndata = "rejection"\nk = 3\nmax_per_task = 1\nfallback = "expert"\n', 1)
    spec = parse_config(rs, "rs.toml").stage("search").phases[0]
    assert (spec.data, spec.k, spec.max_per_task, spec.fallback) == ("rejection", 3, 1, "expert")
    fp = {j.name: j.fingerprint for j in plan(parse_config(rs, "rs.toml"))}
    fp0 = {j.name: j.fingerprint for j in plan(parse_config(base, "b.toml"))}
    fp_good = {j.name: j.fingerprint for j in plan(parse_config(GOOD, "g.toml"))}
    assert fp["seq-search"] != fp0["seq-search"] and fp["seq-math"] == fp0["seq-math"] == fp_good["seq-math"]
    assert "max_per_task" not in parse_config(base, "b.toml").stage("search").phases[0].identity()
