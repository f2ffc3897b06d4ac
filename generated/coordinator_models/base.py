"""Generated from spec/ by `nox -s generate` (scripts/generate.py). Do not edit by hand."""

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, PlainSerializer


class SpecModel(BaseModel):
    """The base of every object model generated from spec/schemas: an instant given as an
    integer is epoch milliseconds (the service's time representation)."""

    model_config = ConfigDict(val_temporal_unit="milliseconds")


def rfc3339_milliseconds(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` (contract 06 §1 item 5) of an aware datetime."""
    utc = moment.astimezone(UTC) if moment.utcoffset() else moment
    return utc.isoformat(timespec="milliseconds")[:23] + "Z"


Instant = Annotated[
    AwareDatetime, PlainSerializer(rfc3339_milliseconds, return_type=str, when_used="json")
]
"""A date-time member: validated as pydantic's `AwareDatetime`, rendered in JSON as
`rfc3339_milliseconds`."""
