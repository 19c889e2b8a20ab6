package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/internal/ops"
)

// Days is a duration flag that takes a number of days (7d, 1.5d) as well
// as Go's forms (36h, 90m), as operators write retention periods; kong and
// the --config file parse it through UnmarshalText, and a bad value is an
// error that names the flag and the forms it takes.
type Days time.Duration

// UnmarshalText parses text with ops.ParseDuration: days or Go's form, not
// negative.
func (d *Days) UnmarshalText(text []byte) error {
	v, err := ops.ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = Days(v)
	return nil
}

// String is the duration in whole days when it is a whole number of days
// ("7d"), else in Go's form without its zero minutes and seconds ("36h",
// "1h30m", "90s"); "0s" for 0.
func (d Days) String() string {
	v := time.Duration(d)
	if v > 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	s := v.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// Duration is d as a time.Duration.
func (d Days) Duration() time.Duration { return time.Duration(d) }
