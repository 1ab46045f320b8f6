"""DynamoDB implementation of the WorkflowStore port: one table, one sparse index.

Items of the workflows table (see infra/template.yaml, WorkflowsTable):

- definition index: pk = ``T#{tenant}#W#{workflow}``, sk = ``v#{version:08d}``; the latest
  version is the first item of a descending Query. The document itself is in S3.
- workflow catalog: pk = ``C#{tenant}``, sk = ``W#{workflow}``, the latest version's index
  entry (written after it): a tenant's workflows, by id, in one Query.
- runs of a workflow: pk = ``WR#{tenant}#{workflow}``, sk = ``{created_at}#{run_id}``,
  written with the run in one transaction: a workflow's runs, newest first, in one Query.
- run: pk = ``R#{run_id}``, sk = ``run``. While the run is running it carries
  ``state_key = "active-runs"``, which puts it in the ``by_state`` index (the periodic
  reconcile's list); any other state removes it.
- node: pk = ``R#{run_id}``, sk = ``N#{node_id}``, with state, pending (unfinished parents),
  generation and fanout (fan-out chunks applied). Only a node in a rare state (failed,
  blocked, cancelled) carries ``state_key = "{run_id}#{state}"``, its index partition:
  a node's way through waiting, dispatched and succeeded writes nothing to the index.
  Nodes in those states are listed and counted from the run's partition itself.
- finished leaves: pk = ``R#{run_id}``, sk = ``leaves#{generation}``, a counter of the
  run's leaves that reached a final state in that generation, at most once each.

Every node move is a conditional write on the state read. A node's success is its own
conditional move first (dispatched -> succeeded, or one step of its fan-out cursor), then
one plain decrement per child: only the writer whose move applied decrements, so a
repeated completion decrements nothing; a crash between the move and the decrements
leaves counters too high, never too low, and the reconcile dispatches from the parents'
states.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from fireline import ports
from fireline.adapters.dynamodb import (
    _applied,
    _batch_get,
    _batch_write,
    _code,
    _decode,
    _decode_cursor,
    _encode,
    _encode_cursor,
    _query_page,
    _translated,
)
from fireline.domain import dag, errors, quota, workflow

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        TransactWriteItemTypeDef,
    )

    from fireline.adapters.quotas_dynamodb import DynamoQuotaStore
else:
    DynamoDBClient = TransactWriteItemTypeDef = Any

logger = Logger(service="fireline", child=True)
STATE_INDEX = "by_state"
LEAVES_PREFIX = "leaves#"
ACTIVE_RUNS = "active-runs"  # the index partition of running runs
RUN_SK = "run"
NODE_PREFIX = "N#"
VERSION_PREFIX = "v#"
MAX_VERSION = 10**8 - 1  # sk holds the version in 8 digits, so that it sorts
# Unprocessed batch items and transaction conflicts are retried this many times, with
# exponential backoff from BACKOFF_SECONDS, before the call gives up (errors.Unavailable).
ATTEMPTS = 6
BACKOFF_SECONDS = 0.05
INDEX_KEYS = ("pk", "sk", "state_key")
# Rows read per Query when a listing filters the run's partition by state.
PARTITION_READ = 100


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _opt_iso(moment: datetime | None) -> str | None:
    return None if moment is None else _iso(moment)


def _from_iso(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def definition_pk(tenant_id: str, workflow_id: str) -> str:
    return f"T#{tenant_id}#W#{workflow_id}"


def definition_sk(version: int) -> str:
    if not 1 <= version <= MAX_VERSION:
        raise errors.ValidationError(f"must be between 1 and {MAX_VERSION}", field="version")
    return f"{VERSION_PREFIX}{version:08d}"


def run_pk(run_id: str) -> str:
    return f"R#{run_id}"


def catalog_pk(tenant_id: str) -> str:
    return f"C#{tenant_id}"


def runs_pk(tenant_id: str, workflow_id: str) -> str:
    return f"WR#{tenant_id}#{workflow_id}"


@dataclass(frozen=True)
class Backfill:
    """What one page of :meth:`DynamoWorkflowStore.backfill_listings` did."""

    scanned: int  # items read
    catalogued: int  # catalog entries moved to a newer version
    runs: int  # runs' entries written (again, for those that had one)
    cursor: str | None  # where the next page starts; None at the end of the table


def _put_new(table: str, item: dict[str, Any]) -> TransactWriteItemTypeDef:
    """A transaction's put of an item whose key must not exist yet."""
    return {
        "Put": {
            "TableName": table,
            "Item": _encode(item),
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": "pk"},
        }
    }


def node_sk(node_id: str) -> str:
    return f"{NODE_PREFIX}{node_id}"


def node_state_key(run_id: str, state: dag.NodeState) -> str:
    # Node states hold no "#", so two runs' keys never meet.
    return f"{run_id}#{state.value}"


def _index_key(run_id: str, state: dag.NodeState) -> str | None:
    """The node's index partition in ``state``; None for a state the index leaves out."""
    return node_state_key(run_id, state) if state in workflow.INDEXED_STATES else None


def _definition_to_item(meta: workflow.DefinitionMeta) -> dict[str, Any]:
    return {
        "pk": definition_pk(meta.tenant_id, meta.workflow_id),
        "sk": definition_sk(meta.version),
        "tenant_id": meta.tenant_id,
        "workflow_id": meta.workflow_id,
        "version": meta.version,
        "nodes": meta.nodes,
        "edges": meta.edges,
        "created_at": _iso(meta.created_at),
        "digest": meta.digest,
    }


def _definition_from_item(record: dict[str, Any]) -> workflow.DefinitionMeta:
    created = _from_iso(record["created_at"])
    assert created is not None
    return workflow.DefinitionMeta(
        tenant_id=record["tenant_id"],
        workflow_id=record["workflow_id"],
        version=int(record["version"]),
        nodes=int(record["nodes"]),
        edges=int(record["edges"]),
        created_at=created,
        digest=record.get("digest", ""),
    )


def _run_to_item(run: workflow.Run) -> dict[str, Any]:
    return {
        "pk": run_pk(run.run_id),
        "sk": RUN_SK,
        "tenant_id": run.tenant_id,
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "version": run.version,
        "total": run.total,
        "state": run.state.value,
        "created_at": _opt_iso(run.created_at),
        "finished_at": _opt_iso(run.finished_at),
        "generation": run.generation,
        "materialized": run.materialized,
        "source": run.source,
        "has_failures": run.has_failures,
        "resetting": run.resetting,
        # Sparse: only a running run is in the index the periodic reconcile lists.
        "state_key": ACTIVE_RUNS if run.state is workflow.RunState.RUNNING else None,
    }


def _run_from_item(record: dict[str, Any]) -> workflow.Run:
    return workflow.Run(
        tenant_id=record["tenant_id"],
        run_id=record["run_id"],
        workflow_id=record["workflow_id"],
        version=int(record["version"]),
        total=int(record["total"]),
        state=workflow.RunState(record["state"]),
        created_at=_from_iso(record.get("created_at")),
        finished_at=_from_iso(record.get("finished_at")),
        generation=int(record["generation"]),
        materialized=int(record["materialized"]),
        source=record.get("source"),
        has_failures=bool(record.get("has_failures", False)),
        resetting=bool(record.get("resetting", False)),
    )


def _node_to_item(run_id: str, node: workflow.RunNode) -> dict[str, Any]:
    return {
        "pk": run_pk(run_id),
        "sk": node_sk(node.node_id),
        "state": node.state.value,
        "pending": node.pending,
        "generation": node.generation,
        "fanout": node.fanout,
        "state_key": _index_key(run_id, node.state),
    }


def _node_from_item(record: dict[str, Any]) -> workflow.RunNode:
    return workflow.RunNode(
        node_id=str(record["sk"])[len(NODE_PREFIX) :],
        state=dag.NodeState(record["state"]),
        pending=int(record["pending"]),
        generation=int(record["generation"]),
        fanout=int(record["fanout"]),
    )


class DynamoWorkflowStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        quotas: DynamoQuotaStore | None = None,
    ) -> None:
        self._client = client
        self._table = table_name
        self._sleep = sleep
        # Where a new workflow takes its unit of the tenant's quota (None: not counted).
        self._quotas = quotas

    def _backoff(self, attempt: int) -> None:
        self._sleep(min(BACKOFF_SECONDS * 2**attempt, 1.0))

    # --- definitions ---------------------------------------------------------------------

    def put_definition(
        self, meta: workflow.DefinitionMeta, *, charge: quota.Charge | None = None
    ) -> bool:
        # Two registrations that read the same latest version race for the next one: one
        # indexes it, the other is told to retry.
        version = _put_new(self._table, _definition_to_item(meta))
        if charge is None:
            # Alone, the version is one conditional put: a transaction would cost twice.
            if not _applied(lambda: self._client.put_item(**version["Put"])):
                return False
        else:
            if self._quotas is None:
                raise errors.ValidationError("this deployment counts no quotas", field="quota")
            reasons = self._quotas.transact([version, self._quotas.charge(meta.tenant_id, charge)])
            if reasons and reasons[0] == "ConditionalCheckFailed":
                return False  # the version is taken, and no unit was
            if reasons:
                raise self._quotas.refused(meta.tenant_id, charge)
        # Then the tenant's catalog entry moves to this version. A failure here must not
        # fail a registration that is done: the entry is an older version's until the next
        # registration moves it.
        try:
            self._catalog(meta)
        except errors.Unavailable:
            logger.warning("workflow catalog not updated", extra={"action": "catalog.stale"})
        return True

    def _catalog(self, meta: workflow.DefinitionMeta) -> bool:
        """Move the tenant's catalog entry of the workflow to ``meta``, only forward
        (versions may be indexed out of order); False if it is at that version or later."""
        entry = {**_definition_to_item(meta), "pk": catalog_pk(meta.tenant_id)}
        entry["sk"] = f"W#{meta.workflow_id}"
        return _applied(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=_encode(entry),
                ConditionExpression="attribute_not_exists(#pk) OR #v < :v",
                ExpressionAttributeNames={"#pk": "pk", "#v": "version"},
                ExpressionAttributeValues={":v": {"N": str(meta.version)}},
            )
        )

    def _runs_entry(self, run: workflow.Run) -> dict[str, Any]:
        """The run's entry among its workflow's runs (newest first by creation)."""
        created = _iso(run.created_at) if run.created_at else ""
        return {
            "pk": runs_pk(run.tenant_id, run.workflow_id),
            "sk": f"{created}#{run.run_id}",
            "run_id": run.run_id,
        }

    def backfill_listings(self, *, cursor: str | None = None, limit: int = 500) -> Backfill:
        """One page of a Scan of the table that writes the listing entries items written
        before the listings existed lack: each definition's catalog entry (only forward)
        and each run's entry among its workflow's runs. Idempotent: a second pass writes
        the same entries again and changes nothing. Resume from the returned cursor."""
        kwargs: dict[str, Any] = {"TableName": self._table, "Limit": limit}
        start = _decode_cursor(cursor, keys=("pk", "sk"))
        if start is not None:
            kwargs["ExclusiveStartKey"] = _encode(start)
        with _translated():
            response = self._client.scan(**kwargs)
        catalogued = runs = 0
        for raw in response.get("Items", []):
            record = _decode(raw)
            pk, sk = str(record["pk"]), str(record["sk"])
            if pk.startswith("T#") and sk.startswith(VERSION_PREFIX):
                catalogued += self._catalog(_definition_from_item(record))
            elif pk.startswith("R#") and sk == RUN_SK:
                entry = self._runs_entry(_run_from_item(record))
                with _translated():
                    self._client.put_item(TableName=self._table, Item=_encode(entry))
                runs += 1
        last = response.get("LastEvaluatedKey")
        next_cursor = _encode_cursor(_decode(last)) if last else None
        return Backfill(
            scanned=response.get("Count", 0), catalogued=catalogued, runs=runs, cursor=next_cursor
        )

    def _transact(self, items: list[TransactWriteItemTypeDef]) -> bool:
        """Write ``items`` together; False when a condition failed (nothing written)."""
        try:
            with _translated():
                self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = [
                str(r.get("Code") or "None") for r in exc.response.get("CancellationReasons", [])
            ]
            if "ConditionalCheckFailed" in reasons:
                return False
            raise errors.Unavailable(f"DynamoDB cancelled the write ({reasons})") from exc
        return True

    def _partition_page(
        self, pk: str, *, limit: int, cursor: str | None, **options: Any
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a Query on the table's partition ``pk`` (see ``_query_page``)."""
        return _query_page(
            self._client,
            table=self._table,
            partition=("pk", pk),
            cursor_keys=("pk", "sk"),
            limit=limit,
            cursor=cursor,
            **options,
        )

    def workflows(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.DefinitionMeta]:
        # One Query on the tenant's catalog partition: ``limit`` rows a page.
        records, next_cursor = self._partition_page(
            catalog_pk(tenant_id),
            limit=limit,
            cursor=cursor,
        )
        return ports.Page([_definition_from_item(r) for r in records], next_cursor)

    def runs_of(
        self, tenant_id: str, workflow_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.Run]:
        # One Query on the workflow's runs partition (``limit`` keys), then one
        # BatchGetItem of those runs' own items (their state as it is now).
        records, next_cursor = self._partition_page(
            runs_pk(tenant_id, workflow_id),
            limit=limit,
            cursor=cursor,
            newest_first=True,
        )
        ids = [str(r["run_id"]) for r in records]
        keys = [{"pk": run_pk(i), "sk": RUN_SK} for i in ids]
        found = {r.run_id: r for r in map(_run_from_item, self._batch_get(keys, "runs"))}
        return ports.Page([found[i] for i in ids if i in found], next_cursor)

    def latest_definition(self, tenant_id: str, workflow_id: str) -> workflow.DefinitionMeta | None:
        with _translated():
            response = self._client.query(
                TableName=self._table,
                KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
                ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
                ExpressionAttributeValues={
                    ":pk": {"S": definition_pk(tenant_id, workflow_id)},
                    ":prefix": {"S": VERSION_PREFIX},
                },
                ScanIndexForward=False,
                Limit=1,
                ConsistentRead=True,
            )
        for raw in response.get("Items", []):
            meta = _definition_from_item(_decode(raw))
            if (meta.tenant_id, meta.workflow_id) == (tenant_id, workflow_id):
                return meta
        return None

    def get_definition(
        self, tenant_id: str, workflow_id: str, version: int
    ) -> workflow.DefinitionMeta | None:
        if not 1 <= version <= MAX_VERSION:
            return None
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key=_encode(
                    {"pk": definition_pk(tenant_id, workflow_id), "sk": definition_sk(version)}
                ),
                ConsistentRead=True,
            )
        record = response.get("Item")
        if not record:
            return None
        meta = _definition_from_item(_decode(record))
        return meta if (meta.tenant_id, meta.workflow_id) == (tenant_id, workflow_id) else None

    # --- runs ----------------------------------------------------------------------------

    def create_run(self, run: workflow.Run) -> bool:
        # A repeated start (a redelivered request, a retried schedule fire) converges on
        # the run that exists; its entry among the workflow's runs is written with it.
        return self._transact(
            [
                _put_new(self._table, _run_to_item(run)),
                {"Put": {"TableName": self._table, "Item": _encode(self._runs_entry(run))}},
            ]
        )

    def get_run(self, run_id: str) -> workflow.Run | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key=_encode({"pk": run_pk(run_id), "sk": RUN_SK}),
                ConsistentRead=True,
            )
        record = response.get("Item")
        return _run_from_item(_decode(record)) if record else None

    def update_run(
        self,
        run: workflow.Run,
        *,
        expected_state: workflow.RunState,
        expected_generation: int,
        expected_materialized: int | None = None,
    ) -> bool:
        condition = "#state = :state AND #gen = :gen"
        names = {"#state": "state", "#gen": "generation"}
        values: dict[str, Any] = {
            ":state": {"S": expected_state.value},
            ":gen": {"N": str(expected_generation)},
        }
        if expected_materialized is not None:
            condition += " AND #mat = :mat"
            names["#mat"] = "materialized"
            values[":mat"] = {"N": str(expected_materialized)}
        # The whole run is rewritten from what was read: a completion lands once, a writer
        # that read an older state, generation ("retry failed" moved on) or materialized
        # count (another start wrote more rows) loses. (A missing run fails too: its state
        # is no value.)
        return _applied(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=_encode(_run_to_item(run)),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        )

    def active_runs(self, *, limit: int, cursor: str | None = None) -> ports.Page[str]:
        records, next_cursor = self._index_page(ACTIVE_RUNS, limit=limit, cursor=cursor)
        ids = [str(r["pk"])[len("R#") :] for r in records]
        return ports.Page(ids, next_cursor)

    # --- nodes ---------------------------------------------------------------------------

    def put_nodes(self, run_id: str, nodes: Sequence[workflow.RunNode]) -> None:
        # One request per 25 rows; a row given twice keeps its last version (a batch may
        # not name one key twice).
        rows = list({n.node_id: n for n in nodes}.values())
        _batch_write(
            self._client,
            self._table,
            [_node_to_item(run_id, n) for n in rows],
            what="node rows",
            backoff=self._backoff,
            attempts=ATTEMPTS,
        )

    def get_nodes(self, run_id: str, node_ids: Sequence[str]) -> dict[str, workflow.RunNode]:
        unique = list(dict.fromkeys(node_ids))
        keys = [{"pk": run_pk(run_id), "sk": node_sk(n)} for n in unique]
        nodes = [_node_from_item(r) for r in self._batch_get(keys, "node rows")]
        return {n.node_id: n for n in nodes}

    def _batch_get(self, keys: Sequence[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        return _batch_get(
            self._client, self._table, keys, what=what, sleep=self._sleep, attempts=ATTEMPTS
        )

    def all_nodes(self, run_id: str) -> builtins.list[workflow.RunNode]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {
                ":pk": {"S": run_pk(run_id)},
                ":prefix": {"S": NODE_PREFIX},
            },
            "ConsistentRead": True,
        }
        nodes: list[workflow.RunNode] = []
        while True:
            with _translated():
                response = self._client.query(**kwargs)
            nodes += [_node_from_item(_decode(r)) for r in response.get("Items", [])]
            if "LastEvaluatedKey" not in response:
                return nodes
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def nodes_in_state(
        self, run_id: str, state: dag.NodeState, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.RunNode]:
        if state not in workflow.INDEXED_STATES:
            return self._partition_state_page(run_id, state, limit=limit, cursor=cursor)
        records, next_cursor = self._index_page(
            node_state_key(run_id, state), limit=limit, cursor=cursor
        )
        # The index holds keys only: read the rows back (consistently) and keep those still
        # in the state; one the index listed a moment before it moved on is left out.
        ids = [r["sk"].removeprefix(NODE_PREFIX) for r in records]
        rows = self.get_nodes(run_id, ids)
        return ports.Page(
            [rows[n] for n in ids if n in rows and rows[n].state is state], next_cursor
        )

    def _partition_state_page(
        self, run_id: str, state: dag.NodeState, *, limit: int, cursor: str | None
    ) -> ports.Page[workflow.RunNode]:
        """A state the index leaves out, from the run's partition read consistently and
        filtered: reads go on until one row more than asked is found (so a page that ends
        the listing says so) or the partition ends."""
        if limit < 1:
            raise errors.ValidationError("must be at least 1", field="limit")
        found: list[dict[str, Any]] = []
        while True:
            records, cursor = self._partition_page(
                run_pk(run_id),
                limit=max(limit + 1, PARTITION_READ),
                cursor=cursor,
                sort_between=("sk", NODE_PREFIX, NODE_PREFIX + "\uffff"),
                states=[state.value],
                consistent=True,
            )
            found += records
            if len(found) > limit:
                found = found[:limit]
                cursor = _encode_cursor({k: found[-1][k] for k in ("pk", "sk")})
                break
            if cursor is None:
                break
        return ports.Page([_node_from_item(r) for r in found], cursor)

    def nodes(
        self, run_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.RunNode]:
        # One Query on the run's partition, its node rows only (their sort keys start
        # with N#; the run's own item, "run", sorts outside the range): ``limit`` rows.
        records, next_cursor = self._partition_page(
            run_pk(run_id),
            limit=limit,
            cursor=cursor,
            sort_between=("sk", NODE_PREFIX, NODE_PREFIX + "\uffff"),
        )
        return ports.Page([_node_from_item(r) for r in records], next_cursor)

    def count_states(self, run_id: str) -> dict[dag.NodeState, int]:
        # The run's node rows, read once (eventually consistent, their state only): the
        # index holds only the rare states, and counts from the table do not lag it.
        counts = dict.fromkeys(dag.NodeState, 0)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ProjectionExpression": "#state",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk", "#state": "state"},
            "ExpressionAttributeValues": {
                ":pk": {"S": run_pk(run_id)},
                ":prefix": {"S": NODE_PREFIX},
            },
        }
        while True:
            with _translated():
                response = self._client.query(**kwargs)
            for item in response.get("Items", []):
                counts[dag.NodeState(item["state"]["S"])] += 1
            if "LastEvaluatedKey" not in response:
                return counts
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def move_node(
        self,
        run_id: str,
        node_id: str,
        *,
        expected: dag.NodeState,
        to: dag.NodeState,
        ready_only: bool = False,
        generation: int | None = None,
        pending: int | None = None,
    ) -> bool:
        update = "SET #state = :to"
        condition = "#state = :expected"
        names = {"#state": "state", "#key": "state_key"}
        values: dict[str, Any] = {":to": {"S": to.value}, ":expected": {"S": expected.value}}
        key = _index_key(run_id, to)
        if key is not None:
            update += ", #key = :key"
            values[":key"] = {"S": key}
        if generation is not None:
            update += ", #gen = :gen"
            names["#gen"] = "generation"
            values[":gen"] = {"N": str(generation)}
        if pending is not None or ready_only:
            names["#pending"] = "pending"
            values[":zero"] = {"N": "0"}
        if pending is not None:
            update += ", #pending = :pending, #fanout = :zero"
            names["#fanout"] = "fanout"
            values[":pending"] = {"N": str(pending)}
        if ready_only:
            # Every parent finished: a dispatch racing the last decrement waits for it.
            condition += " AND #pending <= :zero"
        if key is None:
            update += " REMOVE #key"  # out of the index (nothing to do if it was not in it)
        # Of two controllers that read the same state, one moves the node; the other sees
        # False. (A missing row has no state: it fails too.)
        return self._update_node(
            run_id,
            node_id,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def succeed_node(
        self, run_id: str, node_id: str, *, chunk: int, children: Sequence[str]
    ) -> bool:
        if len(children) > workflow.FANOUT_CHUNK:
            raise errors.ValidationError(
                f"at most {workflow.FANOUT_CHUNK} children per step", field="children"
            )
        if chunk < 0:
            raise errors.ValidationError("must be 0 or more", field="chunk")
        names = {"#state": "state", "#fanout": "fanout"}
        values: dict[str, Any] = {
            ":succeeded": {"S": dag.NodeState.SUCCEEDED.value},
            ":next": {"N": str(chunk + 1 if children else 0)},
        }
        if chunk == 0:
            # The node's success itself: only a dispatched node succeeds, once. (REMOVE:
            # a row written when every state was indexed leaves the index now.)
            update = "SET #state = :succeeded, #fanout = :next REMOVE #key"
            condition = "#state = :dispatched"
            names["#key"] = "state_key"
            values[":dispatched"] = {"S": dag.NodeState.DISPATCHED.value}
        else:
            # A continuation: the fan-out cursor says which chunk is next, so a chunk
            # applied already (a redelivered continuation) fails.
            update = "SET #fanout = :next"
            condition = "#state = :succeeded AND #fanout = :chunk"
            values[":chunk"] = {"N": str(chunk)}
        # The parent's move is the guard: of two controllers applying the same chunk, one
        # moves it and only that one decrements the children.
        if not self._update_node(
            run_id,
            node_id,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        ):
            return False
        for child in children:
            # One plain write per child, at half a transaction item's cost. A crash
            # before the last leaves a counter too high, never too low: the reconcile
            # dispatches a child whose parents all succeeded whatever its counter says.
            self._decrement(run_id, child)
        return True

    def _decrement(self, run_id: str, child: str) -> None:
        self._update_node(
            run_id,
            child,
            UpdateExpression="SET #pending = #pending - :one",
            # An update on a missing key would create a stray row.
            ConditionExpression="attribute_exists(#pk)",
            ExpressionAttributeNames={"#pending": "pending", "#pk": "pk"},
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def _update_node(self, run_id: str, node_id: str, **update: Any) -> bool:
        """One conditional UpdateItem of a node row; False when its condition failed."""
        key = _encode({"pk": run_pk(run_id), "sk": node_sk(node_id)})
        return _applied(lambda: self._client.update_item(TableName=self._table, Key=key, **update))

    # --- finished leaves -----------------------------------------------------------------

    def _leaves_key(self, run_id: str, generation: int) -> dict[str, Any]:
        return _encode({"pk": run_pk(run_id), "sk": f"{LEAVES_PREFIX}{generation}"})

    def add_finished_leaves(self, run_id: str, generation: int, count: int = 1) -> int:
        with _translated():
            response = self._client.update_item(
                TableName=self._table,
                Key=self._leaves_key(run_id, generation),
                UpdateExpression="ADD #done :n",
                ExpressionAttributeNames={"#done": "done"},
                ExpressionAttributeValues={":n": {"N": str(count)}},
                ReturnValues="UPDATED_NEW",
            )
        return int(response["Attributes"]["done"]["N"])

    def finished_leaves(self, run_id: str, generation: int) -> int:
        with _translated():
            response = self._client.get_item(
                TableName=self._table, Key=self._leaves_key(run_id, generation), ConsistentRead=True
            )
        return int(response.get("Item", {}).get("done", {}).get("N", 0))

    # --- the state index -----------------------------------------------------------------

    def _index_page(
        self, state_key: str, *, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the ``by_state`` index's ``state_key`` partition, in sk order.

        One item more than asked is read, so a page that ends the listing says so (cursor
        None) as the memory store does, rather than handing out a cursor to an empty page.
        A cursor is a client's input: it must carry the index's keys and this partition.
        """
        if limit < 1:
            raise errors.ValidationError("must be at least 1", field="limit")
        records, after = _query_page(
            self._client,
            table=self._table,
            partition=("state_key", state_key),
            cursor_keys=INDEX_KEYS,
            limit=limit + 1,
            cursor=cursor,
            index=STATE_INDEX,
        )
        if len(records) > limit:
            records = records[:limit]
            return records, _encode_cursor({k: records[-1][k] for k in INDEX_KEYS})
        # Fewer than asked with a cursor: the 1 MB page limit cut the read short.
        return records, after
