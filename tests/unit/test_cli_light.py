import subprocess
import sys

import pytest

from aclarena.cli import VERBS, build_parser


def test_help_imports_no_heavy_modules():
    code = (
        "import sys\n"
        "from aclarena.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "for verb in sys.argv[1:]:\n"
        "    try:\n        main([verb, '--help'])\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'dash', 'trl', 'peft', 'plotly') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    parser = build_parser()
    verbs = list(parser._subparsers._group_actions[0].choices)
    out = subprocess.run([sys.executable, "-c", code, *verbs], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout[-500:]
    assert "init" in verbs and "checkpoints" in verbs


def test_every_registered_verb_has_examples(capsys):
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert set(choices) <= set(VERBS)
    for name, sub in choices.items():
        assert sub.epilog and "aclarena-diag " + name in sub.epilog, name


def test_usage_error_exit_2(cli):
    code, _, err = cli("checkpoints", "--no-such-option")
    assert code == 2


@pytest.mark.parametrize("argv", [["--version"]])
def test_version(cli, argv):
    code, out, _ = cli(*argv)
    assert code == 0 and "aclarena" in out


def test_broken_pipe_is_not_an_error(tmp_path):
    """`aclarena-diag ... | head` must not print an internal error when head exits early."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "aclarena.toml").write_text(
        "".join(f'[checkpoints.c{i}]\npath = "x{i}"\n' for i in range(400))
    )
    cmd = f"{sys.executable} -m aclarena checkpoints --run {tmp_path} --json | head -c 10"
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("argv, expected", [
    (["study", "--run", "runs/s", "--config", "examples/mini-half.toml", "--lead-n", "100"],
     "aclarena-diag study --run runs/s --seeds 3 -n 100 --config examples/mini-half.toml --lead-n 100"),
    (["study", "--run", "runs/s", "--seeds", "2", "--full", "--no-validate"],
     "aclarena-diag study --run runs/s --seeds 2 -n 100 --full --no-validate"),
])
def test_the_study_records_the_command_that_reproduces_it(argv, expected):
    """findings.json's made_by: a study of another config named no --config, so its command reran the mini preset."""
    from aclarena.cli.study import study_command

    assert study_command(build_parser().parse_args(argv)) == expected
