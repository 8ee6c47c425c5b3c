package relay

import (
	"math/rand/v2"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Backoff is an exponential schedule with jitter.
type Backoff struct {
	Initial, Max time.Duration
}

// Delay returns the wait before the next try after the given number of failed
// attempts (1 for the first failure): Initial*2^(attempts-1), capped at Max,
// then drawn uniformly from its upper half so that rows failing together do
// not retry together.
func (b Backoff) Delay(attempts int) time.Duration {
	d := b.Initial
	if d <= 0 {
		return 0
	}
	for i := 1; i < attempts && d < b.Max; i++ {
		if d > b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// retryDelay is the wait before the next attempt: the schedule's, or longer
// when the sink's server asked for more (Retry-After), capped at the
// schedule's maximum so that a server cannot park a row for hours.
func retryDelay(b Backoff, attempts int, err error) time.Duration {
	d := b.Delay(attempts)
	if after, ok := sink.RetryAfter(err); ok && after > d {
		d = after
		if b.Max > 0 && d > b.Max {
			d = b.Max
		}
	}
	return d
}
