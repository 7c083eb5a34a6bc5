"""The shapes of files k4w wrote under --out and reads back in a later command (k4w.infra.documents.parse):
a file edited by hand, truncated or from another k4w is one line naming it and the field, not a
traceback where it is used. Only the fields read back are declared."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StrictInt, StrictStr


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


def _file_name(value: str) -> str:
    # joined to OUT/boxes/: a name in that folder, never a path out of it
    if not re.fullmatch(r"[\w.+-]+", value) or value in (".", ".."):
        raise ValueError("not a file name in OUT/boxes/")
    return value


class Machine(_Shape):
    name: StrictStr
    role: StrictStr
    os: StrictStr
    ip: StrictStr
    vmname: StrictStr
    box: StrictStr
    box_catalogue: StrictStr


class ClusterJson(_Shape):
    """OUT/vagrant/cluster.json (k4w.render: cluster_json)."""

    cluster: StrictStr
    prefix_length: StrictInt
    machines: list[Machine]


class CatalogueVersion(_Shape):
    version: StrictStr


class BoxCatalogue(_Shape):
    """OUT/boxes/<box>.json, the Vagrant box catalogue a build writes (k4w.bake.catalogue.box_catalogue)."""

    name: StrictStr
    versions: list[CatalogueVersion]


class BuildRecord(_Shape):
    """OUT/boxes/<box>.record.json (k4w.bake.runner): what the last build of the box made from what."""

    box_file: Annotated[StrictStr, AfterValidator(_file_name)] | None = None
    stamp: dict | None = None
