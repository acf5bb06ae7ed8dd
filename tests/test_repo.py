"""The repository's promises about itself: README's two set-up commands, and .ci/run running
the README's test command verbatim."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    return [x.strip() for x in lines if x.startswith("    ")][:2]


def test_readme_starts_with_two_setup_commands():
    text = (ROOT / "README.md").read_text().splitlines()
    body = [x for x in text[1:] if x.strip()]
    assert body[0].startswith("    ") and body[1].startswith("    ")
    run_app, run_tests = readme_commands()
    assert run_app.endswith("specdec-chat") and "[embedded]" in run_app
    assert "pytest" in run_tests and "dev" in run_tests


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_console_scripts_point_at_real_functions():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    import importlib

    for name, target in scripts.items():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), name
