// Package mqtt publishes relay messages to an MQTT v5 server with QoS 1.
//
// # Mapping
//
// The topic is Message.Destination. Each header becomes a user property in
// the order given; the event id is carried as the event_id user property
// (added when the headers do not already carry one), the message key as
// message_key and a partition key as partition_key. Correlation data is not
// set: it belongs to request/response exchanges, and a consumer that
// answers with it would echo the event id to nobody. A JSON payload is
// sent with content type application/json and, when it is UTF-8, payload
// format indicator 1.
//
// # Ordering
//
// The server answers each QoS 1 PUBLISH with its own PUBACK, so with
// several in flight a later message can be accepted after an earlier one
// was refused (quota exceeded, not authorized...). Publish therefore keeps at
// most one message of a key in flight: the next one of that key is sent
// once the previous PUBACK arrived; different keys share the connection
// concurrently, within the server's Receive Maximum (see package keyorder).
// A retryable failure stops its key for the rest of the call.
//
// # Classification
//
// Terminal, without contacting the server: an empty topic, a topic with a
// wildcard (+ or #), a topic or user property that is not UTF-8 or holds
// U+0000, a topic over 65,535 bytes, a payload above MaxMessageBytes, and a
// message larger than the server's Maximum Packet Size. Terminal PUBACK
// reason codes: 0x90 topic name invalid, 0x99 payload format invalid,
// 0x95 packet too large.
//
// Retryable: every other PUBACK reason code of 0x80 or more (0x80
// unspecified, 0x83 implementation specific, 0x87 not authorized, which is
// a configuration to fix for every message alike, 0x91 packet identifier in
// use, 0x97 quota exceeded), no PUBACK within PublishTimeout, a cancelled
// context, a failed connection and a connection lost with messages in
// flight. 0x10 (no matching subscribers) is a success.
//
// # Connections
//
// A Publisher holds one connection, made on first use with Clean Start.
// When it drops, the messages in flight fail retryably at once and the next
// Publish connects again. Each connection is a fresh session: messages
// unacknowledged at a cut are sent again by the relay, not by the session,
// so a consumer may see a duplicate (same event_id) but never a reordering.
package mqtt
