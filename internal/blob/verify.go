package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
)

// EmptySHA256 is the lowercase hex SHA-256 of zero bytes.
const EmptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// ValidSHA256 reports whether s is a lowercase hex SHA-256 (64 characters),
// with a reason when not; "" is not valid (callers test for "" first).
func ValidSHA256(s string) error {
	if len(s) != 2*sha256.Size {
		return fmt.Errorf("%w: SHA-256 %q is %d characters, want %d lowercase hex", ErrChecksum, s, len(s), 2*sha256.Size)
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w: SHA-256 %q is not lowercase hex", ErrChecksum, s)
		}
	}
	return nil
}

// VerifyingReader hashes what it reads from an underlying reader and checks
// the total against an expected SHA-256 (and size, when known).
//
// It holds back the last byte it has read until the underlying reader has
// reported io.EOF and the checksum has matched. A consumer that sends the
// bytes somewhere with a known length (an HTTP PUT, a multipart upload part)
// therefore never sees the complete content when it is wrong: the upload
// fails instead of storing bad bytes. On a mismatch Read returns an error
// wrapping ErrChecksum; a size other than the expected one is a mismatch
// too. With no expected SHA-256 it only hashes (see Sum).
//
// A VerifyingReader is not safe for concurrent use.
type VerifyingReader struct {
	src  io.Reader
	h    hash.Hash
	want string // lowercase hex or ""
	size int64  // expected size in bytes, or -1
	n    int64  // bytes read from src
	buf  []byte
	pend []byte // read, not yet delivered; a suffix of buf
	done bool   // src reached EOF and the checks passed
	err  error  // sticky failure
	what string
}

// NewVerifyingReader returns a reader of src's content that fails with
// ErrChecksum unless the content's SHA-256 is want (lowercase hex; "" checks
// nothing) and its length is size bytes (-1: any). what names the content in
// errors ("key \"t/g/x/1/stdout\"").
func NewVerifyingReader(src io.Reader, want string, size int64, what string) *VerifyingReader {
	return &VerifyingReader{src: src, h: sha256.New(), want: want, size: size, what: what,
		buf: make([]byte, 32<<10)}
}

// Read implements io.Reader (see VerifyingReader for the hold-back).
func (v *VerifyingReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if v.err != nil {
			return 0, v.err
		}
		// Deliver all but the last pending byte; the last one too once the
		// content is known good.
		if len(v.pend) > 1 || (v.done && len(v.pend) == 1) {
			avail := v.pend
			if !v.done {
				avail = avail[:len(avail)-1]
			}
			n := copy(p, avail)
			v.pend = v.pend[n:]
			return n, nil
		}
		if v.done {
			return 0, io.EOF
		}
		// Refill after the held byte (if any).
		k := copy(v.buf, v.pend)
		n, err := v.src.Read(v.buf[k:])
		v.pend = v.buf[:k+n]
		v.h.Write(v.buf[k : k+n])
		v.n += int64(n)
		if v.size >= 0 && v.n > v.size {
			return 0, v.fail(fmt.Errorf("%w: %s has more than the %d bytes announced", ErrChecksum, v.what, v.size))
		}
		switch {
		case err == io.EOF:
			if v.size >= 0 && v.n != v.size {
				return 0, v.fail(fmt.Errorf("%w: %s has %d bytes, %d were announced", ErrChecksum, v.what, v.n, v.size))
			}
			if got := v.Sum(); v.want != "" && got != v.want {
				return 0, v.fail(fmt.Errorf("%w: %s has SHA-256 %s, want %s", ErrChecksum, v.what, got, v.want))
			}
			v.done = true
		case err != nil:
			return 0, v.fail(err)
		}
	}
}

func (v *VerifyingReader) fail(err error) error {
	v.err, v.pend = err, nil
	return err
}

// Sum returns the lowercase hex SHA-256 of the bytes read so far from the
// underlying reader; after Read has returned io.EOF it is the content's.
func (v *VerifyingReader) Sum() string { return hex.EncodeToString(v.h.Sum(nil)) }

// N returns how many bytes were read so far from the underlying reader.
func (v *VerifyingReader) N() int64 { return v.n }
