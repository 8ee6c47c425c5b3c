package mqtt

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

func TestMessageMapping(t *testing.T) {
	t.Parallel()
	sub := subscribe(t)
	p := newPublisher(t, testConfig(testAddr()))

	m := msg(sub.prefix+"/orders", "42", "order-7", `{"total":3}`)
	m.PartitionKey = []byte("tenant-1")
	m.Headers = []sink.Header{{Key: "event_type", Value: []byte("order.created")}, {Key: "x-b", Value: []byte("2")}}
	withID := msg(sub.prefix+"/orders", "43", "", "plain text")
	withID.Headers = []sink.Header{{Key: "event_id", Value: []byte("43")}}
	for i, err := range p.Publish(testCtx(t), []*sink.Message{m, withID}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := sub.wait(t, 2)
	if id, _ := property(got[0], PropertyEventID); id != "42" { // sent concurrently
		got[0], got[1] = got[1], got[0]
	}
	if got[0].Topic != m.Destination || got[0].QoS != 1 || string(got[0].Payload) != `{"total":3}` {
		t.Fatalf("topic %q qos %d payload %q", got[0].Topic, got[0].QoS, got[0].Payload)
	}
	var props []string
	for _, u := range got[0].Properties.User {
		props = append(props, u.Key+"="+u.Value)
	}
	if want := "event_type=order.created x-b=2 event_id=42 message_key=order-7 partition_key=tenant-1"; strings.Join(props, " ") != want {
		t.Errorf("user properties %q, want %q", strings.Join(props, " "), want)
	}
	if pr := got[0].Properties; pr.ContentType != "application/json" || pr.PayloadFormat == nil || *pr.PayloadFormat != 1 || pr.CorrelationData != nil {
		t.Errorf("content type %q payload format %v correlation data %q", pr.ContentType, pr.PayloadFormat, pr.CorrelationData)
	}
	if pr := got[1].Properties; pr.ContentType != "" || len(pr.User) != 1 || pr.User[0].Key != "event_id" {
		t.Errorf("plain message: content type %q user properties %v (event_id twice?)", pr.ContentType, pr.User)
	}
}

func TestTerminalBeforeSending(t *testing.T) {
	t.Parallel()
	sub := subscribe(t)
	cfg := testConfig(testAddr())
	cfg.MaxMessageBytes = 100
	p := newPublisher(t, cfg)

	badHeader := msg(sub.prefix+"/t", "hdr", "k", "x")
	badHeader.Headers = []sink.Header{{Key: "bin", Value: []byte{0xff}}}
	msgs := []*sink.Message{
		msg("", "empty", "k", "x"),
		msg(sub.prefix+"/+/t", "plus", "k", "x"),
		msg(sub.prefix+"/#", "hash", "k", "x"),
		msg(sub.prefix+"/\x00", "nul", "k", "x"),
		msg(sub.prefix+"/t", "big", "k", strings.Repeat("x", 101)),
		badHeader,
		msg(sub.prefix+"/t", "binary-key", "\xff", "x"),
		nil,
		msg(sub.prefix+"/t", "ok", "k", strings.Repeat("x", 100)),
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, want := range []error{ErrInvalidTopic, ErrInvalidTopic, ErrInvalidTopic, ErrInvalidTopic, ErrTooLarge,
		ErrInvalidProperty, ErrInvalidProperty, nil} {
		if !sink.IsTerminal(errs[i]) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("message %d: want terminal %v, got %v", i, want, errs[i])
		}
	}
	if errs[8] != nil {
		t.Fatalf("good message after terminal ones: %v", errs[8])
	}
	if got := sub.wait(t, 1); len(got) != 1 {
		t.Fatalf("%d messages arrived, want 1", len(got))
	}
}

// TestRefusals runs a private Mosquitto that refuses payloads over 100
// bytes (PUBACK 0x95, terminal), allows only topics under ok/ (PUBACK 0x87,
// retryable) and announces a maximum packet size of 400 bytes (checked
// before sending).
func TestRefusals(t *testing.T) {
	t.Parallel()
	addr := privateMosquitto(t, "message_size_limit 100\nmax_packet_size 400\n", "topic readwrite ok/#\n")
	p := newPublisher(t, testConfig(addr))

	errs := p.Publish(testCtx(t), []*sink.Message{
		msg("ok/a", "1", "k", "small"),
		msg("ok/a", "2", "k", strings.Repeat("x", 150)),
		msg("ok/a", "3", "k", "small"),
		msg("ok/a", "4", "k", strings.Repeat("x", 500)),
		msg("ok/a", "5", "k", "small"),
	})
	if errs[0] != nil || errs[2] != nil || errs[4] != nil {
		t.Fatalf("small messages: %v", errs)
	}
	if !sink.IsTerminal(errs[1]) || !errors.Is(errs[1], ErrRefused) || !strings.Contains(errs[1].Error(), "0x95") {
		t.Errorf("over message_size_limit: want terminal 0x95, got %v", errs[1])
	}
	if !sink.IsTerminal(errs[3]) || !errors.Is(errs[3], ErrTooLarge) {
		t.Errorf("over the maximum packet size: want terminal ErrTooLarge, got %v", errs[3])
	}

	errs = p.Publish(testCtx(t), []*sink.Message{
		msg("denied/a", "6", "k", "x"), msg("ok/a", "7", "k", "x"), msg("ok/a", "8", "other", "x"),
	})
	if errs[0] == nil || sink.IsTerminal(errs[0]) || !strings.Contains(errs[0].Error(), "0x87") {
		t.Errorf("not authorized: want retryable 0x87, got %v", errs[0])
	}
	if !errors.Is(errs[1], keyorder.ErrHeldBack) {
		t.Errorf("after a refused message of its key: want held back, got %v", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("another key: %v", errs[2])
	}
}

// privateMosquitto starts a Mosquitto of the test's own with the extra
// configuration and ACL, on a free local port, and returns its address.
func privateMosquitto(t *testing.T, conf, acl string) string {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		t.Fatalf("mosquitto is not installed (apt-get install mosquitto): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl")
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	full := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nacl_file %s\n%s", port, aclFile, conf)
	if os.Geteuid() == 0 {
		full += "user root\n" // else it drops to a user that cannot read the test's files
	}
	confFile := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(confFile, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confFile)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("private mosquitto did not start: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRefusedClassification(t *testing.T) {
	t.Parallel()
	for code, terminal := range map[byte]bool{
		0x80: false, 0x83: false, 0x87: false, 0x91: false, 0x97: false,
		0x90: true, 0x95: true, 0x99: true,
	} {
		err := refused("t", code, "why")
		if sink.IsTerminal(err) != terminal || !errors.Is(err, ErrRefused) {
			t.Errorf("0x%02x: %v, terminal %v, want %v", code, err, sink.IsTerminal(err), terminal)
		}
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, testConfig(testAddr()))
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg("outbox-relay-test/closed", "1", "", "x")})[0]
	if !errors.Is(err, ErrClosed) || sink.IsTerminal(err) {
		t.Fatalf("publish after close: want retryable ErrClosed, got %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestConnectFailureIsRetryable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, testConfig("127.0.0.1:1")) // nothing listens there
	err := p.Publish(testCtx(t), []*sink.Message{msg("outbox-relay-test/x", "1", "", "x")})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("want a retryable connect error, got %v", err)
	}
	if err := p.Ping(testCtx(t)); err == nil {
		t.Fatal("ping succeeded without a server")
	}
}

// TestServerDropsConnection has a second client take over the publisher's
// client id: the server drops the publisher's connection, and its next
// publish reconnects.
func TestServerDropsConnection(t *testing.T) {
	t.Parallel()
	sub := subscribe(t)
	cfg := testConfig(testAddr())
	cfg.ClientID = "outbox-relay-test-" + suffix()
	p := newPublisher(t, cfg)
	if err := p.Publish(testCtx(t), []*sink.Message{msg(sub.prefix+"/t", "1", "", "x")})[0]; err != nil {
		t.Fatal(err)
	}
	other := newPublisher(t, cfg)
	if err := other.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, _ := p.current()
		if s == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the publisher did not notice its connection was taken over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = other.Close(testCtx(t))
	if err := p.Publish(testCtx(t), []*sink.Message{msg(sub.prefix+"/t", "2", "", "x")})[0]; err != nil {
		t.Fatalf("after the connection was dropped: %v", err)
	}
	sub.wait(t, 2)
}
