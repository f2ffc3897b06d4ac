"""The clean-up lint: a cancel or a timeout that ends a run with an accepted mutation still open.

Some mutations leave something open at their product until it completes or is withdrawn: a
Casework review request stays with its reviewers (the catalogue says which, and which operation
withdraws it: `OperationDescriptor.withdrawal`). A run can be cancelled at any time and a
`wait-for` can time out; when that happens while such a mutation is open, the route taken must
pass a step that withdraws it, or the product keeps working on a request nobody will read.

Over the checked graph (acyclic, every step reachable), the steps whose accepted mutation is
still open on some route into each step are computed: a call of such an operation opens it on
its success route; a call of a withdrawing operation on the same connection closes it on its
success route; a `wait-for` on that call's completion closes it on its `next` route (the result
is final). Then, for every `wait-for` where something is open:

* a cancel there follows `onCancel` (on the cancel path a later `wait-for` follows its own
  `onCancel` at once, or the run stops): without `onCancel`, or when some route from it ends
  with something still open, `coordinator.definition.open-mutation` is warned at `onCancel`;
* a timeout there follows `onTimeout`: without it the run fails `wait-timed-out` with the
  mutation open; with it, every route from it must close what is open. The warning is at
  `onTimeout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from coordinator_core.authoring.model import (
    WORKFLOW_FILE,
    CallNode,
    ChooseNode,
    FinishNode,
    StepNode,
    WaitForNode,
    WaitUntilNode,
    WorkflowModel,
    routes_of,
)
from coordinator_core.definition.graph import GraphFacts
from coordinator_core.errors import Diagnostic, Related
from coordinator_core.operations import CATALOG, OperationDescriptor

__all__ = ["open_mutation_rules"]

CODE: Final = "coordinator.definition.open-mutation"
# The fixed sentences of the four findings ({step}: the wait-for; {named}: what stays open).
NO_ON_CANCEL: Final = (
    "Wait-for step {step} has no onCancel route: a run cancelled while it waits there leaves "
    "{named} open."
)
CANCEL_LEAVES_OPEN: Final = (
    "The onCancel route of wait-for step {step} can end the run without withdrawing {named}."
)
NO_ON_TIMEOUT: Final = (
    "Wait-for step {step} has no onTimeout route: a run that times out there fails with "
    "{named} still open."
)
TIMEOUT_LEAVES_OPEN: Final = (
    "The onTimeout route of wait-for step {step} can end the run without withdrawing {named}."
)

Open = frozenset[str]


class _Routes:
    """What is open after each route, and what a route from a step can leave open."""

    def __init__(self, model: WorkflowModel) -> None:
        assert model.steps is not None
        self.steps: Mapping[str, StepNode] = model.steps
        self.model = model
        self.memo: dict[tuple[str, Open, bool], Open] = {}

    def operation(self, step: StepNode) -> OperationDescriptor | None:
        if not isinstance(step, CallNode) or step.operation is None:
            return None
        return CATALOG.get(self.model.alias_operation(step.operation) or "")

    def connection(self, step: StepNode) -> str | None:
        if not isinstance(step, CallNode) or step.operation is None:
            return None
        alias = (self.model.operations or {}).get(step.operation)
        return alias.connection if alias is not None else None

    def what(self, step_id: str) -> str:
        operation = self.operation(self.steps[step_id])
        assert operation is not None and operation.withdrawal is not None
        return operation.withdrawal.what

    def after(self, step: StepNode, route: str, open_before: Open) -> Open:
        """What is open after leaving `step` by `route` (a route word)."""
        if route != "next":
            return open_before
        if isinstance(step, WaitForNode):
            return open_before - {step.call} if step.call in open_before else open_before
        operation = self.operation(step)
        if operation is None:
            return open_before
        found = set(open_before)
        if operation.withdrawal is not None:
            found.add(step.id)
        connection = self.connection(step)
        for opened in open_before:
            withdrawal = self.operation(self.steps[opened])
            assert withdrawal is not None and withdrawal.withdrawal is not None
            if operation.id in withdrawal.withdrawal.by and (
                self.connection(self.steps[opened]) == connection
            ):
                found.discard(opened)
        return frozenset(found)

    def left_open(self, step_id: str, open_now: Open, cancelled: bool) -> Open:
        """What some route from `step_id` can end the run with, still open. On the cancel
        path (`cancelled`) a `wait-for` takes its `onCancel` at once, or the run stops there;
        otherwise a `wait-for` is followed by its `next` (its own timeout and cancel are its
        own findings)."""
        if not open_now:
            return open_now
        key = (step_id, open_now, cancelled)
        known = self.memo.get(key)
        if known is not None:
            return known
        step = self.steps[step_id]
        result: set[str] = set()
        if isinstance(step, FinishNode):
            result |= open_now
        elif isinstance(step, WaitForNode):
            target = step.on_cancel if cancelled else step.next
            if target is None:
                result |= open_now
            else:
                taken = "cancel" if cancelled else "next"
                result |= self.left_open(target, self.after(step, taken, open_now), cancelled)
        elif isinstance(step, CallNode | ChooseNode | WaitUntilNode):
            for route in routes_of(step):
                result |= self.left_open(
                    route.target, self.after(step, route.kind, open_now), cancelled
                )
        found = frozenset(result)
        self.memo[key] = found
        return found


def open_mutation_rules(model: WorkflowModel, facts: GraphFacts, out: list[Diagnostic]) -> None:
    """Warn, at the `onCancel` or `onTimeout` of a `wait-for`, where a cancel or a timeout can
    end the run with an accepted mutation still open (see the module docstring)."""
    routes = _Routes(model)
    steps = routes.steps
    incoming: dict[str, list[tuple[str, str]]] = {}
    for edge in facts.edges:
        incoming.setdefault(edge.target, []).append((edge.source, edge.route))
    open_at: dict[str, Open] = {}
    for step_id in facts.order:
        found: set[str] = set()
        for source, route in incoming.get(step_id, ()):
            found |= routes.after(steps[source], route, open_at.get(source, frozenset()))
        open_at[step_id] = frozenset(found)
    rank = {step_id: index for index, step_id in enumerate(facts.order)}

    def report(step: WaitForNode, member: str, left: Open, sentence: str) -> None:
        ordered = sorted(left, key=lambda s: rank[s])
        named = " and ".join(f"the {routes.what(s)} of step {s}" for s in ordered)
        related = tuple(
            Related(
                WORKFLOW_FILE,
                steps[s].pointer,
                f"the {routes.what(s)} is accepted here",
                *model.key_position(steps[s].pointer),
            )
            for s in ordered
        )
        message = sentence.format(step=step.id, named=named)
        out.append(
            model.diagnostic(
                CODE, f"{step.pointer}/{member}", key=True, message=message, related=related
            )
        )

    for step_id in facts.order:
        step = steps[step_id]
        open_here = open_at[step_id]
        if not isinstance(step, WaitForNode) or not open_here:
            continue
        for member, target, cancelled, missing, unwithdrawn in (
            ("onCancel", step.on_cancel, True, NO_ON_CANCEL, CANCEL_LEAVES_OPEN),
            ("onTimeout", step.on_timeout, False, NO_ON_TIMEOUT, TIMEOUT_LEAVES_OPEN),
        ):
            if target is None:
                report(step, member, open_here, missing)
                continue
            left = routes.left_open(target, open_here, cancelled=cancelled)
            if left:
                report(step, member, left, unwithdrawn)
