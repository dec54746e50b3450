package hubclient

import "time"

// BackoffDelay exposes the backoff's delay for tests.
func BackoffDelay(b Backoff, failures int) time.Duration {
	b.setDefaults()
	return b.delay(failures)
}
