-- Each machine's signed audit head (the text of its `audit.head`), shipped once the rows it
-- names are here, so `glovebox audit verify --postgres` notices a tail cut in PostgreSQL even
-- when `machine.last_row_id` was cut with it. `head_last_id` is the row the head names: a head
-- is only ever replaced by a newer one.
ALTER TABLE machine ADD COLUMN head TEXT;
ALTER TABLE machine ADD COLUMN head_last_id BIGINT;
