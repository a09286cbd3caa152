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
