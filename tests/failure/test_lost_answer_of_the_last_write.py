"""Story: the answer of the write that completes a workflow's last node is lost.

The write lands in DynamoDB, then the controller gets a read timeout: it cannot know. Its
event is not acknowledged, SQS delivers it again, and the repeat must neither apply the
success twice nor end the run twice, nor leave it running. The same for the next writes,
the count of finished leaves and the run's end itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from fireline.domain import errors, workflow
from helpers.faults import FaultPlan
from helpers.flows import DIAMOND, node
from helpers.system import moto_flow

# Within the controller's handling of the last node's completion, its writes in order:
# the node's own success (a leaf: one conditional UpdateItem), the run's count of finished
# leaves (an UpdateItem, added by whoever's write finished the leaf), then the run's end (a
# conditional PutItem of the run). With each, who records the end:
# - the success's or the count's answer lost: the first handling stopped before the end;
#   the periodic reconcile, a minute on (it reads every row, and the count is only a
#   shortcut), records it before the repeat comes (SQS hides the failed event 30 minutes),
#   and the repeat finds the run ended;
# - the end's answer lost: the first handling recorded it; the repeat finds the run ended.
RECONCILE = "the periodic reconcile"
WRITES = {
    "the last node's success": (0, RECONCILE),
    "the leaf's count": (1, RECONCILE),
    "the run's end": (2, 0),
}


class LoseOneAnswer:
    """The controller, with the fault plan on only while it applies ``last``'s completion
    (the first time)."""

    def __init__(self, controller: Any, plan: FaultPlan, last: str, clock: Any) -> None:
        self._controller = controller
        self._clock = clock
        self.times: list[datetime] = []
        self._plan = plan
        self._last = last
        self.handled = 0
        self.failed = 0

    def handle(self, body: dict[str, Any]) -> Any:
        is_last = body.get("type") == "node_done" and body.get("node_id") == self._last
        self.handled += is_last
        if is_last:
            self.times.append(self._clock.now())
        self._plan.enabled = is_last and self.failed == 0
        try:
            return self._controller.handle(body)
        except errors.Unavailable:
            self.failed += 1
            raise  # the record fails: not deleted, SQS delivers it again
        finally:
            self._plan.enabled = False


@pytest.mark.parametrize("write", WRITES)
def test_the_lost_answer_of_the_write_that_completes_the_run_converges(write: str) -> None:
    with moto_flow() as (system, flow):
        # GIVEN the diamond a -> (b, c) -> d, and the answer of one write of d's
        # completion lost after it was applied
        names, edges = DIAMOND
        flow.register([node(n) for n in names], edges)
        index, ending = WRITES[write]
        plan = FaultPlan(at={index: "after"}, only={"UpdateItem", "PutItem"})
        plan.enabled = False
        plan.attach(system.ddb)
        controller = flow.controller
        lossy = LoseOneAnswer(controller, plan, last="d", clock=system.clock)
        flow.controller = lossy  # type: ignore[assignment]
        run = flow.start()
        reconciled: list[datetime] = []
        # WHEN the run is driven until it ended and d's completion was handled again (the
        # failed event redelivered by SQS a visibility timeout later)
        for _ in range(100):
            if lossy.handled == 2 and flow.run_state(run) is not workflow.RunState.RUNNING:
                break
            try:
                if not flow.step():
                    system.clock.advance(60)  # the WorkflowQueue hides a failed event 30 min
                    # the deployed controller's reconcile of running runs, every minute
                    if controller.reconcile_active():
                        reconciled.append(system.clock.now())
            except errors.Unavailable:
                pass
        # THEN the fault fired once, and the completion was handled again
        assert plan.fired == {"after": 1}
        assert lossy.failed == 1 and lossy.handled == 2
        # AND the run ended succeeded, once: its end carries the time of the handling that
        # recorded it (a second end would have written the other's, 30 minutes apart)
        ended = flow.store.get_run(run.run_id)
        assert ended is not None and ended.state is workflow.RunState.SUCCEEDED
        if ending == RECONCILE:
            # recorded by a reconcile, and not again by the repeat
            assert ended.finished_at in reconciled
            assert ended.finished_at != lossy.times[1]
        else:
            assert ended.finished_at == lossy.times[ending]
        # AND every node's effect happened once, in dependency order
        assert dict(flow.ledger.effects) == dict.fromkeys(names, 1)
        print(
            f"\nlost answer of {write}: d's completion handled {lossy.handled} times, "
            f"run {ended.state.value} once, effects {sum(flow.ledger.effects.values())}/4"
        )
