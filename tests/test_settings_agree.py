"""One source of truth for every setting (issue 34): ``config.VARIABLES`` holds each default, and ``load({})``,
``Settings()``, ``fsguard status`` (the installed command, in a fresh interpreter) and the documentation's
Configuration table all say the same."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fsguard import config
from tests.conftest import clean_env
from tests.support.docs import configuration_table


def test_load_settings_status_and_docs_agree_on_every_default(fsguard_python: Path) -> None:
    documented = configuration_table()
    table = {v.name: v.default for v in config.VARIABLES}
    # The documentation writes "no value" as "unset".
    assert documented == {name: default or "unset" for name, default in table.items()}, (documented, table)

    loaded, constructed = config.load({}), config.Settings()
    assert loaded == constructed and not loaded.problems, (loaded, constructed)
    for variable in config.VARIABLES:  # each default, read as load reads a user's value
        problems: list[str] = []
        parsed = config.value_of(variable, variable.default, problems)
        assert not problems and parsed == getattr(constructed, variable.field), (variable, parsed)

    done = subprocess.run(
        [str(fsguard_python.parent / "fsguard"), "status", "--json"],
        env=clean_env({}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown = {item["name"]: item for item in json.loads(done.stdout)["settings"]}
    assert {name: item["default"] for name, item in shown.items()} == table, shown
    for variable in config.VARIABLES:
        effective = getattr(constructed, variable.field)
        expected = ",".join(effective) if isinstance(effective, tuple) else effective
        assert shown[variable.name]["value"] is None and shown[variable.name]["effective"] == expected, variable

    text = subprocess.run(
        [str(fsguard_python.parent / "fsguard"), "status"],
        env=clean_env({}),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    for name, default in table.items():
        assert f"{name} " in text and f"default {default!r}" in text, (name, text)


def test_fresh_s_live_default_is_the_documented_five_seconds() -> None:
    assert config.load({}).fresh_s == 5.0 == config.Settings().fresh_s
    assert config.load({"FSGUARD_FRESH_S": "60"}).fresh_s == 60.0
