package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// ablyErrorCodePath is where Ably puts its error code:
// {"error":{"code":40140,"statusCode":401,"message":"..."}}.
const ablyErrorCodePath = "error.code"

// ablyCodes classifies Ably error codes (ably-common protocol/errors.json).
// Authentication, token and account-limit errors (401xx) and rate limits
// (429xx) say nothing about the message: they are retryable, so a revoked
// key or an exceeded quota holds messages back until an operator acts,
// rather than dead-lettering the whole outbox. An invalid request (400xx:
// bad body, message too large, invalid channel name, invalid id) stays
// invalid and is terminal; so is a missing resource (404xx). Ably's own
// failures (5xxxx) are retryable. Codes not listed fall back to the status.
var ablyCodes = map[string]string{
	"400*": ClassTerminal,
	"401*": ClassRetryable,
	"404*": ClassTerminal,
	"429*": ClassRetryable,
	"5*":   ClassRetryable,
}

// ablyEventNameHeader is the message header used as Ably's message name.
const ablyEventNameHeader = "event_type"

// ablyPublisher publishes to POST {base}/channels/{channel}/messages.
type ablyPublisher struct {
	base string // without trailing slash
	auth string // Authorization header value
}

func newAbly(cfg Ably) *ablyPublisher {
	return &ablyPublisher{
		base: strings.TrimRight(cfg.BaseURL, "/"),
		auth: "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.APIKey)),
	}
}

// ablyMessage is Ably's message object as its REST API takes it.
type ablyMessage struct {
	// ID makes the publish idempotent: Ably drops a later message with the
	// same id.
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name,omitempty"`
	Data     json.RawMessage `json:"data"`
	Encoding string          `json:"encoding,omitempty"`
	Extras   *ablyExtras     `json:"extras,omitempty"`
}

type ablyExtras struct {
	Headers map[string]string `json:"headers"`
}

// ablyData encodes a payload as Ably message data: a JSON object, array or
// string as itself; another JSON value (number, boolean, null) as its text
// with encoding "json"; other UTF-8 text as a string; anything else as
// base64 with encoding "base64". Ably's SDKs decode the last two back.
func ablyData(payload []byte) (data json.RawMessage, encoding string, err error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) > 0 && json.Valid(trimmed) {
		switch trimmed[0] {
		case '{', '[', '"':
			return trimmed, "", nil
		}
		data, err = json.Marshal(string(trimmed))
		return data, "json", err
	}
	if utf8.Valid(payload) {
		data, err = json.Marshal(string(payload))
		return data, "", err
	}
	data, err = json.Marshal(base64.StdEncoding.EncodeToString(payload))
	return data, "base64", err
}

// ablyBody is the JSON request body for m.
func ablyBody(m *sink.Message) ([]byte, error) {
	data, enc, err := ablyData(m.Payload)
	if err != nil {
		return nil, err
	}
	am := ablyMessage{ID: m.ID, Data: data, Encoding: enc}
	if len(m.Headers) > 0 {
		am.Extras = &ablyExtras{Headers: make(map[string]string, len(m.Headers))}
		for _, h := range m.Headers {
			if h.Key == ablyEventNameHeader {
				am.Name = string(h.Value)
			}
			am.Extras.Headers[h.Key] = string(h.Value)
		}
	}
	return json.Marshal(am)
}

// ablyChannelURL is the publish URL of channel.
func (a *ablyPublisher) channelURL(channel string) string {
	return a.base + "/channels/" + url.PathEscape(channel) + "/messages"
}

func (a *ablyPublisher) newRequest(ctx context.Context, p *Publisher, m *sink.Message) (*http.Request, error) {
	if m.Destination == "" {
		return nil, sink.Terminal(fmt.Errorf("empty Ably channel"))
	}
	body, err := ablyBody(m)
	if err != nil {
		return nil, sink.Terminal(fmt.Errorf("ably message body: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.channelURL(m.Destination), bytes.NewReader(body))
	if err != nil {
		return nil, sink.Terminal(fmt.Errorf("ably request for channel %q: %w", m.Destination, err))
	}
	p.setCommon(req, m)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", a.auth)
	return req, nil
}

// pingURL is Ably's time endpoint, which answers without authentication.
func (a *ablyPublisher) pingURL() string { return a.base + "/time" }
