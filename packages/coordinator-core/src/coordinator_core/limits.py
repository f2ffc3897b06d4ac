"""Every named bound of the product and the ABI identity strings pinned into snapshots."""

from __future__ import annotations

from typing import Final

# Authored files (contract 01 §2, 02 §5.1).
YAML_MAX_BYTES: Final = 1_048_576
YAML_MAX_DEPTH: Final = 128
PROJECT_MAX_ENTRIES: Final = 1024
MAX_DIAGNOSTICS_PER_FILE: Final = 100

# Workflow shape (contract 01 §4–§7).
MAX_OPERATIONS: Final = 32
MAX_TRIGGERS: Final = 16
MAX_STEPS: Final = 64
MAX_OUTCOMES: Final = 64
MAX_CASES: Final = 32
MAX_DECLARED_REFUSALS: Final = 16
MAX_CONNECTIONS: Final = 16
MAX_DEADLINE_SECONDS: Final = 31_536_000
MAX_MAPPING_ARGUMENTS: Final = 16

# Functions (contract 03 §3, rhai-subset §10).
FUNCTION_MAX_OPERATIONS: Final = 100_000
FUNCTION_MAX_CALL_LEVELS: Final = 32
FUNCTION_MAX_EXPRESSION_DEPTH: Final = 64
FUNCTION_MAX_STRING_BYTES: Final = 16_384
FUNCTION_MAX_ARRAY_ITEMS: Final = 256
FUNCTION_MAX_MAP_ENTRIES: Final = 256
FUNCTION_MAX_SOURCE_BYTES: Final = 65_536
FUNCTION_MAX_FUNCTIONS: Final = 128
FUNCTION_MAX_ARGUMENTS: Final = 16

# JSON value bounds (contract 03 §4).
JSON_MAX_DEPTH: Final = 32
JSON_MAX_NODES: Final = 4096
JSON_MAX_MEMBERS: Final = 256
JSON_MAX_STRING_BYTES: Final = 16_384
JSON_MAX_CANONICAL_BYTES: Final = 131_072

# Snapshots and packages (contract 02 §5.7, §9).
SNAPSHOT_MAX_BYTES: Final = 393_216
SHA256SUMS_MAX_BYTES: Final = 4096

# Identities (contract 02 §8, 08 §1.2).
ADAPTER_ABI: Final = "coordinator/product-operations/v5"
INTERPRETER_ABI: Final = (
    "coordinator/pure-rhai-py/v1;raw-arithmetic-logic-string-array-map-iterator;"
    "ops=100000;calls=32;expr=64;string=16384;array=256;map=256;source=65536;"
    "json=131072;depth=32"
)
SCHEMA_ABI: Final = "coordinator/jsonschema-py/draft202012/formats-asserted/v1"

# Formats (contract 01 §1, 02 §3, §8).
PROJECT_API_VERSION: Final = "id.registrystack.org/formats/coordinator/project/v1alpha1"
RUNTIME_API_VERSION: Final = "id.registrystack.org/formats/coordinator/runtime/v1alpha1"
SCENARIOS_API_VERSION: Final = "id.registrystack.org/formats/coordinator/scenarios/v1alpha1"
SNAPSHOT_API_VERSION: Final = (
    "id.registrystack.org/formats/coordinator/definition-snapshot/v1alpha1"
)
REPORT_API_VERSION: Final = "id.registrystack.org/formats/coordinator/ctl-report/v1alpha1"

KIND_PROJECT: Final = "CoordinatorProject"
KIND_RUNTIME: Final = "CoordinatorRuntimeConfig"
KIND_SCENARIOS: Final = "CoordinatorScenarios"
KIND_SNAPSHOT: Final = "CoordinatorDefinitionSnapshot"
KIND_REPORT: Final = "CoordinatorCtlReport"

API_VERSION_OF_KIND: Final = {
    KIND_PROJECT: PROJECT_API_VERSION,
    KIND_RUNTIME: RUNTIME_API_VERSION,
    KIND_SCENARIOS: SCENARIOS_API_VERSION,
}

# The eight run statuses (contract 07 §5), in the contract's order. The engine and the API also
# spell them as `Literal` types for the type checker; a test pins all of them to this tuple.
RUN_STATUSES: Final = (
    "running",
    "attention",
    "cancel-requested",
    "finished",
    "failed",
    "cancelled",
    "cancelled-after-effect",
    "expired",
)
