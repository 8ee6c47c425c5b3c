package webhook

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// BenchmarkPublish publishes batches of 500 messages of 1 KB to a local
// server that reads each body and answers 204: with every message its own
// key (all concurrent up to Concurrency) and with 10 keys of 50 messages
// (each key sequential).
func BenchmarkPublish(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	payload := `{"data":"` + strings.Repeat("x", 1024-11) + `"}`
	for _, keys := range []int{500, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			p := newPublisher(b, Config{URL: srv.URL + "/hooks/{destination}", HMAC: HMAC{Secret: "s"}})
			msgs := make([]*sink.Message, 500)
			for i := range msgs {
				msgs[i] = msg("bench", fmt.Sprint(i), fmt.Sprintf("key-%d", i%keys), payload)
			}
			ctx := testCtx(b)
			b.SetBytes(int64(len(msgs) * len(payload)))
			b.ResetTimer()
			for b.Loop() {
				for i, err := range p.Publish(ctx, msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
