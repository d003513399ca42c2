package spec

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// GraphIDPrefix starts every id NewGraphID returns.
const GraphIDPrefix = "g-"

// crockford is Crockford's base32 alphabet in lower case; its characters are
// in ASCII order, so ids sort as the numbers they encode.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// NewGraphID returns an id for a graph submitted without one: GraphIDPrefix
// followed by a lowercase ULID (26 characters of Crockford base32 encoding
// 48 bits of milliseconds since the Unix epoch, then 80 bits read from
// entropy), e.g. "g-01aryz6s41tsv4rrffq69g5fav". Ids sort by time to the
// millisecond (lexically, for times from 1970 to the year 10889; earlier
// times count as the epoch, later ones as the last millisecond); within one
// millisecond their order is random. The id is a valid graph id (see
// Validate).
//
// NewGraphID is a pure function of its arguments: the caller passes its clock
// (on the head, the leader's) and its randomness, crypto/rand.Reader in
// production; nil entropy means crypto/rand.Reader. It panics if entropy
// fails to give 10 bytes, which crypto/rand.Reader never does.
func NewGraphID(now time.Time, entropy io.Reader) string {
	if entropy == nil {
		entropy = rand.Reader
	}
	var b [16]byte
	ms := now.UnixMilli()
	switch {
	case ms < 0:
		ms = 0
	case ms >= 1<<48:
		ms = 1<<48 - 1
	}
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(ms))
	copy(b[:6], ts[2:])
	if _, err := io.ReadFull(entropy, b[6:]); err != nil {
		panic(fmt.Sprintf("spec: NewGraphID: reading entropy: %v", err))
	}

	// 128 bits in 26 characters of 5 bits: the first character holds the top
	// 3 bits.
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return GraphIDPrefix + string(out[:])
}
