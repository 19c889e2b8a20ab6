package pgoutbox

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
)

// EncodeHeaders encodes headers the way the headers column stores them:
// for each header, sorted by name, uvarint(len(name)), name,
// uvarint(len(value)), value. It is binary-safe (names and values may hold
// NUL bytes and invalid UTF-8, which PostgreSQL text and jsonb cannot). A
// nil map encodes as nil (SQL NULL), an empty map as an empty slice.
func EncodeHeaders(h map[string]string) []byte {
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

// DecodeHeaders decodes a headers column value written by
// [EncodeHeaders]. nil (SQL NULL) decodes to a nil map.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	if raw == nil {
		return nil, nil
	}
	h := map[string]string{}
	next := func() (string, error) {
		n, w := binary.Uvarint(raw)
		if w <= 0 || n > uint64(len(raw)-w) {
			return "", errors.New(corruptHeadersPrefix + "a length runs past the end; was it written by something other than pgoutbox?")
		}
		s := string(raw[w : w+int(n)])
		raw = raw[w+int(n):]
		return s, nil
	}
	for len(raw) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[k] = v
	}
	return h, nil
}

// corruptHeadersPrefix starts every error of [DecodeHeaders].
const corruptHeadersPrefix = "pgoutbox: corrupt headers column: "

// corruptHeadersReason is the reason an entry whose headers column does
// not decode is parked with (and refused requeueing for): it names the
// column, what the decoder found and what to do.
func corruptHeadersReason(err error) string {
	return corruptHeadersPrefix + strings.TrimPrefix(err.Error(), corruptHeadersPrefix) +
		"; the stored bytes cannot be decoded, so the entry cannot be published; " + fixAdvice
}
