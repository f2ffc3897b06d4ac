"""The evaluator: the syntax tree compiled once into Python closures, one per node.

Every node kind has exactly one compile handler; anything else cannot reach here because
the parser refuses it. Variables are resolved at compile time to frame slots (Rhai scoping
is lexical), slot 0 of every frame holds `this`. Operations are charged per block: a block
charges the static cost of its statements (one per statement plus one per expression node
outside nested blocks, plus one per call) when it is entered, loops per iteration, script
functions per call, and built-ins extra for work proportional to their data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from coordinator_core.functions import nodes as n
from coordinator_core.functions.errors import (
    BreakSignal,
    ContinueSignal,
    LimitError,
    ParseError,
    ReturnSignal,
    ScriptError,
)
from coordinator_core.functions.library import (
    BINARY,
    LIBRARY,
    MUTATING,
    SIZED,
    assign_op,
    get_index,
    get_prop,
    iterate,
    op_neg,
    op_not,
    op_plus,
    set_child,
)
from coordinator_core.functions.rvalues import (
    MAX_OPS,
    MSG_NOT_FOUND,
    MSG_TYPE,
    UNBOUND,
    Ctx,
    Range,
    check_size,
    check_string_size,
    strict_key,
    to_display,
    too_many_operations,
    type_name,
)
from coordinator_core.limits import FUNCTION_MAX_CALL_LEVELS

Ev = Callable[[list[Any], Ctx], Any]
Method = Callable[[list[Any], Ctx, Any, bool, bool], tuple[Any, Any]]

MSG_VARIABLE: Final = "Variable not found."
MSG_THIS: Final = "'this' is not bound: the function was not called as a method."
MSG_CONSTANT: Final = "A constant cannot be modified."
MSG_THROWN: Final = "A value was thrown by the script."
NOT_BOOLEAN: Final = "non-boolean-condition"
UNKNOWN_FUNCTION: Final = "unknown-function"
_PROP: Final = n.Link.PROP
_INDEX: Final = n.Link.INDEX


class CompiledFn:
    """One script function: its frame layout, its body closure and its entry cost."""

    __slots__ = ("body", "column", "cost", "line", "name", "nparams", "pad", "private")

    def __init__(self, definition: n.FnDef) -> None:
        self.name = definition.name
        self.nparams = len(definition.params)
        self.private = definition.private
        self.line = definition.line
        self.column = definition.column
        self.body: Ev = _unit
        self.cost = 1
        self.pad: tuple[None, ...] = ()


def _unit(s: list[Any], c: Ctx) -> Any:
    return None


def invoke(fn: CompiledFn, args: list[Any], c: Ctx) -> Any:
    depth = c.depth + 1
    if depth > FUNCTION_MAX_CALL_LEVELS:
        raise LimitError("calls")
    c.ops += fn.cost
    if c.ops > MAX_OPS:
        raise too_many_operations()
    c.depth = depth
    frame = [UNBOUND, *args, *fn.pad]
    try:
        return fn.body(frame, c)
    except ReturnSignal as signal:
        return signal.value
    except (ScriptError, LimitError) as error:
        if error.function is None:  # the innermost function names the failure
            error.function = fn.name
        raise
    finally:
        c.depth = depth - 1


def invoke_method(fn: CompiledFn, args: list[Any], c: Ctx, this: Any) -> tuple[Any, Any]:
    """A script function called with method syntax: returns (result, final `this`)."""
    depth = c.depth + 1
    if depth > FUNCTION_MAX_CALL_LEVELS:
        raise LimitError("calls")
    c.ops += fn.cost
    if c.ops > MAX_OPS:
        raise too_many_operations()
    c.depth = depth
    frame = [this, *args, *fn.pad]
    try:
        result = fn.body(frame, c)
    except ReturnSignal as signal:
        result = signal.value
    except (ScriptError, LimitError) as error:
        if error.function is None:
            error.function = fn.name
        raise
    finally:
        c.depth = depth - 1
    return result, frame[0]


def charged(raw: Ev, cost: int) -> Ev:
    if cost <= 0:
        return raw

    def run(s: list[Any], c: Ctx) -> Any:
        c.ops += cost
        if c.ops > MAX_OPS:
            raise too_many_operations()
        return raw(s, c)

    return run


def make_block(evs: list[Ev], positions: list[tuple[int, int]]) -> Ev:
    if not evs:
        return _unit
    if len(evs) == 1:
        only = evs[0]
        line, column = positions[0]

        def block1(s: list[Any], c: Ctx) -> Any:
            try:
                return only(s, c)
            except ScriptError as error:
                if error.line is None:
                    error.line, error.column = line, column
                raise

        return block1
    stmts = tuple(evs)

    def block(s: list[Any], c: Ctx) -> Any:
        value = None
        stmt = stmts[0]
        try:
            for stmt in stmts:
                value = stmt(s, c)
        except ScriptError as error:
            if error.line is None:
                error.line, error.column = positions[stmts.index(stmt)]
            raise
        return value

    return block


def error_map(error: ScriptError) -> dict[str, Any]:
    """The value `catch (e)` binds for a runtime error: a map with a fixed message."""
    result: dict[str, Any] = {"message": error.message}
    if error.line is not None:
        result["line"] = error.line
        result["position"] = error.column
    return result


def _check_bool(v: Any) -> bool:
    if v is True or v is False:
        return v
    raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)


def write_back(c: Ctx, trail: list[tuple[Any, bool, Any]], leaf: Any) -> Any:
    value = leaf
    for container, is_prop, key in reversed(trail):
        value = set_child(c, container, is_prop, key, value)
    return value


class Code:
    """A compiled expression: its closure, its static operation cost, and what it is when it
    is a plain slot read or a constant (so callers can specialise)."""

    __slots__ = ("const", "cost", "ev", "is_const", "slot")

    def __init__(
        self, ev: Ev, cost: int, slot: int = -1, is_const: bool = False, const: Any = None
    ) -> None:
        self.ev = ev
        self.cost = cost
        self.slot = slot
        self.is_const = is_const
        self.const = const


def _const_code(value: Any) -> Code:
    def const(s: list[Any], c: Ctx) -> Any:
        return value

    return Code(const, 1, is_const=True, const=value)


def _raise_at_runtime(message: str, evs: Sequence[Ev] = (), cause: str | None = None) -> Ev:
    def fail(s: list[Any], c: Ctx) -> Any:
        for ev in evs:
            ev(s, c)
        raise ScriptError(message, cause=cause)

    return fail


class Compiler:
    def __init__(self, functions: dict[str, CompiledFn]) -> None:
        self.functions = functions
        self.errors: list[ParseError] = []
        # Calls that resolve to nothing when they run (name, argument count, line, column): no
        # script function and no library function of that name and count. `check` warns.
        self.unknown_calls: list[tuple[str, int, int, int]] = []
        self.runs = True  # False while compiling top-level statements, which never run
        self.scope: list[tuple[str, int, bool]] = []
        self.nslots = 1
        self.catch_slots: list[int] = []

    # ---------------------------------------------------------------------------- scopes

    def declare(self, name: str, const: bool = False) -> int:
        slot = self.nslots
        self.nslots += 1
        self.scope.append((name, slot, const))
        return slot

    def resolve(self, name: str) -> tuple[int, bool] | None:
        for bound, slot, const in reversed(self.scope):
            if bound == name:
                return slot, const
        return None

    # ------------------------------------------------------------------------- functions

    def compile_function(self, definition: n.FnDef, fn: CompiledFn) -> None:
        self.scope = [(p, i + 1, False) for i, p in enumerate(definition.params)]
        self.nslots = 1 + len(definition.params)
        self.catch_slots = []
        assert definition.body is not None
        stmts = list(definition.body.stmts)
        if stmts and isinstance(stmts[-1], n.Return):
            # A trailing `return` needs no signal: its value is the block's value.
            last = stmts[-1]
            value = last.value if last.value is not None else n.Lit(None, last.line, last.column)
            stmts[-1] = n.ExprStmt(value)
        raw, cost = self.compile_stmts(stmts)
        fn.body = raw
        fn.cost = 1 + cost
        fn.pad = (None,) * (self.nslots - 1 - len(definition.params))

    def compile_top_level(self, stmts: list[n.Stmt]) -> None:
        """Top-level statements never run; compiling them still applies compile-time rules."""
        self.scope = []
        self.nslots = 1
        self.catch_slots = []
        self.runs = False
        for stmt in stmts:
            self.compile_stmt(stmt)
        self.runs = True

    def unknown_call(self, name: str, arguments: int, at: n.Node | None) -> None:
        if self.runs and at is not None:
            self.unknown_calls.append((name, arguments, at.line, at.column))

    # ------------------------------------------------------------------------ statements

    def compile_stmts(self, stmts: list[n.Stmt]) -> tuple[Ev, int]:
        mark = len(self.scope)
        evs: list[Ev] = []
        positions: list[tuple[int, int]] = []
        total = 0
        for stmt in stmts:
            ev, cost = self.compile_stmt(stmt)
            evs.append(ev)
            positions.append((stmt.line, stmt.column))
            total += cost
        del self.scope[mark:]
        return make_block(evs, positions), total

    def compile_block(self, block: n.Block) -> tuple[Ev, int]:
        return self.compile_stmts(block.stmts)

    def compile_charged_block(self, block: n.Block) -> Ev:
        raw, cost = self.compile_block(block)
        return charged(raw, cost)

    def compile_stmt(self, stmt: n.Stmt) -> tuple[Ev, int]:
        handler = _STMT_HANDLERS.get(type(stmt))
        if handler is None:  # pragma: no cover - the parser produces no other node
            raise ParseError("This construct is not supported.", stmt.line, stmt.column)
        return handler(self, stmt)

    def stmt_expr(self, stmt: n.ExprStmt) -> tuple[Ev, int]:
        code = self.compile_expr(stmt.expr)
        return code.ev, 1 + code.cost

    def stmt_noop(self, stmt: n.Noop) -> tuple[Ev, int]:
        return _unit, 0

    def stmt_block(self, stmt: n.Block) -> tuple[Ev, int]:
        return self.compile_charged_block(stmt), 1

    def stmt_let(self, stmt: n.Let) -> tuple[Ev, int]:
        code = self.compile_expr(stmt.value) if stmt.value is not None else None
        slot = self.declare(stmt.name, stmt.const)
        if code is None:

            def let_unit(s: list[Any], c: Ctx) -> Any:
                s[slot] = None

            return let_unit, 1
        if code.is_const:
            value = code.const

            def let_const(s: list[Any], c: Ctx) -> Any:
                s[slot] = value

            return let_const, 2
        ev = code.ev

        def let(s: list[Any], c: Ctx) -> Any:
            s[slot] = ev(s, c)

        return let, 1 + code.cost

    def stmt_assign(self, stmt: n.Assign) -> tuple[Ev, int]:
        target = stmt.target
        value = self.compile_expr(stmt.value)
        cost = 2 + value.cost
        if isinstance(target, n.Var):
            resolved = self.resolve(target.name)
            if resolved is None:
                return _raise_at_runtime(MSG_VARIABLE, [value.ev]), cost
            slot, const = resolved
            if const:
                self.errors.append(
                    ParseError("A constant cannot be assigned to.", target.line, target.column)
                )
            return self._assign_slot(slot, stmt.op, value, check_this=False), cost
        if isinstance(target, n.This):
            return self._assign_slot(0, stmt.op, value, check_this=True), cost
        assert isinstance(target, n.Chain)
        return self._assign_path(target, stmt.op, value), cost + len(target.links)

    def _assign_slot(self, slot: int, op: str | None, value: Code, check_this: bool) -> Ev:
        ev = value.ev
        if op is None:
            if check_this:

                def assign_this(s: list[Any], c: Ctx) -> Any:
                    v = ev(s, c)
                    if s[0] is UNBOUND:
                        raise ScriptError(MSG_THIS)
                    s[0] = v

                return assign_this

            def assign(s: list[Any], c: Ctx) -> Any:
                s[slot] = ev(s, c)

            return assign
        opf = assign_op(op)
        if check_this:

            def op_assign_this(s: list[Any], c: Ctx) -> Any:
                v = ev(s, c)
                if s[0] is UNBOUND:
                    raise ScriptError(MSG_THIS)
                s[0] = opf(c, s[0], v)

            return op_assign_this
        if value.slot >= 0:
            src = value.slot

            def op_assign_slot(s: list[Any], c: Ctx) -> Any:
                s[slot] = opf(c, s[slot], s[src])

            return op_assign_slot
        if value.is_const:
            k = value.const

            def op_assign_const(s: list[Any], c: Ctx) -> Any:
                s[slot] = opf(c, s[slot], k)

            return op_assign_const

        def op_assign(s: list[Any], c: Ctx) -> Any:
            v = ev(s, c)
            s[slot] = opf(c, s[slot], v)

        return op_assign

    def _root(self, root: n.Expr) -> tuple[int, bool, bool] | None:
        """(slot, is_const, is_this) for a chain rooted at a variable or `this`."""
        if isinstance(root, n.This):
            return 0, False, True
        if isinstance(root, n.Var):
            resolved = self.resolve(root.name)
            if resolved is not None:
                return resolved[0], resolved[1], False
        return None

    def _steps(self, links: list[n.Link]) -> tuple[list[tuple[int, bool, Any]], int]:
        """The compiled links of a chain and their static cost."""
        steps: list[tuple[int, bool, Any]] = []
        cost = 0
        for link in links:
            if link.kind == _PROP:
                steps.append((_PROP, link.elvis, link.name))
                cost += 1
            elif link.kind == _INDEX:
                assert link.index is not None
                index = self.compile_expr(link.index)
                steps.append((_INDEX, link.elvis, index.ev))
                cost += 1 + index.cost
            else:
                method, method_cost = self.compile_method(link)
                steps.append((n.Link.METHOD, link.elvis, method))
                cost += method_cost
        return steps, cost

    def _assign_path(self, target: n.Chain, op: str | None, value: Code) -> Ev:
        rooted = self._root(target.root)
        ev = value.ev
        if rooted is None:
            return _raise_at_runtime(MSG_VARIABLE, [ev])
        slot, const, is_this = rooted
        steps, _ = self._steps(target.links)
        prefix = steps[:-1]
        last_kind, last_elvis, last_payload = steps[-1]
        last_is_prop = last_kind == _PROP
        opf = assign_op(op) if op is not None else None

        def assign_path(s: list[Any], c: Ctx) -> Any:
            new_value = ev(s, c)
            v = s[slot]
            if is_this and v is UNBOUND:
                raise ScriptError(MSG_THIS)
            if const:
                raise ScriptError(MSG_CONSTANT)
            trail: list[tuple[Any, bool, Any]] = []
            for kind, elvis, payload in prefix:
                if elvis and v is None:
                    return None
                if kind == _PROP:
                    trail.append((v, True, payload))
                    v = get_prop(v, payload)
                else:
                    key = payload(s, c)
                    trail.append((v, False, key))
                    v = get_index(c, v, key)
            if last_elvis and v is None:
                return None
            key = last_payload if last_is_prop else last_payload(s, c)
            if opf is not None:
                old = get_prop(v, key) if last_is_prop else get_index(c, v, key)
                new_value = opf(c, old, new_value)
            container = set_child(c, v, last_is_prop, key, new_value)
            check_size(container, c)
            s[slot] = write_back(c, trail, container)
            return None

        return assign_path

    def stmt_if(self, stmt: n.If) -> tuple[Ev, int]:
        cond_code = self.compile_expr(stmt.cond)
        cond = cond_code.ev
        cond_cost = cond_code.cost
        then = self.compile_charged_block(stmt.then)
        otherwise: Ev | None = None
        if isinstance(stmt.else_, n.Block):
            otherwise = self.compile_charged_block(stmt.else_)
        elif isinstance(stmt.else_, n.If):
            nested, nested_cost = self.stmt_if(stmt.else_)
            otherwise = charged(nested, nested_cost)

        def if_(s: list[Any], c: Ctx) -> Any:
            v = cond(s, c)
            if v is True:
                return then(s, c)
            if v is False:
                return otherwise(s, c) if otherwise is not None else None
            raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)

        return if_, 1 + cond_cost

    def stmt_switch(self, stmt: n.Switch) -> tuple[Ev, int]:
        subject = self.compile_expr(stmt.subject)
        cost = 1 + subject.cost
        subject_ev = subject.ev
        table: dict[Any, list[tuple[Ev | None, Ev]]] = {}
        ranges: list[tuple[Any, Ev | None, Ev]] = []
        default: Ev | None = None
        containers = False
        for case in stmt.cases:
            guard: Ev | None = None
            if case.guard is not None:
                guard_code = self.compile_expr(case.guard)
                guard = guard_code.ev
                cost += guard_code.cost
            mark = len(self.scope)  # an arm is its own block scope
            arm_ev, arm_cost = self.compile_stmt(case.body)
            del self.scope[mark:]
            arm = charged(arm_ev, arm_cost)
            if case.patterns is None:
                default = arm
                continue
            for value in case.patterns:
                if type(value) is Range:
                    ranges.append((value, guard, arm))
                else:
                    if type(value) in (list, dict):
                        containers = True
                    table.setdefault(strict_key(value), []).append((guard, arm))

        def switch(s: list[Any], c: Ctx) -> Any:
            v = subject_ev(s, c)
            tv = type(v)
            bucket = None
            if tv is list or tv is dict:
                if containers:
                    bucket = table.get(strict_key(v, c))
            else:
                bucket = table.get(strict_key(v))
            if bucket is not None:
                for guard, arm in bucket:
                    if guard is None or _check_bool(guard(s, c)):
                        return arm(s, c)
            elif ranges and tv is int:
                for r, guard, arm in ranges:
                    if r.contains(v) and (guard is None or _check_bool(guard(s, c))):
                        return arm(s, c)
            if default is not None:
                return default(s, c)
            return None

        return switch, cost

    def stmt_while(self, stmt: n.While) -> tuple[Ev, int]:
        cond_code = self.compile_expr(stmt.cond) if stmt.cond is not None else None
        body, body_cost = self.compile_block(stmt.body)
        per = 1 + body_cost + (cond_code.cost if cond_code is not None else 0)
        if cond_code is None:

            def loop(s: list[Any], c: Ctx) -> Any:
                while True:
                    c.ops += per
                    if c.ops > MAX_OPS:
                        raise too_many_operations()
                    try:
                        body(s, c)
                    except ContinueSignal:
                        pass
                    except BreakSignal as signal:
                        return signal.value

            return loop, 1
        cond = cond_code.ev

        def while_(s: list[Any], c: Ctx) -> Any:
            while True:
                c.ops += per
                if c.ops > MAX_OPS:
                    raise too_many_operations()
                v = cond(s, c)
                if v is not True:
                    if v is False:
                        return None
                    raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)
                try:
                    body(s, c)
                except ContinueSignal:
                    pass
                except BreakSignal as signal:
                    return signal.value

        return while_, 1

    def stmt_do(self, stmt: n.DoLoop) -> tuple[Ev, int]:
        body, body_cost = self.compile_block(stmt.body)
        cond_code = self.compile_expr(stmt.cond)
        cond = cond_code.ev
        per = 1 + body_cost + cond_code.cost
        stop_on = stmt.until

        def do(s: list[Any], c: Ctx) -> Any:
            while True:
                c.ops += per
                if c.ops > MAX_OPS:
                    raise too_many_operations()
                try:
                    body(s, c)
                except ContinueSignal:
                    pass
                except BreakSignal as signal:
                    return signal.value
                v = cond(s, c)
                if v is not True and v is not False:
                    raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)
                if v is stop_on:
                    return None

        return do, 1

    def stmt_for(self, stmt: n.For) -> tuple[Ev, int]:
        iterable = self.compile_expr(stmt.iterable)
        mark = len(self.scope)
        counter = self.declare(stmt.counter) if stmt.counter is not None else -1
        var = self.declare(stmt.var)
        body, body_cost = self.compile_block(stmt.body)
        del self.scope[mark:]
        per = 1 + body_cost
        source = iterable.ev

        if counter < 0:

            def for_(s: list[Any], c: Ctx) -> Any:
                for v in iterate(source(s, c)):
                    c.ops += per
                    if c.ops > MAX_OPS:
                        raise too_many_operations()
                    s[var] = v
                    try:
                        body(s, c)
                    except ContinueSignal:
                        pass
                    except BreakSignal as signal:
                        return signal.value
                return None

            return for_, 1 + iterable.cost

        def for_counted(s: list[Any], c: Ctx) -> Any:
            for i, v in enumerate(iterate(source(s, c))):
                c.ops += per
                if c.ops > MAX_OPS:
                    raise too_many_operations()
                s[var] = v
                s[counter] = i
                try:
                    body(s, c)
                except ContinueSignal:
                    pass
                except BreakSignal as signal:
                    return signal.value
            return None

        return for_counted, 1 + iterable.cost

    def _signalling(
        self, value: n.Expr | None, signal: type[BreakSignal] | type[ReturnSignal]
    ) -> tuple[Ev, int]:
        """`break` and `return` unwind with a signal carrying `()` or their value."""
        if value is None:

            def raise_unit(s: list[Any], c: Ctx) -> Any:
                raise signal(None)

            return raise_unit, 1
        code = self.compile_expr(value)
        ev = code.ev

        def raise_value(s: list[Any], c: Ctx) -> Any:
            raise signal(ev(s, c))

        return raise_value, 1 + code.cost

    def stmt_break(self, stmt: n.Break) -> tuple[Ev, int]:
        return self._signalling(stmt.value, BreakSignal)

    def stmt_continue(self, stmt: n.Continue) -> tuple[Ev, int]:
        def continue_(s: list[Any], c: Ctx) -> Any:
            raise ContinueSignal()

        return continue_, 1

    def stmt_return(self, stmt: n.Return) -> tuple[Ev, int]:
        return self._signalling(stmt.value, ReturnSignal)

    def stmt_throw(self, stmt: n.Throw) -> tuple[Ev, int]:
        if stmt.value is None:
            if self.catch_slots:
                caught = self.catch_slots[-1]

                def rethrow(s: list[Any], c: Ctx) -> Any:
                    raise ScriptError(MSG_THROWN, s[caught], thrown=True)

                return rethrow, 1

            def throw_unit(s: list[Any], c: Ctx) -> Any:
                raise ScriptError(MSG_THROWN, None, thrown=True)

            return throw_unit, 1
        code = self.compile_expr(stmt.value)
        ev = code.ev

        def throw(s: list[Any], c: Ctx) -> Any:
            raise ScriptError(MSG_THROWN, ev(s, c), thrown=True)

        return throw, 1 + code.cost

    def stmt_try(self, stmt: n.TryCatch) -> tuple[Ev, int]:
        body = self.compile_charged_block(stmt.body)
        mark = len(self.scope)
        caught = self.declare("\0caught")  # not an identifier: never resolvable by a script
        var = self.declare(stmt.var) if stmt.var is not None else -1
        self.catch_slots.append(caught)
        try:
            handler = self.compile_charged_block(stmt.catch_body)
        finally:
            self.catch_slots.pop()
            del self.scope[mark:]

        def try_(s: list[Any], c: Ctx) -> Any:
            try:
                body(s, c)
            except ScriptError as error:
                value = error.value if error.thrown else error_map(error)
                s[caught] = value
                if var >= 0:
                    s[var] = value
                handler(s, c)
            return None

        return try_, 1

    # ----------------------------------------------------------------------- expressions

    def compile_expr(self, e: n.Expr) -> Code:
        handler = _EXPR_HANDLERS.get(type(e))
        if handler is None:  # pragma: no cover - the parser produces no other node
            raise ParseError("This construct is not supported.", e.line, e.column)
        return handler(self, e)

    def expr_lit(self, e: n.Lit) -> Code:
        return _const_code(e.value)

    def expr_var(self, e: n.Var) -> Code:
        resolved = self.resolve(e.name)
        if resolved is None:
            return Code(_raise_at_runtime(MSG_VARIABLE), 1)
        slot = resolved[0]

        def var(s: list[Any], c: Ctx) -> Any:
            return s[slot]

        return Code(var, 1, slot=slot)

    def expr_this(self, e: n.This) -> Code:
        def this(s: list[Any], c: Ctx) -> Any:
            v = s[0]
            if v is UNBOUND:
                raise ScriptError(MSG_THIS)
            return v

        return Code(this, 1)

    def expr_array(self, e: n.ArrayLit) -> Code:
        codes = [self.compile_expr(x) for x in e.items]
        cost = 1 + sum(code.cost for code in codes)
        if all(code.is_const for code in codes):
            return self._constant_container([code.const for code in codes], cost)
        evs = tuple(code.ev for code in codes)

        def array(s: list[Any], c: Ctx) -> Any:
            value = [ev(s, c) for ev in evs]
            check_size(value, c)
            return value

        return Code(array, cost)

    def expr_map(self, e: n.MapLit) -> Code:
        codes = [self.compile_expr(x) for x in e.values]
        cost = 1 + sum(code.cost for code in codes)
        keys = tuple(e.keys)
        if all(code.is_const for code in codes):
            value = dict(zip(keys, [code.const for code in codes], strict=True))
            return self._constant_container(value, cost)
        evs = tuple(code.ev for code in codes)

        def map_(s: list[Any], c: Ctx) -> Any:
            value = {key: ev(s, c) for key, ev in zip(keys, evs, strict=True)}
            check_size(value, c)
            return value

        return Code(map_, cost)

    def _constant_container(self, value: Any, cost: int) -> Code:
        # Containers are never mutated in place, so one constant instance can be shared.
        try:
            check_size(value, Ctx())
        except LimitError:

            def too_large(s: list[Any], c: Ctx) -> Any:
                raise LimitError("data")

            return Code(too_large, cost)

        def const(s: list[Any], c: Ctx) -> Any:
            return value

        return Code(const, cost)

    def expr_interp(self, e: n.Interp) -> Code:
        parts: list[tuple[bool, Any]] = []
        for part in e.parts:
            if isinstance(part, str):
                parts.append((True, part))
            else:
                parts.append((False, self.compile_charged_block(part)))
        frozen = tuple(parts)

        def interp(s: list[Any], c: Ctx) -> Any:
            out = [text if is_text else to_display(text(s, c), c) for is_text, text in frozen]
            value = "".join(out)
            check_string_size(value)
            return value

        return Code(interp, 1)

    def expr_unary(self, e: n.Unary) -> Code:
        operand = self.compile_expr(e.operand)
        ev = operand.ev
        fn = op_neg if e.op == "-" else op_plus if e.op == "+" else op_not

        def unary(s: list[Any], c: Ctx) -> Any:
            return fn(c, ev(s, c))

        return Code(unary, 1 + operand.cost)

    def expr_binary(self, e: n.Binary) -> Code:
        op = e.op
        if op in ("in", "!in"):
            call = self.compile_named_call("contains", [e.right, e.left])
            if op == "in":
                return call
            inner = call.ev

            def not_in(s: list[Any], c: Ctx) -> Any:
                return op_not(c, inner(s, c))

            return Code(not_in, call.cost + 1)
        left = self.compile_expr(e.left)
        right = self.compile_expr(e.right)
        cost = 1 + left.cost + right.cost
        le, re = left.ev, right.ev
        if op == "&&":

            def and_(s: list[Any], c: Ctx) -> Any:
                v = le(s, c)
                if v is False:
                    return False
                if v is not True:
                    raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)
                return _check_bool(re(s, c))

            return Code(and_, cost)
        if op == "||":

            def or_(s: list[Any], c: Ctx) -> Any:
                v = le(s, c)
                if v is True:
                    return True
                if v is not False:
                    raise ScriptError(MSG_TYPE, cause=NOT_BOOLEAN)
                return _check_bool(re(s, c))

            return Code(or_, cost)
        if op == "??":

            def coalesce(s: list[Any], c: Ctx) -> Any:
                v = le(s, c)
                return v if v is not None else re(s, c)

            return Code(coalesce, cost)
        return Code(_binary_closure(BINARY[op], left, right), cost)

    def expr_stmt(self, e: n.StmtExpr) -> Code:
        ev, cost = self.compile_stmt(e.stmt)
        return Code(ev, cost)

    def expr_call(self, e: n.Call) -> Code:
        return self.compile_named_call(e.name, e.args, e)

    def compile_named_call(self, name: str, args: list[n.Expr], at: n.Node | None = None) -> Code:
        codes = [self.compile_expr(a) for a in args]
        evs = tuple(code.ev for code in codes)
        cost = 2 + sum(code.cost for code in codes)
        argc = len(evs)
        if name == "type_of":
            if argc != 1:
                self.unknown_call(name, argc, at)
                return Code(_raise_at_runtime(MSG_NOT_FOUND, evs, UNKNOWN_FUNCTION), cost)
            only = evs[0]

            def type_of(s: list[Any], c: Ctx) -> Any:
                return type_name(only(s, c))

            return Code(type_of, cost)
        fn = self.functions.get(name)
        if fn is not None and fn.nparams == argc:
            return Code(_script_call(fn, evs), cost)
        lib = LIBRARY.get((name, argc))
        if lib is None:
            self.unknown_call(name, argc, at)
            return Code(_raise_at_runtime(MSG_NOT_FOUND, evs, UNKNOWN_FUNCTION), cost)
        first = args[0] if args else None
        ref: tuple[int, bool, bool] | None = None
        if isinstance(first, n.Var | n.This):
            ref = self._root(first)
        if ref is not None and not ref[1]:
            return Code(_lib_call_ref(lib, ref[0], ref[2], evs[1:]), cost)
        return Code(_lib_call(lib, evs), cost)

    def compile_method(self, link: n.Link) -> tuple[Method, int]:
        codes = [self.compile_expr(a) for a in link.args]
        cost = 2 + sum(code.cost for code in codes)
        evs = tuple(code.ev for code in codes)
        name = link.name
        argc = len(evs)
        fn = self.functions.get(name)
        if fn is not None and fn.nparams == argc:
            script = fn

            def script_method(
                s: list[Any], c: Ctx, recv: Any, const: bool, ref: bool
            ) -> tuple[Any, Any]:
                return invoke_method(script, [ev(s, c) for ev in evs], c, recv)

            return script_method, cost
        if name == "type_of" and argc == 0:

            def type_of(s: list[Any], c: Ctx, recv: Any, const: bool, ref: bool) -> tuple[Any, Any]:
                return type_name(recv), recv

            return type_of, cost
        lib = LIBRARY.get((name, argc + 1))
        if lib is None:
            self.unknown_call(name, argc + 1, link)
            fail = _raise_at_runtime(MSG_NOT_FOUND, evs, UNKNOWN_FUNCTION)

            def missing(s: list[Any], c: Ctx, recv: Any, const: bool, ref: bool) -> tuple[Any, Any]:
                return fail(s, c), recv

            return missing, cost
        found = lib
        mutating = (name, argc + 1) in MUTATING

        def library_method(
            s: list[Any], c: Ctx, recv: Any, const: bool, ref: bool
        ) -> tuple[Any, Any]:
            args = [recv]
            for ev in evs:
                args.append(ev(s, c))
            if const and mutating:
                raise ScriptError(MSG_CONSTANT)
            result = found(c, args)
            if type(result) in SIZED:
                check_size(result, c)
            if ref:
                check_size(args[0], c)
            return result, args[0]

        return library_method, cost

    def expr_chain(self, e: n.Chain) -> Code:
        links = e.links
        method_at = next((i for i, link in enumerate(links) if link.kind == n.Link.METHOD), -1)
        rooted = self._root(e.root) if method_at >= 0 else None
        if rooted is not None:
            steps, cost = self._steps(links)
            return Code(_path_method_chain(rooted, steps, method_at), cost + 1)
        root = self.compile_expr(e.root)
        steps, cost = self._steps(links)
        return Code(_read_chain(root, steps), root.cost + cost)


def _binary_closure(fn: Callable[[Ctx, Any, Any], Any], left: Code, right: Code) -> Ev:
    le, re = left.ev, right.ev
    if left.slot >= 0:
        li = left.slot
        if right.is_const:
            rv = right.const

            def slot_const(s: list[Any], c: Ctx) -> Any:
                return fn(c, s[li], rv)

            return slot_const
        if right.slot >= 0:
            ri = right.slot

            def slot_slot(s: list[Any], c: Ctx) -> Any:
                return fn(c, s[li], s[ri])

            return slot_slot

        def slot_expr(s: list[Any], c: Ctx) -> Any:
            return fn(c, s[li], re(s, c))

        return slot_expr
    if right.is_const:
        rv2 = right.const

        def expr_const(s: list[Any], c: Ctx) -> Any:
            return fn(c, le(s, c), rv2)

        return expr_const

    def expr_expr(s: list[Any], c: Ctx) -> Any:
        return fn(c, le(s, c), re(s, c))

    return expr_expr


def _script_call(fn: CompiledFn, evs: tuple[Ev, ...]) -> Ev:
    if not evs:

        def call0(s: list[Any], c: Ctx) -> Any:
            return invoke(fn, [], c)

        return call0
    if len(evs) == 1:
        a0 = evs[0]

        def call1(s: list[Any], c: Ctx) -> Any:
            return invoke(fn, [a0(s, c)], c)

        return call1

    def call(s: list[Any], c: Ctx) -> Any:
        return invoke(fn, [ev(s, c) for ev in evs], c)

    return call


def _lib_call(lib: Callable[[Ctx, list[Any]], Any], evs: tuple[Ev, ...]) -> Ev:
    def call(s: list[Any], c: Ctx) -> Any:
        result = lib(c, [ev(s, c) for ev in evs])
        if type(result) in SIZED:
            check_size(result, c)
        return result

    return call


def _lib_call_ref(
    lib: Callable[[Ctx, list[Any]], Any], slot: int, is_this: bool, rest: tuple[Ev, ...]
) -> Ev:
    """`f(var, …)`: the variable is passed by reference, so mutations stick (Rhai)."""

    def call(s: list[Any], c: Ctx) -> Any:
        args = [None]
        for ev in rest:
            args.append(ev(s, c))
        recv = s[slot]
        if is_this and recv is UNBOUND:
            raise ScriptError(MSG_THIS)
        args[0] = recv
        result = lib(c, args)
        new = args[0]
        if new is not recv:
            s[slot] = new
        check_size(new, c)
        if type(result) in SIZED:
            check_size(result, c)
        return result

    return call


def _apply_steps(s: list[Any], c: Ctx, v: Any, steps: Sequence[tuple[int, bool, Any]]) -> Any:
    for kind, elvis, payload in steps:
        if elvis and v is None:
            return None
        if kind == _PROP:
            v = get_prop(v, payload)
        elif kind == _INDEX:
            v = get_index(c, v, payload(s, c))
        else:
            v = payload(s, c, v, False, False)[0]
    return v


def _read_chain(root: Code, steps: list[tuple[int, bool, Any]]) -> Ev:
    frozen = tuple(steps)
    if len(frozen) == 1:
        kind, elvis, payload = frozen[0]
        if kind == _PROP and root.slot >= 0:
            slot = root.slot
            name = payload

            def slot_prop(s: list[Any], c: Ctx) -> Any:
                v = s[slot]
                if type(v) is dict:
                    return v.get(name)
                if elvis and v is None:
                    return None
                return get_prop(v, name)

            return slot_prop
        if kind == _INDEX and root.slot >= 0:
            slot = root.slot
            index = payload

            def slot_index(s: list[Any], c: Ctx) -> Any:
                v = s[slot]
                if elvis and v is None:
                    return None
                return get_index(c, v, index(s, c))

            return slot_index
    root_ev = root.ev

    def chain(s: list[Any], c: Ctx) -> Any:
        return _apply_steps(s, c, root_ev(s, c), frozen)

    return chain


def _path_method_chain(
    rooted: tuple[int, bool, bool], steps: list[tuple[int, bool, Any]], method_at: int
) -> Ev:
    """A chain whose first method call has a receiver reachable from a variable (or `this`):
    the receiver is passed by reference and written back when the call changes it."""
    slot, const, is_this = rooted
    prefix = tuple(steps[:method_at])
    _, method_elvis, method = steps[method_at]
    suffix = tuple(steps[method_at + 1 :])

    def chain(s: list[Any], c: Ctx) -> Any:
        root = s[slot]
        if is_this and root is UNBOUND:
            raise ScriptError(MSG_THIS)
        v = root
        trail: list[tuple[Any, bool, Any]] = []
        for kind, elvis, payload in prefix:
            if elvis and v is None:
                return None
            if kind == _PROP:
                trail.append((v, True, payload))
                v = get_prop(v, payload)
            else:
                key = payload(s, c)
                trail.append((v, False, key))
                v = get_index(c, v, key)
        if method_elvis and v is None:
            return None
        result, new = method(s, c, v, const, True)
        if new is not v:
            if const:
                raise ScriptError(MSG_CONSTANT)
            s[slot] = write_back(c, trail, new)
        if suffix:
            return _apply_steps(s, c, result, suffix)
        return result

    return chain


_STMT_HANDLERS: Final[dict[type, Callable[[Compiler, Any], tuple[Ev, int]]]] = {
    n.ExprStmt: Compiler.stmt_expr,
    n.Noop: Compiler.stmt_noop,
    n.Block: Compiler.stmt_block,
    n.Let: Compiler.stmt_let,
    n.Assign: Compiler.stmt_assign,
    n.If: Compiler.stmt_if,
    n.Switch: Compiler.stmt_switch,
    n.While: Compiler.stmt_while,
    n.DoLoop: Compiler.stmt_do,
    n.For: Compiler.stmt_for,
    n.Break: Compiler.stmt_break,
    n.Continue: Compiler.stmt_continue,
    n.Return: Compiler.stmt_return,
    n.Throw: Compiler.stmt_throw,
    n.TryCatch: Compiler.stmt_try,
}

_EXPR_HANDLERS: Final[dict[type, Callable[[Compiler, Any], Code]]] = {
    n.Lit: Compiler.expr_lit,
    n.Var: Compiler.expr_var,
    n.This: Compiler.expr_this,
    n.ArrayLit: Compiler.expr_array,
    n.MapLit: Compiler.expr_map,
    n.Interp: Compiler.expr_interp,
    n.Unary: Compiler.expr_unary,
    n.Binary: Compiler.expr_binary,
    n.Call: Compiler.expr_call,
    n.Chain: Compiler.expr_chain,
    n.StmtExpr: Compiler.expr_stmt,
}
