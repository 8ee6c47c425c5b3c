package relay

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// sampleDelay draws n delays and returns the smallest and largest.
func sampleDelay(b Backoff, attempts, n int) (lo, hi time.Duration) {
	lo, hi = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	for range n {
		d := b.Delay(attempts)
		lo, hi = min(lo, d), max(hi, d)
	}
	return lo, hi
}

func TestBackoffDelayBounds(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute}
	tests := []struct {
		attempts int
		nominal  time.Duration
	}{
		{0, time.Second}, // before any failure: no shorter than the first
		{1, time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{4, 8 * time.Second},
		{5, 16 * time.Second},
		{6, 32 * time.Second},
		{7, time.Minute}, // 64s capped
		{8, time.Minute},
		{50, time.Minute},
		{63, time.Minute},
		{64, time.Minute},
		{1000, time.Minute},
		{math.MaxInt32, time.Minute},
		{math.MaxInt, time.Minute},
	}
	for _, tt := range tests {
		lo, hi := sampleDelay(b, tt.attempts, 500)
		if lo < tt.nominal/2 || hi > tt.nominal {
			t.Errorf("Delay(%d) ranged over [%v, %v], want within [%v, %v]", tt.attempts, lo, hi, tt.nominal/2, tt.nominal)
		}
	}
}

func TestBackoffDelayGrowsExponentially(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Hour}
	// Attempt a draws from [I*2^(a-2), I*2^(a-1)], so every draw for a+1 is
	// at least every draw for a, and the upper bound doubles.
	prevLo, prevHi := sampleDelay(b, 1, 300)
	for a := 2; a <= 15; a++ {
		lo, hi := sampleDelay(b, a, 300)
		nominal := b.Initial << (a - 1)
		if lo < nominal/2 || hi > nominal {
			t.Fatalf("Delay(%d) ranged over [%v, %v], want within [%v, %v]", a, lo, hi, nominal/2, nominal)
		}
		if lo < prevHi {
			t.Errorf("Delay(%d) drew %v, below Delay(%d)'s %v", a, lo, a-1, prevHi)
		}
		// With 300 draws the spread covers well over half of each range.
		if hi < prevHi*3/2 || lo > prevLo*3 {
			t.Errorf("Delay(%d) in [%v, %v] does not look like double Delay(%d) in [%v, %v]", a, lo, hi, a-1, prevLo, prevHi)
		}
		prevLo, prevHi = lo, hi
	}
	// 100ms * 2^15 is about 55 minutes: attempt 17 is capped at the hour.
	if lo, hi := sampleDelay(b, 17, 300); lo < 30*time.Minute || hi > time.Hour {
		t.Errorf("Delay(17) ranged over [%v, %v], want within [30m, 1h]", lo, hi)
	}
}

func TestBackoffDelayCapBelowInitialDouble(t *testing.T) {
	// A cap that is not a power-of-two multiple of Initial is still the cap.
	b := Backoff{Initial: 3 * time.Second, Max: 10 * time.Second}
	for _, a := range []int{3, 4, 10, math.MaxInt} {
		if lo, hi := sampleDelay(b, a, 300); lo < 5*time.Second || hi > 10*time.Second {
			t.Errorf("Delay(%d) ranged over [%v, %v], want within [5s, 10s]", a, lo, hi)
		}
	}
	// Initial above Max: Max wins from the first failure.
	b = Backoff{Initial: time.Minute, Max: 10 * time.Second}
	if lo, hi := sampleDelay(b, 1, 300); lo < 5*time.Second || hi > 10*time.Second {
		t.Errorf("Delay(1) with Initial > Max ranged over [%v, %v], want within [5s, 10s]", lo, hi)
	}
}

func TestBackoffDelayHugeAttemptsNoOverflow(t *testing.T) {
	// Large but sane caps: the doubling stops at the cap, long before it
	// could overflow, however many attempts.
	for _, b := range []Backoff{
		{Initial: time.Nanosecond, Max: 24 * time.Hour},
		{Initial: time.Second, Max: 100 * 365 * 24 * time.Hour},
		{Initial: 7 * time.Millisecond, Max: time.Duration(math.MaxInt64 / 4)},
	} {
		for _, a := range []int{62, 63, 64, 65, 200, math.MaxInt} {
			lo, hi := sampleDelay(b, a, 50)
			if lo < b.Max/2 || hi > b.Max {
				t.Errorf("%+v: Delay(%d) ranged over [%v, %v], want within [%v, %v]", b, a, lo, hi, b.Max/2, b.Max)
			}
		}
	}
}

func TestBackoffDelayMaxNearMaxInt64(t *testing.T) {
	for _, b := range []Backoff{
		{Initial: time.Nanosecond, Max: time.Duration(math.MaxInt64)},
		{Initial: 3 * time.Second, Max: time.Duration(math.MaxInt64)},
	} {
		// Not math.MaxInt: once overflowed, d is 0 and the loop runs
		// attempts times.
		for _, a := range []int{64, 100, 1000} {
			if lo, hi := sampleDelay(b, a, 50); lo < b.Max/2 || hi > b.Max {
				t.Errorf("%+v: Delay(%d) ranged over [%v, %v], want within [%v, %v]", b, a, lo, hi, b.Max/2, b.Max)
			}
		}
	}
}

func TestBackoffDelayJitterVaries(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute}
	const n = 2000
	seen := map[time.Duration]bool{}
	var lowQuarter, highQuarter int
	for range n {
		d := b.Delay(1)
		seen[d] = true
		switch {
		case d < 625*time.Millisecond:
			lowQuarter++
		case d > 875*time.Millisecond:
			highQuarter++
		}
	}
	if len(seen) < n/2 {
		t.Errorf("%d draws gave only %d distinct delays", n, len(seen))
	}
	// Uniform over [500ms, 1s]: each quarter holds about n/4 draws.
	if lowQuarter < n/8 || highQuarter < n/8 {
		t.Errorf("draws in [500ms, 625ms): %d, in (875ms, 1s]: %d; want about %d each", lowQuarter, highQuarter, n/4)
	}
}

func TestBackoffDelayTinyDurations(t *testing.T) {
	// Both ends of the upper half are reachable.
	b := Backoff{Initial: 4 * time.Nanosecond, Max: time.Second}
	seen := map[time.Duration]bool{}
	for range 1000 {
		seen[b.Delay(1)] = true
	}
	for d := time.Duration(2); d <= 4; d++ {
		if !seen[d] {
			t.Errorf("Delay(1) with Initial 4ns never gave %v in 1000 draws (got %v)", d, seen)
		}
	}
	if len(seen) != 3 {
		t.Errorf("Delay(1) with Initial 4ns gave %v, want only 2ns..4ns", seen)
	}
	one := Backoff{Initial: time.Nanosecond, Max: time.Nanosecond}
	for _, a := range []int{1, 2, math.MaxInt} {
		if d := one.Delay(a); d != time.Nanosecond {
			t.Errorf("Delay(%d) with Initial = Max = 1ns = %v, want 1ns", a, d)
		}
	}
}

func TestRetryDelayHonoursRetryAfter(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: time.Minute}
	plain := errors.New("503")
	if d := retryDelay(b, 1, plain); d > 10*time.Millisecond {
		t.Fatalf("no Retry-After: delay %v, want the schedule's (<= 10ms)", d)
	}
	if d := retryDelay(b, 1, sink.WithRetryAfter(plain, 30*time.Second)); d != 30*time.Second {
		t.Fatalf("Retry-After 30s: delay %v", d)
	}
	if d := retryDelay(b, 1, sink.WithRetryAfter(plain, time.Hour)); d != time.Minute {
		t.Fatalf("Retry-After beyond backoff.max: delay %v, want the cap %v", d, time.Minute)
	}
	if d := retryDelay(b, 1, sink.WithRetryAfter(plain, time.Millisecond)); d > 10*time.Millisecond {
		t.Fatalf("a shorter Retry-After must not stretch the schedule: %v", d)
	}
}
