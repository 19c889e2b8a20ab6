package ui

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

// Limits of the API.
const (
	defaultLimit = 50       // /api/parked's default limit
	maxLimit     = 500      // /api/parked's largest limit
	scanPage     = 500      // entries per Inspector.Parked call
	maxScan      = 10_000   // parked entries one /api/parked request scans at most
	errorCut     = 300      // bytes of last_error in a summary
	hexCut       = 64 << 10 // bytes of the payload in the hex dump
	chunkSize    = 500      // IDs per Inspector.Requeue call
	maxBody      = 8 << 20  // largest action body
	maxIDs       = 10_000   // most IDs in one action
)

// counts is COUNTS of the package documentation.
type counts struct {
	Pending    int64      `json:"pending"`
	Due        int64      `json:"due"`
	Parked     int64      `json:"parked"`
	LagSeconds float64    `json:"lag_seconds"`
	OldestDue  *time.Time `json:"oldest_due"`
}

func toCounts(st outbox.Stats, now time.Time) counts {
	c := counts{Pending: st.Pending, Due: st.Due, Parked: st.Parked, OldestDue: tptr(st.OldestDue)}
	if !st.OldestDue.IsZero() {
		if lag := now.Sub(st.OldestDue); lag > 0 {
			c.LagSeconds = lag.Seconds()
		}
	}
	return c
}

// tptr is t in UTC, or nil when t is zero (JSON null).
func tptr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

type holdJSON struct {
	Held   bool       `json:"held"`
	Reason string     `json:"reason"`
	Since  *time.Time `json:"since"`
}

type sampleJSON struct {
	T time.Time `json:"t"`
	counts
}

type overviewJSON struct {
	Store          string       `json:"store"`
	Kind           string       `json:"kind"`
	Outbox         string       `json:"outbox"`
	ReadOnly       bool         `json:"read_only"`
	Partitions     int          `json:"partitions"`
	Now            time.Time    `json:"now"`
	Stats          counts       `json:"stats"`
	Held           *holdJSON    `json:"held"`
	Sealed         *bool        `json:"sealed"`
	Paused         *pausedJSON  `json:"paused"`
	Features       featuresJSON `json:"features"`
	SampleInterval float64      `json:"sample_interval_seconds"`
	Samples        []sampleJSON `json:"samples"`
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	ctx := r.Context()
	st, err := s.in.Stats(ctx)
	if err != nil {
		s.storeError(w, "reading the counts", err)
		return
	}
	now := s.opts.Now()
	o := overviewJSON{
		Store: s.opts.StoreName, Kind: s.opts.Kind, Outbox: s.opts.Outbox, ReadOnly: s.opts.ReadOnly,
		Partitions: s.store.Partitions(), Now: now.UTC(), Stats: toCounts(st, now),
		SampleInterval: s.opts.SampleInterval.Seconds(), Samples: []sampleJSON{},
		Features: s.features(),
	}
	if h, ok := s.store.(outbox.Holder); ok {
		hs, err := h.HoldState(ctx)
		if err != nil {
			s.storeError(w, "reading whether the outbox is held", err)
			return
		}
		o.Held = &holdJSON{Held: hs.Held, Reason: hs.Reason, Since: tptr(hs.Since)}
	}
	if sl, ok := s.store.(outbox.Sealer); ok {
		sealed, err := sl.Sealed(ctx)
		if err != nil {
			s.storeError(w, "reading whether the outbox is sealed", err)
			return
		}
		o.Sealed = &sealed
	}
	if pz, ok := s.store.(outbox.Pauser); ok {
		p, err := pz.Paused(ctx)
		if err != nil {
			s.storeError(w, "reading what is paused", err)
			return
		}
		o.Paused = toPaused(p)
	}
	for _, smp := range s.samples() {
		o.Samples = append(o.Samples, sampleJSON{T: smp.T, counts: toCounts(smp.Stats, smp.T)})
	}
	writeJSON(w, http.StatusOK, o)
}

type leaseJSON struct {
	Owner   string    `json:"owner"`
	Version int64     `json:"version"`
	Expires time.Time `json:"expires"`
}

type partitionJSON struct {
	Partition int `json:"partition"`
	counts
	Lease       *leaseJSON `json:"lease"`
	OldestDueID *string    `json:"oldest_due_id"`
	BlockedKeys *int64     `json:"blocked_keys"`
	PausedSince *time.Time `json:"paused_since"`
}

func (s *Server) handlePartitions(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	pi, ok := s.store.(outbox.PartitionInspector)
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"partitions": nil})
		return
	}
	ctx := r.Context()
	ps, err := pi.PartitionStats(ctx)
	if err != nil {
		s.storeError(w, "reading the partitions", err)
		return
	}
	paused := map[int]time.Time{}
	if pz, ok := s.store.(outbox.Pauser); ok {
		p, err := pz.Paused(ctx)
		if err != nil {
			s.storeError(w, "reading what is paused", err)
			return
		}
		for _, pp := range p.Partitions {
			paused[pp.Partition] = pp.Since
		}
	}
	_, lister := s.store.(outbox.Lister)
	now := s.opts.Now()
	out := make([]partitionJSON, 0, len(ps))
	for _, p := range ps {
		pj := partitionJSON{Partition: p.Partition, counts: toCounts(p.Stats, now)}
		if p.Lease.Owner != "" {
			pj.Lease = &leaseJSON{Owner: p.Lease.Owner, Version: p.Lease.Version, Expires: p.Lease.Expires.UTC()}
		}
		if lister { // the backend fills these only then
			pj.BlockedKeys = &p.BlockedKeys
			if p.OldestDueID != "" {
				pj.OldestDueID = &p.OldestDueID
			}
		}
		if since, ok := paused[p.Partition]; ok {
			since = since.UTC()
			pj.PausedSince = &since
		}
		out = append(out, pj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"partitions": out})
}

// summaryJSON is SUMMARY of the package documentation.
type summaryJSON struct {
	ID        string    `json:"id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	Partition int       `json:"partition"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	LastError string    `json:"last_error"`
	// LastErrorBytes is the length of the whole last error: more than
	// len(LastError) when the summary cut it.
	LastErrorBytes int `json:"last_error_bytes"`
	PayloadBytes   int `json:"payload_bytes"`
}

func toSummary(e outbox.Entry, errLen int) summaryJSON {
	return summaryJSON{
		ID: e.ID, Topic: e.Topic, Key: e.Key, Partition: e.Partition, Attempts: e.Attempts,
		CreatedAt: e.CreatedAt.UTC(), LastError: cut(e.LastError, errLen), LastErrorBytes: len(e.LastError),
		PayloadBytes: len(e.Payload),
	}
}

// cut is s's first n bytes at most, never splitting a rune (n < 0: all).
func cut(s string, n int) string {
	if n < 0 || len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

type parkedJSON struct {
	Entries   []summaryJSON `json:"entries"`
	NextAfter *string       `json:"next_after"`
}

func (s *Server) handleParked(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	q := r.URL.Query()
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
	entries, next, err := s.scanParked(r.Context(), f, q.Get("after"), limit)
	if err != nil {
		s.storeError(w, "listing the parked entries", err)
		return
	}
	out := parkedJSON{Entries: make([]summaryJSON, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, toSummary(e, errorCut))
	}
	if next != "" {
		out.NextAfter = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// scanParked returns up to limit parked entries after the ID after that
// match f, scanning at most maxScan of them, and the ID to continue after
// ("" when the scan reached the end).
func (s *Server) scanParked(ctx context.Context, f ops.Filter, after string, limit int) ([]outbox.Entry, string, error) {
	opts := ops.PageOptions{Batch: scanPage, MaxScan: maxScan}
	if !f.Any() {
		opts.Batch = limit // every entry matches: read no more than the page
	}
	return ops.Page(ctx, s.in, f, after, limit, opts)
}

type payloadJSON struct {
	Bytes  int     `json:"bytes"`
	Text   *string `json:"text"`
	JSON   *string `json:"json"`
	Hex    string  `json:"hex"`
	Base64 string  `json:"base64"`
}

type entryJSON struct {
	summaryJSON
	State     string            `json:"state"`
	Status    outbox.EntryState `json:"status"`
	Deferred  bool              `json:"deferred"`
	NotBefore *time.Time        `json:"not_before"`
	DueAt     *time.Time        `json:"due_at"`
	Headers   map[string]string `json:"headers"`
	History   []attemptJSON     `json:"history"`
	Actions   actionsJSON       `json:"actions"`
	Payload   *payloadJSON      `json:"payload"`
}

// attemptJSON is one attempt of an entry's history.
type attemptJSON struct {
	At    time.Time `json:"at"`
	Owner string    `json:"owner"`
	Error string    `json:"error"`
}

// actionsJSON says which actions the entry's state allows on this
// dashboard: requeue when parked, cancel when the store can cancel;
// neither when the dashboard is read-only.
type actionsJSON struct {
	Requeue bool `json:"requeue"`
	Cancel  bool `json:"cancel"`
}

// stateOf is the state of an entry as [outbox.Lister.Entries] would select
// it, judged by now.
func stateOf(info outbox.EntryInfo, now time.Time) outbox.EntryState {
	switch {
	case info.Parked:
		return outbox.StateParked
	case !info.DueAt.After(now):
		return outbox.StateDue
	case info.Attempts > 0:
		return outbox.StateRetrying
	}
	return outbox.StateScheduled
}

func (s *Server) handleEntry(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	id := r.PathValue("id")
	withPayload := true
	switch v := r.URL.Query().Get("payload"); v {
	case "":
	case "none":
		withPayload = false
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ui: payload=%q: give payload=none to leave the payload out, or no payload parameter", v))
		return
	}
	lk, ok := s.store.(outbox.Looker)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.Looker, which the entry view needs; find the entry in /api/parked", s.store))
		return
	}
	info, err := lk.Lookup(r.Context(), id)
	if errors.Is(err, outbox.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("ui: no pending or parked entry has ID %q (never appended, already sent, or cancelled)", id))
		return
	}
	if err != nil {
		s.storeError(w, "looking the entry up", err)
		return
	}
	_, canCancel := s.store.(outbox.Canceler)
	e := entryJSON{
		summaryJSON: toSummary(info.Entry, -1),
		State:       "pending",
		Status:      stateOf(info, s.opts.Now()),
		Deferred:    info.Deferred,
		NotBefore:   tptr(info.NotBefore),
		DueAt:       tptr(info.DueAt),
		Headers:     info.Headers,
		History:     make([]attemptJSON, 0, len(info.History)),
		Actions:     actionsJSON{Requeue: info.Parked && !s.opts.ReadOnly, Cancel: canCancel && !s.opts.ReadOnly},
	}
	if withPayload {
		p := renderPayload(info.Payload)
		e.Payload = &p
	}
	if info.Parked {
		e.State = "parked"
	}
	if e.Headers == nil {
		e.Headers = map[string]string{}
	}
	for _, a := range info.History {
		e.History = append(e.History, attemptJSON{At: a.At.UTC(), Owner: a.Owner, Error: a.Error})
	}
	writeJSON(w, http.StatusOK, e)
}

// renderPayload renders p every way the entry view shows it.
func renderPayload(p []byte) payloadJSON {
	out := payloadJSON{Bytes: len(p), Hex: hex.Dump(p[:min(len(p), hexCut)]), Base64: base64.StdEncoding.EncodeToString(p)}
	if utf8.Valid(p) {
		t := string(p)
		out.Text = &t
	}
	if t := bytes.TrimSpace(p); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		var buf bytes.Buffer
		if json.Indent(&buf, t, "", "  ") == nil {
			j := buf.String()
			out.JSON = &j
		}
	}
	return out
}

// actionJSON is the body of /api/requeue and /api/cancel.
type actionJSON struct {
	IDs    []string    `json:"ids"`
	Filter *filterJSON `json:"filter"`
}

type refusalJSON struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// readAction checks and decodes an action, and returns the IDs it names:
// given, or those of the parked entries its filter matches, oldest first.
// byFilter reports which.
func (s *Server) readAction(w http.ResponseWriter, r *http.Request, verb string) (todo []string, byFilter, ok bool) {
	if !s.checkAction(w, r) {
		return nil, false, false
	}
	var a actionJSON
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		writeError(w, http.StatusBadRequest, "ui: the body is not {\"ids\": [...]} or {\"filter\": {...}}: "+err.Error())
		return nil, false, false
	}
	switch {
	case a.IDs != nil && a.Filter != nil:
		writeError(w, http.StatusBadRequest, "ui: give \"ids\" or \"filter\", not both")
		return nil, false, false
	case a.Filter != nil:
		f, err := parseFilter(*a.Filter, s.opts.Now())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return nil, false, false
		}
		es, more, err := ops.Collect(r.Context(), s.in, f, ops.CollectOptions{Batch: scanPage, Max: maxIDs})
		if err != nil {
			s.storeError(w, "listing the parked entries to "+verb, err)
			return nil, false, false
		}
		if more {
			w.Header().Set(moreHeader, "1")
		}
		ops.ByCreation(es)
		return ops.IDs(es), true, true
	case len(a.IDs) == 0:
		writeError(w, http.StatusBadRequest, "ui: say which entries to "+verb+": {\"ids\": [\"ID\", ...]} or {\"filter\": {\"topic\", \"key\", \"error\", \"since\", \"until\"}}")
		return nil, false, false
	case len(a.IDs) > maxIDs:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ui: %d IDs are more than one action takes (%d); send them in several, or use a filter", len(a.IDs), maxIDs))
		return nil, false, false
	}
	return ops.Dedupe(a.IDs), false, true
}

// moreHeader is set on a filtered action's response (internally, between
// readAction and the handler) when more entries matched than one action
// takes.
const moreHeader = "X-Outbox-More"

func (s *Server) handleRequeue(w http.ResponseWriter, r *http.Request) {
	todo, byFilter, ok := s.readAction(w, r, "requeue")
	if !ok {
		return
	}
	ctx := r.Context()
	refused := []refusalJSON{}
	// Named IDs: say why one that is not parked stays as it is (Requeue
	// would ignore it silently).
	if lk, ok := s.store.(outbox.Looker); ok && !byFilter {
		parked, left, err := ops.CheckParked(ctx, lk, todo)
		if err != nil {
			s.storeError(w, "looking the entries up", err)
			return
		}
		refused = appendRefusals(refused, left)
		todo = ops.IDs(parked)
	}
	res, err := ops.Requeue(ctx, s.in, todo, ops.RequeueOptions{Batch: chunkSize})
	if err != nil {
		s.storeError(w, fmt.Sprintf("requeueing (%d requeued before the error)", res.Requeued), err)
		return
	}
	refused = appendRefusals(refused, res.Refused)
	writeJSON(w, http.StatusOK, map[string]any{"requeued": res.Requeued, "refused": refused, "more": s.more(w)})
}

// appendRefusals appends rs to out as the API shows them.
func appendRefusals(out []refusalJSON, rs []outbox.Refusal) []refusalJSON {
	for _, r := range rs {
		out = append(out, refusalJSON{r.ID, r.Reason})
	}
	return out
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	c, ok := s.store.(outbox.Canceler)
	if !ok {
		if s.checkAction(w, r) {
			writeError(w, http.StatusNotImplemented, fmt.Sprintf("ui: this backend (%T) does not implement outbox.Canceler; it cannot cancel entries", s.store))
		}
		return
	}
	todo, byFilter, ok := s.readAction(w, r, "cancel")
	if !ok {
		return
	}
	// A filter acts on parked entries: one requeued since the filter was
	// read (pending again) is left alone.
	var opts ops.CancelOptions
	if lk, canLook := s.store.(outbox.Looker); byFilter && canLook {
		opts.Recheck = lk
	}
	res, err := ops.Cancel(r.Context(), c, todo, opts)
	var lookup *ops.LookupError
	switch {
	case errors.As(err, &lookup):
		s.storeError(w, fmt.Sprintf("looking entry %s up (%d cancelled before the error)", lookup.ID, res.Cancelled), lookup.Err)
		return
	case err != nil:
		s.storeError(w, fmt.Sprintf("cancelling (%d cancelled before the error)", res.Cancelled), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": res.Cancelled, "more": s.more(w)})
}

// more reports, and takes off the response, the mark readAction left.
func (s *Server) more(w http.ResponseWriter) bool {
	more := w.Header().Get(moreHeader) != ""
	w.Header().Del(moreHeader)
	return more
}

// storeError answers a failed store call: 503 when the store is closed
// or the request was cancelled, 502 otherwise.
func (s *Server) storeError(w http.ResponseWriter, doing string, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, outbox.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
	}
	msg := err.Error()
	if s.opts.Redact != nil {
		msg = s.opts.Redact(msg)
	}
	writeError(w, status, "ui: "+doing+" failed: "+msg+"; check that the store is reachable and try again")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"ui: encoding the response failed: `+strings.ReplaceAll(err.Error(), `"`, `'`)+`"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
