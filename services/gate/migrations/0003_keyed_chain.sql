-- The chain is keyed (rows carry an HMAC under the gate's audit key; `keyed` is 1 for them, NULL for
-- rows written before), and every call has a server-made id (`call_id`) while the agent's own id is
-- kept as a label (`client_call_id`), so the views never merge two calls that reused an id.
ALTER TABLE events ADD COLUMN client_call_id TEXT;
ALTER TABLE events ADD COLUMN keyed INTEGER;
CREATE INDEX events_client_call_id ON events (client_call_id);

DROP VIEW commands;
DROP VIEW approvals;
DROP VIEW denials;
DROP VIEW tool_calls;

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
