"""`dashboard` with a port out of range, a port in use or a bad host (issue 15): one line, exit 1,
before anything is served (Werkzeug answered with a traceback or its own text)."""

from __future__ import annotations

import socket

import pytest


def _one_line(code: int, err: str, needle: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and lines[0].startswith("aclarena-diag dashboard: error: "), err
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize("port", ["70000", "0", "-1", "65536"])
def test_port_out_of_range(fixture_run, cli, port):
    code, _, err = cli("dashboard", "--run", str(fixture_run), "--port", port)
    _one_line(code, err, "is not a port")


def test_port_in_use(fixture_run, cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, _, err = cli("dashboard", "--run", str(fixture_run), "--port", str(port))
    _one_line(code, err, f"port {port} on 127.0.0.1 is in use")


@pytest.mark.parametrize("host", ["no-such-host.invalid", "999.1.1.1", "192.0.2.1"],
                         ids=["unresolvable", "not an address", "not this machine"])
def test_bad_host(fixture_run, cli, host):
    code, _, err = cli("dashboard", "--run", str(fixture_run), "--host", host, "--port", "8059")
    _one_line(code, err, host)
