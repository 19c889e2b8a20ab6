package mysqloutbox

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// maxMemberText is how many bytes of Member.Host and Member.Version are
// stored.
const maxMemberText = 255

// Heartbeat records m as a live relay of the outbox's fleet until ttl from
// now by the server's clock and returns every live record, m's included,
// sorted by Owner (byte order), with Expires and Renewed from the server:
// an upsert of m's record, then a consistent read of the member table
// (two round trips); expired records of other relays it read are then
// deleted, each only if still expired (one more round trip each, rare).
// m.Partitions is stored ascending and comma-separated, m.Host and
// m.Version cut to 255 bytes at a character boundary (invalid UTF-8
// replaced by U+FFFD), m.Started as given to the microsecond. Besides the
// checks of [outbox.CheckMember], m.Owner must be valid UTF-8 of at most
// 255 characters and m.MaxPartitions fit an INT. m.Partitions is not
// retained; the returned slices are the caller's. See
// [outbox.Membership].
func (b *Backend) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	const op = "Heartbeat"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := outbox.CheckMember(b.opts.Partitions, m, ttl); err != nil {
		return nil, argErr(op, err)
	}
	if err := checkOwner(m.Owner); err != nil {
		return nil, argErr(op, err)
	}
	if m.MaxPartitions > math.MaxInt32 {
		return nil, fmt.Errorf("mysqloutbox: %s: member MaxPartitions is %d; at most %d fits the member table: %w", op, m.MaxPartitions, math.MaxInt32, outbox.ErrInvalidArgument)
	}
	var started any
	if !m.Started.IsZero() {
		started = toMicros(m.Started)
	}
	record := []any{formatPartitions(m.Partitions), m.MaxPartitions, micros(ttl),
		cutText(m.Host, maxMemberText), cutText(m.Version, maxMemberText), started}
	args := append(append([]any{m.Owner}, record...), record...)
	if _, err := b.core.stmts.heartbeat.ExecContext(ctx, args...); err != nil {
		return nil, b.interpretError(op, err)
	}
	live, expired, err := b.readMembers(ctx, op)
	if err != nil {
		return nil, err
	}
	for _, owner := range expired {
		if owner == m.Owner {
			continue
		}
		if _, err := b.core.stmts.membersExpire.ExecContext(ctx, owner); err != nil {
			return nil, b.interpretError(op, err)
		}
	}
	return live, nil
}

// Members returns every live member record, sorted by Owner (byte
// order), in one consistent read of the member table. It makes no
// change. See [outbox.MemberLister].
func (b *Backend) Members(ctx context.Context) ([]outbox.Member, error) {
	const op = "Members"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	live, _, err := b.readMembers(ctx, op)
	return live, err
}

// Leave deletes the member record of owner in one statement. Leaving
// twice, or without a record, is a no-op that returns nil. See
// [outbox.Membership].
func (b *Backend) Leave(ctx context.Context, owner string) error {
	const op = "Leave"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if owner == "" || checkOwner(owner) != nil {
		return nil // no record can have this owner
	}
	_, err := b.core.stmts.leave.ExecContext(ctx, owner, owner)
	return b.interpretError(op, err)
}

// readMembers reads the member table: the live records sorted by owner,
// and the owners of the expired ones.
func (b *Backend) readMembers(ctx context.Context, op string) ([]outbox.Member, []string, error) {
	rows, err := b.core.stmts.members.QueryContext(ctx)
	if err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	defer rows.Close()
	live := []outbox.Member{}
	var expired []string
	for rows.Next() {
		var m outbox.Member
		var parts string
		var expires int64
		var started, renewed sql.NullInt64
		var isLive bool
		if err := rows.Scan(&m.Owner, &parts, &m.MaxPartitions, &expires, &m.Host, &m.Version, &started, &renewed, &isLive); err != nil {
			return nil, nil, b.interpretError(op, err)
		}
		if !isLive {
			expired = append(expired, m.Owner)
			continue
		}
		if m.Partitions, err = parsePartitions(parts); err != nil {
			return nil, nil, fmt.Errorf("mysqloutbox: %s: member %q: %w", op, m.Owner, err)
		}
		m.Expires = fromMicros(expires)
		if started.Valid {
			m.Started = fromMicros(started.Int64)
		}
		if renewed.Valid {
			m.Renewed = fromMicros(renewed.Int64)
		}
		live = append(live, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	slices.SortFunc(live, func(a, b outbox.Member) int { return cmp.Compare(a.Owner, b.Owner) })
	return live, expired, nil
}

// formatPartitions returns the partitions ascending, comma-separated.
func formatPartitions(parts []int) string {
	sorted := slices.Sorted(slices.Values(parts))
	var s strings.Builder
	for i, p := range sorted {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(strconv.Itoa(p))
	}
	return s.String()
}

// parsePartitions parses what formatPartitions wrote.
func parsePartitions(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	fields := strings.Split(s, ",")
	out := make([]int, len(fields))
	for i, f := range fields {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("the partitions column %q is not a comma-separated list of numbers: %w", s, err)
		}
		out[i] = p
	}
	return out, nil
}
