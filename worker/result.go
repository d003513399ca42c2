package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ResultPrefix starts the output line that carries a task's result: the
// last line of the task's output (stdout or stderr, which share the log
// file) that starts with "MEGAFLOW_RESULT " holds the task's JSON result,
// at most MaxResultBytes, which the worker sends with the EXITED event of a
// zero exit. The line must be among the last ResultScanBytes of output.
// With an artifact store, a result over MaxResultBytes goes to the store
// (result.json) and the event carries an artifact.Ref to it instead.
const ResultPrefix = "MEGAFLOW_RESULT "

// Bounds on results.
const (
	// MaxResultBytes is the largest result the task table holds, in bytes
	// of JSON.
	MaxResultBytes = 64 << 10
	// ResultScanBytes is how much of the end of the log is searched.
	ResultScanBytes = 1 << 20
)

// readResult finds the result line in the log file at path. It returns the
// JSON, or a note saying why a result line was ignored; both are empty when
// there is no result line (or no log file).
// A result over limit (bytes) is ignored with a note; the worker passes
// MaxResultBytes, or ResultScanBytes when it stores larger results as
// artifacts.
func readResult(path string, limit int) (result []byte, note string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ""
		}
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	// The tail, and the byte before it: the tail starts a line when that
	// byte is a newline.
	off := max(st.Size()-ResultScanBytes, 0)
	from := max(off-1, 0)
	buf := make([]byte, st.Size()-from)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	partial := off > 0 && buf[0] != '\n'
	result, note = parseResult(buf[off-from:], partial, limit)
	if result == nil && note == "" && off > 0 {
		// Nothing in the tail: a result line before it is noted, never
		// dropped without a word.
		note = earlierResultLine(f, off, st.Size(), limit)
	}
	return result, note
}

// parseResult finds the last result line in tail; partial says tail starts
// in the middle of a line, which is then skipped.
func parseResult(tail []byte, partial bool, limit int) ([]byte, string) {
	if partial {
		i := bytes.IndexByte(tail, '\n')
		if i < 0 {
			return nil, ""
		}
		tail = tail[i+1:]
	}
	prefix := []byte(ResultPrefix)
	var line []byte
	found := false
	for len(tail) > 0 {
		end := bytes.LastIndexByte(tail, '\n')
		cur := tail[end+1:]
		tail = tail[:max(end, 0)]
		if bytes.HasPrefix(cur, prefix) {
			line, found = cur, true
			break
		}
		if end < 0 {
			break
		}
	}
	if !found {
		return nil, ""
	}
	payload := bytes.TrimSpace(line[len(prefix):])
	if len(payload) > limit {
		return nil, fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", len(payload), limit)
	}
	if !json.Valid(payload) {
		return nil, "MEGAFLOW_RESULT line ignored: not valid JSON"
	}
	return bytes.Clone(payload), ""
}

// maxResultLineScan is how far before the scanned tail earlierResultLine
// looks for a result line.
const maxResultLineScan = 64 << 20

// earlierResultLine returns a note when the log's last result line starts
// before offset off of f, where the scanned tail (which holds none)
// begins: a result line longer than the tail, or one followed by more
// output than the tail holds. It looks back at most maxResultLineScan
// bytes and returns "" when it finds no result line there.
func earlierResultLine(f *os.File, off, size int64, limit int) string {
	const chunk = 64 << 10
	prefix := []byte(ResultPrefix)
	b := make([]byte, chunk+len(prefix)+1)
	for pos := off; pos > 0 && off-pos < maxResultLineScan; {
		// [from-1, pos+len(prefix)): a prefix across chunks is seen, and
		// the byte before each candidate.
		from := max(pos-chunk, 0)
		lo := max(from-1, 0)
		hi := min(pos+int64(len(prefix)), size)
		w := b[:hi-lo]
		if _, err := f.ReadAt(w, lo); err != nil && !errors.Is(err, io.EOF) {
			return ""
		}
		for end := len(w); ; {
			i := bytes.LastIndex(w[:end], prefix)
			if i < 0 {
				break
			}
			end = i
			at := lo + int64(i)
			if at >= pos || !(at == 0 || (i > 0 && w[i-1] == '\n')) {
				continue
			}
			eol := lineEnd(f, at)
			if eol >= off {
				return fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d",
					eol-at-int64(len(prefix)), limit)
			}
			return fmt.Sprintf("MEGAFLOW_RESULT line ignored: %d bytes of output follow it; the result line must be among the last %d bytes of output",
				size-eol-1, ResultScanBytes)
		}
		pos = from
	}
	return ""
}

// lineEnd returns the offset of the newline ending the line of f that
// holds offset at, or the file's size when the line has none.
func lineEnd(f *os.File, at int64) int64 {
	b := make([]byte, 64<<10)
	for pos := at; ; {
		n, err := f.ReadAt(b, pos)
		if i := bytes.IndexByte(b[:n], '\n'); i >= 0 {
			return pos + int64(i)
		}
		pos += int64(n)
		if err != nil || n == 0 {
			return pos
		}
	}
}

// maxResultBytes is the largest result the worker reads from a log: over
// MaxResultBytes only when such results can go to the artifact store.
func (w *Worker) maxResultBytes() int {
	if w.artifactsOn() {
		return ResultScanBytes
	}
	return MaxResultBytes
}
