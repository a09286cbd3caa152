-- Every command an agent asked to run: approved ones in full (token-like strings masked), refused
-- ones only by their length, with how each was answered and how it ended.
CREATE VIEW commands AS
SELECT
    started_at,
    call_id,
    account,
    subject,
    verdict,
    rule,
    approval,
    outcome,
    error_code
FROM tool_calls
WHERE tool = 'exec_run';
