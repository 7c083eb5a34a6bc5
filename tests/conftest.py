# The live testinfra specs need a booted guest or cluster: `invoke test-box` / `invoke
# cluster-test` run them (or `pytest tests/infra/<spec> --hosts=...`). Keep them out of the
# default run; naming a spec file explicitly still collects it.
collect_ignore = ["infra"]
