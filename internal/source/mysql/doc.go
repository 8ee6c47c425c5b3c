// Package mysql implements the source seam for MySQL 8 and MariaDB 10.6+
// with database/sql and go-sql-driver/mysql, on the PostgreSQL store's
// model: a claim is a transaction on one connection whose SELECT ... FOR
// UPDATE SKIP LOCKED locks the batch; the transaction stays open while the
// batch is published; acknowledgement, retry state and dead letters are
// written in it before it commits; Release rolls it back. A relay that dies
// loses its connection and the server rolls its claims back; one that hangs
// is cut off by wait_timeout (the claim timeout).
//
// The exported API, for wiring a source:
//
//   - Open / OpenWith: a pool set up as the relay needs it (UTC, READ
//     COMMITTED, client-side parameters, wait_timeout = claim timeout,
//     optionally connections marked with the owner's name).
//   - Columns: the table's columns for layout.Resolve (MariaDB's JSON
//     columns reported as "json").
//   - New(db, Options) *Store: the source.Store; Options.Validate checks
//     every identifier first (backticks, NUL and names over 64 characters
//     are refused, naming the field).
//     Options.ClaimTimeout is the source's claim timeout: another relay's
//     unfinished claims (state.batch_id) older than it are taken back, and
//     it wins over the pool's wait_timeout for this store's claims.
//     Options.ClaimIndex (from ClaimIndex) is the index every claim reads
//     the table by. Options.Bucket makes the store claim one bucket of the
//     source (its claims always read a window then, see passedKeys).
//   - Store.Settle: after taking a source over, wait until the previous
//     owner's claims are over.
//   - MigrateTable / NewTableMigrator: the relay-owned kafka_outbox table
//     in the application's database, with its own version table.
//   - NewMigrator: the relay database's migrations (goose, up, down,
//     status); the relay database defaults to DefaultRelayDatabase.
//   - NewLeases / LeaseStore: the SQL of internal/lease (one owner per
//     source across replicas); share one per server and owner (it holds a
//     connection for the owner's liveness).
//   - ListFailed and Store.Replay: the dead-letter list and its replay.
//   - CheckPrivileges (with layout.Layout.NeededPrivileges and
//     UpdatedColumns) and CheckRelayDatabase: what the relay's user lacks.
//   - Purge and Optimize: retention of delivered rows and OPTIMIZE TABLE.
package mysql
