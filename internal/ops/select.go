package ops

import (
	"context"
	"errors"
	"sort"

	"github.com/outboxrelay/outbox"
)

// Reasons an entry named by ID is left as it is, as [CheckParked] gives
// them.
const (
	ReasonNotFound  = "not found (already sent, cancelled, or never appended)"
	ReasonNotParked = "not parked (it is pending; requeue moves parked entries only)"
)

// Dedupe returns ids without repeats, keeping the first of each, in a new
// slice; ids is not changed.
func Dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// IDs returns the IDs of es, in order.
func IDs(es []outbox.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// ByCreation orders es oldest first (ties by ID), so requeued entries go
// back in append order as far as the store's clock tells it.
func ByCreation(es []outbox.Entry) {
	sort.SliceStable(es, func(i, j int) bool {
		if !es[i].CreatedAt.Equal(es[j].CreatedAt) {
			return es[i].CreatedAt.Before(es[j].CreatedAt)
		}
		return es[i].ID < es[j].ID
	})
}

// PageOptions bound one [Page].
type PageOptions struct {
	// Batch is how many parked entries one Inspector.Parked call reads.
	// Default (zero or less): the page's limit.
	Batch int
	// MaxScan is how many parked entries one Page reads at most; it stops
	// at the end of the Parked call that reaches it. Default (zero or
	// less): no bound.
	MaxScan int
}

// Page lists up to limit parked entries that f matches, in ID order,
// starting after the ID after ("" for the first). next is the ID to
// continue after: the last entry listed when limit were listed and
// others may follow, the last entry read when MaxScan stopped the scan
// (the page may then hold fewer than limit), and "" when the scan reached
// the last parked entry. limit must be positive. Store errors are
// returned as they are.
func Page(ctx context.Context, in outbox.Inspector, f Filter, after string, limit int, opts PageOptions) (found []outbox.Entry, next string, err error) {
	size := opts.Batch
	if size <= 0 {
		size = limit
	}
	for scanned := 0; opts.MaxScan <= 0 || scanned < opts.MaxScan; {
		page, err := in.Parked(ctx, after, size)
		if err != nil {
			return nil, "", err
		}
		for i, e := range page {
			scanned++
			after = e.ID
			if !f.Match(e) {
				continue
			}
			found = append(found, e)
			if len(found) == limit {
				if i == len(page)-1 && len(page) < size {
					return found, "", nil // the last parked entry
				}
				return found, after, nil
			}
		}
		if len(page) < size {
			return found, "", nil
		}
	}
	return found, after, nil
}

// CollectOptions bound one [Collect].
type CollectOptions struct {
	// Batch is how many parked entries one Inspector.Parked call reads.
	// Default (zero or less): 500.
	Batch int
	// Max is how many entries Collect returns at most. Default (zero or
	// less): every one that matches.
	Max int
}

// defaultBatch is the default of CollectOptions.Batch and of
// RequeueOptions.Batch.
const defaultBatch = 500

// Collect walks the parked entries once, in ID order, and returns those f
// matches, in ID order, without their payloads, headers and last errors
// (a long walk keeps no more than a bulk action needs). more reports that
// entries beyond Max matched too: the caller acts on these and collects
// again. Entries parked while it walks may or may not be seen; none is
// returned twice, so a relay that parks requeued entries again cannot make
// a bulk requeue loop. Store errors are returned as they are.
func Collect(ctx context.Context, in outbox.Inspector, f Filter, opts CollectOptions) (out []outbox.Entry, more bool, err error) {
	size := opts.Batch
	if size <= 0 {
		size = defaultBatch
	}
	for after := ""; ; {
		page, err := in.Parked(ctx, after, size)
		if err != nil {
			return nil, false, err
		}
		for _, e := range page {
			if !f.Match(e) {
				continue
			}
			if opts.Max > 0 && len(out) == opts.Max {
				return out, true, nil
			}
			e.Payload, e.Headers, e.LastError = nil, nil, ""
			out = append(out, e)
		}
		if len(page) < size {
			return out, false, nil
		}
		after = page[len(page)-1].ID
	}
}

// CheckParked looks each of ids up and splits them: the entries that are
// parked, in the order of ids, and the others with why they are left as
// they are ([ReasonNotFound], [ReasonNotParked]), in the order of ids. On
// a store error it returns what it found before it, and the error as it
// is.
func CheckParked(ctx context.Context, lk outbox.Looker, ids []string) (parked []outbox.Entry, left []outbox.Refusal, err error) {
	for _, id := range ids {
		info, err := lk.Lookup(ctx, id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			left = append(left, outbox.Refusal{ID: id, Reason: ReasonNotFound})
		case err != nil:
			return parked, left, err
		case !info.Parked:
			left = append(left, outbox.Refusal{ID: id, Reason: ReasonNotParked})
		default:
			parked = append(parked, info.Entry)
		}
	}
	return parked, left, nil
}
