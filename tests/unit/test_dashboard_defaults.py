import pytest

from aclarena.cli import build_parser
from aclarena.errors import AclarenaError


def test_dashboard_binds_localhost_without_debug_by_default():
    args = build_parser().parse_args(["dashboard"])
    assert args.host == "127.0.0.1" and args.port == 8050 and args.dev is False


def test_create_app_needs_a_manifest(tmp_path):
    from aclarena.dashboard import create_app

    with pytest.raises(AclarenaError, match="no aclarena.toml"):
        create_app(tmp_path)
