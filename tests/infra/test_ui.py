"""What k4w prints when its output is piped or redirected (CI logs, `| tee`)."""

from tests.helpers import config_dict, invoke, write_config


def test_piped_tables_keep_every_value_whole(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": "http://proxy.corp.example:3128",
                                                               "proxy.no_proxy": ["very-long-internal-domain.corp.example"]}))
    # COLUMNS=80 as a CI runner has; the output is a pipe, not a terminal.
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out"), env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    no_proxy_line = next(line for line in result.stdout.splitlines() if line.strip().startswith("NO_PROXY"))
    assert "very-long-internal-domain.corp.example" in no_proxy_line and no_proxy_line.rstrip().endswith(".svc")
    assert "192.168.250.21" in result.stdout and "…" not in result.stdout
    assert "┃" not in result.stdout  # no box drawing in a log file
