package redisoutbox

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// argvLine is one "-- ARGV[pos] name: what" line of a script's header.
var argvLine = regexp.MustCompile(`^-- ARGV\[([^\]]+)\] (\w+):`)

// headerARGV returns the ARGV lines of a script's header comment (the
// comment lines before its first line of code): each part's position
// expression ("1", "5..4+m", "6+m+n..") and name, in order.
func headerARGV(t *testing.T, name string) (pos, names []string) {
	t.Helper()
	src, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	require.NoError(t, err)
	for line := range strings.Lines(string(src)) {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if m := argvLine.FindStringSubmatch(line); m != nil {
			pos, names = append(pos, m[1]), append(names, m[2])
		}
	}
	return pos, names
}

// evalPos evaluates a header position bound such as "6+m+n" with the
// counts vars; "" (an open end) is -1.
func evalPos(t *testing.T, expr string, vars map[string]int) int {
	t.Helper()
	if expr == "" {
		return -1
	}
	sum := 0
	for term := range strings.SplitSeq(expr, "+") {
		if v, ok := vars[term]; ok {
			sum += v
			continue
		}
		n, err := strconv.Atoi(term)
		require.NoError(t, err, "position %q", expr)
		sum += n
	}
	return sum
}

// TestClaimArgsMatchTheScriptHeader: claimArgs emits claim.lua's ARGV as
// the script's header documents it, part by part: the same names in the
// same order, each starting and ending where the header says, for a
// FetchBatch and for FetchNexts with and without entries in flight.
func TestClaimArgsMatchTheScriptHeader(t *testing.T) {
	t.Parallel()
	pos, names := headerARGV(t, "claim")
	require.NotEmpty(t, names, "claim.lua's header documents its ARGV")
	cases := []struct {
		name string
		args claimArgs
	}{
		{"FetchBatch", claimArgs{token: "1:me", limit: 10, budget: 276}},
		{"FetchNextNothingInFlight", claimArgs{token: "1:me", limit: 10, budget: 276, fetchNext: true}},
		{"FetchNext", claimArgs{token: "1:me", limit: 10, budget: 279, fetchNext: true,
			members: []string{"m1", "m2"}, ids: []string{"i1"}, stopped: []string{"k1", "k2", "k3"}}},
		{"FetchNextHinted", claimArgs{token: "1:me", limit: 10, budget: 279, fetchNext: true,
			hint: hintArgs{gen: "42", first: "f", last: "l", count: 3, lscore: "1700000000000"}, stopped: []string{"k1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fields := tc.args.fields()
			require.LessOrEqual(t, len(fields), len(names))
			vars := map[string]int{"m": len(tc.args.members), "n": len(tc.args.ids)}
			argv := tc.args.argv()
			at := 1 // the next ARGV position, 1-based as in Lua
			for i, f := range fields {
				assert.Equal(t, names[i], f.name, "part %d", i+1)
				lo, hi, ranged := strings.Cut(pos[i], "..")
				first := evalPos(t, lo, vars)
				assert.Equal(t, first, at, "%s starts at ARGV[%s]", f.name, pos[i])
				last := first
				if ranged {
					last = evalPos(t, hi, vars)
				}
				if last < 0 {
					last = len(argv) // open to the end
					assert.Equal(t, len(fields)-1, i, "only the last part runs to the end")
				}
				assert.Equal(t, last-first+1, len(f.values), "%s is ARGV[%s]", f.name, pos[i])
				at += len(f.values)
			}
			assert.Equal(t, len(argv)+1, at, "the parts make up ARGV")
			if !tc.args.fetchNext {
				assert.Len(t, fields, 3, "a FetchBatch ends at the budget")
			} else {
				assert.Len(t, fields, len(names), "a FetchNext sends every part")
			}
			// Counts are the lengths of what they count.
			for i, f := range fields {
				switch f.name {
				case "m", "n":
					assert.Equal(t, len(fields[i+1].values), f.values[0], "%s counts %s", f.name, fields[i+1].name)
				}
			}
		})
	}
}
