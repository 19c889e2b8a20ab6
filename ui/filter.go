package ui

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox/internal/ops"
)

// filterJSON is FILTER of the package documentation, and the query
// parameters of /api/parked. An empty field filters nothing; the matching
// is [ops.Filter]'s.
type filterJSON struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	Error string `json:"error"`
	Since string `json:"since"`
	Until string `json:"until"`
}

// parseFilter parses f; now is the reference of durations ago. Its errors
// name the parameters as the API spells them.
func parseFilter(f filterJSON, now time.Time) (ops.Filter, error) {
	out, err := ops.ParseFilter(ops.FilterSpec(f), now)
	var field *ops.FieldError
	var rng *ops.RangeError
	switch {
	case errors.As(err, &field):
		return out, fmt.Errorf("ui: %s: %w", field.Field, field.Err)
	case errors.As(err, &rng):
		return out, fmt.Errorf("ui: since %s is not before until %s: nothing could match; swap them or widen the range",
			rng.Since.UTC().Format(time.RFC3339), rng.Until.UTC().Format(time.RFC3339))
	}
	return out, err
}
