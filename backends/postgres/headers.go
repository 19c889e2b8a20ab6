package pgoutbox

import "github.com/outboxrelay/outbox/internal/headercodec"

// EncodeHeaders encodes headers the way the headers column stores them:
// for each header, sorted by name, uvarint(len(name)), name,
// uvarint(len(value)), value. It is binary-safe (names and values may hold
// NUL bytes and invalid UTF-8, which PostgreSQL text and jsonb cannot). A
// nil map encodes as nil (SQL NULL), an empty map as an empty slice.
func EncodeHeaders(h map[string]string) []byte { return headercodec.Encode(h) }

// DecodeHeaders decodes a headers column value written by
// [EncodeHeaders]. nil (SQL NULL) decodes to a nil map.
func DecodeHeaders(raw []byte) (map[string]string, error) { return headercodec.Decode(pkgName, raw) }

// pkgName names this package in the errors of [DecodeHeaders].
const pkgName = "pgoutbox"
