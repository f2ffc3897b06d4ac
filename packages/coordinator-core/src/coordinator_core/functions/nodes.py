"""The syntax tree: one small class per accepted construct, each with a 1-based position."""

from __future__ import annotations

from typing import Any


class Node:
    __slots__ = ("column", "line")

    def __init__(self, line: int, column: int) -> None:
        self.line = line
        self.column = column


# ------------------------------------------------------------------------------ expressions


class Expr(Node):
    __slots__ = ()


class Lit(Expr):
    """A constant: int, float, str, Char, bool or None (unit)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, line: int, column: int) -> None:
        super().__init__(line, column)
        self.value = value


class Var(Expr):
    __slots__ = ("name",)

    def __init__(self, name: str, line: int, column: int) -> None:
        super().__init__(line, column)
        self.name = name


class This(Expr):
    __slots__ = ()


class ArrayLit(Expr):
    __slots__ = ("items",)

    def __init__(self, items: list[Expr], line: int, column: int) -> None:
        super().__init__(line, column)
        self.items = items


class MapLit(Expr):
    __slots__ = ("keys", "values")

    def __init__(self, keys: list[str], values: list[Expr], line: int, column: int) -> None:
        super().__init__(line, column)
        self.keys = keys
        self.values = values


class Interp(Expr):
    """A back-tick string with `${…}`: text parts and blocks, in order."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[str | Block], line: int, column: int) -> None:
        super().__init__(line, column)
        self.parts = parts


class Unary(Expr):
    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: Expr, line: int, column: int) -> None:
        super().__init__(line, column)
        self.op = op
        self.operand = operand


class Binary(Expr):
    """Every binary operator, including `&&`, `||`, `??`, ranges, `in` and `!in`."""

    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Expr, right: Expr, line: int, column: int) -> None:
        super().__init__(line, column)
        self.op = op
        self.left = left
        self.right = right


class Call(Expr):
    __slots__ = ("args", "name")

    def __init__(self, name: str, args: list[Expr], line: int, column: int) -> None:
        super().__init__(line, column)
        self.name = name
        self.args = args


class Link(Node):
    """One postfix step of a chain: `.name`, `[index]` or `.name(args)`; `elvis` for `?`."""

    __slots__ = ("args", "elvis", "index", "kind", "name")

    PROP = 0
    INDEX = 1
    METHOD = 2

    def __init__(
        self,
        kind: int,
        elvis: bool,
        line: int,
        column: int,
        name: str = "",
        index: Expr | None = None,
        args: list[Expr] | None = None,
    ) -> None:
        super().__init__(line, column)
        self.kind = kind
        self.elvis = elvis
        self.name = name
        self.index = index
        self.args = args if args is not None else []


class Chain(Expr):
    __slots__ = ("links", "root")

    def __init__(self, root: Expr, links: list[Link], line: int, column: int) -> None:
        super().__init__(line, column)
        self.root = root
        self.links = links


class StmtExpr(Expr):
    """A statement used as an expression: if, switch, loops, blocks, or a `??` jump."""

    __slots__ = ("stmt",)

    def __init__(self, stmt: Stmt) -> None:
        super().__init__(stmt.line, stmt.column)
        self.stmt = stmt


# ------------------------------------------------------------------------------- statements


class Stmt(Node):
    __slots__ = ()
    self_terminated = False


class Noop(Stmt):
    __slots__ = ()


class ExprStmt(Stmt):
    __slots__ = ("expr",)

    def __init__(self, expr: Expr) -> None:
        super().__init__(expr.line, expr.column)
        self.expr = expr


class Let(Stmt):
    __slots__ = ("const", "name", "name_column", "name_line", "value")

    def __init__(self, name: str, value: Expr | None, const: bool, line: int, column: int) -> None:
        super().__init__(line, column)
        self.name = name
        self.value = value
        self.const = const
        self.name_line = line
        self.name_column = column


class Assign(Stmt):
    """`target = value` or `target op= value`; `op` is the binary operator or None."""

    __slots__ = ("op", "target", "value")

    def __init__(self, target: Expr, op: str | None, value: Expr, line: int, column: int) -> None:
        super().__init__(line, column)
        self.target = target
        self.op = op
        self.value = value


class Block(Stmt):
    __slots__ = ("stmts",)
    self_terminated = True

    def __init__(self, stmts: list[Stmt], line: int, column: int) -> None:
        super().__init__(line, column)
        self.stmts = stmts


class If(Stmt):
    __slots__ = ("cond", "else_", "then")
    self_terminated = True

    def __init__(
        self, cond: Expr, then: Block, else_: Block | If | None, line: int, column: int
    ) -> None:
        super().__init__(line, column)
        self.cond = cond
        self.then = then
        self.else_ = else_


class Case(Node):
    """One switch arm: literal patterns (None for `_`), optional guard, the arm statement."""

    __slots__ = ("body", "guard", "patterns")

    def __init__(
        self, patterns: list[Any] | None, guard: Expr | None, body: Stmt, line: int, column: int
    ) -> None:
        super().__init__(line, column)
        self.patterns = patterns
        self.guard = guard
        self.body = body


class Switch(Stmt):
    __slots__ = ("cases", "subject")
    self_terminated = True

    def __init__(self, subject: Expr, cases: list[Case], line: int, column: int) -> None:
        super().__init__(line, column)
        self.subject = subject
        self.cases = cases


class While(Stmt):
    """`while cond {}` or, with `cond` None, `loop {}`."""

    __slots__ = ("body", "cond")
    self_terminated = True

    def __init__(self, cond: Expr | None, body: Block, line: int, column: int) -> None:
        super().__init__(line, column)
        self.cond = cond
        self.body = body


class DoLoop(Stmt):
    __slots__ = ("body", "cond", "until")

    def __init__(self, body: Block, cond: Expr, until: bool, line: int, column: int) -> None:
        super().__init__(line, column)
        self.body = body
        self.cond = cond
        self.until = until


class For(Stmt):
    __slots__ = ("body", "counter", "iterable", "var")
    self_terminated = True

    def __init__(
        self, var: str, counter: str | None, iterable: Expr, body: Block, line: int, column: int
    ) -> None:
        super().__init__(line, column)
        self.var = var
        self.counter = counter
        self.iterable = iterable
        self.body = body


class Break(Stmt):
    __slots__ = ("value",)

    def __init__(self, value: Expr | None, line: int, column: int) -> None:
        super().__init__(line, column)
        self.value = value


class Continue(Stmt):
    __slots__ = ()


class Return(Stmt):
    __slots__ = ("value",)

    def __init__(self, value: Expr | None, line: int, column: int) -> None:
        super().__init__(line, column)
        self.value = value


class Throw(Stmt):
    __slots__ = ("value",)

    def __init__(self, value: Expr | None, line: int, column: int) -> None:
        super().__init__(line, column)
        self.value = value


class TryCatch(Stmt):
    __slots__ = ("body", "catch_body", "var")
    self_terminated = True

    def __init__(
        self, body: Block, var: str | None, catch_body: Block, line: int, column: int
    ) -> None:
        super().__init__(line, column)
        self.body = body
        self.var = var
        self.catch_body = catch_body


class FnDef(Node):
    __slots__ = ("body", "name", "params", "private")

    def __init__(self, name: str, params: list[str], private: bool, line: int, column: int) -> None:
        super().__init__(line, column)
        self.name = name
        self.params = params
        self.private = private
        self.body: Block | None = None
