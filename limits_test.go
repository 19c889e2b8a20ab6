package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestPrepareEntriesWithLimits(t *testing.T) {
	t.Parallel()
	errNoSpace := errors.New("no spaces; use '-' instead")
	limits := outbox.Limits{
		MaxPayload: 4,
		Topic: func(topic string) error {
			if strings.Contains(topic, " ") {
				return errNoSpace
			}
			return nil
		},
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		limits  outbox.Limits
		entries []outbox.Entry
		want    []string // substrings of the error; nil means accepted
		wrapped error
	}{
		{"ZeroLimitsAcceptAnything", outbox.Limits{}, []outbox.Entry{{Topic: "a b", Payload: make([]byte, 1<<20)}}, nil, nil},
		{"PayloadAtTheLimitIsAccepted", limits, []outbox.Entry{{Topic: "t", Payload: []byte("1234")}}, nil, nil},
		{"PayloadOverTheLimitIsRejected", limits, []outbox.Entry{{Topic: "t"}, {ID: "big", Topic: "t", Payload: []byte("12345")}},
			[]string{"entry 1", `"big"`, "5 bytes", "Limits.MaxPayload of 4", "make the payload smaller"}, outbox.ErrInvalidEntry},
		{"TopicRuleRejects", limits, []outbox.Entry{{ID: "x", Topic: "bad topic"}},
			[]string{"entry 0", `"x"`, `Topic "bad topic"`, "Limits.Topic", "use '-' instead"}, errNoSpace},
		{"NegativeMaxPayloadIsAnArgumentError", outbox.Limits{MaxPayload: -1}, []outbox.Entry{{Topic: "t"}},
			[]string{"Limits.MaxPayload is -1"}, outbox.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := outbox.PrepareEntriesWith(ctx, tc.entries, 3, tc.limits)
			if tc.want == nil {
				require.NoError(t, err)
				require.Len(t, got, len(tc.entries))
				return
			}
			require.Nil(t, got)
			require.ErrorIs(t, err, tc.wrapped)
			if tc.wrapped != outbox.ErrInvalidArgument {
				require.ErrorIs(t, err, outbox.ErrInvalidEntry)
			}
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
