// Package rabbitmq publishes relay messages to RabbitMQ (AMQP 0-9-1) with
// publisher confirms.
//
// # Mapping
//
// Every message is published persistent (delivery mode 2) and mandatory
// (unless configured otherwise) on a channel in confirm mode. When
// Config.Exchange is set, every message goes to that exchange and
// Message.Destination is the routing key. When it is not set, the
// destination names both as "exchange/routing.key" (split at the first
// "/"; "/orders" is the default exchange, which routes to the queue named
// "orders"). The AMQP message_id property is the event id; the type
// property is the event_type header; content_type is application/json when
// the payload is JSON. The message's headers go into the AMQP headers
// table (UTF-8 values as strings, others as byte arrays), the message key
// as the message_key header and a partition key as partition_key.
//
// # Ordering
//
// Publishes on one channel reach the broker in order, but each is
// confirmed on its own: a queue at its length limit (x-overflow
// reject-publish) nacks one message and may accept the next one once a
// consumer made room. So Publish keeps at most one message of a key
// unconfirmed and sends the next message of that key only after the
// previous one was confirmed; messages of different keys are pipelined on
// the channel (see package keyorder). A retryable failure stops its key for
// the rest of the call; the later messages fail unsent. A message whose
// confirm did not come (timeout, cancellation, a cut connection) may still
// have been routed: the relay sends it again, and consumers deduplicate by
// message_id.
//
// # Classification
//
// Terminal (no retry can fix it): a destination that cannot be parsed, a
// routing key over 255 bytes, a payload above MaxMessageBytes, an exchange
// that does not exist (checked with a passive declare before the first
// publish to it on a connection), and a mandatory message returned as
// unroutable (basic.return: no queue is bound for its routing key).
//
// Retryable: a nack, no confirm within ConfirmTimeout, a cancelled
// context, and a channel closed while messages were unconfirmed by a
// channel exception (such as an exchange deleted after it was checked: the
// next call checks it again). A connection that cannot be made, or a
// connection-level close (a cut, a broker restart, missed heartbeats) is
// the broker's failure, not the message's: sink.Down, no attempt charged.
// The broker closes a channel whose message exceeds its max_message_size;
// set MaxMessageBytes at or below it so that such messages are refused
// terminally before they are sent.
//
// # Connections
//
// A Publisher holds one connection and one confirm channel, opened on first
// use. When either closes, the unconfirmed messages fail retryably and the
// next Publish dials again; Publish never waits for a reconnection beyond
// its own call.
package rabbitmq
