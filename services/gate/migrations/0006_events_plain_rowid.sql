-- `events` without AUTOINCREMENT. Rows are never deleted (the triggers refuse it), so the plain
-- rowid SQLite gives a new row (the largest so far plus one) is the id AUTOINCREMENT gave, while
-- AUTOINCREMENT also kept the largest in `sqlite_sequence`: one more page written to the WAL by
-- every commit (one in eight) and an update of that table per statement. The table is rebuilt
-- with every row and id as they were (the chain and the head file name ids); the views that
-- read it are dropped first and made again as they were.
DROP VIEW pack_calls;
DROP VIEW commands;
DROP VIEW approvals;
DROP VIEW denials;
DROP VIEW tool_calls;

CREATE TABLE events_rebuilt (
    id             INTEGER PRIMARY KEY,
    ts             TEXT    NOT NULL,
    call_id        TEXT,
    account        TEXT,
    source         TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    tool           TEXT,
    subject        TEXT,
    verdict        TEXT,
    rule           TEXT,
    reason         TEXT,
    approval       TEXT,
    outcome        TEXT,
    error_code     TEXT,
    duration_ms    INTEGER,
    bytes          INTEGER,
    detail         TEXT,
    prev_hash      TEXT    NOT NULL,
    hash           TEXT    NOT NULL,
    client_call_id TEXT,
    keyed          INTEGER
);

INSERT INTO events_rebuilt
    (id, ts, call_id, account, source, kind, tool, subject, verdict, rule, reason, approval,
     outcome, error_code, duration_ms, bytes, detail, prev_hash, hash, client_call_id, keyed)
SELECT id, ts, call_id, account, source, kind, tool, subject, verdict, rule, reason, approval,
       outcome, error_code, duration_ms, bytes, detail, prev_hash, hash, client_call_id, keyed
FROM events ORDER BY id;

DROP TABLE events;
ALTER TABLE events_rebuilt RENAME TO events;

CREATE INDEX events_call_id ON events (call_id);
CREATE INDEX events_ts ON events (ts);
CREATE INDEX events_client_call_id ON events (client_call_id);

CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;

-- One row per call: what was asked, how it was judged and answered, and how it ended.
CREATE VIEW tool_calls AS
SELECT
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
GROUP BY call_id;

-- Calls that did not run because policy or the approver said no.
CREATE VIEW denials AS
SELECT * FROM tool_calls
WHERE verdict = 'deny' OR approval IN ('denied', 'timeout', 'no_approver', 'cancelled');

-- Every answer an approver gave (or failed to give).
CREATE VIEW approvals AS
SELECT ts, call_id, client_call_id, account, tool, subject, approval, detail
FROM events
WHERE kind = 'resolve';

-- Every command an agent asked to run: approved ones in full (secrets masked), refused ones only by
-- their length, with how each was answered and how it ended.
CREATE VIEW commands AS
SELECT
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

-- One row per call of a pack tool (`<pack>__<tool>`; client tools `client__*` are not packs):
-- everything `tool_calls` has, the pack and its tool apart, and what the pack host recorded of
-- the arguments (names and sizes, never values). Calls that were denied or never reached the
-- pack host have no `arguments`.
CREATE VIEW pack_calls AS
SELECT
    t.*,
    substr(t.tool, 1, instr(t.tool, '__') - 1)                     AS pack,
    substr(t.tool, instr(t.tool, '__') + 2)                        AS pack_tool,
    (SELECT e.detail FROM events e
      WHERE e.call_id = t.call_id AND e.source = 'packs' AND e.kind = 'execute'
      ORDER BY e.id LIMIT 1)                                       AS arguments
FROM tool_calls t
WHERE instr(t.tool, '__') > 1 AND substr(t.tool, 1, 8) <> 'client__';
