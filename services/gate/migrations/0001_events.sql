-- The audit log: one row per event, append-only, each row chained to the previous by hash.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    ts          TEXT    NOT NULL,          -- RFC 3339, UTC, milliseconds
    call_id     TEXT,                      -- joins the events of one call
    account     TEXT,
    source      TEXT    NOT NULL,          -- gate | executor | broker | supervisor
    kind        TEXT    NOT NULL,          -- decide | resolve | execute | result | service | policy
    tool        TEXT,
    subject     TEXT,                      -- canonical subjects, e.g. "read /home/a/w/x.txt"; commands
                                           -- in full (masked) only once approved, else their length
    verdict     TEXT,                      -- allow | ask | deny
    rule        TEXT,                      -- the rule that decided
    reason      TEXT,
    approval    TEXT,                      -- auto | approved | approved_always | denied | timeout | no_approver | cancelled
    outcome     TEXT,                      -- ok | error | denied | started | restarted | stopped ...
    error_code  TEXT,                      -- a stable error code
    duration_ms INTEGER,
    bytes       INTEGER,                   -- bytes read or written, never the bytes themselves
    detail      TEXT,
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL
);

CREATE INDEX events_call_id ON events (call_id);
CREATE INDEX events_ts ON events (ts);

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
SELECT ts, call_id, account, tool, subject, approval, detail
FROM events
WHERE kind = 'resolve';
