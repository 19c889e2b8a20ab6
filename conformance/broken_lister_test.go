package conformance_test

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// listerVariants break Entries, BlockedKeys and the fields of
// PartitionStats that a Lister fills.
var listerVariants = []variant{
	{"entries-retrying-as-due", "Entries lists retrying entries as due (a state judged by Attempts alone, not by the due time)", []string{"Lister/EntriesByState"}},
	{"entries-deferred-as-retrying", "Entries lists an entry deferred before its first attempt as retrying, not scheduled", []string{"Lister/EntriesByState"}},
	{"entries-filter-ignores-topic", "Entries ignores ListFilter.Topic", []string{"Lister/EntriesFilters"}},
	{"entries-filter-ignores-key", "Entries ignores ListFilter.Key", []string{"Lister/EntriesFilters"}},
	{"entries-filter-ignores-error", "Entries ignores ListFilter.Error", []string{"Lister/EntriesFilters"}},
	{"entries-filter-ignores-since", "Entries ignores ListFilter.Since", []string{"Lister/EntriesFilters"}},
	{"entries-filter-ignores-until", "Entries ignores ListFilter.Until", []string{"Lister/EntriesFilters"}},
	{"entries-since-exclusive", "Entries selects CreatedAt after Since, not at or after it", []string{"Lister/EntriesFilters"}},
	{"entries-until-inclusive", "Entries selects CreatedAt at or before Until, not before it", []string{"Lister/EntriesFilters"}},
	{"entries-error-folds-unicode", "Entries compares the error filter with Unicode case folding (as ILIKE under a locale does)", []string{"Lister/EntriesFilters"}},
	{"entries-error-like-pattern", "Entries takes the error filter as a LIKE pattern (% and _ are wildcards)", []string{"Lister/EntriesFilters"}},
	{"entries-after-inclusive", "Entries starts a page at the ID after, not after it", []string{"Lister/EntriesPaging"}},
	{"entries-arguments-unchecked", "Entries returns nothing and nil for a limit that is not positive or an unknown state", []string{"Lister/EntriesRejectBadArguments"}},
	{"blocked-keys-by-head-id", "BlockedKeys orders keys by their head's ID, not by how long they have been blocked", []string{"Lister/BlockedKeysLongestBlockedFirst"}},
	{"blocked-keys-since-last-attempt", "BlockedKeys reports Since as the head's last attempt, not its first", []string{"Lister/BlockedKeysLongestBlockedFirst"}},
	{"blocked-keys-since-created", "BlockedKeys reports Since as the head's CreatedAt, attempted or not", []string{"Lister/BlockedKeysLongestBlockedFirst"}},
	{"blocked-keys-waiting-includes-head", "BlockedKeys counts the head in Waiting", []string{"Lister/BlockedKeysHeadsAndWaiting"}},
	{"blocked-keys-ignore-deferred", "BlockedKeys leaves out keys whose head was deferred before any attempt", []string{"Lister/BlockedKeysHeadsAndWaiting"}},
	{"blocked-keys-ignore-paused", "BlockedKeys leaves out keys whose head is of a paused topic", []string{"Lister/BlockedKeysHeadsAndWaiting"}},
	{"blocked-keys-list-free-keys", "BlockedKeys also lists keys whose head was never attempted nor deferred, nor paused", []string{"Lister/BlockedKeysHeadsAndWaiting"}},
	{"blocked-keys-list-unkeyed", "BlockedKeys also lists attempted entries without a key", []string{"Lister/BlockedKeysHeadsAndWaiting"}},
	{"blocked-keys-after-by-id", "BlockedKeys starts a page after the head ID of after, ignoring its Since (paging by the tie-breaker alone)", []string{"Lister/BlockedKeysPagingAndFilter"}},
	{"blocked-keys-filter-any-entry", "BlockedKeys lists a key when any pending entry of it matches the filter, not its head", []string{"Lister/BlockedKeysPagingAndFilter"}},
	{"blocked-keys-limit-unchecked", "BlockedKeys returns nothing and nil for a limit that is not positive", []string{"Lister/BlockedKeysRejectBadArguments"}},
	{"partition-stats-blocked-keys-uncounted", "PartitionStats reports BlockedKeys 0", []string{"Lister/BlockedKeysAgreeWithPartitionStats"}},
	{"partition-stats-oldest-due-not-held", "PartitionStats reports as OldestDueID the oldest due entry that is not held back by its key", []string{"Lister/BlockedKeysAgreeWithPartitionStats"}},
}

// pendingStates are the states of a pending entry.
var pendingStates = []outbox.EntryState{outbox.StateDue, outbox.StateScheduled, outbox.StateRetrying}

// allEntries is the backend's Entries in state with f after after,
// unpaged.
func (w *broken) allEntries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string) ([]outbox.EntryInfo, error) {
	got, err := w.Backend.Entries(ctx, state, f, after, 1<<30)
	for i := range got {
		got[i] = w.breakInfo(got[i])
	}
	return got, err
}

// page sorts infos by ID and cuts them to limit.
func page(infos []outbox.EntryInfo, limit int) []outbox.EntryInfo {
	slices.SortFunc(infos, func(x, y outbox.EntryInfo) int { return strings.Compare(x.ID, y.ID) })
	return infos[:min(limit, len(infos))]
}

func (w *broken) Entries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	ctx = w.ctx(ctx)
	switch w.variant {
	case "entries-filter-ignores-topic":
		f.Topic = ""
	case "entries-filter-ignores-key":
		f.Key = ""
	case "entries-filter-ignores-error":
		f.Error = ""
	case "entries-filter-ignores-since":
		f.Since = time.Time{}
	case "entries-filter-ignores-until":
		f.Until = time.Time{}
	case "entries-since-exclusive":
		if !f.Since.IsZero() {
			f.Since = f.Since.Add(time.Nanosecond)
		}
	case "entries-until-inclusive":
		if !f.Until.IsZero() {
			f.Until = f.Until.Add(time.Nanosecond)
		}
	case "entries-after-inclusive":
		if limit > 0 && after != "" {
			got, err := w.allEntries(ctx, state, f, "")
			return page(slices.DeleteFunc(got, func(info outbox.EntryInfo) bool { return info.ID < after }), limit), err
		}
	case "entries-arguments-unchecked":
		if limit <= 0 || !slices.Contains(outbox.EntryStates, state) {
			return nil, nil
		}
	case "entries-collation-order":
		if limit > 0 && slices.Contains(outbox.EntryStates, state) {
			return w.collatedEntries(ctx, state, f, after, limit)
		}
	case "entries-retrying-as-due", "entries-deferred-as-retrying":
		return w.misstate(ctx, state, f, after, limit)
	case "entries-error-folds-unicode", "entries-error-like-pattern":
		return w.matchErrors(ctx, state, f, after, limit)
	}
	got, err := w.Backend.Entries(ctx, state, f, after, limit)
	for i := range got {
		got[i] = w.breakInfo(got[i])
	}
	return got, err
}

// misstate is the Entries of the variants that judge a state wrongly.
func (w *broken) misstate(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	if limit <= 0 || !slices.Contains(outbox.EntryStates, state) {
		return w.Backend.Entries(ctx, state, f, after, limit)
	}
	got, err := w.allEntries(ctx, state, f, after)
	if err != nil {
		return nil, err
	}
	switch {
	case w.variant == "entries-retrying-as-due" && state == outbox.StateDue:
		more, err := w.allEntries(ctx, outbox.StateRetrying, f, after)
		if err != nil {
			return nil, err
		}
		got = append(got, more...)
	case w.variant == "entries-retrying-as-due" && state == outbox.StateRetrying:
		got = nil
	case w.variant == "entries-deferred-as-retrying" && state == outbox.StateScheduled:
		got = slices.DeleteFunc(got, func(info outbox.EntryInfo) bool { return info.Deferred })
	case w.variant == "entries-deferred-as-retrying" && state == outbox.StateRetrying:
		more, err := w.allEntries(ctx, outbox.StateScheduled, f, after)
		if err != nil {
			return nil, err
		}
		got = append(got, slices.DeleteFunc(more, func(info outbox.EntryInfo) bool { return !info.Deferred })...)
	}
	return page(got, limit), nil
}

// matchErrors is the Entries of the variants that match the error filter
// wrongly.
func (w *broken) matchErrors(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	if limit <= 0 || f.Error == "" {
		return w.Backend.Entries(ctx, state, f, after, limit)
	}
	pattern := f.Error
	f.Error = ""
	got, err := w.allEntries(ctx, state, f, after)
	if err != nil {
		return nil, err
	}
	var match func(string) bool
	if w.variant == "entries-error-folds-unicode" {
		match = func(s string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(pattern)) }
	} else {
		var re strings.Builder
		for _, r := range foldASCII(pattern) {
			switch r {
			case '%':
				re.WriteString(".*")
			case '_':
				re.WriteString(".")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		rx := regexp.MustCompile(re.String())
		match = func(s string) bool { return rx.MatchString(foldASCII(s)) }
	}
	got = slices.DeleteFunc(got, func(info outbox.EntryInfo) bool { return !match(info.LastError) })
	return page(got, limit), nil
}

func (w *broken) BlockedKeys(ctx context.Context, f outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	ctx = w.ctx(ctx)
	switch w.variant {
	case "blocked-keys-limit-unchecked":
		if limit <= 0 {
			return nil, nil
		}
	case "blocked-keys-filter-any-entry":
		return w.blockedByAnyEntry(ctx, f, after, limit)
	}
	if limit <= 0 || !w.breaksBlockedKeys() {
		got, err := w.Backend.BlockedKeys(ctx, f, after, limit)
		for i := range got {
			got[i].Head = w.breakInfo(got[i].Head)
		}
		return got, err
	}
	all, err := w.Backend.BlockedKeys(ctx, f, outbox.BlockedKey{}, 1<<30)
	if err != nil {
		return nil, err
	}
	for i := range all {
		all[i].Head = w.breakInfo(all[i].Head)
	}
	all, err = w.breakBlocked(ctx, f, all)
	if err != nil {
		return nil, err
	}
	return pageBlocked(all, after, limit, w.variant), nil
}

// breaksBlockedKeys reports whether the variant changes what BlockedKeys
// lists (the others pass it through).
func (w *broken) breaksBlockedKeys() bool {
	return strings.HasPrefix(w.variant, "blocked-keys-")
}

// breakBlocked changes the full list of blocked keys as the variant says.
func (w *broken) breakBlocked(ctx context.Context, f outbox.ListFilter, all []outbox.BlockedKey) ([]outbox.BlockedKey, error) {
	switch w.variant {
	case "blocked-keys-since-last-attempt":
		for i, k := range all {
			if h := k.Head.History; len(h) > 0 {
				all[i].Since = h[len(h)-1].At
			}
		}
	case "blocked-keys-since-created":
		for i, k := range all {
			all[i].Since = k.Head.CreatedAt
		}
	case "blocked-keys-waiting-includes-head":
		for i := range all {
			all[i].Waiting++
		}
	case "blocked-keys-ignore-deferred":
		all = slices.DeleteFunc(all, func(k outbox.BlockedKey) bool { return k.Head.Attempts == 0 && k.Head.Deferred })
	case "blocked-keys-ignore-paused":
		all = slices.DeleteFunc(all, func(k outbox.BlockedKey) bool { return k.Head.Attempts == 0 && !k.Head.Deferred })
	case "blocked-keys-list-free-keys", "blocked-keys-list-unkeyed":
		more, err := w.fakeBlocked(ctx, f, all)
		if err != nil {
			return nil, err
		}
		all = append(all, more...)
	}
	return all, nil
}

// pageBlocked orders all as the variant does and returns the page after
// after, at most limit keys.
func pageBlocked(all []outbox.BlockedKey, after outbox.BlockedKey, limit int, variant string) []outbox.BlockedKey {
	compare := func(x, y outbox.BlockedKey) int {
		return cmp.Or(x.Since.Compare(y.Since), strings.Compare(x.Head.ID, y.Head.ID))
	}
	switch variant {
	case "blocked-keys-by-head-id":
		compare = func(x, y outbox.BlockedKey) int { return strings.Compare(x.Head.ID, y.Head.ID) }
	case "blocked-keys-collation-ties":
		compare = func(x, y outbox.BlockedKey) int {
			return cmp.Or(x.Since.Compare(y.Since), strings.Compare(collationKey(x.Head.ID), collationKey(y.Head.ID)))
		}
	}
	slices.SortFunc(all, compare)
	var out []outbox.BlockedKey
	for _, k := range all {
		var later bool
		switch variant {
		case "blocked-keys-after-by-id":
			later = k.Head.ID > after.Head.ID
		case "blocked-keys-by-head-id":
			later = compare(k, after) > 0
		default:
			// Paging with the store's byte order, whatever order the
			// variant sorts in.
			later = cmp.Or(k.Since.Compare(after.Since), strings.Compare(k.Head.ID, after.Head.ID)) > 0
		}
		if later && len(out) < limit {
			out = append(out, k)
		}
	}
	return out
}

// fakeBlocked is the blocked-keys-list-free-keys and
// blocked-keys-list-unkeyed variants' addition to the blocked keys listed:
// the earliest pending entry of every other key, or every attempted entry
// without a key.
func (w *broken) fakeBlocked(ctx context.Context, f outbox.ListFilter, listed []outbox.BlockedKey) ([]outbox.BlockedKey, error) {
	var pending []outbox.EntryInfo
	for _, state := range pendingStates {
		got, err := w.allEntries(ctx, state, outbox.ListFilter{}, "")
		if err != nil {
			return nil, err
		}
		pending = append(pending, got...)
	}
	slices.SortStableFunc(pending, func(x, y outbox.EntryInfo) int { return x.CreatedAt.Compare(y.CreatedAt) })
	taken := map[string]bool{}
	for _, k := range listed {
		taken[k.Head.Key] = true
	}
	heads := map[string]*outbox.BlockedKey{}
	var out []*outbox.BlockedKey
	for _, info := range pending {
		switch {
		case w.variant == "blocked-keys-list-unkeyed" && info.Key == "" && info.Attempts > 0:
			out = append(out, &outbox.BlockedKey{Head: info, Since: info.CreatedAt})
		case w.variant == "blocked-keys-list-free-keys" && info.Key != "" && !taken[info.Key]:
			if h := heads[info.Key]; h != nil {
				h.Waiting++
				continue
			}
			heads[info.Key] = &outbox.BlockedKey{Head: info, Since: info.CreatedAt}
			out = append(out, heads[info.Key])
		}
	}
	var keys []outbox.BlockedKey
	for _, k := range out {
		if matchesHead(f, k.Head) {
			keys = append(keys, *k)
		}
	}
	return keys, nil
}

// matchesHead reports whether info matches the Topic, Key and Error of f.
func matchesHead(f outbox.ListFilter, info outbox.EntryInfo) bool {
	return (f.Topic == "" || info.Topic == f.Topic) && (f.Key == "" || info.Key == f.Key) &&
		(f.Error == "" || strings.Contains(foldASCII(info.LastError), foldASCII(f.Error)))
}

// foldASCII lowers the ASCII letters of s.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// blockedByAnyEntry is the blocked-keys-filter-any-entry variant's
// BlockedKeys: the blocked keys with a pending entry that matches f.
func (w *broken) blockedByAnyEntry(ctx context.Context, f outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	if limit <= 0 {
		return w.Backend.BlockedKeys(ctx, f, after, limit)
	}
	all, err := w.Backend.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 1<<30)
	if err != nil {
		return nil, err
	}
	matching := map[string]bool{}
	for _, state := range pendingStates {
		got, err := w.allEntries(ctx, state, f, "")
		if err != nil {
			return nil, err
		}
		for _, info := range got {
			matching[info.Key] = true
		}
	}
	all = slices.DeleteFunc(all, func(k outbox.BlockedKey) bool { return !matching[k.Head.Key] })
	return pageBlocked(all, after, limit, w.variant), nil
}

// breakPartitionStats breaks the fields of PartitionStats a Lister fills.
func (w *broken) breakPartitionStats(ctx context.Context, got []outbox.PartitionStats) []outbox.PartitionStats {
	switch w.variant {
	case "partition-stats-blocked-keys-uncounted":
		for i := range got {
			got[i].BlockedKeys = 0
		}
	case "partition-stats-oldest-due-not-held":
		blocked, _ := w.Backend.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 1<<30)
		heads := map[string]string{}
		for _, k := range blocked {
			heads[k.Head.Key] = k.Head.ID
		}
		due, _ := w.Backend.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 1<<30)
		slices.SortStableFunc(due, func(x, y outbox.EntryInfo) int { return x.DueAt.Compare(y.DueAt) })
		for i := range got {
			got[i].OldestDueID = ""
			for _, info := range due {
				if head, held := heads[info.Key]; info.Partition == i && (!held || head == info.ID) {
					got[i].OldestDueID = info.ID
					break
				}
			}
		}
	}
	return got
}
