// Package config loads the relay's YAML configuration.
//
// [Load] reads a file and [Parse] parses bytes. Both run the same steps, in
// this order:
//
//  1. Decode the YAML strictly: an unknown key is an error naming the key,
//     its path and its line. Durations are written as Go durations ("250ms",
//     "1m30s"); a bad one is an error naming the field path and the value.
//  2. Expand ${NAME} references in string values from the environment. Only
//     the braced form with NAME matching [A-Za-z_][A-Za-z0-9_]* is expanded;
//     any other "$" is kept as written. A reference to an unset variable is an
//     error naming the field. Numbers, booleans and durations are not
//     expanded. Values taken from environment overrides (step 3) are used as
//     they are, never expanded.
//  3. Apply environment overrides (see below).
//  4. Fill defaults for fields left unset. Strings and lists are unset when
//     empty. Numbers and durations are unset only when their key is absent
//     from the file: an explicit 0 is kept, so "record_retries: 0" means no
//     retries and "batch_size: 0" is reported as invalid.
//  5. Validate. Every problem is collected and reported together as one
//     [*ValidationError], one "<path>: <message>" line per problem, such as
//     "sources[1].batch_size: must be between 1 and 10000, got 0".
//
// # Environment overrides
//
// In the variable names below, <NAME> is a database or sink name from the
// file, upper-cased, with every character other than A-Z and 0-9 replaced by
// "_" (the database "billing-eu" becomes BILLING_EU). Overrides apply only to
// databases and sinks that the file declares.
//
//	OUTBOX_RELAY_DATABASE_<NAME>_DSN        databases.<name>.dsn
//	OUTBOX_RELAY_SINK_<NAME>_BROKERS        sinks.<name>.brokers (comma-separated)
//	OUTBOX_RELAY_SINK_<NAME>_SASL_PASSWORD  sinks.<name>.sasl.password
//	OUTBOX_RELAY_LOG_LEVEL                  log.level
//	OUTBOX_RELAY_ADMIN_LISTEN               admin.listen
//	OUTBOX_RELAY_ADMIN_TOKEN                admin.token
//
// Each variable also has a _FILE variant (OUTBOX_RELAY_LOG_LEVEL_FILE, ...)
// whose value is the path of a file holding the value, as mounted secrets
// are; trailing newlines are trimmed from the file's content. Setting both a
// variable and its _FILE variant is an error. A variable set to the empty
// string counts as unset, and an empty file is an error.
//
// A broker list may also be separated by white space, so a _FILE may hold one
// broker per line. An override for a sink without a sasl block adds one, which
// then needs its mechanism and username set in the file. log.level and
// log.format are case-insensitive.
//
// DATABASE_URL fills the dsn of the database when the file declares exactly
// one database and neither the file nor OUTBOX_RELAY_DATABASE_<NAME>_DSN gives
// it a dsn (nor dsns). For an entry with discover, the dsn is the server's.
//
// # Templates and table names
//
// Template fields (layout.topic, layout.key, layout.partition_key,
// layout.order_key and a source's topic) mix literal text with {column}
// references, e.g. "tenant:{tenantId}"; see [layout.ParseTemplate]. Table names are
// schema-qualified SQL identifiers, e.g. "billing.outbox" or
// `tenant."OutboxEvent"`; see [layout.ParseTableName].
package config
