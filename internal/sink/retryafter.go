package sink

import (
	"errors"
	"time"
)

// RetryAfterError is a retryable failure for which the server named how long
// to wait before trying again (an HTTP Retry-After header, a broker's
// throttle time). The engine may wait at least that long before the retry.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// WithRetryAfter wraps err with the delay the server asked for. A zero or
// negative delay returns err unchanged.
func WithRetryAfter(err error, after time.Duration) error {
	if err == nil || after <= 0 {
		return err
	}
	return &RetryAfterError{Err: err, After: after}
}

// RetryAfter returns the delay carried by err (or anything it wraps), if
// any. A terminal error carries none: it is not retried.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RetryAfterError
	if IsTerminal(err) || !errors.As(err, &r) {
		return 0, false
	}
	return r.After, true
}
