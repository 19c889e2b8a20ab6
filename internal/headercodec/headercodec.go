// Package headercodec is the binary encoding of an entry's headers that
// the SQL backends (pgoutbox, mysqloutbox) store in their headers column,
// and the text of the errors and park reasons for bytes it cannot decode.
package headercodec

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
)

// Encode encodes headers the way the headers column stores them: for each
// header, sorted by name, uvarint(len(name)), name, uvarint(len(value)),
// value. It is binary-safe (names and values may hold NUL bytes and
// invalid UTF-8). A nil map encodes as nil (SQL NULL), an empty map as an
// empty slice.
func Encode(h map[string]string) []byte {
	if h == nil {
		return nil
	}
	size := 0
	for k, v := range h {
		size += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	out := make([]byte, 0, size)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.AppendUvarint(out, uint64(len(h[k])))
		out = append(out, h[k]...)
	}
	return out
}

// Decode decodes a headers column value written by [Encode]. nil (SQL
// NULL) decodes to a nil map. pkg names the backend package reading the
// column (for example "pgoutbox"): the error of bytes Encode did not
// write starts with [Prefix](pkg), says what is wrong and asks whether
// something other than pkg wrote them. On error the map is nil.
func Decode(pkg string, raw []byte) (map[string]string, error) {
	if raw == nil {
		return nil, nil
	}
	h := map[string]string{}
	next := func() (string, bool) {
		n, w := binary.Uvarint(raw)
		if w <= 0 || n > uint64(len(raw)-w) {
			return "", false
		}
		s := string(raw[w : w+int(n)])
		raw = raw[w+int(n):]
		return s, true
	}
	for len(raw) > 0 {
		k, ok := next()
		if !ok {
			return nil, overrun(pkg)
		}
		v, ok := next()
		if !ok {
			return nil, overrun(pkg)
		}
		h[k] = v
	}
	return h, nil
}

func overrun(pkg string) error {
	return errors.New(Prefix(pkg) + "a length runs past the end; was it written by something other than " + pkg + "?")
}

// Prefix starts every error of [Decode] for pkg and every [Reason]:
// pkg + ": corrupt headers column: ".
func Prefix(pkg string) string { return pkg + ": corrupt headers column: " }

// Reason is the reason an entry whose headers column does not decode is
// parked with (and refused requeueing for): it names the column, what the
// decoder found (err, from [Decode] with the same pkg) and what to do
// (fix, the backend's advice to the operator).
func Reason(pkg string, err error, fix string) string {
	return Prefix(pkg) + strings.TrimPrefix(err.Error(), Prefix(pkg)) +
		"; the stored bytes cannot be decoded, so the entry cannot be published; " + fix
}
