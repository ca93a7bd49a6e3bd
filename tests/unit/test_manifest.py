import pytest

from aclarena.errors import ManifestError
from aclarena.store.manifest import CheckpointSpec, Manifest, load_manifest, parse_manifest, write_manifest

GOOD = """
[run]
name = "mini"
base = "base"

[checkpoints.base]
path = "checkpoints/base"
kind = "base"

[checkpoints.seq-math]
path = "checkpoints/seq-math"
kind = "stage"
domain = "math"
phase = "rl"
parent = "base"

[checkpoints.seq-search]
path = "checkpoints/seq-search"
kind = "stage"
domain = "search"
phase = "sft"
parent = "seq-math"

[checkpoints.oracle-math]
path = "checkpoints/oracle-math"
kind = "oracle"
domain = "math"
parent = "base"
seed = 3
"""


def test_parse_and_lineage():
    m = parse_manifest(GOOD)
    assert m.name == "mini" and m.base == "base"
    assert [s.name for s in m] == ["base", "seq-math", "seq-search", "oracle-math"]
    assert m.ancestors("seq-search") == ["seq-math", "base"]
    assert m.descendants("seq-math") == ["seq-search"]
    assert m.descendants("base") == ["seq-math", "seq-search", "oracle-math"]
    assert m.resolve("oracle-math").seed == 3


def test_round_trip(tmp_path):
    m = parse_manifest(GOOD)
    write_manifest(m, tmp_path)
    again = load_manifest(tmp_path)
    assert again == m
    assert again.to_toml() == m.to_toml()


def test_unknown_name_did_you_mean():
    m = parse_manifest(GOOD)
    with pytest.raises(Exception) as e:
        m.resolve("seq-mat")
    msg = str(e.value)
    assert "did you mean 'seq-math'" in msg and "oracle-math" in msg


def test_garbled_toml_names_line():
    bad = GOOD.replace('kind = "stage"\ndomain = "math"', 'kind = "stage\ndomain = "math"', 1)
    with pytest.raises(ManifestError, match=r"line \d+"):
        parse_manifest(bad)


def test_duplicate_names_are_a_toml_error_with_line():
    with pytest.raises(ManifestError, match=r"not valid TOML.*line 3"):
        parse_manifest('[checkpoints.a]\npath = "x"\n[checkpoints.a]\npath = "y"\n')


def test_parent_cycle():
    text = '[checkpoints.a]\npath="a"\nparent="b"\n[checkpoints.b]\npath="b"\nparent="a"\n'
    with pytest.raises(ManifestError, match="parent cycle"):
        parse_manifest(text)


def test_unknown_parent_and_key_and_kind():
    with pytest.raises(ManifestError, match="did you mean 'base'"):
        parse_manifest('[checkpoints.base]\npath="b"\n[checkpoints.x]\npath="x"\nparent="bas"\n')
    with pytest.raises(ManifestError, match="did you mean 'parent'"):
        parse_manifest('[checkpoints.x]\npath="x"\nparnt="a"\n')
    with pytest.raises(ManifestError, match="did you mean 'stage'"):
        parse_manifest('[checkpoints.x]\npath="x"\nkind="stag"\n')
    with pytest.raises(ManifestError, match="has no `path`"):
        parse_manifest('[checkpoints.x]\nkind="stage"\n')


def test_checkpoint_entries_are_tables_of_strings():
    with pytest.raises(ManifestError, match=r"checkpoints\.x must be a table with at least `path`"):
        parse_manifest('[checkpoints]\nx = "a"\n')
    with pytest.raises(ManifestError, match=r"checkpoints\.x\.kind must be a string, got 3"):
        parse_manifest('[checkpoints.x]\npath="x"\nkind=3\n')
    assert parse_manifest('[checkpoints.x]\npath="x"\nseed=3\n').resolve("x").seed == 3  # the one number


def test_add_rejects_duplicates_and_keeps_state():
    m = parse_manifest(GOOD)
    with pytest.raises(ManifestError, match="already in the manifest"):
        m.add(CheckpointSpec("base", "elsewhere", kind="base"))
    with pytest.raises(ManifestError, match="not a checkpoint"):
        m.add(CheckpointSpec("new", "p", parent="nope"))
    assert "new" not in m and len(m) == 4


def test_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match="aclarena-diag init"):
        load_manifest(tmp_path)


def test_bad_name():
    with pytest.raises(ManifestError, match="not allowed"):
        CheckpointSpec("bad name", "p")


def test_manifest_default_base():
    m = parse_manifest('[checkpoints.b0]\npath="b"\nkind="base"\n[checkpoints.s]\npath="s"\nparent="b0"\n')
    assert m.base == "b0"
    assert Manifest().base is None
