package outbox

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Argument checks shared by backends. Each [Store] method starts by
// checking its arguments the same way; these functions hold those checks
// once, so every backend (a third-party one too) rejects the same inputs
// with the same words. Each returns nil or an error wrapping
// [ErrInvalidArgument] that names the argument and the allowed range; a
// backend wraps it with its package name and the method, for example
// fmt.Errorf("mybackend: AcquireLease: %w", err).

// CheckPartition checks that partition is in [0, partitions).
func CheckPartition(partitions, partition int) error {
	if partition < 0 || partition >= partitions {
		return fmt.Errorf("partition %d is out of range: the outbox has partitions 0..%d: %w", partition, partitions-1, ErrInvalidArgument)
	}
	return nil
}

// CheckTTL checks that a lease or membership ttl is positive.
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("ttl is %v; it must be positive: %w", ttl, ErrInvalidArgument)
	}
	return nil
}

// CheckAcquire checks the arguments of [Store.AcquireLease]: partition in
// range, a non-empty owner and a positive ttl.
func CheckAcquire(partitions, partition int, owner string, ttl time.Duration) error {
	if err := CheckPartition(partitions, partition); err != nil {
		return err
	}
	if owner == "" {
		return fmt.Errorf("owner is empty; pass the relay's owner token: %w", ErrInvalidArgument)
	}
	return CheckTTL(ttl)
}

// CheckRenew checks the arguments of [Store.RenewLease]: the lease's
// partition in range and a positive ttl.
func CheckRenew(partitions int, lease Lease, ttl time.Duration) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	return CheckPartition(partitions, lease.Partition)
}

// CheckFetch checks the arguments of [Store.FindPendingBatch]: a positive
// limit and the lease's partition in range.
func CheckFetch(partitions int, lease Lease, limit int) error {
	if limit <= 0 {
		return fmt.Errorf("limit is %d; it must be positive: %w", limit, ErrInvalidArgument)
	}
	return CheckPartition(partitions, lease.Partition)
}

// CheckMember checks the arguments of [Membership.Heartbeat]: a non-empty
// owner, a positive ttl, a non-negative MaxPartitions and partitions in
// range.
func CheckMember(partitions int, m Member, ttl time.Duration) error {
	if m.Owner == "" {
		return fmt.Errorf("member owner is empty; pass the relay's owner token: %w", ErrInvalidArgument)
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	if m.MaxPartitions < 0 {
		return fmt.Errorf("member MaxPartitions is %d; use 0 (no cap) or a positive cap: %w", m.MaxPartitions, ErrInvalidArgument)
	}
	for _, p := range m.Partitions {
		if err := CheckPartition(partitions, p); err != nil {
			return fmt.Errorf("member partitions: %w", err)
		}
	}
	return nil
}

// PartitionMismatchError is the error a backend's constructor returns when
// the partition count it was configured with differs from the count stored
// with the outbox. Check for it with errors.As.
type PartitionMismatchError struct {
	// Outbox names the outbox (a schema and table, a key prefix).
	Outbox string
	// Configured is the count the constructor was given.
	Configured int
	// Stored is the count the outbox was created with.
	Stored int
}

func (e *PartitionMismatchError) Error() string {
	return fmt.Sprintf("outbox %s was created with %d partitions, but %d were configured: an entry's partition is derived from its key and the count, so every appender and relay must use the stored count (configure %d, or 0 to read it from the store); to change the count, move the outbox to a new one with the new count (see docs/scaling.md, \"Changing the partition count\")",
		e.Outbox, e.Stored, e.Configured, e.Stored)
}

// Is makes errors.Is(err, ErrInvalidArgument) true for a mismatch.
func (e *PartitionMismatchError) Is(target error) bool { return target == ErrInvalidArgument }

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8
// sequence, so a truncated error (Failure.Error, LastError) is still valid
// text for every store.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// RequeueRefusedError is the error [Inspector.Requeue] returns, together
// with the count of the entries it did requeue, when it left parked entries
// parked because they can never be published as stored: no topic, or
// stored data that does not decode. Fix such an entry in the store and
// requeue it again, or cancel it. It wraps [ErrNotRequeueable].
type RequeueRefusedError struct {
	// Refused are the entries left parked, in the order of the IDs given.
	Refused []Refusal
}

// Refusal is one entry [Inspector.Requeue] left parked, and why.
type Refusal struct {
	ID     string
	Reason string
}

func (e *RequeueRefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outbox: %d parked %s left parked: %s can never be published as stored (fix the stored data and requeue again, or cancel)",
		len(e.Refused), plural(len(e.Refused), "entry", "entries"), plural(len(e.Refused), "it", "they"))
	for i, r := range e.Refused {
		if i == 10 {
			fmt.Fprintf(&b, "; and %d more", len(e.Refused)-i)
			break
		}
		fmt.Fprintf(&b, "; %q: %s", r.ID, r.Reason)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNotRequeueable) true.
func (e *RequeueRefusedError) Unwrap() error { return ErrNotRequeueable }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
