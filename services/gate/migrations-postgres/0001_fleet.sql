-- The fleet's audit: every machine's rows, shipped by `glovebox audit ship` (or the gate's
-- `audit.ship`), keyed by (machine id, row id) and carrying the hash chain, so that
-- `glovebox audit verify --postgres URL --machine ID` re-computes each machine's chain here.
-- Text compares byte by byte (COLLATE "C"), as in SQLite, so MIN/MAX/ORDER BY agree on both.

CREATE TABLE machine (
    id               TEXT PRIMARY KEY COLLATE "C",
    hostname         TEXT COLLATE "C",
    first_shipped_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_shipped_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_row_id      BIGINT NOT NULL DEFAULT 0      -- the newest row shipped
);

CREATE TABLE events (
    machine_id     TEXT   NOT NULL COLLATE "C" REFERENCES machine (id),
    id             BIGINT NOT NULL,                 -- the row id on its machine
    ts             TEXT   NOT NULL COLLATE "C",     -- RFC 3339, UTC, milliseconds
    call_id        TEXT COLLATE "C",
    client_call_id TEXT COLLATE "C",
    account        TEXT COLLATE "C",
    source         TEXT   NOT NULL COLLATE "C",
    kind           TEXT   NOT NULL COLLATE "C",
    tool           TEXT COLLATE "C",
    subject        TEXT COLLATE "C",
    verdict        TEXT COLLATE "C",
    rule           TEXT COLLATE "C",
    reason         TEXT COLLATE "C",
    approval       TEXT COLLATE "C",
    outcome        TEXT COLLATE "C",
    error_code     TEXT COLLATE "C",
    duration_ms    BIGINT,
    bytes          BIGINT,
    detail         TEXT COLLATE "C",
    prev_hash      TEXT   NOT NULL COLLATE "C",
    hash           TEXT   NOT NULL COLLATE "C",
    keyed          BIGINT,
    PRIMARY KEY (machine_id, id)
);

CREATE INDEX events_call_id ON events (machine_id, call_id);
CREATE INDEX events_ts ON events (ts);

-- Shipped rows are evidence: like the local store, the table refuses UPDATE and DELETE (its owner
-- can drop the triggers; `verify --postgres` still names any row changed without the audit key).
CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only';
END;
$$;
CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER events_refuse_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- The same views as the local store (services/gate/migrations), with the machine first: a call is
-- one machine's (call ids are made per machine), so the views group by both.
CREATE VIEW tool_calls AS
SELECT
    machine_id,
    call_id,
    MAX(client_call_id)                                             AS client_call_id,
    MIN(ts)                                                         AS started_at,
    MAX(account)                                                    AS account,
    MAX(tool)                                                       AS tool,
    COALESCE(MAX(CASE WHEN kind = 'resolve' THEN subject END),
             MAX(CASE WHEN kind = 'decide' THEN subject END))       AS subject,
    MAX(CASE WHEN kind = 'decide' THEN verdict END)                 AS verdict,
    MAX(CASE WHEN kind = 'decide' THEN rule END)                    AS rule,
    MAX(CASE WHEN kind = 'decide' THEN reason END)                  AS reason,
    COALESCE(MAX(CASE WHEN kind = 'resolve' THEN approval END),
             MAX(CASE WHEN kind = 'decide' THEN approval END))      AS approval,
    MAX(CASE WHEN kind = 'result' THEN outcome END)                 AS outcome,
    MAX(CASE WHEN kind = 'result' THEN error_code END)              AS error_code,
    MAX(CASE WHEN kind = 'result' THEN duration_ms END)             AS duration_ms,
    MAX(CASE WHEN kind = 'execute' THEN bytes END)                  AS bytes
FROM events
WHERE call_id IS NOT NULL
GROUP BY machine_id, call_id;

CREATE VIEW denials AS
SELECT * FROM tool_calls
WHERE verdict = 'deny' OR approval IN ('denied', 'timeout', 'no_approver', 'cancelled');

CREATE VIEW approvals AS
SELECT machine_id, ts, call_id, client_call_id, account, tool, subject, approval, detail
FROM events
WHERE kind = 'resolve';

CREATE VIEW commands AS
SELECT
    machine_id,
    started_at,
    call_id,
    client_call_id,
    account,
    subject,
    verdict,
    rule,
    approval,
    outcome,
    error_code
FROM tool_calls
WHERE tool = 'exec_run';

-- SQLite's instr/substr become strpos/substr; the same columns.
CREATE VIEW pack_calls AS
SELECT
    t.*,
    substr(t.tool, 1, strpos(t.tool, '__') - 1)                    AS pack,
    substr(t.tool, strpos(t.tool, '__') + 2)                       AS pack_tool,
    (SELECT e.detail FROM events e
      WHERE e.machine_id = t.machine_id AND e.call_id = t.call_id
        AND e.source = 'packs' AND e.kind = 'execute'
      ORDER BY e.id LIMIT 1)                                       AS arguments
FROM tool_calls t
WHERE strpos(t.tool, '__') > 1 AND substr(t.tool, 1, 8) <> 'client__';
