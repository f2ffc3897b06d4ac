"""The bounded Rhai-subset interpreter for pure mapping functions (contract 03, rhai-subset).

`compile_functions(source)` compiles a functions file once; `CompiledFunctions.call(name,
arguments)` runs one public function on JSON arguments and returns its JSON result. Every
failure is a `FunctionError` carrying one `coordinator.function.*` code.
"""

from __future__ import annotations

from coordinator_core.functions.errors import FunctionError
from coordinator_core.functions.program import (
    CompiledFunctions,
    CompileResult,
    FunctionInfo,
    UnresolvedCall,
    compile_functions,
)
from coordinator_core.limits import INTERPRETER_ABI

__all__ = [
    "INTERPRETER_ABI",
    "CompileResult",
    "CompiledFunctions",
    "FunctionError",
    "FunctionInfo",
    "UnresolvedCall",
    "compile_functions",
]
