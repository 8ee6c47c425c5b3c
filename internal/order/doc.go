// Package order owns every in-memory decision about per-key order: which
// rows of a claimed batch may be published now, in which waves, and what the
// sink's results mean for each row and its key. The relay engine asks; it
// decides nothing about order itself. (The database's part, claiming rows in
// order and skipping keys that are held, is the claim statement's.)
//
// # Keys
//
// A row's order key is its partition key, else its key. Rows of one key are
// published in claim order, and a row is never published before every
// earlier row of its key has been published or dead-lettered. Rows without a
// key (order key "") have no order: they never wait on each other and never
// hold each other back.
//
// # States of a key
//
// Seen from one relay process, a key is
//
//   - free: no batch in flight holds a row of it;
//   - in flight in batch N: the newest claimed batch holding its rows is N;
//     a later batch's rows of the key wait until N has committed;
//   - held until T: a batch committed leaving a row of the key pending (a
//     retry, a sink that was unavailable, a row not sent). The commit wrote
//     the hold into the database (retry_state), so claims after it skip the
//     key until T; batches claimed before it could not see that commit, and
//     the Book fences them: their rows of the key are held too;
//   - released: a commit failed or a batch was released, so its rows are
//     pending again with no hold in the database; batches claimed before
//     that are fenced as above, for the same reason.
//
// A row that is held is not charged an attempt: it is written back as
// pending with its key held until T (see Fate). That hold in the database is
// what makes the engine live: once every batch claimed before it has
// committed, the next claim takes the key from its first pending row with no
// batch in flight to wait on.
//
// # Within a batch
//
// A key's rows go to the sink in one call, in order; the sink contract says
// a failure fails every later message of that key in the call. When a key's
// rows change destination (another topic, another sink) they are cut into
// waves (Plan), since no broker orders across partitions: a key's next wave
// goes only if its previous one was delivered. Judge then gives each row its
// Fate, walking each key in order: after a row left pending, the key's later
// rows are held, not charged; after a terminal failure (the row will be
// dead-lettered and never published) the key goes on.
package order
