"""Build generated/ (and the error-code reference in docs/) from spec/; `--check` reports drift.

Outputs, all byte-reproducible:
  generated/coordinator_models/schemas/*.schema.json   published copies of spec/schemas
  generated/coordinator_models/<name>.py               pydantic v2 models (datamodel-code-generator)
  generated/coordinator_models/base.py                 their base class (`BASE_MODULE` below)
  generated/coordinator_models/error_catalogue.py      the catalogue of spec/errors.yaml
  generated/coordinator_models/openapi.json            the bundled OpenAPI 3.1 document as the
                                                       service serves it (`coordinatorctl openapi`)
  generated/openapi.bundled.yaml, openapi.connexion.yaml   scripts/bundle_openapi.py
  docs/reference/error-codes.md                        the error catalogue for people
  docs/reference/api.md                                every route, body and problem code
"""

from __future__ import annotations

import argparse
import difflib
import filecmp
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
PACKAGE = Path("generated") / "coordinator_models"
ERROR_DOC = Path("docs") / "reference" / "error-codes.md"
API_DOC = Path("docs") / "reference" / "api.md"
SERVED_DOCUMENT = "openapi.json"

# Schema file stem → generated module name. Only the schemas whose models the code uses
# (ARCHITECTURE rule 3): `api`, the bodies of the service API, read and written by
# coordinator_api.wire and coordinatorctl.remote.models. The authored formats (project, runtime,
# scenarios) and the ctl report are decoded and checked by coordinator_core against their
# published schemas with positions; a second, unused model of them is not generated.
MODELS = {
    "api": "api",
}
# `$defs`-only files: without this flag the generator adds a useless root model.
DEFS_ONLY = {"api"}
OPENAPI_DOCUMENTS = ("openapi.bundled.yaml", "openapi.connexion.yaml")

CODEGEN_FLAGS = [
    "--input-file-type", "jsonschema",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--use-annotated", "--field-constraints",
    "--target-python-version", "3.11",
    "--use-standard-collections", "--use-union-operator", "--use-double-quotes",
    "--disable-timestamp", "--use-schema-description", "--use-field-description",
    "--snake-case-field", "--allow-population-by-field-name",
    # Named scalar definitions (LocalId, Digest, Timestamp, …) become annotated field types,
    # not RootModel wrappers that every reader would have to unwrap.
    "--collapse-root-models",
    # A problem's `type` is compared as text (its pattern holds it), not normalised as a URL.
    "--type-mappings", "string+uri=string",
    "--formatters", "builtin",
    # No coercion: a JSON string is not an integer, a number is not a string, 1 is not `true`,
    # and an integer member takes an integer token (not 1.0, as 03 §4 keeps 2 and 2.0 apart).
    # coordinator_api.bodies validates request bodies in Python mode on the strict-JSON value,
    # where pydantic would otherwise turn "1" into 1 (its JSON mode is not used: jiter refuses
    # a run input nested deeper than 200 levels, which 06 §5.1 step 7 answers as input-invalid).
    "--strict-types", "str", "int", "bool",
    "--base-class", "coordinator_models.base.SpecModel",
]  # fmt: skip

PACKAGE_INIT = '"""Generated from spec/ by `nox -s generate`. Do not edit by hand."""\n'

# The base class of every object model (`--base-class`): what the generator's options cannot
# say. An instant given as an integer is epoch milliseconds, the one time representation of
# coordinator-core, so the API validates its service shapes into their models as they are
# (`model_validate(shape, from_attributes=True)`) with no conversion per member; on the wire an
# instant is always an RFC 3339 string with milliseconds (06 §1 item 5), which pydantic's own
# JSON rendering writes with microseconds: `Instant`, every date-time member's type in place of
# pydantic's `AwareDatetime` (`_instants`), says how, so that a model renders its JSON itself.
BASE_MODULE = '''"""Generated from spec/ by `nox -s generate` (scripts/generate.py). Do not edit by hand."""

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
'''


def _instants(module: Path) -> None:
    """Every `AwareDatetime` of a generated module becomes the base module's `Instant`."""
    text = module.read_text(encoding="utf-8")
    if "AwareDatetime" not in text:
        return
    if "    AwareDatetime,\n" not in text or "import SpecModel\n" not in text:
        raise SystemExit(f"{module.name}: the generator's imports changed; teach _instants them")
    text = text.replace("    AwareDatetime,\n", "", 1).replace(
        "from coordinator_models.base import SpecModel\n",
        "from coordinator_models.base import Instant, SpecModel\n",
        1,
    )
    text = re.sub(r"\bAwareDatetime\b", "Instant", text)
    module.write_text(text, encoding="utf-8")


def generate(out_root: Path) -> None:
    """Write every generated file under `out_root` (the repository root or a scratch copy)."""
    package = out_root / PACKAGE
    schemas_out = package / "schemas"
    schemas_out.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(PACKAGE_INIT, encoding="utf-8")
    (package / "py.typed").write_text("", encoding="utf-8")
    (schemas_out / "__init__.py").write_text(PACKAGE_INIT, encoding="utf-8")
    (package / "base.py").write_text(BASE_MODULE, encoding="utf-8")
    for source in sorted((SPEC / "schemas").glob("*.schema.json")):
        schema = json.loads(source.read_text(encoding="utf-8"))
        published = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        (schemas_out / source.name).write_text(published, encoding="utf-8")
    for stem, module in MODELS.items():
        source = SPEC / "schemas" / f"{stem}.schema.json"
        subprocess.run(
            [
                sys.executable, "-m", "datamodel_code_generator",
                "--input", str(source),
                "--output", str(package / f"{module}.py"),
                *CODEGEN_FLAGS,
                *(["--skip-root-model"] if stem in DEFS_ONLY else []),
            ],
            check=True,
        )  # fmt: skip
        _instants(package / f"{module}.py")
    sys.path.insert(0, str(ROOT / "scripts"))
    import bundle_openapi
    import generate_api_doc
    import generate_errors
    import yaml

    bundled, connexion = bundle_openapi.bundle(SPEC)
    for name, text in (
        (bundle_openapi.BUNDLED_NAME, bundled),
        (bundle_openapi.CONNEXION_NAME, connexion),
    ):
        (out_root / "generated").mkdir(parents=True, exist_ok=True)
        (out_root / "generated" / name).write_text(text, encoding="utf-8", newline="\n")

    catalogue = generate_errors.load_catalogue(SPEC / "errors.yaml")
    problems = generate_errors.validate_catalogue(catalogue)
    if problems:
        raise SystemExit("spec/errors.yaml: " + "; ".join(problems))
    (package / "error_catalogue.py").write_text(
        generate_errors.render_python(catalogue), encoding="utf-8"
    )
    (out_root / ERROR_DOC).parent.mkdir(parents=True, exist_ok=True)
    (out_root / ERROR_DOC).write_text(generate_errors.render_markdown(catalogue), encoding="utf-8")

    document = yaml.safe_load(bundled)
    # The bytes `GET /openapi.json` answers (coordinator_api.explorer.render_document) and
    # `coordinatorctl openapi` prints: package data of coordinator-models.
    served = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    (package / SERVED_DOCUMENT).write_text(served, encoding="utf-8", newline="\n")
    (out_root / API_DOC).write_text(
        generate_api_doc.render_markdown(document, catalogue["codes"]),
        encoding="utf-8",
        newline="\n",
    )


def _files(base: Path) -> set[Path]:
    return {
        path.relative_to(base)
        for path in base.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def check() -> int:
    """Regenerate into a scratch directory and compare with the committed files."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        generate(out)
        drift: list[str] = []
        committed, fresh = _files(ROOT / PACKAGE), _files(out / PACKAGE)
        drift.extend(f"missing from generated/: {p}" for p in sorted(fresh - committed))
        drift.extend(f"not produced by spec/: {p}" for p in sorted(committed - fresh))
        pairs = [(ROOT / PACKAGE / p, out / PACKAGE / p) for p in sorted(committed & fresh)]
        pairs.append((ROOT / ERROR_DOC, out / ERROR_DOC))
        pairs.append((ROOT / API_DOC, out / API_DOC))
        pairs.extend(
            (ROOT / "generated" / name, out / "generated" / name) for name in OPENAPI_DOCUMENTS
        )
        for old, new in pairs:
            if not old.exists() or not filecmp.cmp(old, new, shallow=False):
                drift.append(f"differs: {old.relative_to(ROOT)}")
                if old.exists():
                    sys.stdout.writelines(
                        difflib.unified_diff(
                            old.read_text(encoding="utf-8").splitlines(keepends=True),
                            new.read_text(encoding="utf-8").splitlines(keepends=True),
                            str(old.relative_to(ROOT)),
                            "regenerated",
                        )
                    )
    for line in drift:
        print(line)
    if drift:
        print("generated/ is out of date: run `nox -s generate` and commit the result.")
        return 1
    print("generated/ matches spec/.")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail on drift instead of writing")
    arguments = parser.parse_args()
    if arguments.check:
        return check()
    # Start from an empty package so that a model no longer generated leaves no stale module.
    shutil.rmtree(ROOT / PACKAGE, ignore_errors=True)
    generate(ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
