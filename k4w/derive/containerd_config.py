"""The schema version of every containerd config k4w writes (config.toml on both families and the
registry credentials drop-in), in one place.

containerd migrates a file whose `version` is below its own ConfigVersion in memory at every start,
and logs "Configuration migrated from version N, use `containerd config migrate` to avoid migration"
once per file, the main config and each import (containerd@v2.3.7
cmd/containerd/server/config/config.go:474-496 LoadConfigWithPlugins); a version above it is
refused ("expected containerd config version equal to or less than", ValidateVersion :125-128).
So a file carries exactly the ConfigVersion of the containerd that reads it. `invoke validate`
holds every containerd box to this against k4w/validate/facts/containerd-<version>-config.yml
(containerd_config_rules).

Sources, read in the module zip github.com/containerd/containerd/v2@v2.3.7
(h1:7PGbgAVKE4ieQjFPv7+kwAv7f9dCtRpExZwjExHD/Fk=; the stored GitHub snapshot ends at v2.3.4):
- version/version.go:41 `const ConfigVersion = 4`;
- RELEASES.md:446 "The latest version is `version = 4`", and its table (:459-464): version 4 needs
  containerd >= v2.3.0 (3: >= v2.0.0).

Every box that pins containerd pins 2.3.7 (boxes/ubuntu-2404.yml, ubuntu-2604.yml, windows-2022.yml,
windows-2025.yml; ci/e2e/boxes/ubuntu-2404-e2e.yml, ubuntu-2604-e2e.yml), so one value serves all.
A box with an older containerd needs a facts file of its own, and the validate rule then refuses this
value for it until the version is derived per box.
"""

from __future__ import annotations

# containerd@v2.3.7 version/version.go:41 ConfigVersion. The step from 3 to 4 (serviceMigrate) moves
# only the top-level [grpc], [ttrpc], [debug] and [metrics] tables, none of which k4w writes, so a
# k4w config means the same under either number; 4 just spares the migration at every start.
CONFIG_VERSION = 4

# The start of the warning containerd logs for each file it had to migrate
# (containerd@v2.3.7 cmd/containerd/server/config/config.go:496).
MIGRATION_WARNING = "Configuration migrated from version"


def migration_warnings(stderr: str) -> list[str]:
    """The lines of containerd's log (e.g. the stderr of `containerd config dump`) that say it
    migrated a config file, one per file written for an older schema than its own."""
    return [line.strip() for line in stderr.splitlines() if MIGRATION_WARNING in line]
