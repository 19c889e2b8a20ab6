package mysqlinbox

import "time"

// SetRetryAfter sets how long s waits before trying its statements'
// prepare or the procedures again (default a minute).
func SetRetryAfter(s *Store, d time.Duration) { s.retryAfter = d }
