"""Documents k4w did not just write itself (API answers, its own state files under --out), read at
the boundary: decoded, then held to a typed model, so a wrong shape ends in one line naming the
source and the field, never a traceback from deep inside the code that uses it."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from k4w.infra.errors import K4wError

M = TypeVar("M", bound=BaseModel)


class DocumentError(K4wError):
    """A document that is not what k4w reads there: the source, the field and what was found."""


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_path(loc: tuple) -> str:
    """pydantic's location as a user reads it: networking.podSubnet, items[0].metadata.name."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse(model: type[M], data: Any, source: str) -> M:
    """data held to model; a mismatch raises one line naming source, the first wrong field and its value."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = field_path(err["loc"]) or "the document"
        # pydantic's wording, less its internals: "Value error, " and the model's class name
        why = re.sub(r" or instance of \w+", "", err["msg"].removeprefix("Value error, "))
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise DocumentError(f"{source}: {where}: {why}, found {_found(err.get('input'))}{more}") from None
    except RecursionError:
        raise DocumentError(f"{source}: nested too deeply to be what k4w reads there") from None


def json_value(text: str | bytes, source: str) -> Any:
    """JSON text decoded; not JSON, or nested deeper than Python's decoder goes, is one line."""
    try:
        return json.loads(text)
    except RecursionError:
        raise DocumentError(f"{source}: the JSON is nested too deeply to read") from None
    except ValueError as exc:
        raise DocumentError(f"{source}: not valid JSON ({exc})") from None


def refuse_unbounded_yaml(text: str, source: str, max_depth: int = 32) -> None:
    """Refuse, on the event stream and before anything is built, YAML anchors and aliases (an alias bomb
    expands to gigabytes while it is built or walked) and nesting deeper than max_depth (PyYAML's
    composer recurses per level). A malformed stream raises yaml.YAMLError for the caller to word."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise DocumentError(f"{source}: line {event.start_mark.line + 1}: YAML anchors and aliases (&name, *name) "
                                "are not allowed in this file; write the values out")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > max_depth:
                raise DocumentError(f"{source}: line {event.start_mark.line + 1}: nested more than {max_depth} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def yaml_value(text: str, source: str) -> Any:
    """YAML text an API server or a file hands k4w, decoded once refuse_unbounded_yaml let it through;
    not YAML is one line naming the source."""
    try:
        refuse_unbounded_yaml(text, source)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DocumentError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None
