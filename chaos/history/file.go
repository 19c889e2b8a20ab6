package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Event ops, the "op" field of a history line.
const (
	OpAppend  = "append"
	OpUnknown = "unknown"
	OpDeliver = "deliver"
	OpFault   = "fault"
)

// line is one history line; which fields matter depends on Op.
type line struct {
	Op        string    `json:"op"`
	ID        string    `json:"id,omitempty"`
	Key       string    `json:"key,omitempty"`
	Seq       int64     `json:"seq,omitempty"`
	Topic     string    `json:"topic,omitempty"`
	Partition *int32    `json:"partition,omitempty"`
	Offset    *int64    `json:"offset,omitempty"`
	At        time.Time `json:"at,omitzero"`
	What      string    `json:"what,omitempty"`
}

// Writer writes history events as JSON lines. Its methods are safe for
// concurrent use. Output is buffered: call Flush (or Close) before the
// process exits; a process killed mid-write may leave a torn last line,
// which [History.Read] rejects, so the harness stops writers gracefully.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	c   io.Closer // nil when the Writer does not own the destination
	err error
}

// NewWriter returns a Writer writing to w. Close flushes but does not
// close w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

// Create creates (or truncates) the named file and returns a Writer to
// it; Close flushes and closes the file.
func Create(name string) (*Writer, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	w := NewWriter(f)
	w.c = f
	return w, nil
}

// Append records an entry whose commit returned success.
func (w *Writer) Append(e Entry) error {
	return w.write(line{Op: OpAppend, ID: e.ID, Key: e.Key, Seq: e.Seq, Partition: e.Partition, At: e.At})
}

// Unknown records an entry whose commit outcome is unknown.
func (w *Writer) Unknown(e Entry) error {
	return w.write(line{Op: OpUnknown, ID: e.ID, Key: e.Key, Seq: e.Seq, Partition: e.Partition, At: e.At})
}

// Delivered records a record the broker holds.
func (w *Writer) Delivered(d Delivery) error {
	p, o := d.Partition, d.Offset
	return w.write(line{Op: OpDeliver, ID: d.ID, Key: d.Key, Topic: d.Topic, Partition: &p, Offset: &o, At: d.At})
}

// Fault records a fault injected at the given time.
func (w *Writer) Fault(at time.Time, what string) error {
	return w.write(line{Op: OpFault, At: at, What: what})
}

func (w *Writer) write(l line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("history: %w", err)
	}
	return w.err
}

// Flush writes buffered events to the destination (not fsynced).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("history: %w", err)
	}
	return w.err
}

// Close flushes and, for a Writer made by Create, closes the file.
// Writes after Close fail.
func (w *Writer) Close() error {
	err := w.Flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		err = errors.Join(err, w.c.Close())
		w.c = nil
	}
	if w.err == nil {
		w.err = errors.New("history: writer closed")
	}
	return err
}

// ReadFiles reads the named history files into a new History.
func ReadFiles(names ...string) (*History, error) {
	h := new(History)
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		err = h.Read(f, name)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Read adds the events of a JSON-lines history to h. name is used in
// errors, which name the line: "history: NAME:LINE: ...". On error the
// lines before the bad one have been added.
func (h *History) Read(r io.Reader, name string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("history: %s:%d: %v", name, n, err)
		}
		if err := h.add1(l); err != nil {
			return fmt.Errorf("history: %s:%d: %v", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("history: %s:%d: %w", name, n+1, err)
	}
	return nil
}

func (h *History) add1(l line) error {
	switch l.Op {
	case OpAppend, OpUnknown:
		if l.ID == "" {
			return fmt.Errorf("%s line without an id", l.Op)
		}
		if l.Seq < 0 {
			return fmt.Errorf("%s line with negative seq %d", l.Op, l.Seq)
		}
		h.add(Entry{ID: l.ID, Key: l.Key, Seq: l.Seq, Partition: l.Partition, At: l.At}, l.Op == OpUnknown)
	case OpDeliver:
		switch {
		case l.ID == "":
			return errors.New("deliver line without an id")
		case l.Topic == "":
			return errors.New("deliver line without a topic")
		case l.Partition == nil:
			return errors.New("deliver line without a partition")
		case l.Offset == nil:
			return errors.New("deliver line without an offset")
		case l.At.IsZero():
			return errors.New("deliver line without a time (at)")
		}
		h.Delivered(Delivery{Topic: l.Topic, Partition: *l.Partition, Offset: *l.Offset, ID: l.ID, Key: l.Key, At: l.At})
	case OpFault:
		if l.At.IsZero() {
			return errors.New("fault line without a time (at)")
		}
		h.Fault(l.At, l.What)
	case "":
		return errors.New(`line without an "op"`)
	default:
		return fmt.Errorf("unknown op %q (want append, unknown, deliver or fault)", l.Op)
	}
	return nil
}
