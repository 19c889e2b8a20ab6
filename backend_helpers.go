package outbox

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Helpers for backend authors. Nothing in this file is needed to append
// entries or run a relay: these are the pieces every [Store]
// implementation (a third-party one too) shares, so that all backends
// reject the same inputs with the same words.
//
// The Check functions hold the argument checks each Store method starts
// with. Each returns nil or an error wrapping [ErrInvalidArgument] that
// names the argument and the allowed range; a backend wraps it with its
// package name and the method, for example
// fmt.Errorf("mybackend: AcquireLease: %w", err). The other helpers cover
// the partition count a backend stores ([PartitionMismatchError]), the
// bound on stored error text ([TruncateUTF8]) and per-key sequence
// numbers ([CheckKeySeqHeaders], [FormatKeySeq]). Entries are prepared for
// storing with [PrepareEntries] (entry.go), and docs/backend-authors.md
// is the guide.

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

// CheckKeySeqHeaders rejects entries that set [HeaderKeySeq] themselves,
// with an error wrapping [ErrInvalidEntry] that names the first such entry.
// A backend that numbers keys calls it in AppendInTx before anything is
// written, so a caller can never forge or override a sequence number.
func CheckKeySeqHeaders(entries []Entry) error {
	for i := range entries {
		if v, ok := entries[i].Headers[HeaderKeySeq]; ok {
			return fmt.Errorf("%w: entry %d (id %q): header %q is set (to %q), but the backend assigns it because per-key sequence numbers are on; remove the header from the entry",
				ErrInvalidEntry, i, entries[i].ID, HeaderKeySeq, v)
		}
	}
	return nil
}

// FormatKeySeq returns the header value of sequence number n.
func FormatKeySeq(n int64) string { return strconv.FormatInt(n, 10) }
