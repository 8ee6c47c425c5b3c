package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// hdr is a header in a comparable, printable form.
type hdr struct{ K, V string }

func hdrs(hs []sink.Header) []hdr {
	out := make([]hdr, 0, len(hs))
	for _, h := range hs {
		out = append(out, hdr{h.Key, string(h.Value)})
	}
	return out
}

// baseRow is a complete row; tests change what they exercise.
func baseRow() source.Row {
	return source.Row{
		ID:            "42",
		Payload:       []byte(`{"a":1}`),
		Topic:         "orders",
		TopicOK:       true,
		Key:           []byte("k"),
		PartitionKey:  []byte("p"),
		OrderKey:      "p",
		EventType:     "OrderCreated",
		AggregateType: "order",
		AggregateID:   "o-1",
	}
}

// relayHdrs are the headers buildMessage adds for baseRow with source "src".
var relayHdrs = []hdr{
	{HeaderEventID, "42"},
	{HeaderEventType, "OrderCreated"},
	{HeaderAggregateType, "order"},
	{HeaderAggregateID, "o-1"},
	{HeaderSource, "src"},
}

func with(extra []hdr, tail ...hdr) []hdr {
	return append(append([]hdr(nil), extra...), tail...)
}

func TestBuildMessage(t *testing.T) {
	// Size of baseRow's message as messageSize counts it: payload 7 + key 1 +
	// event_id 8+2 + event_type 10+12 + aggregate_type 14+5 +
	// aggregate_id 12+3 + outbox_source 13+3. The partition key does not
	// travel with the record.
	const baseSize = 90

	type want struct {
		err     error  // errors.Is target, when the build must fail
		errText string // exact error text, when the build must fail
		errSub  string // substring of the error, when the build must fail
		headers []hdr  // expected headers, when it succeeds
	}
	tests := []struct {
		name     string
		row      func(r *source.Row)
		src      string
		validate bool
		maxBytes int
		want     want
	}{
		{
			name: "plain row",
			row:  func(*source.Row) {},
			src:  "src", validate: true,
			want: want{headers: relayHdrs},
		},
		{
			name: "missing topic is terminal",
			row:  func(r *source.Row) { r.TopicOK, r.Topic = false, "" },
			src:  "src", validate: true,
			want: want{err: errNoTopic},
		},
		{
			name: "missing topic is terminal even with a stale topic string",
			row:  func(r *source.Row) { r.TopicOK = false },
			src:  "src",
			want: want{err: errNoTopic},
		},
		{
			name: "invalid JSON with validation is terminal",
			row:  func(r *source.Row) { r.Payload = []byte(`{"a":`) },
			src:  "src", validate: true,
			want: want{err: errInvalidJSON},
		},
		{
			name: "invalid JSON without validation is published as is",
			row:  func(r *source.Row) { r.Payload = []byte(`{"a":`) },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "binary payload without validation",
			row:  func(r *source.Row) { r.Payload = []byte{0x00, 0xff, 0xfe} },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "invalid UTF-8 inside a JSON string is terminal with validation",
			row:  func(r *source.Row) { r.Payload = []byte("{\"a\":\"\xff\xfe\"}") },
			src:  "src", validate: true,
			want: want{err: errInvalidJSON},
		},
		{
			name: "invalid UTF-8 is accepted without validation",
			row:  func(r *source.Row) { r.Payload = []byte("{\"a\":\"\xff\xfe\"}") },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "empty payload is not JSON",
			row:  func(r *source.Row) { r.Payload = nil },
			src:  "src", validate: true,
			want: want{err: errInvalidJSON},
		},
		{
			name: "missing topic wins over invalid JSON",
			row:  func(r *source.Row) { r.TopicOK, r.Payload = false, []byte("nope") },
			src:  "src", validate: true,
			want: want{err: errNoTopic},
		},
		{
			name: "message exactly at the limit",
			row:  func(*source.Row) {},
			src:  "src", validate: true, maxBytes: baseSize,
			want: want{headers: relayHdrs},
		},
		{
			name: "oversize message is terminal and names both sizes",
			row:  func(*source.Row) {},
			src:  "src", validate: true, maxBytes: baseSize - 1,
			want: want{errText: fmt.Sprintf("message too large: %d bytes, the sink accepts at most %d", baseSize, baseSize-1)},
		},
		{
			name: "row headers count towards the size",
			row:  func(r *source.Row) { r.Headers = []byte(`{"tr":"abc"}`) },
			src:  "src", maxBytes: baseSize + 4,
			want: want{errText: fmt.Sprintf("message too large: %d bytes, the sink accepts at most %d", baseSize+5, baseSize+4)},
		},
		{
			name: "zero limit means no limit",
			row:  func(r *source.Row) { r.Payload = bytes.Repeat([]byte("x"), 1<<20) },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "headers keep order; strings raw, other values as JSON text, null skipped",
			row: func(r *source.Row) {
				r.Headers = []byte(`{"z":"last","a":1,"b":true,"f":false,"n":null,"o":{"x":[1,2]},"l":[1,"a"],` +
					`"num":1.50,"q":"say \"hi\"\n","u":"\u00e9\u20ac","e":"","s":"null"}`)
			},
			src: "src",
			want: want{headers: with([]hdr{
				{"z", "last"}, {"a", "1"}, {"b", "true"}, {"f", "false"},
				{"o", `{"x":[1,2]}`}, {"l", `[1,"a"]`}, {"num", "1.50"},
				{"q", "say \"hi\"\n"}, {"u", "é€"}, {"e", ""}, {"s", "null"},
			}, relayHdrs...)},
		},
		{
			name: "duplicate header names are all kept, in order",
			row:  func(r *source.Row) { r.Headers = []byte(`{"a":"1","b":"2","a":"3"}`) },
			src:  "src",
			want: want{headers: with([]hdr{{"a", "1"}, {"b", "2"}, {"a", "3"}}, relayHdrs...)},
		},
		{
			name: "whitespace around the object and members",
			row:  func(r *source.Row) { r.Headers = []byte(" \n{ \"a\" : \"x\" ,\t\"b\" : 2 }\n") },
			src:  "src",
			want: want{headers: with([]hdr{{"a", "x"}, {"b", "2"}}, relayHdrs...)},
		},
		{
			name: "reserved names from the row give way to the relay's",
			row: func(r *source.Row) {
				r.Headers = []byte(`{"event_id":"spoofed","trace":"t1","event_type":"X","aggregate_type":"Y",` +
					`"aggregate_id":"Z","outbox_source":"other","span":"s1"}`)
			},
			src:  "src",
			want: want{headers: with([]hdr{{"trace", "t1"}, {"span", "s1"}}, relayHdrs...)},
		},
		{
			name: "reserved names are dropped whatever their value type",
			row:  func(r *source.Row) { r.Headers = []byte(`{"event_id":7,"outbox_source":{"a":1},"event_type":null}`) },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "null headers",
			row:  func(r *source.Row) { r.Headers = []byte(" null ") },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{
			name: "empty object",
			row:  func(r *source.Row) { r.Headers = []byte(`{}`) },
			src:  "src",
			want: want{headers: relayHdrs},
		},
		{name: "array headers are terminal", row: func(r *source.Row) { r.Headers = []byte(`[{"a":"b"}]`) },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "string headers are terminal", row: func(r *source.Row) { r.Headers = []byte(`"a=b"`) },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "number headers are terminal", row: func(r *source.Row) { r.Headers = []byte(`12`) },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "bool headers are terminal", row: func(r *source.Row) { r.Headers = []byte(`true`) },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "non-JSON headers are terminal", row: func(r *source.Row) { r.Headers = []byte(`trace=abc`) },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "blank headers are terminal", row: func(r *source.Row) { r.Headers = []byte("  ") },
			src: "src", want: want{errSub: "invalid headers: not a JSON object"}},
		{name: "malformed member is terminal", row: func(r *source.Row) { r.Headers = []byte(`{"a":"b",}`) },
			src: "src", want: want{errSub: "invalid headers: "}},
		{name: "missing colon is terminal", row: func(r *source.Row) { r.Headers = []byte(`{"a" "b"}`) },
			src: "src", want: want{errSub: "invalid headers: "}},
		{name: "bad value is terminal", row: func(r *source.Row) { r.Headers = []byte(`{"a":tru}`) },
			src: "src", want: want{errSub: "invalid headers: "}},
		{
			name: "empty relay values are omitted",
			row:  func(r *source.Row) { r.EventType, r.AggregateType, r.AggregateID = "", "", "" },
			src:  "",
			want: want{headers: []hdr{{HeaderEventID, "42"}}},
		},
		{
			name: "only the aggregate type set",
			row:  func(r *source.Row) { r.EventType, r.AggregateID = "", "" },
			src:  "src",
			want: want{headers: []hdr{{HeaderEventID, "42"}, {HeaderAggregateType, "order"}, {HeaderSource, "src"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := baseRow()
			tt.row(&r)
			m, err := buildMessage(&r, tt.src, tt.validate, &target{topic: "{topic}", maxBytes: tt.maxBytes}, nil)
			failing := tt.want.err != nil || tt.want.errText != "" || tt.want.errSub != ""
			if failing {
				if err == nil {
					t.Fatalf("buildMessage succeeded with headers %q, want an error", hdrs(m.Headers))
				}
				if m != nil {
					t.Errorf("buildMessage returned a message along with error %v", err)
				}
				if !sink.IsTerminal(err) {
					t.Errorf("error %v is not terminal", err)
				}
				if tt.want.err != nil && !errors.Is(err, tt.want.err) {
					t.Errorf("error = %v, want %v", err, tt.want.err)
				}
				if tt.want.errText != "" && err.Error() != tt.want.errText {
					t.Errorf("error = %q, want %q", err, tt.want.errText)
				}
				if tt.want.errSub != "" && !strings.Contains(err.Error(), tt.want.errSub) {
					t.Errorf("error = %q, want it to contain %q", err, tt.want.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("buildMessage: %v", err)
			}
			if m.ID != r.ID || m.Destination != r.Topic || !bytes.Equal(m.Key, r.Key) ||
				!bytes.Equal(m.PartitionKey, r.PartitionKey) || !bytes.Equal(m.Payload, r.Payload) {
				t.Errorf("message = {ID:%q Destination:%q Key:%q PartitionKey:%q Payload:%q}, want the row's {%q %q %q %q %q}",
					m.ID, m.Destination, m.Key, m.PartitionKey, m.Payload, r.ID, r.Topic, r.Key, r.PartitionKey, r.Payload)
			}
			if got := hdrs(m.Headers); !reflect.DeepEqual(got, tt.want.headers) {
				t.Errorf("headers:\n got %q\nwant %q", got, tt.want.headers)
			}
		})
	}
}

func TestBuildMessageNilKeys(t *testing.T) {
	r := baseRow()
	r.Key, r.PartitionKey = nil, nil
	m, err := buildMessage(&r, "src", true, &target{topic: "{topic}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Key != nil || m.PartitionKey != nil {
		t.Errorf("Key = %q, PartitionKey = %q; want both nil (NULL keys stay NULL)", m.Key, m.PartitionKey)
	}
}

// Header values must not alias the row: the row's buffer may be reused.
func TestParseHeadersCopiesValues(t *testing.T) {
	raw := []byte(`{"a":123,"b":{"c":1}}`)
	hs, err := parseHeaders(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 'X'
	}
	if got, want := hdrs(hs), []hdr{{"a", "123"}, {"b", `{"c":1}`}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after overwriting the input, headers = %q, want %q", got, want)
	}
}

func TestParseHeadersRejectsMalformedObject(t *testing.T) {
	for _, in := range []string{`{`, `{"a":"b"`, `{"a":"b",`, `{"a":1} x`, `{}{}`, `{"a":1}]`} {
		if hs, err := parseHeaders([]byte(in)); err == nil {
			t.Errorf("parseHeaders(%q) = %q, want an error", in, hdrs(hs))
		}
	}
}

// refHeader is one member of a headers object as a reference decoder sees
// it: the value decoded into any (json.Number for numbers).
type refHeader struct {
	key string
	val any
}

// refHeaders decodes a valid JSON object member by member, keeping order and
// duplicates. ok is false when raw is not an object.
func refHeaders(raw []byte) ([]refHeader, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []refHeader
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		k, ok := kt.(string)
		if !ok {
			return nil, false
		}
		out = append(out, refHeader{k, v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return out, true
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, ` null `, `{"a":"b"}`, `{"a":1,"b":true,"c":null,"d":{"e":[1,2]},"f":"g"}`,
		`{"event_id":"x","k":"v"}`, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":"b","a":"c"}`,
		`[]`, `"s"`, `1`, ``, `{`, `{"a":}`, `{"a":"b",}`, `{"a":1e400}`, `{"a":-0.0e-0}`,
		"{\"a\":\"\xff\"}", `{"":""}`, ` { "a" : [ 1 , { } ] } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		hs, err := parseHeaders(raw)
		trimmed := bytes.TrimSpace(raw)
		isObject := json.Valid(raw) && len(trimmed) > 0 && trimmed[0] == '{'
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid headers") {
				t.Errorf("error %q does not start with \"invalid headers\"", err)
			}
			if isObject {
				t.Fatalf("parseHeaders(%q) failed on a valid JSON object: %v", raw, err)
			}
			if hs != nil {
				t.Errorf("parseHeaders(%q) returned headers %q with an error", raw, hdrs(hs))
			}
			return
		}
		if bytes.Equal(trimmed, []byte("null")) {
			if hs != nil {
				t.Fatalf("parseHeaders(%q) = %q, want nil", raw, hdrs(hs))
			}
			return
		}
		if len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("parseHeaders(%q) succeeded on input that does not start with '{'", raw)
		}
		for _, h := range hs {
			if reserved[h.Key] {
				t.Fatalf("parseHeaders(%q) kept the reserved header %q", raw, h.Key)
			}
		}
		if !json.Valid(raw) {
			t.Fatalf("parseHeaders(%q) = %q, accepted input that is not valid JSON", raw, hdrs(hs))
		}
		ref, ok := refHeaders(raw)
		if !ok {
			t.Fatalf("reference decoder rejects %q, which parseHeaders accepted", raw)
		}
		var want []refHeader
		for _, r := range ref {
			if r.val != nil && !reserved[r.key] {
				want = append(want, r)
			}
		}
		if len(hs) != len(want) {
			t.Fatalf("parseHeaders(%q) gave %d headers %q, want %d (%v)", raw, len(hs), hdrs(hs), len(want), want)
		}
		for i, h := range hs {
			w := want[i]
			if h.Key != w.key {
				t.Fatalf("header %d of %q: key %q, want %q", i, raw, h.Key, w.key)
			}
			if s, isString := w.val.(string); isString {
				if string(h.Value) != s {
					t.Fatalf("header %q of %q: value %q, want the raw string %q", h.Key, raw, h.Value, s)
				}
				continue
			}
			// Any other value is its JSON text, which decodes to the same value.
			dec := json.NewDecoder(bytes.NewReader(h.Value))
			dec.UseNumber()
			var got any
			if err := dec.Decode(&got); err != nil || dec.More() {
				t.Fatalf("header %q of %q: value %q is not JSON text (%v)", h.Key, raw, h.Value, err)
			}
			if !reflect.DeepEqual(got, w.val) {
				t.Fatalf("header %q of %q: value %q decodes to %#v, want %#v", h.Key, raw, h.Value, got, w.val)
			}
		}
	})
}

func TestIsJSON(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{`[]`, true},
		{`{"a":[1,2,{"b":null}]}`, true},
		{`"text"`, true},
		{`12.5e3`, true},
		{`null`, true},
		{`true`, true},
		{" \n{\"a\":1}\t", true},
		{`{"a":"é"}`, true},
		{`{"a":"\u00e9"}`, true},
		{``, false},
		{` `, false},
		{`{`, false},
		{`{"a":1,}`, false},
		{`{'a':1}`, false},
		{`{"a":1} {}`, false},
		{`nul`, false},
		{`NaN`, false},
		{`01`, false},
		{"{\"a\":\"\xff\"}", false},         // invalid UTF-8 inside a string
		{"{\"a\":\"\xc3\"}", false},         // truncated UTF-8 sequence
		{"{\"a\":\"\xed\xa0\x80\"}", false}, // UTF-8-encoded surrogate
		{"{\"a\":\"b\x00\"}", false},        // raw control character
		{"\xef\xbb\xbf{}", false},           // byte order mark
	}
	for _, tt := range tests {
		if got := isJSON([]byte(tt.in)); got != tt.want {
			t.Errorf("isJSON(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// isJSON promises that the payload can be stored in failed_events.payload,
// a jsonb column. PostgreSQL refuses these although they are valid JSON.
func TestIsJSONMatchesJSONB(t *testing.T) {
	for _, in := range []string{`{"a":"\u0000"}`, `"x\u0000y"`, `{"a":"\ud800"}`, `{"a":"\udc00\ud800"}`} {
		if isJSON([]byte(in)) {
			t.Errorf("isJSON(%q) = true, but PostgreSQL's jsonb rejects it", in)
		}
	}
}
