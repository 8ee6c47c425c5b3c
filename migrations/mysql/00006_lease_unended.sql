-- Owners a lease passed through whose claims may still be open: a new owner
-- ends every one of them before it claims, then clears the list. Without it
-- a holder that lost the lease before it had ended its own predecessor's
-- claims left them to nobody, and the next holder claimed past their locks.
-- +goose Up
ALTER TABLE leases ADD COLUMN unended VARCHAR(4096) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE leases DROP COLUMN unended;
