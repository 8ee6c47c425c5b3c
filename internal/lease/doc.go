// Package lease gives each shard (a source, or a bucket of a source split
// by sources[].shards, see source.Bucket) to one relay process at a time
// and fences every other: the leases are rows of the relay's own schema
// (outbox_relay.leases, or the relay database on MySQL), and this package
// holds the rule and the loop once; each dialect supplies a Store of single
// statements and driver calls (postgres.LeaseStore, mysql.LeaseStore), and
// both pass the conformance suite in leasetest.
//
// # Terms
//
// A lease row names its shard, its owner (one relay process: host, pid and
// a random part), a term and an expiry. The term is 1 when the row is
// created and grows by one on every change of owner, never otherwise: an
// owner that acquires its own lease again keeps its term. A term therefore
// names one holding of the shard, and a process that held term 3 can be
// told apart from the one that holds term 4 even though both think they
// hold the shard.
//
// Acquire (Leases.Acquire) reads the row and decides once (decide): no row,
// insert term 1; the owner's own, extend it; expired, take it over with the
// next term; another owner's and unexpired, stand by, unless that owner's
// process is gone (Store.Alive: on PostgreSQL no session carries its
// application_name; on MySQL no connection holds its named liveness lock),
// in which case its lease is expired at once and taken, so that a restarted
// relay resumes without waiting for the TTL. Every write names the row it
// expects (owner, term, and for a takeover that it has expired): a replica
// that lost a race writes nothing and stands by.
//
// # Timers
//
//   - The TTL (config lease_ttl, default 15s) is how long a lease lasts
//     without renewal: the longest a dead holder's shard waits for another
//     replica when its death cannot be seen (a partition, a frozen
//     process).
//   - The renewal interval is a third of the TTL: the balancer renews
//     every lease its process holds in the database at that pace, in one
//     statement (RenewAll), and standby shards try to acquire at every
//     census, which comes at the same pace or sooner.
//   - The trust window is half the TTL, shorter than the TTL: a holder whose
//     renewals have all failed for that long stops claiming, before its
//     lease can have expired and been taken over. A renewal that finds the
//     lease taken stops it at once.
//   - The claim timeout (config claim_timeout) bounds how long one claim
//     transaction may stay open: the database ends a claim of a hung relay
//     after it. It bounds what a hand-over may have to wait for when the
//     previous holder's claims cannot be ended.
//
// # Fencing
//
// A store binds its claims to the lease they are made under (Fence, set by
// Hold while the work runs). The term is checked twice, in the database:
// the claim locks no row unless the lease is still held with its term, and
// the completing transaction reads the lease row with that term before it
// commits; a batch whose lease is gone fails with ErrLeaseLost and records
// nothing. The read takes no lock (it would hold up the holder's own
// renewals): a takeover committed after it finds that transaction still
// open, and the new holder ends it before claiming (hand-over, below). A deposed holder that wakes up (a paused VM, a long GC)
// can therefore neither claim nor complete, whatever its clock says.
//
// # Hand-over
//
// A lease taken over names the owners whose claims may still be open
// (Lease.Unended): the previous holder and every earlier one that a
// previous holder did not end before it lost the lease in turn (A -> B -> C
// where B lost the lease before ending A's claims: C ends both). The list
// is kept in the row (NextUnended: each owner once, the newest last, never
// the new holder itself, at most 16). Before it claims, the new holder ends
// each of them (Store.EndOwner terminates their transactions on the table,
// or waits for those it may not end), then, where the dialect needs it,
// settles (waits with a locking read until the rows those claims held are
// free: MySQL frees an owner's named locks before it has rolled back), and
// only then records them ended (Leases.Ended) and starts its work. If it
// loses the lease meanwhile the list stays, and the next holder ends them.
// Per-key order thus holds through a hand-over: no new claim skips a row an
// earlier holder's claim still locks.
//
// # Losing the lease
//
// When a renewal finds the lease taken, or none succeeded within the trust
// window, Hold cancels the work: the worker stops claiming and finishes its
// batches in flight, whose completions fail with ErrLeaseLost (their rows
// go back to the pending set for the new holder). The replica then stands
// by, trying to acquire again at every census. A worker that stops on its
// own makes Hold acquire again, keeping its term while the lease is still
// its own. On shutdown Hold hands the lease to another replica, or
// releases it (expires it at once) when there is none, so that a standby
// replica takes the shard over without waiting.
//
// # Balance
//
// Replicas share a database's shards rather than the first one taking
// them all. Every Hold runs under the Balancer of its database and process
// (Balancer.Hold), a process alone too (one replica of one): there is one
// renewal loop and one set of rules. The balancer renews the process's
// leases, keeps the process registered in the relay schema's replicas
// table with a heartbeat every third of the TTL, and each heartbeat is a
// census: the live replicas and how many of the shards each holds. The
// store reads the facts (how long each replica's heartbeat has to run,
// whether its process has a session now, as Alive says); one rule in Go
// (Live) decides: a replica is live while its heartbeat is unexpired and
// it has a session, or while its last heartbeat is younger than the trust
// window (half the TTL). A replica whose connection blipped between two
// heartbeats is thus not taken for gone, a killed one drops out within
// half a TTL of its last heartbeat rather than after its TTL, and a frozen
// or cut-off one, whose sessions may linger on the server, once its
// heartbeat has expired. From the census:
//
//   - Claim. A replica acquires a free or expired shard only while it
//     holds fewer than its share, shards ÷ live replicas rounded up; its
//     own lease it always renews. Free shards are therefore taken first,
//     and nobody takes more than its share while others have less.
//   - Steal, never a hot potato. A replica holding at least two more than
//     the least loaded one hands shards to it (handOvers): above its share,
//     down to its share; at its share, one a census, so replicas giving at
//     the same time do not pile onto one taker. A shard handed over stops
//     its work like a lost lease (batches in flight finish), then its lease
//     is expired naming the successor. For half the TTL only the successor
//     may take it (the giver neither), it takes it even beyond its share,
//     and censuses count it as the successor's already (a giver counting it
//     as nobody's would give the successor one more at its next census). Taking it is an ordinary takeover: the next term, the previous
//     owner ended, fencing as above.
//   - Leave. On shutdown each shard is handed to the least loaded other
//     live replica, and the replica removes itself from the table.
//   - Told, not left to wait. On PostgreSQL a hand-over, a leave and a
//     replica's first census NOTIFY the relay schema's channel: every
//     replica takes a census at once and its standing-by shards try again,
//     so a successor takes a shard within milliseconds. MySQL has no
//     notifications: each replica waits on a bell (Bell: a SLEEP on a
//     connection of its own) and the replica that hands over, leaves or
//     joins rings the others' (it counts a ring in the replica's row, then
//     kills the SLEEP; the ringers of one replica take turns, as two KILLs
//     of one query at once can stall each other for seconds). A ring that
//     comes between two waits, when there is no SLEEP to kill, is not
//     lost: the next wait reads the count first and returns at once.
//
// A dead replica drops out of the census once its last heartbeat is half a
// TTL old (its connections are gone), and its leases are taken at once by
// the replicas then below their share (Alive), or after the TTL when its
// death cannot be seen (a partition, a frozen process). Every replica must run the same sources of the database: the
// share is counted over the shards this process runs.
package lease
