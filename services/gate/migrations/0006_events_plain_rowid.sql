-- `events` without AUTOINCREMENT. Rows are never deleted (the triggers refuse it), so the plain
-- rowid SQLite gives a new row (the largest so far plus one) is the id AUTOINCREMENT gave, while
-- AUTOINCREMENT also kept the largest in `sqlite_sequence`: one more page written to the WAL by
-- every commit (one in eight) and an update of that table per statement.
--
-- The keyword changes nothing stored (the table is a rowid table either way), so only the
-- table's text in the schema changes, in place, whatever the number of rows (rebuilding the
-- table would take seconds per million rows and twice the disk, with the gate not yet up).
-- Dropping and creating a trigger again afterwards is an ordinary schema change: it moves the
-- schema's version on, so every connection reads the new text (and a file whose trigger someone
-- dropped still opens, with the trigger back; the chain shows what was changed meanwhile).
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql, 'INTEGER PRIMARY KEY AUTOINCREMENT', 'INTEGER PRIMARY KEY')
WHERE type = 'table' AND name = 'events';
PRAGMA writable_schema = OFF;

DROP TRIGGER IF EXISTS events_refuse_update;
CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;
