"""Generated from spec/ by `nox -s generate` (scripts/generate.py). Do not edit by hand."""

from pydantic import BaseModel, ConfigDict


class SpecModel(BaseModel):
    """The base of every object model generated from spec/schemas: an instant given as an
    integer is epoch milliseconds (the service's time representation)."""

    model_config = ConfigDict(val_temporal_unit="milliseconds")
