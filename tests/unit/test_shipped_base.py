"""The shipped mini base's fingerprint check: a missing or modified file is one line naming it and the rebuild command."""

from __future__ import annotations

import json

import pytest

from aclarena.errors import CheckpointError
from aclarena.models import shipped


@pytest.fixture()
def fake_base(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (src / "config.json").write_text('{"model_type": "qwen3"}')
    (src / "tokenizer.json").write_text('{"model": {}}')
    (src / ".aclarena-phase.json").write_text(json.dumps({"steps": 7, "time_s": 1.5, "meta": {"seed": 0}}))
    dest = tmp_path / "mini_base"
    data = shipped.ship(src, dest)
    return dest, data


def test_ship_records_every_file_and_checks_them(fake_base):
    dest, data = fake_base
    assert set(data["files"]) == {"model.safetensors", "config.json", "tokenizer.json"}
    assert data["steps"] == 7 and data["seed"] == 0 and data["command"] == shipped.REBUILD_COMMAND
    assert shipped.recorded(dest)["fingerprint"] == data["fingerprint"] == shipped.combined(data["files"])
    assert shipped.shipped_base(dest) == dest


def test_modified_file_is_one_line_naming_it_and_the_rebuild_command(fake_base):
    dest, _ = fake_base
    raw = bytearray((dest / "model.safetensors").read_bytes())
    raw[100] ^= 1  # one flipped bit
    (dest / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError) as e:
        shipped.shipped_base(dest)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(dest / "model.safetensors") in msg and "does not match its recorded fingerprint" in msg
    assert "aclarena-diag train --config examples/mini-base.toml" in msg


def test_missing_file_and_missing_record(fake_base):
    dest, _ = fake_base
    (dest / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"missing .*tokenizer\.json.*examples/mini-base\.toml"):
        shipped.shipped_base(dest)
    (dest / shipped.FINGERPRINT_FILE).write_text("not json")
    with pytest.raises(CheckpointError, match=r"no readable .*fingerprint\.json.*examples/mini-base\.toml"):
        shipped.shipped_base(dest)


def test_a_recorded_fingerprint_that_is_not_its_files_is_refused(fake_base):
    dest, data = fake_base
    (dest / shipped.FINGERPRINT_FILE).write_text(json.dumps({**data, "fingerprint": "0" * 16}))
    with pytest.raises(CheckpointError, match="inconsistent"):
        shipped.shipped_base(dest)
