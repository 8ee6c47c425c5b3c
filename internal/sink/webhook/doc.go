// Package webhook publishes relay messages as HTTP requests, one request per
// message, with net/http: to any webhook endpoint, or (preset "ably") to
// Ably's REST publish API.
//
// # Requests
//
// Config.URL is a template: "{destination}" is replaced by the message's
// destination, path-escaped in the path and query-escaped after "?". A URL
// that is only "{destination}" takes the destination as the whole URL. A
// result that is not an absolute http(s) URL fails the message terminally.
//
// The body is the payload, sent as Content-Type application/json when it is
// valid JSON, else application/octet-stream (Config.ContentType overrides).
// Each message header travels as an HTTP header named HeaderPrefix plus the
// key with "_" replaced by "-" (event_id becomes X-Outbox-Event-Id; names
// are case-insensitive). Idempotency-Key carries the event id, and
// X-Outbox-Key the message key, percent-encoded as a path segment. With an HMAC
// secret, the signature header (default X-Outbox-Signature) carries
// "t=<unix seconds>,v1=<hex HMAC-SHA256 over "<t>.<body>">", as Sign
// computes it. Static Config.Headers are set on every request.
//
// The ably preset posts Ably's message object to
// {base}/channels/{destination}/messages with Basic authentication: id =
// event id (Ably drops a repeated id: idempotent publishing), name = the
// event_type header, data = the payload (see ablyData), extras.headers =
// every message header.
//
// # Ordering
//
// Messages of one order key (sink.OrderKey) are sent one at a time, each
// after the previous one was answered 2xx; the first failure fails the rest
// of that key in the call, unsent and retryable. Different keys go
// concurrently, bounded by Config.Concurrency requests across all Publish
// calls, over one keep-alive client.
//
// Ably accepts an array of messages in one publish, all or nothing, but
// then requires client-supplied ids of the form "<base>:<index>" (error
// 40031): the event ids could no longer be the idempotency keys, so each
// message is its own request.
//
// # Classification
//
// 2xx is success. A network error, a timeout (Config.Timeout per request) or
// a cancelled context is retryable. 408, 429 and 5xx are retryable and carry
// the Retry-After delay, if any, for sink.RetryAfter. Every other status
// (3xx, as redirects are not followed, and 4xx) is terminal. When
// Config.ErrorCodes names a path in a JSON error body, a code found there
// and listed in ErrorCodes.Codes decides instead of the status. Messages that
// cannot become a request (too large, bad destination, a header name or
// value HTTP cannot carry) are terminal without a request.
package webhook
