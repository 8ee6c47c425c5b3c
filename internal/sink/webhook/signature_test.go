package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// verifySignature is a receiver's check written from docs/sinks/webhook.md
// alone: split the header at commas into key=value pairs, take t and every
// v1, refuse a t more than tolerance away from now, compute the hex
// HMAC-SHA256 of "<t>.<raw body>" with the secret, and accept when it
// equals one v1 (compared in constant time).
func verifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("no timestamp in %q", header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("timestamp %d is %v away", sec, d)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}

func TestSignatureVerifiedByReceiver(t *testing.T) {
	secret := []byte("whsec_" + suffix())
	rc := newReceiver(t)
	var verified, refused atomic.Int64
	rc.setRespond(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if err := verifySignature(secret, r.Header.Get("X-Hook-Signature"), body, time.Now(), 5*time.Minute); err != nil {
			refused.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return true
		}
		verified.Add(1)
		return false
	})
	p := newPublisher(t, Config{URL: hookURL(rc.addr()), HMAC: HMAC{Secret: string(secret), Header: "X-Hook-Signature"}, Concurrency: 1})
	dest := "signed-" + suffix()
	msgs := []*sink.Message{msg(dest, "1", "", `{"amount":10}`), msg(dest, "2", "", "\x00binary\xff"), msg(dest, "3", "", "")}
	for i, err := range p.Publish(testCtx(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if verified.Load() != 3 || refused.Load() != 0 {
		t.Fatalf("verified %d, refused %d", verified.Load(), refused.Load())
	}

	// The same receiver refuses what a wrong secret, a changed body or an
	// old timestamp produce.
	now := time.Now()
	body := []byte(`{"amount":10}`)
	good := Sign(secret, now, body)
	if err := verifySignature(secret, good, body, now, time.Minute); err != nil {
		t.Fatalf("good signature refused: %v", err)
	}
	if verifySignature([]byte("other"), good, body, now, time.Minute) == nil {
		t.Error("wrong secret accepted")
	}
	if verifySignature(secret, good, []byte(`{"amount":1000}`), now, time.Minute) == nil {
		t.Error("changed body accepted")
	}
	if verifySignature(secret, Sign(secret, now.Add(-10*time.Minute), body), body, now, 5*time.Minute) == nil {
		t.Error("old timestamp accepted")
	}
	if !strings.HasPrefix(good, "t="+strconv.FormatInt(now.Unix(), 10)+",v1=") {
		t.Errorf("signature %q is not t=<unix>,v1=<hex>", good)
	}
}

// TestSignatureKnownValue pins the construction to a value computed
// independently: printf '1700000000.{}' | openssl dgst -sha256 -hmac secret.
func TestSignatureKnownValue(t *testing.T) {
	got := Sign([]byte("secret"), time.Unix(1700000000, 0), []byte("{}"))
	const want = "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}
