-- An adopted table from an early version of the original relay has no key
-- and partition_key columns, and no table of it has the index on
-- push_completed_at that the pending count uses. Each is added only where it
-- is missing: MySQL has no ADD COLUMN IF NOT EXISTS, so the catalogue
-- decides and a prepared statement runs the change.

-- +goose Up
SET @relay_ddl = (SELECT IF(COUNT(*) = 0,
  'ALTER TABLE {{table}} ADD COLUMN `key` VARCHAR(255) NOT NULL DEFAULT ''''', 'DO 0')
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{{name}}' AND COLUMN_NAME = 'key');
PREPARE relay_stmt FROM @relay_ddl;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

SET @relay_ddl = (SELECT IF(COUNT(*) = 0,
  'ALTER TABLE {{table}} ADD COLUMN partition_key VARCHAR(255) NOT NULL DEFAULT ''''', 'DO 0')
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{{name}}' AND COLUMN_NAME = 'partition_key');
PREPARE relay_stmt FROM @relay_ddl;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

SET @relay_ddl = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX {{name}}_push_completed_at_idx ON {{table}} (push_completed_at)', 'DO 0')
  FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{{name}}'
  AND COLUMN_NAME = 'push_completed_at' AND SEQ_IN_INDEX = 1);
PREPARE relay_stmt FROM @relay_ddl;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

-- +goose Down
SET @relay_ddl = (SELECT IF(COUNT(*) > 0, 'DROP INDEX {{name}}_push_completed_at_idx ON {{table}}', 'DO 0')
  FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{{name}}'
  AND INDEX_NAME = '{{name}}_push_completed_at_idx');
PREPARE relay_stmt FROM @relay_ddl;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;
