-- Each machine's public checkpoint key (hex Ed25519, its `audit.pub`), registered with its first
-- shipped rows and never replaced by a shipper: `glovebox audit verify --postgres` checks the
-- machine's signed checkpoints with it (or with a key pinned on the command line), no audit key
-- needed.
ALTER TABLE machine ADD COLUMN public_key TEXT;
