"""The engine option (pipeline.stages.engine): config and CLI plumbing, and the error without Ray.

These need no Ray; the runs on a real Ray instance are in test_engine_ray.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipeline.stages import engine as engines
from pipeline.cli import cli
from pipeline.core.config import config_from_dict
from pipeline.core.errors import ConfigError, UsageError


def test_the_default_engine_is_local_from_no_config_and_no_option():
    assert isinstance(engines.resolve(None, config_from_dict({})), engines.LocalEngine)
    assert config_from_dict({}).engine == "local"
    assert config_from_dict({}).ray_address is None


def test_the_config_names_the_engine_and_the_ray_address():
    config = config_from_dict({"engine": "ray", "ray_address": "auto"})
    assert (config.engine, config.ray_address) == ("ray", "auto")


def test_an_unknown_engine_in_the_config_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"engine": "spark"})
    assert info.value.message == "engine: unknown engine 'spark'"
    assert info.value.hint == "engines: local, ray"


def test_an_activated_engine_wins_over_the_config(monkeypatch):
    local = engines.LocalEngine()
    with engines.activate(local):
        assert engines.resolve(None, config_from_dict({"engine": "ray"})) is local
    assert engines.current() is None


def test_the_engine_does_not_change_the_config_hash():
    assert config_from_dict({"engine": "ray"}).resolve("microcompact").config_hash == \
        config_from_dict({}).resolve("microcompact").config_hash


def test_engine_ray_without_ray_installed_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(engines, "ray_available", lambda: False)
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "--engine", "ray",
                                      "ingest", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output.splitlines()[-2:] == [
        "Error: --engine ray needs Ray, which is not installed",
        "hint: install the extra: pip install 'ctxlake[ray]' (or pip install ray)"]
    assert not (tmp_path / "lake").exists()


def test_a_config_asking_for_ray_without_ray_installed_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(engines, "ray_available", lambda: False)
    with pytest.raises(UsageError) as info:
        engines.resolve(None, config_from_dict({"engine": "ray"}))
    assert info.value.hint == engines.RAY_INSTALL_HINT


def test_the_help_names_the_engine_options_with_an_example():
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "--engine [local|ray]" in result.output
    assert "--ray-address TEXT" in result.output
    assert "ctxlake --engine ray --ray-address auto run ~/.claude/projects" in result.output


