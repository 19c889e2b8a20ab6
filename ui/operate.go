package ui

// The operator views of issue 28: entries by state, blocked keys, the
// fleet, and pausing delivery. Each works through one optional interface
// of the store (outbox.Lister, outbox.MemberLister with
// outbox.PartitionInspector, outbox.Pauser) and the shared logic of
// internal/ops.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

// featuresJSON says which optional views the store supports, so that the
// page offers only those.
type featuresJSON struct {
	States  bool `json:"states"`  // outbox.Lister: due, scheduled, retrying, blocked keys
	Pause   bool `json:"pause"`   // outbox.Pauser
	Relays  bool `json:"relays"`  // outbox.PartitionInspector: the lease holders
	Members bool `json:"members"` // outbox.MemberLister: the membership records
	Entry   bool `json:"entry"`   // outbox.Looker
	Cancel  bool `json:"cancel"`  // outbox.Canceler
}

func (s *Server) features() featuresJSON {
	var f featuresJSON
	_, f.States = s.store.(outbox.Lister)
	_, f.Pause = s.store.(outbox.Pauser)
	_, f.Relays = s.store.(outbox.PartitionInspector)
	_, f.Members = s.store.(outbox.MemberLister)
	_, f.Entry = s.store.(outbox.Looker)
	_, f.Cancel = s.store.(outbox.Canceler)
	return f
}

// pausedJSON is PAUSED of the package documentation.
type pausedJSON struct {
	Topics     []pausedTopicJSON     `json:"topics"`
	Partitions []pausedPartitionJSON `json:"partitions"`
}

type pausedTopicJSON struct {
	Topic string    `json:"topic"`
	Since time.Time `json:"since"`
}

type pausedPartitionJSON struct {
	Partition int       `json:"partition"`
	Since     time.Time `json:"since"`
}

func toPaused(p outbox.Paused) *pausedJSON {
	out := &pausedJSON{Topics: []pausedTopicJSON{}, Partitions: []pausedPartitionJSON{}}
	for _, t := range p.Topics {
		out.Topics = append(out.Topics, pausedTopicJSON{t.Topic, t.Since.UTC()})
	}
	for _, pp := range p.Partitions {
		out.Partitions = append(out.Partitions, pausedPartitionJSON{pp.Partition, pp.Since.UTC()})
	}
	return out
}

// itemJSON is ITEM of the package documentation: an entry of a listing.
type itemJSON struct {
	summaryJSON
	State    outbox.EntryState `json:"state"`
	DueAt    *time.Time        `json:"due_at"`
	Deferred bool              `json:"deferred"`
}

func toItem(info outbox.EntryInfo, state outbox.EntryState) itemJSON {
	return itemJSON{summaryJSON: toSummary(info.Entry, errorCut), State: state, DueAt: tptr(info.DueAt), Deferred: info.Deferred}
}

type listJSON struct {
	State     outbox.EntryState `json:"state"`
	Entries   []itemJSON        `json:"entries"`
	NextAfter *string           `json:"next_after"`
}

// queryFilter parses the filter parameters of q.
func (s *Server) queryFilter(q url.Values) (ops.Filter, error) {
	return parseFilter(filterJSON{Topic: q.Get("topic"), Key: q.Get("key"), Error: q.Get("error"), Since: q.Get("since"), Until: q.Get("until")}, s.opts.Now())
}

// queryLimit parses the limit parameter of q: defaultLimit when it is
// absent, at most maxLimit.
func queryLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return defaultLimit, nil
	}
	limit, err := strconv.Atoi(v)
	if err != nil || limit < 1 {
		return 0, fmt.Errorf("ui: limit=%q is not a positive whole number; give 1 to %d (default %d)", v, maxLimit, defaultLimit)
	}
	return min(limit, maxLimit), nil
}

// handleList serves GET /api/entries: the entries of one state.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	q := r.URL.Query()
	state, err := ops.ParseState(q.Get("state"))
	if err != nil {
		var field *ops.FieldError
		if errors.As(err, &field) {
			err = fmt.Errorf("ui: %s: %w", field.Field, field.Err)
		}
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, err := s.queryFilter(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := queryLimit(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := listJSON{State: state, Entries: []itemJSON{}}
	var next string
	if l, ok := s.store.(outbox.Lister); ok {
		var infos []outbox.EntryInfo
		infos, next, err = ops.Entries(r.Context(), l, state, f, q.Get("after"), limit)
		for _, info := range infos {
			out.Entries = append(out.Entries, toItem(info, state))
		}
	} else {
		if state != outbox.StateParked {
			writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.Lister, which lists entries by state; only state=parked can be listed", s.store))
			return
		}
		var es []outbox.Entry
		es, next, err = s.scanParked(r.Context(), f, q.Get("after"), limit)
		for _, e := range es {
			out.Entries = append(out.Entries, toItem(outbox.EntryInfo{Entry: e, Parked: true}, state))
		}
	}
	if err != nil {
		s.storeError(w, "listing the "+string(state)+" entries", err)
		return
	}
	if next != "" {
		out.NextAfter = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// blockedJSON is BLOCKED of the package documentation.
type blockedJSON struct {
	Head    itemJSON  `json:"head"`
	Waiting int64     `json:"waiting"`
	Since   time.Time `json:"since"`
}

// handleBlocked serves GET /api/blocked: the keys held back by their head
// entry, the longest blocked first.
func (s *Server) handleBlocked(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	q := r.URL.Query()
	f, err := s.queryFilter(q)
	if err == nil {
		err = s.checkBlockedQuery(q)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, _ := queryLimit(q) // checked by checkBlockedQuery
	after, _ := ops.ParseBlockedCursor(q.Get("after"))
	partition := -1
	if v := q.Get("partition"); v != "" {
		partition, _ = strconv.Atoi(v)
	}
	l, ok := s.store.(outbox.Lister)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.Lister, which finds the blocked keys", s.store))
		return
	}
	keys, next, err := s.scanBlocked(r.Context(), l, f, partition, after, limit)
	if err != nil {
		s.storeError(w, "listing the blocked keys", err)
		return
	}
	now := s.opts.Now()
	out := struct {
		Keys      []blockedJSON `json:"keys"`
		NextAfter *string       `json:"next_after"`
	}{Keys: make([]blockedJSON, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, blockedJSON{Head: toItem(k.Head, stateOf(k.Head, now)), Waiting: k.Waiting, Since: k.Since.UTC()})
	}
	if !next.IsZero() {
		n := next.String()
		out.NextAfter = &n
	}
	writeJSON(w, http.StatusOK, out)
}

// checkBlockedQuery checks the parameters of /api/blocked other than the
// filter, naming the one that is wrong.
func (s *Server) checkBlockedQuery(q url.Values) error {
	if _, err := queryLimit(q); err != nil {
		return err
	}
	if _, err := ops.ParseBlockedCursor(q.Get("after")); err != nil {
		var field *ops.FieldError
		if errors.As(err, &field) {
			return fmt.Errorf("ui: %s: %w", field.Field, field.Err)
		}
		return err
	}
	if v := q.Get("partition"); v != "" {
		n := s.store.Partitions()
		if p, err := strconv.Atoi(v); err != nil || p < 0 || p >= n {
			return fmt.Errorf("ui: partition=%q is not a partition of this outbox; give a number from 0 to %d, or leave it out for every partition", v, n-1)
		}
	}
	return nil
}

// scanBlocked lists up to limit blocked keys after the cursor after whose
// head f matches and, when partition is not -1, is of that partition. The
// store filters by partition in no call, so a partition's keys are picked
// from pages of every partition's, reading at most maxScan keys: the page
// may then hold fewer than limit with a cursor to continue from. next is
// the zero cursor at the end.
func (s *Server) scanBlocked(ctx context.Context, l outbox.Lister, f ops.Filter, partition int, after ops.BlockedCursor, limit int) ([]outbox.BlockedKey, ops.BlockedCursor, error) {
	if partition < 0 {
		return ops.Blocked(ctx, l, f, after, limit)
	}
	var found []outbox.BlockedKey
	for scanned := 0; scanned < maxScan; {
		page, next, err := ops.Blocked(ctx, l, f, after, scanPage)
		if err != nil {
			return nil, ops.BlockedCursor{}, err
		}
		for i, k := range page {
			scanned++
			after = ops.CursorOf(k)
			if k.Head.Partition != partition {
				continue
			}
			found = append(found, k)
			if len(found) == limit {
				if i == len(page)-1 && next.IsZero() {
					return found, ops.BlockedCursor{}, nil
				}
				return found, after, nil
			}
		}
		if next.IsZero() {
			return found, ops.BlockedCursor{}, nil
		}
	}
	return found, after, nil
}

// relayJSON is RELAY of the package documentation.
type relayJSON struct {
	Owner         string     `json:"owner"`
	Listed        bool       `json:"listed"`
	Host          string     `json:"host"`
	Version       string     `json:"version"`
	Started       *time.Time `json:"started"`
	Renewed       *time.Time `json:"renewed"`
	Expires       *time.Time `json:"expires"`
	MaxPartitions int        `json:"max_partitions"`
	Reported      []int      `json:"reported"`
	Held          []int      `json:"held"`
}

type unheldJSON struct {
	Partition int `json:"partition"`
	counts
}

// handleRelays serves GET /api/relays: the fleet.
func (s *Server) handleRelays(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	pin, ok := s.store.(outbox.PartitionInspector)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.PartitionInspector, which shows who holds the partitions", s.store))
		return
	}
	var fleet ops.Fleet
	var err error
	ml, members := s.store.(outbox.MemberLister)
	if members {
		fleet, err = ops.LoadFleet(r.Context(), ml, pin)
	} else {
		var parts []outbox.PartitionStats
		parts, err = pin.PartitionStats(r.Context())
		fleet = ops.JoinFleet(nil, parts)
	}
	if err != nil {
		s.storeError(w, "reading the fleet", err)
		return
	}
	now := s.opts.Now()
	out := struct {
		Members bool         `json:"members"`
		Relays  []relayJSON  `json:"relays"`
		Unheld  []unheldJSON `json:"unheld"`
	}{Members: members, Relays: make([]relayJSON, 0, len(fleet.Relays)), Unheld: make([]unheldJSON, 0, len(fleet.Unheld))}
	for _, rl := range fleet.Relays {
		m := rl.Member
		out.Relays = append(out.Relays, relayJSON{
			Owner: m.Owner, Listed: rl.Listed, Host: m.Host, Version: m.Version,
			Started: tptr(m.Started), Renewed: tptr(m.Renewed), Expires: tptr(m.Expires),
			MaxPartitions: m.MaxPartitions, Reported: orEmpty(m.Partitions), Held: orEmpty(rl.Held),
		})
	}
	for _, p := range fleet.Unheld {
		out.Unheld = append(out.Unheld, unheldJSON{Partition: p.Partition, counts: toCounts(p.Stats, now)})
	}
	writeJSON(w, http.StatusOK, out)
}

// orEmpty is xs, or an empty slice (JSON []) for nil.
func orEmpty(xs []int) []int {
	if xs == nil {
		return []int{}
	}
	return xs
}

// pauseBody is the body of /api/pause and /api/resume.
type pauseBody struct {
	Topic     string `json:"topic"`
	Partition *int   `json:"partition"`
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request)  { s.pauseAction(w, r, true) }
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) { s.pauseAction(w, r, false) }

// pauseAction pauses (or resumes) the topic or partition r's body names,
// after the checks every action passes.
func (s *Server) pauseAction(w http.ResponseWriter, r *http.Request, pause bool) {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	if !s.checkAction(w, r) {
		return
	}
	pz, ok := s.store.(outbox.Pauser)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.Pauser; it cannot %s delivery", s.store, verb))
		return
	}
	var b pauseBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "ui: the body is not {\"topic\": \"T\"} or {\"partition\": P} (P a whole number): "+err.Error())
		return
	}
	spec := ops.PauseSpec{Topic: b.Topic}
	if b.Partition != nil {
		spec.Partition = strconv.Itoa(*b.Partition)
	}
	target, err := ops.ParsePauseTarget(spec, s.store.Partitions())
	var field *ops.FieldError
	switch {
	case errors.Is(err, ops.ErrNoTarget):
		writeError(w, http.StatusBadRequest, "ui: say what to "+verb+": {\"topic\": \"T\"} or {\"partition\": P}")
		return
	case errors.Is(err, ops.ErrTwoTargets):
		writeError(w, http.StatusBadRequest, "ui: give \"topic\" or \"partition\", not both: "+verb+" one at a time")
		return
	case errors.As(err, &field):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ui: %s: %v", field.Field, field.Err))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "ui: "+err.Error())
		return
	}
	change := ops.Resume
	if pause {
		change = ops.Pause
	}
	c, err := change(r.Context(), pz, target)
	if err != nil {
		s.storeError(w, verb+" of "+target.String(), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"target": target.String(), "changed": c.Changed, "since": tptr(c.Since), "paused": toPaused(c.Paused),
	})
}
