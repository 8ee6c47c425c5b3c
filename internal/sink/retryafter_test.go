package sink

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	base := errors.New("throttled")
	tests := []struct {
		name string
		err  error
		want time.Duration
		ok   bool
	}{
		{"plain", base, 0, false},
		{"nil", nil, 0, false},
		{"carried", WithRetryAfter(base, 3*time.Second), 3 * time.Second, true},
		{"wrapped", fmt.Errorf("post: %w", WithRetryAfter(base, time.Second)), time.Second, true},
		{"zero delay", WithRetryAfter(base, 0), 0, false},
		{"terminal wins", Terminal(WithRetryAfter(base, time.Second)), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RetryAfter(tt.err)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("RetryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if !errors.Is(WithRetryAfter(base, time.Second), base) {
		t.Fatal("RetryAfterError does not unwrap to its cause")
	}
	if IsTerminal(WithRetryAfter(base, time.Second)) {
		t.Fatal("a retry-after error must be retryable")
	}
}
