package postgres

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// maxWALName is the longest name PostgreSQL keeps for a publication or a
// replication slot (NAMEDATALEN - 1).
const maxWALName = 63

// WALName is the name of the publication and of the replication slot of a
// source read by capture wal: the relay's schema and the source's name,
// joined by "_", lower-cased, every character other than a-z, 0-9 and "_"
// made "_". A name that had to change (characters replaced) or that is
// longer than 63 bytes is cut to 54 bytes and ends in "_" and 8 hex digits
// of a hash of the schema and the source's name, so that two sources never
// share a slot: "outbox_relay_orders", "outbox_relay_billing_events_f3a9c2d1".
func WALName(relaySchema, source string) string {
	raw := relaySchema + "_" + source
	var b strings.Builder
	for _, c := range strings.ToLower(raw) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == raw && len(name) <= maxWALName {
		return name
	}
	return withHash(name, relaySchema+"\x00"+source)
}

// WALSlotName is the name of the replication slot of a source read by
// capture wal: WALName cut to 54 bytes, then "_" and 8 hex digits of a hash
// of the database's name, the relay's schema and the source's name. Slots
// are the server's, not a database's: two databases of one server may each
// have a source of the same name ("outbox_relay_orders_5be0a7c2").
func WALSlotName(database, relaySchema, source string) string {
	return withHash(WALName(relaySchema, source), database+"\x00"+relaySchema+"\x00"+source)
}

// withHash cuts name to leave room for "_" and 8 hex digits of a hash of
// of, and appends them.
func withHash(name, of string) string {
	h := fnv.New32a()
	h.Write([]byte(of))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	return name[:min(len(name), maxWALName-len(suffix))] + suffix
}
