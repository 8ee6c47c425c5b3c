// Package sqlcore writes the relay's SQL for an outbox table once, for every
// dialect: how a layout's templates, order key and states become SQL
// expressions and SET lists. A dialect supplies only what differs between
// databases (quoting, casts, booleans, the clock) through Dialect; the
// stores in postgres and mysql build their statements from these pieces.
//
// The claims of one bucket of a source (source.Bucket) filter their
// candidates with one predicate, InBucket, over the hash the dialect spells
// (Hash32).
//
// Every change to what this package writes shows in the golden files under
// internal/source/testdata/golden, one a dialect and preset, and one more
// for the claims of a bucket.
package sqlcore
