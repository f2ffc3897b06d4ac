"""The parser: tokens to a syntax tree, refusing everything outside the subset.

Recursive descent for statements and precedence climbing for operators, following Rhai's
parser closely enough that its expression-depth accounting (`level_up`) matches: every
construct that raises the level in Rhai raises it here, and a level beyond 64 is refused.
"""

from __future__ import annotations

from typing import Any, Final

from coordinator_core.functions import nodes as n
from coordinator_core.functions.errors import ParseError
from coordinator_core.functions.lexer import (
    CHAR,
    EOF,
    ERROR,
    FLOAT,
    IDENT,
    INT,
    INTERP,
    ISTR_END,
    KW,
    KWFN,
    OP,
    STR,
    Token,
    reserved_message,
)
from coordinator_core.functions.rvalues import MIN_I64, Char, Range
from coordinator_core.limits import (
    FUNCTION_MAX_ARRAY_ITEMS,
    FUNCTION_MAX_EXPRESSION_DEPTH,
    FUNCTION_MAX_MAP_ENTRIES,
)

PRECEDENCE: Final = {
    "||": 30,
    "|": 30,
    "^": 30,
    "&&": 60,
    "&": 60,
    "==": 90,
    "!=": 90,
    "in": 110,
    "!in": 110,
    "<": 130,
    "<=": 130,
    ">": 130,
    ">=": 130,
    "??": 135,
    "..": 140,
    "..=": 140,
    "+": 150,
    "-": 150,
    "*": 180,
    "/": 180,
    "%": 180,
    "**": 190,
    "<<": 210,
    ">>": 210,
}
OP_ASSIGN: Final = {
    "+=": "+",
    "-=": "-",
    "*=": "*",
    "/=": "/",
    "%=": "%",
    "**=": "**",
    "<<=": "<<",
    ">>=": ">>",
    "&=": "&",
    "|=": "|",
    "^=": "^",
}
# Keyword-functions usable in method position (`x.type_of()`); only type_of is in the subset.
_METHOD_KEYWORDS: Final = frozenset(("type_of", "call", "curry", "is_shared"))
_OPEN_RANGE_FOLLOWERS: Final = frozenset(("]", ")", "}", ",", ";", "=>"))
_JUMPS: Final = frozenset(("break", "continue", "return", "throw"))

MSG_DEPTH: Final = f"Expression nesting is deeper than {FUNCTION_MAX_EXPRESSION_DEPTH} levels."
MSG_CLOSURE: Final = "Closures and anonymous functions are not permitted."
MSG_FN_POINTER: Final = "Function pointers and function reflection are not permitted."
MSG_CAPTURE: Final = "Calling a function in the caller's scope is not permitted."
MSG_PATH: Final = "Module paths ('::') are not permitted."
MSG_RESERVED: Final = "A reserved keyword cannot be used here."
MSG_NOT_BOOL: Final = "A condition or logical operand must be a boolean expression."
MSG_NOT_ITERABLE: Final = "This literal cannot be iterated by 'for'."
MSG_NOT_LITERAL: Final = "A switch case must be a literal value."


class _NotLiteral:
    pass


NOT_LITERAL: Final = _NotLiteral()


def literal_value(e: n.Expr) -> Any:
    """The constant value of a literal expression, or NOT_LITERAL."""
    if isinstance(e, n.Lit):
        return e.value
    if isinstance(e, n.ArrayLit):
        items = [literal_value(x) for x in e.items]
        return NOT_LITERAL if any(x is NOT_LITERAL for x in items) else items
    if isinstance(e, n.MapLit):
        values = [literal_value(x) for x in e.values]
        if any(x is NOT_LITERAL for x in values):
            return NOT_LITERAL
        return dict(zip(e.keys, values, strict=True))
    if (
        isinstance(e, n.Binary)
        and e.op in ("..", "..=")
        and isinstance(e.left, n.Lit)
        and isinstance(e.right, n.Lit)
        and type(e.left.value) is int
        and type(e.right.value) is int
    ):
        return Range(e.left.value, e.right.value, e.op == "..=")
    return NOT_LITERAL


class FnHeader:
    """A function definition as far as its header: enough for duplicate and count checks."""

    __slots__ = ("column", "line", "name", "private")

    def __init__(self, name: str, private: bool, line: int, column: int) -> None:
        self.name = name
        self.private = private
        self.line = line
        self.column = column


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.in_fn = False
        self.breakable = False
        self.no_pipe = False
        self.errors: list[ParseError] = []
        self.headers: list[FnHeader] = []
        self.functions: list[n.FnDef] = []
        self.top: list[n.Stmt] = []

    # ------------------------------------------------------------------------ token access

    def peek(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind == ERROR:
            raise ParseError(token.value, token.line, token.column)
        return token

    def next(self) -> Token:
        token = self.peek()
        if token.kind != EOF:
            self.pos += 1
        return token

    def fail(self, message: str, token: Token | None = None) -> ParseError:
        if token is None:
            token = self.tokens[self.pos]
        return ParseError(message, token.line, token.column)

    def expect(self, symbol: str, message: str) -> Token:
        token = self.peek()
        if not token.is_op(symbol):
            raise self.fail(message, token)
        self.pos += 1
        return token

    def level_up(self, level: int) -> int:
        if level >= FUNCTION_MAX_EXPRESSION_DEPTH:
            raise self.fail(MSG_DEPTH)
        return level + 1

    # --------------------------------------------------------------------------- the file

    def parse_file(self) -> None:
        while True:
            item_start = self.pos
            try:
                token = self.peek()
                if token.kind == EOF:
                    return
                if token.is_kw("fn") or token.is_kw("private"):
                    self.functions.append(self.parse_fn())
                    continue
                stmt = self.parse_stmt(0)
                if isinstance(stmt, n.Noop):
                    continue
                self.top.append(stmt)
                token = self.peek()
                if token.kind == EOF:
                    return
                if token.is_op(";"):
                    self.pos += 1
                elif not stmt.self_terminated:
                    raise self.fail("';' is expected between statements.", token)
            except ParseError as error:
                self.errors.append(error)
                if not self.recover(item_start):
                    return

    def recover(self, item_start: int) -> bool:
        """Skip to the next top-level `fn`/`private`, judged by brace balance since the item
        began or, failing that, by a definition that starts a line. False at the end."""
        tokens = self.tokens
        depth = 0
        for token in tokens[item_start : self.pos]:
            depth += _brace_delta(token)
        index = max(self.pos, item_start + 1)
        while index < len(tokens):
            token = tokens[index]
            if token.kind == EOF:
                self.pos = index
                return False
            is_def = token.kind == KW and token.value in ("fn", "private")
            if is_def and (depth <= 0 or token.column == 1):
                self.pos = index
                return True
            depth += _brace_delta(token)
            index += 1
        return False

    def parse_fn(self) -> n.FnDef:
        start = self.next()
        private = start.is_kw("private")
        if private and not self.next().is_kw("fn"):
            raise self.fail("'private' must be followed by 'fn'.", self.tokens[self.pos - 1])
        level = self.level_up(0)
        name_token = self.next()
        if name_token.kind != IDENT:
            if name_token.kind == KWFN:
                raise self.fail(reserved_message(name_token.value), name_token)
            raise self.fail("A function name is expected after 'fn'.", name_token)
        name = name_token.value
        self.headers.append(FnHeader(name, private, start.line, start.column))
        params: list[str] = []
        token = self.next()
        if token.is_op("("):
            if self.peek().is_op(")"):
                self.pos += 1
            else:
                while True:
                    token = self.next()
                    if token.kind != IDENT:
                        if token.kind == KWFN:
                            raise self.fail(reserved_message(token.value), token)
                        raise self.fail("A parameter name is expected.", token)
                    if token.value in params:
                        raise self.fail("A parameter name is repeated.", token)
                    params.append(token.value)
                    token = self.next()
                    if token.is_op(")"):
                        break
                    if not token.is_op(","):
                        raise self.fail("',' is expected between parameters.", token)
        elif not token.is_op("()"):
            raise self.fail("A parameter list is expected after the function name.", token)
        definition = n.FnDef(name, params, private, start.line, start.column)
        if not self.peek().is_op("{"):
            raise self.fail("A function body is expected.")
        saved = (self.in_fn, self.breakable)
        self.in_fn, self.breakable = True, False
        try:
            definition.body = self.parse_block(level)
        finally:
            self.in_fn, self.breakable = saved
        return definition

    # ------------------------------------------------------------------------- statements

    def parse_block(self, level: int) -> n.Block:
        brace = self.next()
        if not brace.is_op("{"):
            raise self.fail("'{' is expected to start a block.", brace)
        level = self.level_up(level)
        stmts: list[n.Stmt] = []
        while True:
            token = self.peek()
            if token.is_op("}"):
                self.pos += 1
                break
            if token.kind == EOF:
                raise self.fail("'}' is missing at the end of a block.", token)
            stmt = self.parse_stmt(level)
            if isinstance(stmt, n.Noop):
                continue
            stmts.append(stmt)
            token = self.peek()
            if token.is_op("}"):
                self.pos += 1
                break
            if token.is_op(";"):
                self.pos += 1
            elif not stmt.self_terminated:
                raise self.fail("';' is expected between statements.", token)
        return n.Block(stmts, brace.line, brace.column)

    def parse_stmt(self, level: int) -> n.Stmt:
        token = self.peek()
        kind = token.kind
        if kind == EOF:
            return n.Noop(token.line, token.column)
        if kind == OP:
            if token.value == ";":
                self.pos += 1
                return n.Noop(token.line, token.column)
            if token.value == "{":
                return self.parse_block(self.level_up(level))
        elif kind == KW:
            word = token.value
            if word in ("fn", "private"):
                raise self.fail("Functions can only be defined at the top level.", token)
            if word == "if":
                return self.parse_if(self.level_up(level))
            if word == "switch":
                return self.parse_switch(self.level_up(level))
            if word in ("while", "loop"):
                return self.parse_while(self.level_up(level))
            if word == "do":
                return self.parse_do(self.level_up(level))
            if word == "for":
                return self.parse_for(self.level_up(level))
            if word in ("break", "continue"):
                if not self.breakable:
                    raise self.fail("'break' and 'continue' are only valid inside a loop.")
                self.pos += 1
                if word == "continue":
                    return n.Continue(token.line, token.column)
                value = self.optional_expr(self.level_up(level))
                return n.Break(value, token.line, token.column)
            if word in ("return", "throw"):
                self.pos += 1
                value = self.optional_expr(self.level_up(level))
                if word == "return":
                    return n.Return(value, token.line, token.column)
                return n.Throw(value, token.line, token.column)
            if word == "try":
                return self.parse_try(self.level_up(level))
            if word in ("let", "const"):
                return self.parse_let(self.level_up(level))
        return self.parse_expr_stmt(self.level_up(level))

    def optional_expr(self, level: int) -> n.Expr | None:
        start = self.pos
        try:
            return self.parse_expr(level)
        except ParseError:
            if self.pos == start:
                return None
            raise

    def var_name(self) -> Token:
        token = self.next()
        if token.kind == IDENT:
            return token
        if token.kind == KWFN:
            raise self.fail(reserved_message(token.value), token)
        raise self.fail("A variable name is expected.", token)

    def parse_let(self, level: int) -> n.Let:
        keyword = self.next()
        name = self.var_name()
        value = None
        if self.peek().is_op("="):
            self.pos += 1
            value = self.parse_expr(self.level_up(level))
        let = n.Let(name.value, value, keyword.is_kw("const"), keyword.line, keyword.column)
        let.name_line, let.name_column = name.line, name.column
        return let

    def parse_condition(self, level: int) -> n.Expr:
        if self.peek().is_op("{"):
            raise self.fail("An expression is expected before '{'.")
        expr = self.ensure_bool(self.parse_expr(level))
        if self.peek().is_op("="):
            raise self.fail("'=' is not valid here; possibly a typo of '=='.")
        return expr

    def ensure_bool(self, e: n.Expr) -> n.Expr:
        if (isinstance(e, n.Lit) and type(e.value) is not bool) or isinstance(
            e, n.ArrayLit | n.MapLit | n.Interp
        ):
            raise ParseError(MSG_NOT_BOOL, e.line, e.column)
        return e

    def parse_if(self, level: int) -> n.If:
        keyword = self.next()
        level = self.level_up(level)
        cond = self.parse_condition(level)
        then = self.parse_block(level)
        else_: n.Block | n.If | None = None
        if self.peek().is_kw("else"):
            self.pos += 1
            else_ = self.parse_if(level) if self.peek().is_kw("if") else self.parse_block(level)
        return n.If(cond, then, else_, keyword.line, keyword.column)

    def loop_body(self, level: int) -> n.Block:
        saved = self.breakable
        self.breakable = True
        try:
            return self.parse_block(level)
        finally:
            self.breakable = saved

    def parse_while(self, level: int) -> n.While:
        level = self.level_up(level)
        keyword = self.next()
        cond = self.parse_condition(level) if keyword.is_kw("while") else None
        body = self.loop_body(level)
        return n.While(cond, body, keyword.line, keyword.column)

    def parse_do(self, level: int) -> n.DoLoop:
        keyword = self.next()
        level = self.level_up(level)
        body = self.loop_body(level)
        token = self.next()
        if not (token.is_kw("while") or token.is_kw("until")):
            raise self.fail("'while' or 'until' is expected after a 'do' block.", token)
        cond = self.parse_condition(level)
        return n.DoLoop(body, cond, token.is_kw("until"), keyword.line, keyword.column)

    def parse_for(self, level: int) -> n.For:
        keyword = self.next()
        level = self.level_up(level)
        counter: str | None = None
        if self.peek().is_op("("):
            self.pos += 1
            var = self.var_name().value
            self.expect(",", "',' is expected after the loop variable.")
            counter_token = self.var_name()
            if counter_token.value == var:
                raise self.fail("The loop counter repeats the loop variable.", counter_token)
            counter = counter_token.value
            self.expect(")", "')' is expected after the loop counter.")
        else:
            var = self.var_name().value
        if not self.next().is_kw("in"):
            raise self.fail("'in' is expected after the loop variable.", self.tokens[self.pos - 1])
        if self.peek().is_op("{"):
            raise self.fail("An expression is expected before '{'.")
        iterable = self.parse_expr(level)
        if (
            isinstance(iterable, n.Lit)
            and type(iterable.value) in (type(None), bool, int, float, Char)
        ) or isinstance(iterable, n.MapLit):
            raise ParseError(MSG_NOT_ITERABLE, iterable.line, iterable.column)
        body = self.loop_body(level)
        return n.For(var, counter, iterable, body, keyword.line, keyword.column)

    def parse_try(self, level: int) -> n.TryCatch:
        keyword = self.next()
        level = self.level_up(level)
        body = self.parse_block(level)
        if not self.next().is_kw("catch"):
            raise self.fail("'catch' is expected after a 'try' block.", self.tokens[self.pos - 1])
        var: str | None = None
        if self.peek().is_op("("):
            self.pos += 1
            var = self.var_name().value
            self.expect(")", "')' is expected after the catch variable.")
        catch_body = self.parse_block(level)
        return n.TryCatch(body, var, catch_body, keyword.line, keyword.column)

    def parse_switch(self, level: int) -> n.Switch:
        keyword = self.next()
        level = self.level_up(level)
        subject = self.parse_expr(level)
        self.expect("{", "'{' is expected to start the switch block.")
        cases: list[n.Case] = []
        default_token: Token | None = None
        ranges_seen = False
        while True:
            token = self.peek()
            if token.is_op("}"):
                self.pos += 1
                break
            if token.kind == EOF:
                raise self.fail("'}' is missing at the end of the switch block.", token)
            if default_token is not None:
                raise self.fail("The default case '_' must be the last case.", default_token)
            patterns: list[n.Expr] | None
            guard: n.Expr | None = None
            if token.is_op("_"):
                self.pos += 1
                default_token = token
                if self.peek().is_kw("if"):
                    raise self.fail("The default case cannot have a condition.")
                patterns = None
            else:
                patterns = []
                while True:
                    saved = self.no_pipe
                    self.no_pipe = True
                    try:
                        patterns.append(self.parse_expr(level))
                    except ParseError as error:
                        raise ParseError(MSG_NOT_LITERAL, error.line, error.column) from None
                    finally:
                        self.no_pipe = saved
                    if self.peek().is_op("|"):
                        self.pos += 1
                        continue
                    break
                if self.peek().is_kw("if"):
                    self.pos += 1
                    guard = self.parse_condition(level)
            self.expect("=>", "'=>' is expected in a switch case.")
            body = self.parse_stmt(level)
            values: list[Any] | None = None
            if patterns is not None:
                values = []
                for pattern in patterns:
                    value = literal_value(pattern)
                    if value is NOT_LITERAL:
                        raise ParseError(MSG_NOT_LITERAL, pattern.line, pattern.column)
                    if type(value) is Range:
                        if value.is_empty():
                            continue
                        ranges_seen = True
                    elif ranges_seen and type(value) in (int, float):
                        raise ParseError(
                            "A numeric case cannot follow a range case.",
                            pattern.line,
                            pattern.column,
                        )
                    values.append(value)
            cases.append(n.Case(values, guard, body, token.line, token.column))
            token = self.peek()
            if token.is_op(","):
                self.pos += 1
            elif token.is_op("}"):
                pass
            elif token.kind == EOF:
                raise self.fail("'}' is missing at the end of the switch block.", token)
            elif not body.self_terminated:
                raise self.fail("',' is expected between switch cases.", token)
        return n.Switch(subject, cases, keyword.line, keyword.column)

    def parse_expr_stmt(self, level: int) -> n.Stmt:
        expr = self.parse_expr(level)
        token = self.peek()
        if token.kind == OP and (token.value == "=" or token.value in OP_ASSIGN):
            self.pos += 1
            value = self.parse_expr(level)
            op = None if token.value == "=" else OP_ASSIGN[token.value]
            return self.make_assign(expr, op, value, token)
        return n.ExprStmt(expr)

    def make_assign(self, target: n.Expr, op: str | None, value: n.Expr, token: Token) -> n.Stmt:
        if isinstance(target, n.Var | n.This):
            return n.Assign(target, op, value, token.line, token.column)
        if isinstance(target, n.Chain):
            for link in target.links:
                if link.kind == n.Link.METHOD:
                    raise ParseError("A method call cannot be assigned to.", link.line, link.column)
            if not isinstance(target.root, n.Var | n.This):
                raise ParseError(
                    "Only a variable or a path from one can be assigned to.",
                    target.root.line,
                    target.root.column,
                )
            return n.Assign(target, op, value, token.line, token.column)
        if isinstance(target, n.Lit | n.ArrayLit | n.MapLit):
            raise ParseError("A constant cannot be assigned to.", target.line, target.column)
        if isinstance(target, n.Binary) and target.op in ("&&", "||", "??") and op is None:
            raise self.fail("'=' is not valid here; possibly a typo of '=='.", token)
        raise ParseError(
            "Only a variable or a path from one can be assigned to.", target.line, target.column
        )

    # ------------------------------------------------------------------------ expressions

    def parse_expr(self, level: int) -> n.Expr:
        level = self.level_up(level)
        return self.parse_binary(level, 1, self.parse_unary(level))

    def precedence(self, token: Token) -> int:
        if token.kind == OP:
            if self.no_pipe and token.value == "|":
                return 0
            return PRECEDENCE.get(token.value, 0)
        if token.kind == KW and token.value == "in":
            return 110
        return 0

    def parse_binary(self, level: int, parent: int, lhs: n.Expr) -> n.Expr:
        root = lhs
        while True:
            token = self.peek()
            prec = self.precedence(token)
            right_assoc = token.kind == OP and token.value == "**"
            if prec < parent or (prec == parent and not right_assoc):
                return root
            self.pos += 1
            op = token.value
            after = self.peek()
            rhs: n.Expr
            if op == "??" and after.kind == KW and after.value in _JUMPS:
                rhs = n.StmtExpr(self.parse_stmt(level))
            elif op in ("..", "..=") and after.kind == OP and after.value in _OPEN_RANGE_FOLLOWERS:
                rhs = n.Lit(None, after.line, after.column)
            else:
                rhs = self.parse_unary(level)
            next_prec = self.precedence(self.peek())
            if (prec == next_prec and right_assoc) or prec < next_prec:
                rhs = self.parse_binary(self.level_up(level), prec, rhs)
            level = self.level_up(level)
            if op in ("&&", "||"):
                self.ensure_bool(root)
                self.ensure_bool(rhs)
            root = n.Binary(op, root, rhs, token.line, token.column)

    def parse_unary(self, level: int) -> n.Expr:
        token = self.peek()
        if token.kind == OP:
            op = token.value
            if op == "-":
                self.pos += 1
                e = self.parse_unary(self.level_up(level))
                if isinstance(e, n.Lit) and type(e.value) is int:
                    value = e.value
                    if value == MIN_I64:
                        return n.Lit(-float(value), token.line, token.column)
                    return n.Lit(-value, token.line, token.column)
                if isinstance(e, n.Lit) and type(e.value) is float:
                    return n.Lit(-e.value, token.line, token.column)
                return n.Unary("-", e, token.line, token.column)
            if op == "+":
                self.pos += 1
                e = self.parse_unary(self.level_up(level))
                if isinstance(e, n.Lit) and type(e.value) in (int, float):
                    return e
                return n.Unary("+", e, token.line, token.column)
            if op == "!":
                self.pos += 1
                e = self.parse_unary(self.level_up(level))
                return n.Unary("!", e, token.line, token.column)
        return self.parse_primary(level)

    def parse_primary(self, level: int) -> n.Expr:
        token = self.peek()
        kind = token.kind
        line, column = token.line, token.column
        e: n.Expr
        if kind in (INT, FLOAT, STR):
            self.pos += 1
            e = n.Lit(token.value, line, column)
        elif kind == CHAR:
            self.pos += 1
            e = n.Lit(Char(token.value), line, column)
        elif kind == IDENT:
            self.pos += 1
            after = self.peek()
            if after.kind == OP:
                if after.value in ("(", "()"):
                    e = self.parse_call(level, token)
                elif after.value == "!":
                    raise self.fail(MSG_CAPTURE, after)
                elif after.value == "::":
                    raise self.fail(MSG_PATH, after)
                else:
                    e = n.Var(token.value, line, column)
            else:
                e = n.Var(token.value, line, column)
        elif kind == OP:
            value = token.value
            if value == "()":
                self.pos += 1
                e = n.Lit(None, line, column)
            elif value in ("..", "..="):
                e = n.Lit(0, line, column)  # `..b` is `0..b`; the operator is not consumed
            elif value == "{":
                e = n.StmtExpr(self.parse_block(self.level_up(level)))
            elif value == "(":
                self.pos += 1
                e = self.parse_expr(self.level_up(level))
                self.expect(")", "')' is expected to close the parenthesis.")
            elif value in ("|", "||"):
                if self.no_pipe:
                    raise self.fail(MSG_NOT_LITERAL)
                raise self.fail(MSG_CLOSURE)
            elif value == "[":
                e = self.parse_array(self.level_up(level))
            elif value == "#{":
                e = self.parse_map(self.level_up(level))
            else:
                raise self.fail("An expression is expected.")
        elif kind == KW:
            word = token.value
            if word in ("true", "false"):
                self.pos += 1
                e = n.Lit(word == "true", line, column)
            elif word == "if":
                e = n.StmtExpr(self.parse_if(self.level_up(level)))
            elif word in ("while", "loop"):
                e = n.StmtExpr(self.parse_while(self.level_up(level)))
            elif word == "do":
                e = n.StmtExpr(self.parse_do(self.level_up(level)))
            elif word == "for":
                e = n.StmtExpr(self.parse_for(self.level_up(level)))
            elif word == "switch":
                e = n.StmtExpr(self.parse_switch(self.level_up(level)))
            elif word == "this":
                if not self.in_fn:
                    raise self.fail("'this' can only be used inside a function.")
                self.pos += 1
                e = n.This(line, column)
            elif word == "global":
                self.pos += 1
                if self.peek().is_op("::"):
                    raise self.fail(MSG_PATH)
                raise self.fail(reserved_message(token.value), token)
            else:
                raise self.fail("An expression is expected.")
        elif kind == KWFN:
            self.pos += 1
            after = self.peek()
            if not (after.is_op("(") or after.is_op("()")):
                raise self.fail(reserved_message(token.value), token)
            if token.value != "type_of":
                raise self.fail(MSG_FN_POINTER, token)
            e = self.parse_call(level, token)
        elif kind == INTERP:
            e = self.parse_interp(self.level_up(level))
        elif kind == EOF:
            raise self.fail("The source ends in the middle of an expression.")
        else:
            raise self.fail("An expression is expected.")
        return self.parse_postfix(level, e)

    def parse_interp(self, level: int) -> n.Interp:
        first = self.next()
        parts: list[str | n.Block] = []
        if first.value:
            parts.append(first.value)
        while True:
            parts.append(self.parse_block(level))
            token = self.next()
            if token.kind not in (INTERP, ISTR_END):
                raise self.fail("An interpolated string is malformed.", token)
            if token.value:
                parts.append(token.value)
            if token.kind == ISTR_END:
                break
        return n.Interp(parts, first.line, first.column)

    def parse_call(self, level: int, name: Token) -> n.Call:
        args = self.parse_args(level)
        return n.Call(name.value, args, name.line, name.column)

    def parse_args(self, level: int) -> list[n.Expr]:
        token = self.next()
        if token.is_op("()"):
            return []
        if self.peek().is_op(")"):
            self.pos += 1
            return []
        level = self.level_up(level)
        args: list[n.Expr] = []
        while True:
            if not self.peek().is_op(")"):
                args.append(self.parse_expr(level))
            token = self.peek()
            if token.is_op(")"):
                self.pos += 1
                return args
            if token.is_op(","):
                self.pos += 1
                continue
            if token.kind == EOF:
                raise self.fail("')' is missing at the end of the arguments.", token)
            raise self.fail("',' is expected between arguments.", token)

    def parse_postfix(self, level: int, e: n.Expr) -> n.Expr:
        links: list[n.Link] = []
        chain_level = level
        while True:
            token = self.peek()
            if token.kind != OP:
                break
            symbol = token.value
            if symbol in (".", "?."):
                self.pos += 1
                chain_level = self.level_up(chain_level)
                elvis = symbol == "?."
                name = self.peek()
                if name.kind == IDENT or (name.kind == KWFN and name.value in _METHOD_KEYWORDS):
                    self.pos += 1
                elif name.kind == KWFN:
                    raise self.fail(MSG_RESERVED, name)
                else:
                    raise self.fail("A property name is expected after '.'.", name)
                after = self.peek()
                if after.is_op("(") or after.is_op("()"):
                    if name.kind == KWFN and name.value != "type_of":
                        raise self.fail(MSG_FN_POINTER, name)
                    args = self.parse_args(chain_level)
                    links.append(
                        n.Link(n.Link.METHOD, elvis, name.line, name.column, name.value, args=args)
                    )
                elif after.is_op("!"):
                    raise self.fail(MSG_CAPTURE, after)
                else:
                    if name.kind == KWFN:
                        raise self.fail(MSG_RESERVED, name)
                    links.append(n.Link(n.Link.PROP, elvis, name.line, name.column, name.value))
            elif symbol in ("[", "?["):
                self.pos += 1
                chain_level = self.level_up(chain_level)
                index = self.parse_expr(self.level_up(chain_level))
                if not links:
                    self.check_index_literal(e, index)
                self.expect("]", "']' is expected to close the index.")
                links.append(
                    n.Link(n.Link.INDEX, symbol == "?[", token.line, token.column, index=index)
                )
            else:
                break
        if not links:
            return e
        if isinstance(e, n.Chain):
            # `(x.a).b` is one chain, as Rhai merges a parenthesised chain into its parent
            return n.Chain(e.root, e.links + links, e.line, e.column)
        return n.Chain(e, links, e.line, e.column)

    def check_index_literal(self, target: n.Expr, index: n.Expr) -> None:
        bad = False
        index_value = index.value if isinstance(index, n.Lit) else None
        is_logic = isinstance(index, n.Binary) and index.op in ("&&", "||")
        if isinstance(target, n.MapLit):
            bad = is_logic or (
                isinstance(index, n.Lit)
                and type(index_value) in (int, float, Char, type(None), bool)
            )
        elif isinstance(target, n.ArrayLit | n.Interp) or (
            isinstance(target, n.Lit) and type(target.value) in (int, str)
        ):
            bad = (
                is_logic
                or isinstance(index, n.Interp)
                or (
                    isinstance(index, n.Lit)
                    and type(index_value) in (str, float, Char, type(None), bool)
                )
            )
        if bad:
            raise ParseError(
                "The index has the wrong type for this value.", index.line, index.column
            )

    def parse_array(self, level: int) -> n.ArrayLit:
        bracket = self.next()
        items: list[n.Expr] = []
        while True:
            if len(items) >= FUNCTION_MAX_ARRAY_ITEMS:
                raise self.fail(
                    f"An array literal has more than {FUNCTION_MAX_ARRAY_ITEMS - 1} items."
                )
            token = self.peek()
            if token.is_op("]"):
                self.pos += 1
                break
            if token.kind == EOF:
                raise self.fail("']' is missing at the end of the array literal.", token)
            items.append(self.parse_expr(self.level_up(level)))
            token = self.peek()
            if token.is_op(","):
                self.pos += 1
            elif not token.is_op("]"):
                if token.kind == EOF:
                    raise self.fail("']' is missing at the end of the array literal.", token)
                raise self.fail("',' is expected between array items.", token)
        return n.ArrayLit(items, bracket.line, bracket.column)

    def parse_map(self, level: int) -> n.MapLit:
        brace = self.next()
        keys: list[str] = []
        values: list[n.Expr] = []
        while True:
            token = self.peek()
            if token.is_op("}"):
                self.pos += 1
                break
            if token.kind == EOF:
                raise self.fail("'}' is missing at the end of the map literal.", token)
            self.pos += 1
            if token.kind in (IDENT, STR):
                if token.value in keys:
                    raise self.fail("A map literal repeats a key.", token)
                key = token.value
            elif token.kind == KWFN:
                raise self.fail(reserved_message(token.value), token)
            else:
                raise self.fail("A property name is expected in the map literal.", token)
            self.expect(":", "':' is expected after a map key.")
            if len(keys) >= FUNCTION_MAX_MAP_ENTRIES:
                raise self.fail(f"A map literal has more than {FUNCTION_MAX_MAP_ENTRIES} entries.")
            values.append(self.parse_expr(self.level_up(level)))
            keys.append(key)
            token = self.peek()
            if token.is_op(","):
                self.pos += 1
            elif not token.is_op("}"):
                if token.kind == IDENT:
                    raise self.fail("',' is expected between map entries.", token)
                raise self.fail("'}' is missing at the end of the map literal.", token)
        return n.MapLit(keys, values, brace.line, brace.column)


def _brace_delta(token: Token) -> int:
    if token.kind == OP:
        if token.value in ("{", "#{"):
            return 1
        if token.value == "}":
            return -1
    return 0
