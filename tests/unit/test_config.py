"""pipeframe.yaml: defaults, environments (deep-merged), environment-variable overrides and config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeframe.config import ProjectConfig, SparkSettings, load_config
from pipeframe.errors import Location, PipeframeError

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"

CONFIG = """\
name: shop
warehouse: .pipeframe/warehouse
spark:
  master: local[4]
  conf:
    spark.driver.memory: 4g
    spark.sql.session.timeZone: UTC
environments:
  dev:
    warehouse: .pipeframe/dev
  prod:
    warehouse: s3a://bucket/shop
    spark:
      remote: sc://spark.internal:15002
      conf:
        spark.sql.shuffle.partitions: 64
vars:
  tenant_column: account_id
ignore:
  - scratch/
tokens:
  dashboard: secret
"""


def project(tmp_path: Path, text: str | None = CONFIG) -> Path:
    root = tmp_path / "shop_project"
    root.mkdir()
    if text is not None:
        (root / "pipeframe.yaml").write_text(text, encoding="utf-8")
    return root


def config_error(root: Path, **kwargs) -> PipeframeError:
    with pytest.raises(PipeframeError) as info:
        load_config(root, environ=kwargs.pop("environ", {}), **kwargs)
    return info.value


def test_defaults_without_a_config_file(tmp_path):
    root = project(tmp_path, None)
    config = load_config(root, environ={})
    assert config == ProjectConfig(
        root=root.resolve(), name="shop_project", warehouse=".pipeframe/warehouse",
        spark=SparkSettings(master="local[*]", remote=None, conf={}), vars={}, ignore=(), environment=None,
        tokens={})
    assert config.warehouse_uri == str(root.resolve() / ".pipeframe" / "warehouse")


def test_empty_config_file_means_defaults(tmp_path):
    root = project(tmp_path, "# nothing set yet\n")
    config = load_config(root, environ={})
    assert (config.name, config.warehouse, config.spark) == ("shop_project", ".pipeframe/warehouse", SparkSettings())


def test_relative_root_is_resolved(tmp_path, monkeypatch):
    root = project(tmp_path, None)
    monkeypatch.chdir(tmp_path)
    config = load_config("shop_project", environ={})
    assert config.root == root.resolve()
    assert config.warehouse_uri == str(root.resolve() / ".pipeframe" / "warehouse")


def test_top_level_settings(tmp_path):
    root = project(tmp_path)
    config = load_config(root, environ={})
    assert config.name == "shop"
    assert config.environment is None
    assert config.warehouse == ".pipeframe/warehouse"
    assert config.spark == SparkSettings(
        master="local[4]", remote=None, conf={"spark.driver.memory": "4g", "spark.sql.session.timeZone": "UTC"})
    assert config.vars == {"tenant_column": "account_id"}
    assert config.ignore == ("scratch/",)
    assert config.tokens == {"dashboard": "secret"}


def test_prod_environment_is_deep_merged(tmp_path):
    root = project(tmp_path)
    config = load_config(root, env="prod", environ={})
    assert config.environment == "prod"
    assert config.warehouse == "s3a://bucket/shop"
    assert config.warehouse_uri == "s3a://bucket/shop"
    assert config.spark.master == "local[4]"  # kept from the top level
    assert config.spark.remote == "sc://spark.internal:15002"
    assert config.spark.conf == {
        "spark.driver.memory": "4g",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "64",
    }
    assert config.vars == {"tenant_column": "account_id"}


def test_dev_environment_changes_only_the_warehouse(tmp_path):
    root = project(tmp_path)
    config = load_config(root, env="dev", environ={})
    assert config.warehouse == ".pipeframe/dev"
    assert config.warehouse_uri == str(root.resolve() / ".pipeframe" / "dev")
    assert config.spark == load_config(root, environ={}).spark


def test_environment_without_its_own_warehouse_gets_one_under_pipeframe(tmp_path):
    root = project(tmp_path, "environments:\n  ci: {spark: {master: 'local[2]'}}\n")
    config = load_config(root, env="ci", environ={})
    assert (config.warehouse, config.spark.master) == (".pipeframe/ci", "local[2]")


def test_pipeframe_env_selects_the_environment(tmp_path):
    root = project(tmp_path)
    config = load_config(root, environ={"PIPEFRAME_ENV": "prod"})
    assert (config.environment, config.warehouse) == ("prod", "s3a://bucket/shop")
    # An explicit --env wins over PIPEFRAME_ENV.
    assert load_config(root, env="dev", environ={"PIPEFRAME_ENV": "prod"}).warehouse == ".pipeframe/dev"


def test_environment_variables_override_the_file(tmp_path):
    root = project(tmp_path)
    config = load_config(root, env="prod", environ={
        "PIPEFRAME_WAREHOUSE": "abfss://lake@acct.dfs.core.windows.net/shop",
        "PIPEFRAME_SPARK_MASTER": "spark://head:7077",
        "PIPEFRAME_SPARK_REMOTE": "sc://other:15002",
    })
    assert config.warehouse_uri == "abfss://lake@acct.dfs.core.windows.net/shop"
    assert (config.spark.master, config.spark.remote) == ("spark://head:7077", "sc://other:15002")
    assert config.spark.conf["spark.sql.shuffle.partitions"] == "64"


def test_relative_warehouse_override_resolves_under_the_root(tmp_path):
    root = project(tmp_path)
    config = load_config(root, environ={"PIPEFRAME_WAREHOUSE": "data/wh"})
    assert config.warehouse_uri == str(root.resolve() / "data" / "wh")
    absolute = tmp_path / "elsewhere"
    assert load_config(root, environ={"PIPEFRAME_WAREHOUSE": str(absolute)}).warehouse_uri == str(absolute)


def test_empty_environment_variables_are_ignored(tmp_path):
    root = project(tmp_path)
    config = load_config(root, environ={"PIPEFRAME_ENV": "", "PIPEFRAME_WAREHOUSE": "", "PIPEFRAME_SPARK_MASTER": ""})
    assert (config.environment, config.warehouse, config.spark.master) == (None, ".pipeframe/warehouse", "local[4]")


@pytest.mark.parametrize("uri", ["s3a://bucket/shop", "hdfs://namenode:8020/wh", "file:///tmp/wh"])
def test_hadoop_uris_are_kept_unchanged(tmp_path, uri):
    root = project(tmp_path, f"warehouse: {uri}\n")
    assert load_config(root, environ={}).warehouse_uri == uri


def test_spark_conf_values_are_spelled_as_spark_expects(tmp_path):
    root = project(tmp_path, """\
spark:
  conf:
    spark.sql.adaptive.enabled: true
    spark.sql.ansi.enabled: false
    spark.sql.shuffle.partitions: 8
    spark.driver.memory: 2g
environments:
  lean:
    spark:
      conf:
        spark.driver.memory: null
""")
    assert load_config(root, environ={}).spark.conf == {
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.ansi.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g",
    }
    # `null` in an environment unsets a setting from the top level.
    assert "spark.driver.memory" not in load_config(root, env="lean", environ={}).spark.conf


def test_unknown_environment(tmp_path):
    root = project(tmp_path)
    err = config_error(root, env="staging")
    assert err.code == "PF003"
    assert err.diagnostics[0].message == "Unknown environment `staging`."
    assert err.diagnostics[0].hint == "Choose one of: dev, prod, or add it under `environments:`."
    assert config_error(root, environ={"PIPEFRAME_ENV": "stagign"}).code == "PF003"


def test_dev_needs_no_environments_entry(tmp_path):
    root = project(tmp_path, "warehouse: wh\nenvironments:\n  prod: {warehouse: s3a://b/x}\n")
    config = load_config(root, env="dev", environ={})
    assert (config.environment, config.warehouse) == ("dev", "wh")


def test_environment_that_is_not_a_mapping(tmp_path):
    root = project(tmp_path, "environments:\n  prod: s3a://bucket\n")
    assert config_error(root, env="prod").code == "PF003"


def test_invalid_yaml_reports_the_line(tmp_path):
    root = project(tmp_path, "name: shop\nspark:\n  master: local[*]\n  conf: {a: 1\nvars: {}\n")
    err = config_error(root)
    d = err.diagnostics[0]
    assert d.code == "PF001"
    assert d.message.startswith("pipeframe.yaml is not valid YAML: ")
    assert d.location.path == "pipeframe.yaml"
    assert d.location.line == 5


def test_yaml_error_position(tmp_path):
    root = project(tmp_path, "name: shop\nwarehouse: x\n  bad: 1\n")
    d = config_error(root).diagnostics[0]
    assert (d.code, d.location.line, d.location.col) == ("PF001", 3, 6)
    assert d.message == "pipeframe.yaml is not valid YAML: mapping values are not allowed here."


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n"])
def test_config_that_is_not_a_mapping(tmp_path, text):
    err = config_error(project(tmp_path, text))
    assert err.code == "PF001"
    assert err.diagnostics[0].message.startswith("pipeframe.yaml must be a mapping of settings")


def test_non_utf8_config(tmp_path):
    root = project(tmp_path, None)
    (root / "pipeframe.yaml").write_bytes(b"name: \xff\xfe\n")
    assert config_error(root).code == "PF001"


@pytest.mark.parametrize("text, message", [
    ("nmae: shop\n", "Unknown setting nmae in pipeframe.yaml."),
    ("foo: 1\nbar: 2\n", "Unknown settings bar, foo in pipeframe.yaml."),
    ("spark:\n  masters: local\n", "Unknown spark setting masters in pipeframe.yaml."),
    ("spark: local\n", "`spark` in pipeframe.yaml must be a mapping."),
    ("spark:\n  conf: [a]\n", "`spark.conf` in pipeframe.yaml must be a mapping of Spark settings."),
    ("vars: [a]\n", "`vars` in pipeframe.yaml must be a mapping."),
    ("tokens: abc\n", "`tokens` in pipeframe.yaml must be a mapping."),
    ("environments: [dev]\n", "`environments` must map environment names to settings."),
])
def test_unknown_or_misshaped_settings(tmp_path, text, message):
    err = config_error(project(tmp_path, text))
    assert (err.code, err.diagnostics[0].message) == ("PF002", message)
    assert err.diagnostics[0].hint


def test_unknown_setting_inside_an_environment(tmp_path):
    root = project(tmp_path, "environments:\n  prod:\n    warehose: s3a://b/x\n")
    err = config_error(root, env="prod")
    assert (err.code, err.diagnostics[0].message) == ("PF002", "Unknown setting warehose in environment `prod`.")
    # Other environments are not affected.
    assert load_config(root, env="dev", environ={}).warehouse == ".pipeframe/dev"


def test_ignore_may_be_a_single_string(tmp_path):
    assert load_config(project(tmp_path, "ignore: scratch/\n"), environ={}).ignore == ("scratch/",)


def test_example_project_config():
    config = load_config(EXAMPLE, environ={})
    assert config.root == EXAMPLE
    assert (config.name, config.environment) == ("shop", None)
    assert config.warehouse_uri == str(EXAMPLE / ".pipeframe" / "warehouse")
    assert config.spark == SparkSettings(
        master="local[*]", remote=None,
        conf={"spark.driver.memory": "2g", "spark.sql.session.timeZone": "UTC"})
    assert config.vars == {"currency": "EUR"}


def test_example_project_prod_and_dev():
    prod = load_config(EXAMPLE, env="prod", environ={})
    assert prod.warehouse_uri == "s3a://acme-analytics-lake/shop"
    assert prod.spark == SparkSettings(
        master="local[*]", remote="sc://spark.internal:15002",
        conf={"spark.driver.memory": "2g", "spark.sql.session.timeZone": "UTC",
              "spark.sql.shuffle.partitions": "64"})
    dev = load_config(EXAMPLE, environ={"PIPEFRAME_ENV": "dev"})
    assert dev.warehouse_uri == str(EXAMPLE / ".pipeframe" / "dev")
    assert dev.spark.remote is None
    with pytest.raises(PipeframeError) as info:
        load_config(EXAMPLE, env="qa", environ={})
    assert info.value.code == "PF003"
    assert info.value.diagnostics[0].location == Location("pipeframe.yaml")


SECRETS = """\
name: ${PROJECT_NAME:-shop}
warehouse: "${WAREHOUSE}"
tokens:
  admin: "${ADMIN_TOKEN}"
ingest:
  flush_ms: ${FLUSH_MS:-50}
vars:
  literal: "$${HOME}"
  mixed: "a-${MIDDLE:-b}-c"
  quoted_number: "${FLUSH_MS:-50}"
environments:
  prod:
    spark:
      remote: "${SPARK_REMOTE}"
      conf:
        spark.hadoop.fs.s3a.secret.key: "${AWS_SECRET_ACCESS_KEY}"
"""


def test_settings_name_environment_variables_with_defaults(tmp_path):
    config = load_config(project(tmp_path, SECRETS),
                         environ={"WAREHOUSE": "s3a://lake/shop", "ADMIN_TOKEN": "t0k3n", "FLUSH_MS": "70"})
    assert (config.name, config.warehouse, dict(config.tokens)) == ("shop", "s3a://lake/shop", {"admin": "t0k3n"})
    assert config.ingest.flush_ms == 70  # unquoted: read as YAML reads the substituted text, a number
    assert config.vars == {"literal": "${HOME}", "mixed": "a-b-c", "quoted_number": "70"}


def test_an_empty_variable_takes_the_default_and_an_unset_one_without_default_is_named(tmp_path):
    root = project(tmp_path, SECRETS)
    config = load_config(root, environ={"WAREHOUSE": "w", "ADMIN_TOKEN": "t", "PROJECT_NAME": ""})
    assert config.name == "shop"
    d = config_error(root, environ={"WAREHOUSE": "w"}).diagnostics[0]
    assert (d.code, d.location.line, d.location.col) == ("PF008", 4, 10)
    assert d.message == "`${ADMIN_TOKEN}` names the environment variable ADMIN_TOKEN, which is not set."
    assert "${ADMIN_TOKEN:-value}" in d.hint


def test_only_the_chosen_environment_needs_its_variables(tmp_path):
    root = project(tmp_path, SECRETS)
    base = {"WAREHOUSE": "w", "ADMIN_TOKEN": "t"}
    assert load_config(root, environ=base).spark.remote is None  # prod's secrets are not needed outside prod
    assert config_error(root, env="prod", environ={**base, "SPARK_REMOTE": "sc://h:15002"}) \
        .diagnostics[0].message.startswith("`${AWS_SECRET_ACCESS_KEY}` names")
    prod = load_config(root, env="prod", environ={**base, "SPARK_REMOTE": "sc://h:15002",
                                                  "AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert prod.spark.remote == "sc://h:15002"
    assert prod.spark.conf["spark.hadoop.fs.s3a.secret.key"] == "s3cr3t"


def test_a_reference_that_is_not_a_variable_name_is_refused(tmp_path):
    d = config_error(project(tmp_path, 'warehouse: "${not a name}"\n')).diagnostics[0]
    assert (d.code, d.location.line) == ("PF002", 1)
    assert "`$${`" in d.hint
